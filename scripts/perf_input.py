#!/usr/bin/env python3
"""Write perf_analyzer --input-data files for one photo, checked against a
running server.

For each variant (ENCODED: the JPEG bytes; IMAGE: its RGB pixels) it sends
one request to --model with tritonclient, requires at least one face in
RESULT, and writes OUT/<model>-<variant>.json:

  {"data": [{"ENCODED": {"b64": ..., "shape": [1]}}],
   "validation_data": [{"RESULT": {"b64": ...}}]}

perf_analyzer base64-decodes "b64" and sends the bytes as the tensor's raw
content, so a BYTES tensor must already be in Triton's wire form: each
element is a 4-byte little-endian length followed by its bytes. The
validation data (that reply, in the same form) makes perf_analyzer compare
every response with it and fail on a mismatch. ENROLL is never sent.

With --sequence (a model with Triton's sequence batcher) the check is a
two-frame sequence (START, then END) whose frames must be numbered 0 and 1
and find a face, and whose END answer must carry the summary. No
validation_data is written: every answer names its frame number, so no two
are alike. perf_analyzer sets the sequence controls itself.
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


def infer(client, model, name, datatype, array, **sequence):
    inp = httpclient.InferInput(name, [1, *array.shape], datatype)
    inp.set_data_from_numpy(array[np.newaxis])
    result = client.infer(model, [inp], outputs=[httpclient.InferRequestedOutput("RESULT")],
                          **sequence)
    return result.as_numpy("RESULT").reshape(-1)[0]


def check_sequence(client, model, name, datatype, array, seq_id):
    """A START frame then an END frame of one sequence; the START reply."""
    replies = [infer(client, model, name, datatype, array, sequence_id=seq_id,
                     sequence_start=start, sequence_end=not start) for start in (True, False)]
    for frame, reply in enumerate(replies):
        doc = json.loads(reply)
        got = (doc.get("sequence") or {}).get("frame")
        if got != frame or not doc.get("faces"):
            sys.exit(f"{model}: sequence {seq_id} frame {frame}: unexpected answer {reply.decode()}")
    if "summary" not in json.loads(replies[1]):
        sys.exit(f"{model}: sequence {seq_id}: no summary at END: {replies[1].decode()}")
    return replies[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", required=True, help="host:port of the server's HTTP endpoint")
    ap.add_argument("--model", default="face")
    ap.add_argument("--variants", default="encoded,image",
                    help="comma-separated: encoded, image (default both)")
    ap.add_argument("--sequence", action="store_true",
                    help="the model is stateful: check with a sequence, write no validation_data")
    ap.add_argument("--photo", required=True)
    ap.add_argument("--out", required=True, help="directory for <model>-<variant>.json")
    args = ap.parse_args()

    client = httpclient.InferenceServerClient(args.url)
    all_variants = variants(args.photo)
    for k, variant in enumerate(args.variants.split(",")):
        if variant not in all_variants:
            ap.error(f"unknown variant {variant!r}; known: {', '.join(all_variants)}")
        name, datatype, array, payload = all_variants[variant]
        if args.sequence:
            # High IDs: far from perf_analyzer's (which start at 1).
            reply = check_sequence(client, args.model, name, datatype, array, 1_000_000_000 + k)
        else:
            reply = infer(client, args.model, name, datatype, array)
        faces = json.loads(reply)["faces"]
        if not faces:
            sys.exit(f"{args.model} {variant}: the server found no face in {args.photo}: "
                     f"{reply.decode()}")
        found = ", ".join(f"{f['name']} ({f['distance']})" for f in faces)
        print(f"{args.model} {variant}: {name} {list(array.shape)} -> {len(faces)} face(s): "
              f"{found}")
        doc = {"data": [{name: {"b64": b64(payload), "shape": list(array.shape)}}]}
        if not args.sequence:
            doc["validation_data"] = [{"RESULT": {"b64": b64(bytes_element(reply))}}]
        with open(os.path.join(args.out, f"{args.model}-{variant}.json"), "w") as f:
            json.dump(doc, f)


if __name__ == "__main__":
    main()
