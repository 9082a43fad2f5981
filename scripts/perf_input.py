#!/usr/bin/env python3
"""Write perf_analyzer --input-data files for one photo, checked against a
running server.

For each variant (ENCODED: the JPEG bytes; IMAGE: its RGB pixels) it sends
one request with tritonclient, requires at least one face in RESULT, and
writes OUT/<variant>.json:

  {"data": [{"ENCODED": {"b64": ..., "shape": [1]}}],
   "validation_data": [{"RESULT": {"b64": ...}}]}

perf_analyzer base64-decodes "b64" and sends the bytes as the tensor's raw
content, so a BYTES tensor must already be in Triton's wire form: each
element is a 4-byte little-endian length followed by its bytes. The
validation data (that reply, in the same form) makes perf_analyzer compare
every response with it and fail on a mismatch. ENROLL is never sent.
"""
import argparse
import base64
import json
import os
import struct
import sys

import numpy as np
import tritonclient.http as httpclient
from PIL import Image


def b64(raw):
    return base64.b64encode(raw).decode("ascii")


def bytes_element(raw):
    """One BYTES tensor element as Triton lays it out: u32 LE length + bytes."""
    return struct.pack("<I", len(raw)) + raw


def variants(photo):
    """name -> (input name, tritonclient datatype, batch-1 array, raw payload)."""
    jpeg = open(photo, "rb").read()
    pixels = np.asarray(Image.open(photo).convert("RGB"), dtype=np.uint8)
    return {
        "encoded": ("ENCODED", "BYTES", np.array([jpeg], dtype=object), bytes_element(jpeg)),
        "image": ("IMAGE", "UINT8", pixels, pixels.tobytes()),
    }


def infer(client, model, name, datatype, array):
    inp = httpclient.InferInput(name, [1, *array.shape], datatype)
    inp.set_data_from_numpy(array[np.newaxis])
    result = client.infer(model, [inp], outputs=[httpclient.InferRequestedOutput("RESULT")])
    return result.as_numpy("RESULT").reshape(-1)[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", required=True, help="host:port of the server's HTTP endpoint")
    ap.add_argument("--model", default="face")
    ap.add_argument("--photo", required=True)
    ap.add_argument("--out", required=True, help="directory for <variant>.json")
    args = ap.parse_args()

    client = httpclient.InferenceServerClient(args.url)
    for variant, (name, datatype, array, payload) in variants(args.photo).items():
        reply = infer(client, args.model, name, datatype, array)
        faces = json.loads(reply)["faces"]
        if not faces:
            sys.exit(f"{variant}: the server found no face in {args.photo}: {reply.decode()}")
        found = ", ".join(f"{f['name']} ({f['distance']})" for f in faces)
        print(f"{variant}: {name} {list(array.shape)} -> {len(faces)} face(s): {found}")
        doc = {
            "data": [{name: {"b64": b64(payload), "shape": list(array.shape)}}],
            "validation_data": [{"RESULT": {"b64": b64(bytes_element(reply))}}],
        }
        with open(os.path.join(args.out, f"{variant}.json"), "w") as f:
            json.dump(doc, f)


if __name__ == "__main__":
    main()
