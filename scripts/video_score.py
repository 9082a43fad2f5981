#!/usr/bin/env python3
"""Score a video.py report against a video's truth (scripts/sample_video.py writes one beside
each video it makes): per frame, each person fully in view is paired with the answered face
whose box overlaps theirs most (any overlap), and

- named right: the share of person-frames whose face carries their name;
- false names: faces that carry a name other than their person's (a face the truth does not
  list, one partly out of view, is not scored);
- ID switches: times a person's track changed while they stayed in view;
- boxes: the share of paired faces within IoU 0.5 of the truth.

The truth's box is the face's square as drawn (sample_video.FACE), so a detector's box is
compared with a box of the same kind on every frame.

    python scripts/video_score.py out/video/sample.json assets/video/sample.json
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass
from pathlib import Path

BOX_IOU = 0.5


@dataclass
class Score:
    person_frames: int = 0
    named_right: int = 0
    false_names: int = 0
    id_switches: int = 0
    boxes_within: int = 0
    paired: int = 0

    @property
    def named_share(self) -> float:
        return self.named_right / self.person_frames if self.person_frames else 1.0

    @property
    def box_share(self) -> float:
        return self.boxes_within / self.paired if self.paired else 1.0

    def __add__(self, other: "Score") -> "Score":
        return Score(*(a + b for a, b in zip(asdict(self).values(), asdict(other).values())))

    def row(self) -> dict:
        return {**asdict(self), "named_share": round(self.named_share, 4),
                "box_share": round(self.box_share, 4)}


def iou(a, b) -> float:
    """Intersection over union of two (left, top, right, bottom) boxes."""
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    if w <= 0 or h <= 0:
        return 0.0
    inter = w * h
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def box_of(face: dict) -> tuple:
    box = face["box"]
    return (box["left"], box["top"], box["right"], box["bottom"]) if isinstance(box, dict) else tuple(box)


def pair(people: list[dict], faces: list[dict]) -> list[tuple[dict, dict | None]]:
    """Each person with the face overlapping them most, no face used twice (largest overlaps
    first)."""
    overlaps = sorted(((iou(p["box"], box_of(f)), i, j) for i, p in enumerate(people)
                       for j, f in enumerate(faces)), reverse=True)
    face_of: dict[int, int] = {}
    used = set()
    for overlap, i, j in overlaps:
        if overlap > 0 and i not in face_of and j not in used:
            face_of[i] = j
            used.add(j)
    return [(p, faces[face_of[i]] if i in face_of else None) for i, p in enumerate(people)]


def score(frames: list[dict], truth: dict) -> Score:
    """`frames`: a video.py report's frames ({frame, faces: [{name, track, box}]})."""
    s = Score()
    last_track: dict[str, object] = {}  # person -> track while in view
    for answered in frames:
        people = truth["frames"][answered["frame"]]
        in_view = {p["name"] for p in people}
        for gone in set(last_track) - in_view:
            del last_track[gone]
        for person, face in pair(people, answered["faces"]):
            s.person_frames += 1
            if face is None:
                continue
            s.paired += 1
            s.named_right += face["name"] == person["name"]
            s.false_names += face["name"] not in (person["name"], "unknown", None)
            s.boxes_within += iou(person["box"], box_of(face)) >= BOX_IOU
            track = face.get("track")
            if track is not None:
                before = last_track.get(person["name"])
                s.id_switches += before is not None and before != track
                last_track[person["name"]] = track
    return s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("report", type=Path, help="video.py's JSON report")
    ap.add_argument("truth", type=Path, help="the video's truth (sample_video.py)")
    args = ap.parse_args()
    report = json.loads(args.report.read_text())
    print(json.dumps(score(report["frames"], json.loads(args.truth.read_text())).row(), indent=1))


if __name__ == "__main__":
    main()
