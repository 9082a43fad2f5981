#!/usr/bin/env python3
"""Demo client for the `face` model: enroll a person, recognize people in the
sample photos, print each JSON answer and save a copy of each photo with the
boxes and names drawn (out/<photo>); then one sequence on `face_sequence`.

    python scripts/demo.py --url localhost:8000 --photos assets/photos --out out
"""
import argparse
import json
import re
import sys
from pathlib import Path

import numpy as np
import tritonclient.http as httpclient
from PIL import Image, ImageDraw, ImageFont


def bytes_input(name, value):
    tensor = httpclient.InferInput(name, [1, 1], "BYTES")
    tensor.set_data_from_numpy(np.array([[value]], dtype=object))
    return tensor


def infer(client, model, photo=None, enroll=None, **sequence):
    """One request: the photo's encoded bytes (and ENROLL when given) -> the JSON
    document. `sequence` passes sequence_id / sequence_start / sequence_end."""
    inputs = [bytes_input("ENCODED", photo.read_bytes())] if photo else []
    if enroll is not None:
        inputs.append(bytes_input("ENROLL", enroll.encode()))
    result = client.infer(model, inputs, outputs=[httpclient.InferRequestedOutput("RESULT")], **sequence)
    return json.loads(result.as_numpy("RESULT")[0][0])


def run_sequence(client, model, photos, names, sequence_id=42):
    """One stateful sequence: START with the first photo, one request per
    photo, then END without a frame, which answers with the summary."""
    print(f"== sequence {sequence_id} on {model}: {', '.join(names)}")
    for i, name in enumerate(names):
        doc = infer(client, model, photos / name, sequence_id=sequence_id, sequence_start=(i == 0))
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
    img = Image.open(photo).convert("RGB")
    pen = ImageDraw.Draw(img)
    width = max(2, img.width // 300)
    font = ImageFont.load_default(size=max(14, img.width // 30))
    for face in doc["faces"]:
        b = face["box"]
        known = face["name"] != "unknown"
        colour = (40, 200, 60) if known else (230, 60, 40)
        pen.rectangle([b["left"], b["top"], b["right"], b["bottom"]], outline=colour, width=width)
        for x, y in face["landmarks"]:
            pen.ellipse([x - width, y - width, x + width, y + width], fill=colour)
        label = face["name"] if face["distance"] is None else f'{face["name"]} ({face["distance"]:.2f})'
        x0, y0, x1, y1 = pen.textbbox((b["left"] + 4, b["bottom"] + 2), label, font=font)
        pen.rectangle([b["left"], b["bottom"], x1 + 4, y1 + 4], fill=colour)
        pen.text((b["left"] + 4, b["bottom"] + 2), label, fill=(255, 255, 255), font=font)
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / (photo.stem + ".jpg")
    img.save(target, quality=90)
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
    ap.add_argument("--onnx-model", default="face_onnx", help="ONNX-engine model ('' to skip)")
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
        print(f"== the same photos on {args.onnx_model} (ONNX engine, tract; gallery: obama, biden)")
        for name in args.recognize:
            doc = infer(client, args.onnx_model, args.photos / name)
            faces = ", ".join(
                f["name"] if f["distance"] is None else f"{f['name']} ({f['distance']:.3f})"
                for f in doc["faces"]
            ) or "no face"
            print(f"   {name}: {faces}")

    if args.sequence_model:
        run_sequence(client, args.sequence_model, args.photos, args.sequence)


if __name__ == "__main__":
    main()
