#!/usr/bin/env python3
"""Bulk enrollment: every photo of a folder enrolled through a running model.

    python scripts/enroll.py FOLDER --model face_onnx [--url localhost:8000] [--concurrency 4]

FOLDER holds one photo per person (`ada.jpg` enrolls "ada") or a folder per
person (`ada/1.jpg`, `ada/2.png` enroll "ada" twice). Photos go to the server
`--concurrency` at a time, with a progress bar; at the end a summary says what
was enrolled and, per reason, which photos failed (no face, several faces, an
invalid name, ...). The exit status is 0 when every photo is enrolled.

Run it again after an interruption: photos already done are in the journal
(`FOLDER/.enrolled-<model>.jsonl`, one line per acknowledged photo) and are
not sent again; a photo acknowledged but not yet written to the journal is
sent again and the server, which keeps no duplicate of the same photo,
answers `"added": false`. Nobody is enrolled twice.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import threading
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

import tritonclient.http as httpclient
from tqdm import tqdm
from tritonclient.utils import InferenceServerException

import face_api

PHOTO_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp"}
# UNAVAILABLE (a busy store, a restarting server) is tried again this often.
RETRIES = 5


def photos_of(folder: Path) -> list[tuple[str, Path]]:
    """(name, photo) for every photo: a file directly in FOLDER is its own
    person (its stem), a sub-folder is one person with several photos."""
    found = []
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith("."):
            continue
        if entry.is_dir():
            found += [(entry.name, p) for p in sorted(entry.iterdir()) if is_photo(p)]
        elif is_photo(entry):
            found.append((entry.stem, entry))
    return found


def is_photo(path: Path) -> bool:
    return path.is_file() and path.suffix.lower() in PHOTO_SUFFIXES


class Journal:
    """The photos already acknowledged, by name, path and content, so that a
    changed photo is sent again and an unchanged one is not."""

    def __init__(self, path: Path):
        self.path = path
        self.done: set[tuple[str, str, str]] = set()
        if path.exists():
            for line in path.read_text().splitlines():
                try:
                    row = json.loads(line)
                    self.done.add((row["name"], row["photo"], row["sha256"]))
                except (ValueError, KeyError):
                    continue  # a line torn by an interruption
        self.lock = threading.Lock()
        self.file = None

    def key(self, name: str, photo: Path, data: bytes) -> tuple[str, str, str]:
        return name, str(photo), hashlib.sha256(data).hexdigest()

    def record(self, key: tuple[str, str, str]) -> None:
        with self.lock:
            if self.file is None:
                self.file = self.path.open("a")
            name, photo, sha = key
            self.file.write(json.dumps({"name": name, "photo": photo, "sha256": sha}) + "\n")
            self.file.flush()


def reason(error: InferenceServerException) -> str:
    """A short, groupable reason for a refused photo."""
    text = error.message() if hasattr(error, "message") else str(error)
    found = re.search(r"exactly one face in the image, found (\d+)", text)
    if found:
        return "no face" if found.group(1) == "0" else "several faces"
    if "ENROLL: name" in text or "is reserved" in text:
        return "invalid name"
    if "max_gallery_size" in text:
        return "gallery full"
    return text.strip().splitlines()[0][:200]


class Enroller:
    def __init__(self, url: str, model: str, timeout: float):
        self.url, self.model, self.timeout = url, model, timeout
        self.local = threading.local()

    def client(self) -> httpclient.InferenceServerClient:
        # One client per worker thread: a client's connection is not shared.
        if not hasattr(self.local, "client"):
            self.local.client = face_api.connect(self.url, self.timeout)
        return self.local.client

    def enroll(self, name: str, data: bytes) -> dict:
        for attempt in range(RETRIES + 1):
            try:
                return face_api.infer(self.client(), self.model, photo=data, enroll=name)["enrolled"]
            except InferenceServerException as e:
                if e.status() not in ("503", "StatusCode.UNAVAILABLE") or attempt == RETRIES:
                    raise
                if "max_gallery_size" in str(e):
                    raise
                time.sleep(0.2 * 2**attempt)
        raise AssertionError("unreachable")


def main(argv=None) -> int:
    args = parse_args(argv)
    folder = Path(args.folder)
    if not folder.is_dir():
        print(f"enroll: {folder} is not a folder", file=sys.stderr)
        return 2
    enroller = Enroller(args.url, args.model, args.timeout)
    try:
        if not enroller.client().is_model_ready(args.model):
            print(f"enroll: model {args.model!r} is not ready at {args.url}", file=sys.stderr)
            return 2
    except Exception as e:  # connection refused, DNS: say where we looked
        print(f"enroll: no server at {args.url}: {e}", file=sys.stderr)
        return 2

    journal = Journal(folder / f".enrolled-{args.model}.jsonl")
    todo, skipped = [], 0
    for name, photo in photos_of(folder):
        data = photo.read_bytes()
        key = journal.key(name, photo.relative_to(folder), data)
        if key in journal.done:
            skipped += 1
        else:
            todo.append((name, photo, data, key))

    counts: Counter[str] = Counter()
    failed: dict[str, list[str]] = defaultdict(list)
    with ThreadPoolExecutor(args.concurrency) as pool, tqdm(
            total=len(todo), unit="photo", disable=args.quiet) as bar:
        futures = {pool.submit(enroller.enroll, name, data): (name, photo, key)
                   for name, photo, data, key in todo}
        for future in as_completed(futures):
            name, photo, key = futures[future]
            try:
                enrolled = future.result()
                journal.record(key)
                counts["added" if enrolled["added"] else "already there"] += 1
            except InferenceServerException as e:
                failed[reason(e)].append(str(photo.relative_to(folder)))
            bar.update()

    print(summary(len(todo) + skipped, skipped, counts, failed))
    return 1 if failed else 0


def summary(total: int, skipped: int, counts: Counter, failed: dict[str, list[str]]) -> str:
    lines = [f"{total} photos: {counts['added']} enrolled, "
             f"{counts['already there']} already there, {skipped} done in an earlier run, "
             f"{sum(len(v) for v in failed.values())} failed"]
    for why, photos in sorted(failed.items()):
        shown = ", ".join(sorted(photos)[:10]) + (" ..." if len(photos) > 10 else "")
        lines.append(f"  {why} ({len(photos)}): {shown}")
    return "\n".join(lines)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folder", help="one photo per person, or a folder per person")
    p.add_argument("--model", default="face_onnx")
    p.add_argument("--url", default="localhost:8000", help="the server's HTTP address")
    p.add_argument("--concurrency", type=int, default=4, help="photos in flight at once")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per request")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p.parse_args(argv)


if __name__ == "__main__":
    sys.exit(main())
