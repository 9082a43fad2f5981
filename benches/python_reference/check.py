#!/usr/bin/env python3
"""Parity of two models on a running tritonserver: send each photo to both (the same
request: ENCODED bytes or IMAGE pixels), and require the same faces, the same names
and distances within --tolerance. Starts nothing; exits 1 on a mismatch.

  check.py --url localhost:8000 face_onnx face_onnx_py_expert assets/photos/*.jpg

Faces are paired in answer order (both models sort by detector score) and must
overlap (box IoU >= 0.5). Box and landmark differences are printed, not judged:
they are pixels, the distance is what decides the name.
"""
import argparse
import json
import sys

import numpy as np
import tritonclient.http as httpclient
from PIL import Image


def request(photo, variant):
    if variant == "encoded":
        with open(photo, "rb") as f:
            data = np.array([[f.read()]], dtype=object)
        inp = httpclient.InferInput("ENCODED", [1, 1], "BYTES")
    else:
        data = np.asarray(Image.open(photo).convert("RGB"), dtype=np.uint8)[np.newaxis]
        inp = httpclient.InferInput("IMAGE", list(data.shape), "UINT8")
    inp.set_data_from_numpy(data)
    return inp


def answer(client, model, inp):
    result = client.infer(model, [inp], outputs=[httpclient.InferRequestedOutput("RESULT")])
    return json.loads(result.as_numpy("RESULT").reshape(-1)[0])


def iou(a, b):
    w = max(0, min(a["right"], b["right"]) - max(a["left"], b["left"]))
    h = max(0, min(a["bottom"], b["bottom"]) - max(a["top"], b["top"]))
    area = lambda r: (r["right"] - r["left"]) * (r["bottom"] - r["top"])  # noqa: E731
    union = area(a) + area(b) - w * h
    return w * h / union if union > 0 else 0.0


def compare(photo, a, b, tolerance):
    """Lines describing the comparison, and whether it passed."""
    fa, fb = a.get("faces", []), b.get("faces", [])
    if len(fa) != len(fb):
        return [f"  {len(fa)} faces vs {len(fb)}"], False
    if not fa:
        return ["  no faces in either"], True
    ok, lines = True, []
    for i, (x, y) in enumerate(zip(fa, fb)):
        box = max(abs(x["box"][k] - y["box"][k]) for k in x["box"])
        overlap = iou(x["box"], y["box"])
        lm = "-"
        if x.get("landmarks") and y.get("landmarks"):
            lm = f"{np.abs(np.array(x['landmarks']) - np.array(y['landmarks'])).max():.2e}"
        dx, dy = x.get("distance"), y.get("distance")
        if dx is None or dy is None:
            dd, close = None, dx is dy
        else:
            dd = abs(dx - dy)
            close = dd <= tolerance
        same = x["name"] == y["name"] and close and overlap >= 0.5
        ok &= same
        lines.append(f"  face {i}: {x['name']} {dx} | {y['name']} {dy} | "
                     f"|d distance| {'-' if dd is None else f'{dd:.2e}'} | box max |d| {box} px "
                     f"(IoU {overlap:.3f}) | landmarks max |d| {lm} px  {'OK' if same else 'MISMATCH'}")
    return lines, ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", required=True, help="host:port of the server's HTTP endpoint")
    ap.add_argument("--input", choices=("encoded", "image"), default="encoded",
                    help="send ENCODED (the file's bytes, default) or IMAGE (RGB pixels)")
    ap.add_argument("--tolerance", type=float, default=1e-3, help="max |distance difference|")
    ap.add_argument("model_a")
    ap.add_argument("model_b")
    ap.add_argument("photos", nargs="+")
    args = ap.parse_args()

    client = httpclient.InferenceServerClient(args.url)
    failed = 0
    for photo in args.photos:
        inp = request(photo, args.input)
        a, b = answer(client, args.model_a, inp), answer(client, args.model_b, inp)
        lines, ok = compare(photo, a, b, args.tolerance)
        failed += not ok
        print(f"{photo} ({args.input}): {args.model_a} vs {args.model_b}: "
              f"{'same' if ok else 'DIFFERENT'}")
        print("\n".join(lines))
    print(f"{len(args.photos) - failed}/{len(args.photos)} photos agree "
          f"(names equal, distances within {args.tolerance})")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
