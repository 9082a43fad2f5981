#!/usr/bin/env python3
"""The GPU bundle's made inputs (run by scripts/gpu_bundle.sh with the project's .venv):
the sample video's frames as JPEG files with its truth (the GPU machine has no video
decoder), and perf_analyzer's input for one 640x480 photo as IMAGE pixels and as ENCODED
JPEG bytes.

  inputs.py --video assets/video/sample.mp4 --photo assets/photos/obama_640x480.jpg --out DIR

writes DIR/video/frames/000.jpg ..., DIR/video/truth.json, DIR/perf/obama_640x480-IMAGE.json
and DIR/perf/obama_640x480-ENCODED.json.
"""
import argparse
import base64
import json
import shutil
import struct
from pathlib import Path

import av
import numpy as np
from PIL import Image


def frames(video: Path, out: Path) -> int:
    folder = out / "video" / "frames"
    folder.mkdir(parents=True, exist_ok=True)
    count = 0
    with av.open(str(video)) as container:
        for count, frame in enumerate(container.decode(video=0), start=1):
            frame.to_image().save(folder / f"{count - 1:03d}.jpg", "JPEG", quality=90)
    shutil.copy2(video.with_suffix(".json"), out / "video" / "truth.json")
    return count


def perf_input(photo: Path, out: Path) -> None:
    """perf_analyzer sends the "b64" bytes as the tensor's raw content: HWC RGB pixels for
    IMAGE; for ENCODED (BYTES) Triton's wire form, a u32 little-endian length then the
    JPEG."""
    pixels = np.asarray(Image.open(photo).convert("RGB"), dtype=np.uint8)
    jpeg = photo.read_bytes()
    tensors = {
        "IMAGE": (pixels.tobytes(), list(pixels.shape)),
        "ENCODED": (struct.pack("<I", len(jpeg)) + jpeg, [1]),
    }
    (out / "perf").mkdir(parents=True, exist_ok=True)
    for name, (raw, shape) in tensors.items():
        data = {"data": [{name: {"b64": base64.b64encode(raw).decode("ascii"), "shape": shape}}]}
        (out / "perf" / f"{photo.stem}-{name}.json").write_text(json.dumps(data))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--video", type=Path, required=True)
    parser.add_argument("--photo", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    print(f"{frames(args.video, args.out)} frames")
    perf_input(args.photo, args.out)


if __name__ == "__main__":
    main()
