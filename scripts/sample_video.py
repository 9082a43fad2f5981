#!/usr/bin/env python3
"""Make the sample video from the sample photos: 15 s at 10 fps, 640x480, H.264 in MP4, with
known people entering and leaving, and beside it the truth (which person is fully in view in
which frame) for the tests and the README demo.

    python scripts/sample_video.py --photos assets/photos --out assets/video/sample.mp4

Scenes: obama alone, zooming in (frames 0-39); biden slides in from the right (40-79); obama
slides out to the left (80-99); biden slides out to the right, then no one (100-114); another
photo of obama comes in (115-149). No video ships in the registries we can reach, so setup makes
this one (scripts/setup.sh); the same photos give the same frames.

`--scene crossing` makes another (4 s): obama and biden cross, one above the other, so close that
their heads overlap (their faces do not); the tests follow both through it.
`--scene camera` makes a third (9 s), what a camera in a hall sees: obama walks towards it,
swaying, his face growing from 80 to 400 px; then biden and obama side by side; then no one.
`--scene approach`, `offsets` and `behind`: faces entering small (50 px) and growing, small
faces coming into view between the detector's cells, a face passing behind another.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import av
import numpy as np
from PIL import Image

WIDTH, HEIGHT, FPS, FRAMES = 640, 480, 10, 150
SPRITE = 240  # side of a head-and-shoulders square on the canvas

# The face boxes docs/sequences.md shows for these photos (about 310 px); each head is cut as
# a square of twice that side around its face, so a face is about 120 px on the canvas.
HEADS = {
    "obama2.jpg": ("obama", (164, 302, 474, 611)),
    "biden.jpg": ("biden", (439, 233, 749, 542)),
    "obama3.jpg": ("obama", (646, 302, 955, 611)),
}
# The face's share of its square: (left, top, right, bottom) in 0..1 of the square.
FACE = (0.25, 0.25, 0.75, 0.75)


def sprite(photos: Path, name: str, side: int) -> Image.Image:
    left, top, right, bottom = HEADS[name][1]
    half_w, half_h = (right - left) / 2, (bottom - top) / 2
    square = (left - half_w, top - half_h, right + half_w, bottom + half_h)
    image = Image.open(photos / name).convert("RGB")
    return image.crop(tuple(round(v) for v in square)).resize((side, side), Image.LANCZOS)


def ease(t: float) -> float:
    """0..1 -> 0..1, smooth at both ends."""
    t = min(max(t, 0.0), 1.0)
    return t * t * (3 - 2 * t)


def along(frame: int, start: int, end: int, a: float, b: float) -> float:
    return a + (b - a) * ease((frame - start) / max(1, end - start))


def crossing(frame: int) -> list[tuple[str, float, float, float]]:
    """Obama (upper) and biden (lower) swap sides in frames 10-29; their squares overlap by a
    quarter of a side, their faces stay clear of the other's square."""
    left, right = WIDTH * 0.2, WIDTH * 0.8
    upper, lower = HEIGHT / 2 - 92, HEIGHT / 2 + 93
    return [("obama2.jpg", along(frame, 10, 29, left, right), upper, 1.0),
            ("biden.jpg", along(frame, 10, 29, right, left), lower, 1.0)]


def scene(frame: int) -> list[tuple[str, float, float, float]]:
    """(photo, centre x, centre y, scale) of each head in this frame."""
    left, middle, right = WIDTH * 0.27, WIDTH / 2, WIDTH * 0.73
    heads = []
    if frame < 40:
        heads.append(("obama2.jpg", middle, HEIGHT / 2, along(frame, 0, 39, 1.0, 1.3)))
    elif frame < 100:
        x = along(frame, 40, 49, middle, left) if frame < 80 else along(frame, 80, 89, left, -SPRITE)
        heads.append(("obama2.jpg", x, HEIGHT / 2, 1.0))
    if 40 <= frame < 115:
        x = along(frame, 40, 49, WIDTH + SPRITE, right) if frame < 100 else along(frame, 100, 109, right, WIDTH + SPRITE)
        heads.append(("biden.jpg", x, HEIGHT / 2, 1.0))
    if frame >= 115:
        heads.append(("obama3.jpg", along(frame, 115, 149, left, right), HEIGHT / 2, 1.1))
    return heads


def background() -> Image.Image:
    """A soft vertical gradient: nothing a detector could take for a face."""
    ramp = np.linspace(70, 150, HEIGHT, dtype=np.float32)[:, None, None]
    tint = np.array([1.0, 1.05, 1.15], dtype=np.float32)
    pixels = np.broadcast_to(ramp * tint, (HEIGHT, WIDTH, 3)).clip(0, 255).astype(np.uint8)
    return Image.fromarray(pixels)


def camera(frame: int) -> list[tuple]:
    """What a camera in a hall sees (9 s): obama walks towards it across the view, his face
    growing from 80 px to 400 px (frames 0-39); biden and obama side by side, faces of 100 px,
    drifting right (40-69); no one (70-89). Heads sway as people walk (up to 14 degrees)."""
    sway = 14 * math.sin(frame * 0.6)
    if frame < 40:
        return [("obama2.jpg", along(frame, 0, 39, WIDTH * 0.2, WIDTH * 0.6), HEIGHT / 2,
                 along(frame, 0, 39, 80 / 120, 400 / 120), sway)]
    if frame < 70:
        dx = along(frame, 40, 69, 0, 40)
        return [("biden.jpg", WIDTH * 0.3 + dx, HEIGHT / 2, 100 / 120, sway),
                ("obama3.jpg", WIDTH * 0.7 + dx, HEIGHT / 2, 100 / 120, -sway)]
    return []


