"""Following faces between detections (`detect_every`, `reidentify_every`) on a real server, with
frames of the sample video and of a second video made the same way (two faces crossing): every-
frame cadence answers as the `face` model does, a face that appears between detections is found at
the next one, one that leaves ends its track within `detect_every` frames, crossing faces keep
their names, a face the detector misses keeps its track, a tracked face obeys `max_faces` and
`min_face_size` as a detected one does, a camera's swaying, growing faces are named, and its small
ones (entering at 50 px, between the detector's cells, behind another face), bad values are
refused for their request alone.
"""

from __future__ import annotations

import json
import subprocess
import sys

import av
import numpy as np
import pytest

from environment import REPO_ROOT
from face_client import (
    MODEL, SEQUENCE_MODEL, expect_invalid, infer, pixel_tensors, sequence_request, validate,
)

sys.path.insert(0, str(REPO_ROOT / "scripts"))
import sample_video  # noqa: E402
import video_score  # noqa: E402

pytestmark = pytest.mark.engines("dlib", "onnx")


@pytest.fixture(scope="module")
def server(start_module_server):
    """face_sequence as shipped, and `face` (same engine, same gallery, and as face_sequence
    looking for faces from 50 px) to compare with."""
    return start_module_server(model=SEQUENCE_MODEL, more_models=(MODEL,),
                               params={"smallest_face": "50"})


@pytest.fixture(scope="module")
def http(server):
    return server.http()


@pytest.fixture(scope="module")
def frames(sample_video) -> list[np.ndarray]:
    with av.open(str(sample_video.path)) as video:
        return [f.to_ndarray(format="rgb24") for f in video.decode(video=0)]


def step(http, seq: int, rgb: np.ndarray, start=False, end=False, **parameters) -> dict:
    docs = infer(http, pixel_tensors(rgb), SEQUENCE_MODEL, parameters=parameters or None,
                 **sequence_request(seq, start, end))
    return validate(docs[0])


def run(http, seq: int, frames: list[np.ndarray], **parameters) -> list[dict]:
    """`frames` as one sequence, the cadence asked at START."""
    last = len(frames) - 1
    return [step(http, seq, rgb, start=i == 0, end=i == last, **(parameters if i == 0 else {}))
            for i, rgb in enumerate(frames)]


def assert_one_face_per_track(frames: list[dict]) -> None:
    for doc in frames:
        tracks = [f["track"] for f in doc["faces"]]
        assert len(set(tracks)) == len(tracks), f"two faces share a track: {doc}"


def boxes_and_names(doc: dict) -> list[tuple]:
    return [(f["box"], f["name"], f["distance"]) for f in doc["faces"]]


def test_every_frame_cadence_answers_as_the_face_model(http, frames):
    clip = frames[35:55]  # obama alone, then biden coming in beside him
    followed = run(http, 101, clip, detect_every=1, reidentify_every=1)
    for i, (doc, rgb) in enumerate(zip(followed, clip)):
        alone = validate(infer(http, pixel_tensors(rgb), MODEL)[0])
        assert boxes_and_names(doc) == boxes_and_names(alone), f"frame {i}"
        assert all(f["source"] == "detected" and f["embedded"] for f in doc["faces"]), doc
    assert any(len(d["faces"]) == 2 for d in followed), "biden never came in"


# What the shipped sequence models ask (model_repository/face_sequence, face_onnx_sequence):
# dlib detects every 5th frame (HOG costs 8x the tracker), the ONNX engine every 3rd (its faces
# carried by their points between).
TRACKS = {"dlib": True, "onnx": True}


def test_shipped_cadence_embeds_less(http, frames, sample_video, engine):
    docs = run(http, 102, frames)
    faces = [f for d in docs for f in d["faces"]]
    sources = {"detected", "tracked"} if TRACKS[engine.name] else {"detected"}
    assert {f["source"] for f in faces} == sources, "not the shipped cadence"
    assert sum(f["embedded"] for f in faces) < 0.3 * len(faces), "most faces were embedded"
    assert_one_face_per_track(docs)
    report = [{"frame": i, "faces": d["faces"]} for i, d in enumerate(docs)]
    scored = video_score.score(report, sample_video.truth)
    assert scored.named_share >= 0.95 and scored.false_names == 0, scored.row()
    assert scored.id_switches == 0, scored.row()
    # Tracked boxes on their own: within IoU 0.5 of the truth.
    tracked = [{"frame": r["frame"], "faces": [f for f in r["faces"] if f["source"] == "tracked"]}
               for r in report]
    boxes = video_score.score(tracked, sample_video.truth)
    assert boxes.box_share >= 0.9 and (boxes.paired > 0) == TRACKS[engine.name], boxes.row()


