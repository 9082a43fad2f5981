#!/usr/bin/env python3
"""Demo client for the `face` model: enroll a person, recognize people in the
sample photos, print each JSON answer and save a copy of each photo with the
boxes and names drawn (out/<photo>); then the same photos on `face_onnx_yunet` (OpenCV
zoo's YuNet + SFace, the accurate pipeline) and one sequence on `face_sequence`.

    python scripts/demo.py --url localhost:8000 --photos assets/photos --out out
"""
import argparse
import json
import re
import sys
from pathlib import Path

import tritonclient.http as httpclient
from PIL import Image

import face_api


def infer(client, model, photo=None, enroll=None, parameters=None, **sequence):
    """One request: the photo's encoded bytes (and ENROLL when given) -> the JSON
    document. `sequence` passes sequence_id / sequence_start / sequence_end."""
    return face_api.infer(client, model, parameters, photo=photo.read_bytes() if photo else None,
                          enroll=enroll, **sequence)


EVERY_FRAME = {"detect_every": 1, "reidentify_every": 1}


def run_sequence(client, model, photos, names, sequence_id=42):
    """One stateful sequence: START with the first photo, one request per
    photo, then END without a frame, which answers with the summary. Photos
    are not video: the START asks for every frame in full (no tracker, every
    face embedded)."""
    print(f"== sequence {sequence_id} on {model}: {', '.join(names)}")
    for i, name in enumerate(names):
        start = i == 0
        doc = infer(client, model, photos / name, parameters=EVERY_FRAME if start else None,
                    sequence_id=sequence_id, sequence_start=start)
        faces = ", ".join(f'{f["name"]} (track {f["track"]})' for f in doc["faces"]) or "no face"
        print(f"   frame {doc['sequence']['frame']} {name}: {faces}")
    doc = infer(client, model, sequence_id=sequence_id, sequence_end=True)
    print("== END answer (summary)")
    print(pretty(doc))


def pretty(doc):
    """Indented JSON with short number lists (boxes' landmarks) on one line."""
    text = json.dumps(doc, indent=2)
    return re.sub(r"\[\s*([-\d.e,\s]+?)\s*\]", lambda m: "[" + re.sub(r"\s+", " ", m.group(1)) + "]", text)


def draw(photo, doc, out_dir):
    """Save a copy of the photo with each face's box, landmarks and name."""
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / (photo.stem + ".jpg")
    face_api.draw(Image.open(photo), doc["faces"]).save(target, quality=90)
    return target


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="localhost:8000")
    ap.add_argument("--model", default="face")
    ap.add_argument("--photos", type=Path, default=Path("assets/photos"))
    ap.add_argument("--out", type=Path, default=Path("out"))
    ap.add_argument("--enroll-name", default="obama")
    ap.add_argument("--enroll-photo", default="obama.jpg")
    ap.add_argument("--recognize", nargs="*", default=["obama2.jpg", "obama3.jpg", "biden.jpg", "noface.jpg"])
    ap.add_argument("--onnx-model", default="face_onnx_yunet",
                    help="ONNX-engine model, the accurate pipeline by default ('' to skip)")
    ap.add_argument("--sequence-model", default="face_sequence", help="stateful model ('' to skip)")
    ap.add_argument("--sequence", nargs="*", default=["obama2.jpg", "biden.jpg", "obama3.jpg", "noface.jpg"])
    args = ap.parse_args()

    client = httpclient.InferenceServerClient(args.url)
    if not client.is_model_ready(args.model):
        sys.exit(f"model {args.model!r} is not ready at {args.url}")

    print(f"== enroll {args.enroll_name!r} from {args.enroll_photo}")
    doc = infer(client, args.model, args.photos / args.enroll_photo, enroll=args.enroll_name)
    print(pretty(doc))
    draw(args.photos / args.enroll_photo, doc, args.out)

    for name in args.recognize:
        photo = args.photos / name
        doc = infer(client, args.model, photo)
        people = ", ".join(f["name"] for f in doc["faces"]) or "no face"
        print(f"== {name}: {people}")
        print(pretty(doc))
        print(f"   drawn: {draw(photo, doc, args.out)}")

    if args.onnx_model:
        print(f"== the same photos on {args.onnx_model} (ONNX engine; gallery: obama, biden)")
        for name in args.recognize:
            doc = infer(client, args.onnx_model, args.photos / name)
            faces = ", ".join(
                f["name"] if f["distance"] is None else f"{f['name']} ({f['distance']})"
                for f in doc["faces"]
            ) or "no face"
            print(f"   {name}: {faces}")

    if args.sequence_model:
        run_sequence(client, args.sequence_model, args.photos, args.sequence)


if __name__ == "__main__":
    main()