def face(px: float) -> float:
    """The scale of a head whose face is `px` wide on the canvas (its square is twice that)."""
    return px / (SPRITE * (FACE[2] - FACE[0]))


def approach(frame: int) -> list[tuple]:
    """Faces entering small and growing (6 s): obama comes in from the left, his face growing
    from 50 to 150 px (frames 0-59); biden comes in from the right at 50 px, growing to 110
    (25-59)."""
    heads = [("obama2.jpg", along(frame, 0, 19, -20, WIDTH * 0.35), HEIGHT * 0.45,
              face(along(frame, 0, 59, 50, 150)))]
    if frame >= 25:
        heads.append(("biden.jpg", along(frame, 25, 39, WIDTH + 20, WIDTH * 0.76), HEIGHT * 0.4,
                      face(along(frame, 25, 59, 50, 110))))
    return heads


def offsets(frame: int) -> list[tuple]:
    """Small faces (52-64 px) coming into view at offsets of the frame that fall between the
    detector's 8 px cells (9 s): obama from the top (frames 0-29, then out the top), biden from
    the left (8-89), obama again from the right, lower (33-89)."""
    heads = []
    if frame < 30:
        cy = along(frame, 0, 14, -30, 130.6) if frame < 24 else along(frame, 24, 29, 130.6, -40)
        heads.append(("obama3.jpg", 150.4 + 0.3 * frame, cy, face(56)))
    if frame >= 8:
        heads.append(("biden.jpg", along(frame, 8, 22, -30, 140.7), 330.2, face(64)))
    if frame >= 33:
        heads.append(("obama2.jpg", along(frame, 33, 47, WIDTH + 30, 470.3), 300.5, face(52)))
    return heads


def behind(frame: int) -> list[tuple]:
    """A face passing behind another (6 s): obama stands still (a 90 px face); biden, nearer
    the camera (130 px), walks across in front of him (frames 10-49), hiding his face while
    their squares overlap."""
    return [("obama3.jpg", WIDTH / 2, HEIGHT / 2, face(90)),
            ("biden.jpg", along(frame, 10, 49, -150, WIDTH + 150), HEIGHT / 2 + 20, face(130))]


SCENES = {"sample": (scene, FRAMES), "crossing": (crossing, 40), "camera": (camera, 90),
          "approach": (approach, 60), "offsets": (offsets, 90), "behind": (behind, 60)}


def render(photos: Path, frame: int, cache: dict, base: Image.Image,
           heads: list[tuple[str, float, float, float]]) -> tuple[Image.Image, list]:
    """The frame and, for each person whose face is fully in view (inside the frame, under no
    head drawn after it), {name, box}."""
    canvas = base.copy()
    truth, drawn = [], []  # drawn: the box of each face in truth
    for photo, cx, cy, scale, *turn in heads:
        side = round(SPRITE * scale)
        angle = round(turn[0]) if turn else 0  # a head tilted (degrees), as people walk
        key = (photo, side, angle)
        if key not in cache:
            cache[key] = sprite(photos, photo, side).rotate(angle, Image.BICUBIC,
                                                            fillcolor=(100, 105, 115))
        x0, y0 = round(cx - side / 2), round(cy - side / 2)
        canvas.paste(cache[key], (x0, y0))
        square = (x0, y0, x0 + side, y0 + side)
        truth = [t for t, box in zip(truth, drawn) if not overlaps(box, square)]
        drawn = [box for box in drawn if not overlaps(box, square)]
        box = [x0 + FACE[0] * side, y0 + FACE[1] * side, x0 + FACE[2] * side, y0 + FACE[3] * side]
        if box[0] >= 0 and box[1] >= 0 and box[2] <= WIDTH and box[3] <= HEIGHT:
            truth.append({"name": HEADS[photo][0], "box": [round(v) for v in box]})
            drawn.append(box)
    return canvas, truth


def overlaps(a, b) -> bool:
    return min(a[2], b[2]) > max(a[0], b[0]) and min(a[3], b[3]) > max(a[1], b[1])


def write(photos: Path, out: Path, scene_name: str = "sample") -> dict:
    heads_of, count = SCENES[scene_name]
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    frames, cache, base = [], {}, background()
    with av.open(str(partial), "w", format="mp4", options={"movflags": "+faststart"}) as container:
        stream = container.add_stream("libx264", rate=FPS)
        stream.width, stream.height, stream.pix_fmt = WIDTH, HEIGHT, "yuv420p"
        stream.options = {"crf": "20", "preset": "medium"}
        for i in range(count):
            image, truth = render(photos, i, cache, base, heads_of(i))
            frames.append(truth)
            container.mux(stream.encode(av.VideoFrame.from_image(image)))
        container.mux(stream.encode())
    partial.replace(out)  # never a half-written video under the real name
    doc = {"video": out.name, "fps": FPS, "width": WIDTH, "height": HEIGHT, "frames": frames}
    out.with_suffix(".json").write_text(json.dumps(doc, indent=1) + "\n")
    return doc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--photos", type=Path, default=Path("assets/photos"))
    ap.add_argument("--out", type=Path, default=Path("assets/video/sample.mp4"))
    ap.add_argument("--scene", choices=sorted(SCENES), default="sample")
    args = ap.parse_args()
    doc = write(args.photos, args.out, args.scene)
    seen = sorted({p["name"] for f in doc["frames"] for p in f})
    print(f"{args.out}: {len(doc['frames'])} frames, people: {', '.join(seen)}")


if __name__ == "__main__":
    main()