def test_faces_come_at_a_detection_and_go_within_detect_every(http, frames):
    # From video frame 100, detecting every 4th: at 100, 104, 108, 112, 116, 120. Biden's face is
    # fully out of view from frame 105 (scripts/sample_video.py); obama comes in at 115.
    first, every, last = 100, 4, 124
    docs = run(http, 103, frames[first:last + 1], detect_every=every, reidentify_every=every)
    at = {first + i: d["faces"] for i, d in enumerate(docs)}
    gone = next(f for f in range(first, last) if not visible(f, "biden.jpg"))
    came = next(f for f in range(gone, last) if visible(f, "obama3.jpg"))
    assert (gone, came) == (105, 115), "the sample video changed: adapt this test"
    ended = next(f for f in range(gone, gone + every) if not at[f])
    assert all(not at[f] for f in range(ended, came)), "a track outlived its face"
    detection = next(f for f in range(came, last) if (f - first) % every == 0)
    assert detection > came, "obama must come in between two detections"
    assert all(not at[f] for f in range(came, detection)), "a face before any detection found it"
    obama = at[detection]
    assert [f["name"] for f in obama] == ["obama"] and obama[0]["source"] == "detected", obama
    assert all([f["name"] for f in at[f]] == ["obama"] for f in range(detection, last + 1))


def visible(frame: int, photo: str) -> bool:
    """Whether any of `photo`'s face square is on the canvas in `frame` of the sample video."""
    for name, cx, cy, scale in sample_video.scene(frame):
        side = sample_video.SPRITE * scale
        left = cx - side / 2 + sample_video.FACE[0] * side
        right = cx - side / 2 + sample_video.FACE[2] * side
        if name == photo and right > 0 and left < sample_video.WIDTH:
            return True
    return False


@pytest.mark.parametrize("cadence", [(), ("--detect-every", "3")], ids=["shipped", "tracked"])
def test_crossing_faces_keep_their_names(server, suite_env, tmp_path, cadence):
    scored = scene_through_video_client(server, suite_env, tmp_path, "crossing", cadence)
    assert scored.person_frames == 80, scored.row()


def test_a_camera_in_a_hall(server, suite_env, tmp_path):
    """sample_video.py's camera scene, as shipped: a face that walks towards the camera swaying
    (80 to 400 px, tilted up to 14 degrees), two side by side, no one. dlib's tracker loses such
    faces between detections; each loss sends that frame to the detector at once (it named 0.80
    of the person-frames when a lost face waited for the next detection round)."""
    scored = scene_through_video_client(server, suite_env, tmp_path, "camera", ())
    assert scored.person_frames == 100, scored.row()


@pytest.mark.parametrize("scene", ["approach", "offsets", "behind"])
def test_a_camera_s_small_faces(server, http, suite_env, tmp_path, scene):
    """sample_video.py's scenes of small faces, as shipped: faces entering at 50 px and growing
    (named on every frame from the first detection frame that sees them whole), small faces
    coming into view between the detector's 8 px cells (each named within two detection
    frames), a face passing behind another (no false name, no switch when it comes back)."""
    scored, report, truth = scene_report(server, suite_env, tmp_path, scene, ())
    every = int(http.get_model_config(SEQUENCE_MODEL)["parameters"]["detect_every"]["string_value"])
    for name, start, end in runs_in_view(truth["frames"]):
        first_detection = start + (-start % every)
        by = first_detection if scene == "approach" else first_detection + every
        missed = [i for i in range(by, end) if name not in names_at(report, i)]
        assert not missed, f"{scene}: {name} in view from frame {start}, not named at {missed}"
    if scene == "approach":
        smallest = min(p["box"][2] - p["box"][0] for f in truth["frames"] for p in f)
        assert smallest <= 55, f"the scene's faces start at {smallest} px"


def runs_in_view(frames: list[list[dict]]) -> list[tuple[str, int, int]]:
    """(name, first frame, frame after the last) of each stretch a person is in view."""
    runs, open_ = [], {}
    for i, people in enumerate(frames + [[]]):
        here = {p["name"] for p in people}
        for name in here - open_.keys():
            open_[name] = i
        for name in set(open_) - here:
            runs.append((name, open_.pop(name), i))
    return runs


