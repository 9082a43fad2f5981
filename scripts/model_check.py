#!/usr/bin/env python3
"""Check a detector and an embedder of your own before serving them: which detector family the
backend reads the detector as and every setting it would use, a config.pbtxt that serves the
pair, and, on your photos through the real server, the faces found in each, the distances
between photos of one person and of different people, and a `match_threshold` that separates
them with its margin on both sides.

    python scripts/model_check.py DETECTOR.onnx EMBEDDER.onnx [--photos DIR]
        [--landmark-model LANDMARKS.onnx] [--param KEY=VALUE ...] [--time PHOTO]
    make model-check DETECTOR=det.onnx EMBEDDER=emb.onnx [PHOTOS=dir]

Photos: a folder per person (DIR/alice/*.jpg), or files named after their person
(alice_1.jpg, alice_2.jpg, bob.jpg; a name's trailing digits are dropped: obama2.jpg is obama's).
Without --photos the sample photos (scripts/setup.sh) are used. The largest face of a photo
stands for it. Needs the built backend and tritonserver (`bash scripts/build.sh` after
scripts/setup.sh; `make model-check` does both). Exit status: 0 checked, 1 a model or photos it
cannot read or serve (the message says why), 2 bad arguments.
"""

from __future__ import annotations

import argparse
import itertools
import re
import shutil
import socket
import sys
import tempfile
from pathlib import Path

import numpy as np

import face_api
import local_server

REPO_ROOT = Path(__file__).resolve().parent.parent
LIBRARY = REPO_ROOT / "target" / "release" / "libtriton_face.so"
SAMPLE_PHOTOS = ("obama.jpg", "obama2.jpg", "obama3.jpg", "biden.jpg")
IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".webp", ".bmp"}
MODEL = "model_check"


class CheckFailed(Exception):
    """What could not be read or served, as a sentence for a person."""


def read_onnx(path: Path, role: str) -> Path:
    """`path` as an ONNX file, or CheckFailed saying what it is instead."""
    import onnx  # here: the message below says what a missing package means

    if not path.is_file():
        raise CheckFailed(f"{role} {path}: no such file")
    try:
        onnx.load(str(path), load_external_data=False)
    except Exception as e:  # noqa: BLE001 - any parse error means the same to a person
        raise CheckFailed(f"{role} {path}: not an ONNX model ({type(e).__name__}: {e})") from None
    return path.resolve()


def config_text(params: dict[str, str]) -> str:
    """A config.pbtxt serving the pair as the `face` backend's ONNX engine."""
    sample = (REPO_ROOT / "model_repository" / "face_onnx" / "config.pbtxt").read_text()
    body = sample[sample.index("backend:"):sample.index("parameters {")]
    lines = [f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}'
             for k, v in params.items()]
    return f'name: "{MODEL}"\n' + body + "\n".join(lines) + "\n"


