#!/usr/bin/env python3
"""1:1 verification of two photos, in two calls to a running model:

    python scripts/verify.py PHOTO_A PHOTO_B [--model face_onnx] [--url localhost:8000]
                             [--threshold 0.5]

1. PHOTO_A with the request parameter `return_embeddings`: its one face's embedding.
2. PHOTO_B with that embedding as REFERENCE: each of its faces gets
   `verification: {"distance", "same_person"}` at the model's match_threshold (or --threshold).

Prints one line per face of PHOTO_B; the exit status is 0 when one of them is the same person,
1 when none is, 2 on an error (no face or several in PHOTO_A, a server error).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import face_api


def ask(client, model: str, photo: Path, parameters: dict, reference=None) -> dict:
    """One photo's RESULT document."""
    return face_api.infer(client, model, parameters, photo=photo.read_bytes(), reference=reference)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("photo_a", type=Path)
    parser.add_argument("photo_b", type=Path)
    parser.add_argument("--model", default="face_onnx")
    parser.add_argument("--url", default="localhost:8000", help="tritonserver's HTTP address")
    parser.add_argument("--threshold", type=float, help="same-person distance for this call")
    args = parser.parse_args()
    client = httpclient.InferenceServerClient(args.url)
    try:
        faces = ask(client, args.model, args.photo_a, {"return_embeddings": True})["faces"]
        if len(faces) != 1:
            print(f"{args.photo_a}: {len(faces)} faces; verification needs exactly one",
                  file=sys.stderr)
            return 2
        parameters = {} if args.threshold is None else {"match_threshold": args.threshold}
        doc = ask(client, args.model, args.photo_b, parameters, faces[0]["embedding"])
    except (InferenceServerException, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not doc["faces"]:
        print(f"{args.photo_b}: no face")
        return 1
    for i, face in enumerate(doc["faces"]):
        v = face["verification"]
        verdict = "same person" if v["same_person"] else "different people"
        print(f"{args.photo_b} face {i} {face['box']}: {verdict} as {args.photo_a} "
              f"(distance {v['distance']:.3f})")
    return 0 if any(f["verification"]["same_person"] for f in doc["faces"]) else 1


if __name__ == "__main__":
    sys.exit(main())