def names_at(report: dict, frame: int) -> list[str]:
    return [f["name"] for f in report["frames"][frame]["faces"]]


def scene_through_video_client(server, suite_env, tmp_path, scene: str, cadence):
    """One sample_video.py scene through scripts/video.py: every person named, none wrongly, no
    identity switch; its score."""
    return scene_report(server, suite_env, tmp_path, scene, cadence)[0]


def scene_report(server, suite_env, tmp_path, scene: str, cadence):
    """scene_through_video_client's score, the client's report and the scene's truth."""
    video = tmp_path / f"{scene}.mp4"
    truth = sample_video.write(suite_env.photos, video, scene)
    done = subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "video.py"), str(video), "--url",
         f"127.0.0.1:{server.http_port}", "--model", SEQUENCE_MODEL, "--out", str(tmp_path / "out"),
         "--quiet", "--no-video", *cadence], cwd=REPO_ROOT, capture_output=True, text=True,
        timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((tmp_path / "out" / f"{scene}.json").read_text())
    assert_one_face_per_track(report["frames"])
    scored = video_score.score(report["frames"], truth)
    assert scored.named_share >= 0.95 and scored.false_names == 0, scored.row()
    assert scored.id_switches == 0, scored.row()
    if cadence:
        assert any(f["source"] == "tracked" for r in report["frames"] for f in r["faces"])
    return scored, report, truth


def test_cadence_asked_mid_sequence(http, frames, sample_video):
    # Every frame in full for frames 40-44 (biden coming in beside obama), then detect every 4th
    # from 45: the boxes go on moving with the faces between detections.
    first = 40
    docs = [step(http, 104, frames[i], start=i == first, detect_every=1, reidentify_every=1)
            for i in range(first, 45)]
    docs += [step(http, 104, frames[i], end=i == 64, detect_every=4, reidentify_every=10)
             for i in range(45, 65)]
    assert [d["sequence"]["frame"] for d in docs] == list(range(25))
    assert all(f["source"] == "detected" and f["embedded"] for d in docs[:5] for f in d["faces"])
    assert any(f["source"] == "tracked" for d in docs[5:] for f in d["faces"])
    assert_one_face_per_track(docs)
    report = [{"frame": first + i, "faces": d["faces"]} for i, d in enumerate(docs)]
    scored = video_score.score(report, sample_video.truth)
    assert scored.false_names == 0 and scored.id_switches == 0, scored.row()
    assert scored.named_share >= 0.9 and scored.box_share >= 0.9, scored.row()


BAD_VALUES = [0, -3, 1001, 2.5, "five", True]


@pytest.mark.parametrize("name", ["detect_every", "reidentify_every"])
@pytest.mark.parametrize("value", BAD_VALUES)
def test_bad_cadence_is_refused_alone(http, frames, name, value):
    seq = 200 + 10 * BAD_VALUES.index(value) + (name == "detect_every")
    step(http, seq, frames[0], start=True)
    expect_invalid(lambda: step(http, seq, frames[1], **{name: value}), name)
    # The sequence goes on, and the model answers the next request.
    doc = step(http, seq, frames[2], end=True)
    assert doc["sequence"]["frame"] == 1 and [f["name"] for f in doc["faces"]] == ["obama"]


def test_cadence_is_for_sequence_models(http, frames):
    expect_invalid(lambda: infer(http, pixel_tensors(frames[0]), MODEL,
                                 parameters={"detect_every": 3}), "detect_every", "sequence")


def covered(rgb: np.ndarray, boxes: list[dict]) -> np.ndarray:
    """`rgb` with each face in `boxes` covered from brow to mouth (15% to 75% of its box's height)
    by a flat patch of its own mean colour: neither engine's detector finds such a face, and its
    tracker still holds it."""
    out = rgb.copy()
    for b in boxes:
        left, top, right, bottom = (int(b[k]) for k in ("left", "top", "right", "bottom"))
        face = out[top:bottom, left:right]
        height = bottom - top
        rows = slice(top + int(0.15 * height), top + int(0.75 * height))
        out[rows, left:right] = face.reshape(-1, 3).mean(axis=0).astype(np.uint8)
    return out


@pytest.fixture(scope="module")
def correlation(start_module_server):
    """face_sequence on dlib's correlation tracker (`track_by: correlation`, the parameter's
    default; the shipped models carry faces by their points)."""
    return start_module_server(model=SEQUENCE_MODEL, params={"track_by": "correlation"}).http()