def people_of(folder: Path | None, samples: Path) -> dict[str, list[Path]]:
    """Photos by person: a folder per person, or files named after their person."""
    if folder is None:
        return group([samples / name for name in SAMPLE_PHOTOS])
    if not folder.is_dir():
        raise CheckFailed(f"--photos {folder}: not a folder")
    people: dict[str, list[Path]] = {}
    for entry in sorted(folder.iterdir()):
        if entry.is_dir():
            photos = sorted(p for p in entry.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
            if photos:
                people.setdefault(entry.name, []).extend(photos)
    loose = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
    for name, photos in group(loose).items():
        people.setdefault(name, []).extend(photos)
    if not people:
        raise CheckFailed(f"--photos {folder}: no .jpg, .png, .webp or .bmp photos in it")
    return people


def group(photos: list[Path]) -> dict[str, list[Path]]:
    people: dict[str, list[Path]] = {}
    for photo in photos:
        name = re.sub(r"\d+$", "", photo.stem.split("_")[0]) or photo.stem
        people.setdefault(name, []).append(photo)
    return people


def free_ports() -> int:
    """A port whose next two are free too."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base < 65000 and all(_free(base + k) for k in (1, 2)):
            return base
    raise CheckFailed("no three free ports next to each other on this machine")


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def serve(params: dict[str, str], folder: Path,
          gallery: dict[str, Path] | None = None) -> tuple[str, Path]:
    """A server on a repository holding only the checked model (its gallery folder holding
    `gallery`: file name -> photo); its URL and log."""
    if not LIBRARY.is_file():
        raise CheckFailed(f"{LIBRARY} not built: run `bash scripts/build.sh` (after scripts/setup.sh)")
    model = folder / "models" / MODEL
    (model / "1").mkdir(parents=True)
    (model / "gallery").mkdir()
    for name, photo in (gallery or {}).items():
        shutil.copy2(photo, model / "gallery" / name)
    shutil.copy2(LIBRARY, model / "libtriton_face.so")
    (model / "config.pbtxt").write_text(config_text(params))
    url = f"127.0.0.1:{free_ports()}"
    log = folder / "tritonserver.log"
    try:
        local_server.start(url, repository=folder / "models", log=log)
    except local_server.NotStarted:
        raise CheckFailed(load_error(log)) from None
    return url, log


def load_error(log: Path) -> str:
    """The backend's reason the model did not load, from the server's log."""
    text = log.read_text(errors="replace") if log.is_file() else ""
    found = re.search(r"failed to load '" + MODEL + r"'[^:]*: (.*?)\"?$", text, re.M)
    if found:
        why = found.group(1).replace("TRITONBACKEND_ModelInitialize: ", "")
        return "the backend cannot serve the pair: " + why.replace('\\"', '"')
    return "tritonserver did not start:\n" + local_server.tail(log)


def engine_line(log: Path) -> tuple[str, dict[str, str]]:
    """The load's line about the engine, and the settings it lists."""
    text = log.read_text(errors="replace")
    found = re.search(r"model '" + MODEL + r"': engine (onnx \(.*)\"$", text, re.M)
    if not found:
        raise CheckFailed("the server's log does not say how the models were read:\n"
                          + local_server.tail(log))
    line = found.group(1)
    settings = dict(re.findall(r"(\w+)=([^\s;]+)", line.split("settings: ", 1)[-1]))
    return line, settings


def largest_face(doc: dict) -> dict | None:
    def area(face):
        box = face["box"]
        return (box["right"] - box["left"]) * (box["bottom"] - box["top"])
    return max(doc["faces"], key=area, default=None)


def cosine_distance(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(1.0 - a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def distances(embeddings: dict[Path, tuple[str, list[float]]]) -> tuple[list[float], list[float]]:
    same, different = [], []
    for (_, (a, ea)), (_, (b, eb)) in itertools.combinations(embeddings.items(), 2):
        (same if a == b else different).append(cosine_distance(ea, eb))
    return same, different


def recommend(same: list[float], different: list[float]) -> tuple[float | None, str]:
    """A threshold (None: none can be said) and why."""
    if not same or not different:
        return None, ("no recommendation: it needs two photos of one person and photos of two "
                      "people (a folder per person, or alice_1.jpg, alice_2.jpg, bob.jpg)")
    worst_same, closest_other = max(same), min(different)
    if worst_same < closest_other:
        threshold = round((worst_same + closest_other) / 2, 3)
        return threshold, (
            f"match_threshold {threshold}: {threshold - worst_same:.3f} above the farthest "
            f"same-person pair, {closest_other - threshold:.3f} below the closest pair of "
            f"different people")
    # Overlap: the threshold with the fewest pairs on the wrong side.
    def wrong(t):
        return sum(d >= t for d in same) + sum(d < t for d in different)
    best = round(min(sorted(set(same + different)), key=wrong), 3)
    return best, (
        f"the ranges overlap: no threshold separates these photos; match_threshold {best} puts "
        f"the fewest pairs on the wrong side ({wrong(best)} of {len(same) + len(different)})")


def frame_time(client, photo: Path, count: int = 21) -> str:
    """The server's milliseconds for `photo`, stage by stage: the median of `count` requests
    sent one at a time (its `timings` parameter), after one to warm up."""
    runs = []
    for _ in range(count + 1):
        doc = face_api.infer(client, MODEL, {"timings": True}, photo=photo.read_bytes())
        runs.append(doc["timings_ms"])
    stages = {k: float(np.median([r[k] for r in runs[1:]])) for k in runs[0]}
    parts = ", ".join(f"{k} {v:.1f}" for k, v in stages.items())
    total = float(np.median([sum(r.values()) for r in runs[1:]]))
    return f"== {photo.name}: {total:.1f} ms ({parts}; median of {count}, one at a time)\n"


def span(values: list[float]) -> str:
    return f"{min(values):.3f} - {max(values):.3f} ({len(values)} pairs)" if values else "none"


def check(args: argparse.Namespace) -> None:
    detector = read_onnx(args.detector, "detector")
    embedder = read_onnx(args.embedder, "embedder")
    params = {"engine": "onnx", "detector_model": str(detector), "embedder_model": str(embedder),
              "return_embeddings": "true"}
    if args.landmark_model:
        params["landmark_model"] = str(read_onnx(args.landmark_model, "landmark model"))
    for item in args.param:
        key, _, value = item.partition("=")
        params[key.strip()] = value.strip()
    samples = REPO_ROOT / "assets" / "photos"
    people = people_of(args.photos, samples)
    with tempfile.TemporaryDirectory(prefix="model_check.") as folder:
        url, log = serve(params, Path(folder))
        line, settings = engine_line(log)
        print(f"== how the backend reads the pair\n{line}\n")
        client = face_api.connect(url)
        embeddings: dict[Path, tuple[str, list[float]]] = {}
        print("== faces found")
        for person, photos in people.items():
            for photo in photos:
                doc = face_api.infer(client, MODEL, photo=photo.read_bytes())
                face = largest_face(doc)
                print(f"{photo.name} ({person}): {len(doc['faces'])} face(s)")
                if face is not None:
                    embeddings[photo] = (person, face["embedding"])
        if not embeddings:
            raise CheckFailed("no face found in any photo: the detector (or its settings) "
                              "does not find these faces")
        same, different = distances(embeddings)
        print("\n== distances (1 - cosine)")
        print(f"same person:       {span(same)}")
        print(f"different people:  {span(different)}")
        threshold, why = recommend(same, different)
        print(f"\n== {why}\n")
        if args.time:
            print(frame_time(client, args.time))
    served = {k: v for k, v in params.items() if k != "return_embeddings"}
    served.update(settings)
    for key in ("detector_model", "embedder_model", "landmark_model"):
        if key in served:
            served[key] = Path(served[key]).name
    if threshold is not None:
        served["match_threshold"] = str(threshold)
    print("== a config.pbtxt that serves the pair (the *_model files in its version folder 1/)")
    print(config_text(served))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("detector", type=Path)
    parser.add_argument("embedder", type=Path)
    parser.add_argument("--photos", type=Path, help="a folder per person, or name_*.jpg files")
    parser.add_argument("--landmark-model", type=Path,
                        help="a 68-point model, for a detector without points (UltraFace)")
    parser.add_argument("--time", type=Path, metavar="PHOTO",
                        help="also time this photo through the server, stage by stage")
    parser.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                        help="a model parameter (docs/parameters.md), e.g. detector_family=scrfd")
    args = parser.parse_args()
    try:
        check(args)
    except CheckFailed as e:
        print(f"model_check: {e}", file=sys.stderr)
        return 1
    finally:
        local_server.stop_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
