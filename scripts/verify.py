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
import json
import sys
from pathlib import Path

import numpy as np
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException


def ask(client, model: str, photo: Path, parameters: dict, reference=None) -> dict:
    """One photo's RESULT document."""
    data = np.array([[photo.read_bytes()]], dtype=np.object_)
    inputs = [httpclient.InferInput("ENCODED", [1, 1], "BYTES")]
    inputs[0].set_data_from_numpy(data)
    if reference is not None:
        ref = np.asarray([reference], dtype=np.float32)
        inputs.append(httpclient.InferInput("REFERENCE", list(ref.shape), "FP32"))
        inputs[-1].set_data_from_numpy(ref)
    result = client.infer(model, inputs, parameters=parameters)
    return json.loads(result.as_numpy("RESULT")[0][0])


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