# The correlation tracker's own rules.
def test_a_missed_detection_keeps_the_tracks_and_their_names(correlation, frames):
    """Frames 50-58 (obama at the left, biden at the right, both still), detecting every 4th: at
    54 both faces are covered (`covered`), so the detection misses them. Their trackers still hold
    them, so both tracks go on (`track_shadow_rounds`, 2 as shipped): the faces are answered as
    tracked, with their tracks and names, and 58's detection finds them in the same tracks."""
    docs = []
    for f in range(50, 59):
        rgb = covered(frames[f], [d["box"] for d in docs[0]["faces"]]) if f == 54 else frames[f]
        docs.append(step(correlation, 105, rgb, start=f == 50, end=f == 58,
                         **({"detect_every": 4, "reidentify_every": 10} if f == 50 else {})))
    seen = [sorted((d["name"], d["track"], d["source"]) for d in doc["faces"]) for doc in docs]
    first = sorted((name, track) for name, track, _ in seen[0])
    assert [name for name, _ in first] == ["biden", "obama"], seen[0]
    for i, faces in enumerate(seen):
        assert sorted((n, t) for n, t, _ in faces) == first, f"frame {50 + i}: {faces}"
        want = "detected" if i in (0, 8) else "tracked"
        assert all(s == want for _, _, s in faces), f"frame {50 + i}: {faces}"


def test_tracked_faces_are_dropped_as_detected_ones_are(correlation, frames):
    """`max_faces` and `min_face_size` hold between detections too (frames 50-55, detecting every
    4th): at 51 `max_faces` 1 keeps the larger face, at 52 `min_face_size` drops both, and their
    tracks let go, so 53 answers none; the detection at 54 finds both again, in their tracks."""
    asked = {51: {"max_faces": 1}, 52: {"min_face_size": 65536}}
    docs = [step(correlation, 106, frames[f], start=f == 50, end=f == 55,
                 **({"detect_every": 4, "reidentify_every": 10} if f == 50 else {}),
                 **asked.get(f, {}))
            for f in range(50, 56)]
    assert [len(doc["faces"]) for doc in docs] == [2, 1, 0, 0, 2, 2], docs

    def area(face: dict) -> float:
        b = face["box"]
        return (b["right"] - b["left"]) * (b["bottom"] - b["top"])

    # The two faces are of one size: the one kept is tracked, and as large as frame 50's largest.
    kept = docs[1]["faces"][0]
    assert kept["source"] == "tracked" and kept["track"] in {f["track"] for f in docs[0]["faces"]}
    assert area(kept) >= 0.9 * max(map(area, docs[0]["faces"])), docs[:2]
    tracks = [sorted((f["name"], f["track"]) for f in docs[i]["faces"]) for i in (0, 4)]
    assert tracks[0] == tracks[1], tracks


@pytest.fixture(scope="module")
def points_server(start_module_server):
    """face_sequence carrying faces by their points (`track_by: points`), detecting every 3rd
    frame."""
    return start_module_server(model=SEQUENCE_MODEL, params={
        "smallest_face": "50", "track_by": "points", "detect_every": "3"})


@pytest.mark.parametrize("scene", ["sample", "crossing", "camera", "behind"])
def test_faces_carried_by_their_points(points_server, suite_env, tmp_path, scene):
    """`track_by: points`: between detections each face's box is placed around the points the
    engine finds at its last box. Every person named, none wrongly, no identity switch, and
    the carried boxes on their faces (IoU 0.5 with the scene's truth)."""
    video = tmp_path / f"{scene}.mp4"
    truth = sample_video.write(suite_env.photos, video, scene)
    done = subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "video.py"), str(video), "--url",
         f"127.0.0.1:{points_server.http_port}", "--model", SEQUENCE_MODEL, "--out",
         str(tmp_path / "out"), "--quiet", "--no-video"], cwd=REPO_ROOT, capture_output=True,
        text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    frames = json.loads((tmp_path / "out" / f"{scene}.json").read_text())["frames"]
    assert_one_face_per_track(frames)
    scored = video_score.score(frames, truth)
    assert scored.named_share >= 0.95 and scored.false_names == 0, scored.row()
    assert scored.id_switches == 0, scored.row()
    tracked = [{"frame": r["frame"], "faces": [f for f in r["faces"] if f["source"] == "tracked"]}
               for r in frames]
    boxes = video_score.score(tracked, truth)
    assert boxes.paired > 0 and boxes.box_share >= 0.9, boxes.row()
