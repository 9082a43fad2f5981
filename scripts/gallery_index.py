#!/usr/bin/env python3
"""Index a model's gallery before it serves: a tritonserver of its own loads the one model, which
builds the gallery's vector index from the store on every core and saves it beside the store;
the build's progress is shown as a bar with the time left, and the server is stopped. A server
then loads the saved index in seconds (a million people: ready in 9 to 10 s) instead of building
it at its first load (a million: about 11 minutes on 2 cores).

For a store filled outside the server: rows written by your own import, a store restored from a
backup or copied from another machine. Photos enrolled through the server (scripts/enroll.py)
need none of this: each ENROLL goes into the index as it comes.

  python scripts/gallery_index.py model_repository/face_onnx [--log FILE] [--backends DIR]

Needs TRITONSERVER (assets/env.sh) and libtriton_face.so in the model's folder (scripts/build.sh
puts it there) or --library. Exit status 0 when the saved index is there and holds the store's
rows; 1 with the server log's last lines when the model did not load.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent))
from local_server import tail, wait_ready  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent
# "gallery: indexing 1000000 faces: 35% (350000 of 1000000) in 8 min 10 s, about 15 min 10 s left"
STEP = re.compile(r"gallery: indexing (\d+) faces: \d+% \((\d+) of \d+\) in (.*?), about (.*) left")
DONE = re.compile(r"gallery: indexing (\d+) faces: done in ([^\"\n]*)")
# "model 'face_onnx': gallery index built in 9 min 58 s (read ..., strays 17.2 s counted):
#  1000001 vectors read from the store, ..."
# "model 'face_onnx': gallery store sqlite /path/gallery.sqlite3, embedder ..., saved index
#  gallery.1f2e3d4c5b6a.index"
STORE = re.compile(r"gallery store sqlite (.*?), embedder")
INDEX = re.compile(r", saved index (gallery\.\w+\.index)")
LOADED = re.compile(r"gallery index (\w+(?: \w+)*?) in .*?: (\d+) vectors read from the store")
# The index is saved as the model unloads; a million people's take a few seconds.
EXIT_TIMEOUT_S = 600


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Watch:
    """Reads the server's output into `log`, showing the index build as a bar."""

    def __init__(self, output, log):
        self.bar: tqdm | None = None
        self.loaded = ""
        self.built_in = ""
        self.store: Path | None = None
        self.index_file = ""
        self.thread = threading.Thread(target=self._read, args=(output, log), daemon=True)
        self.thread.start()

    def _read(self, output, log) -> None:
        # Drains the pipe whatever happens: a server blocked on a full pipe never gets ready.
        for line in output:
            log.write(line)
            log.flush()
            try:
                self._see(line)
            except Exception as e:  # noqa: BLE001 - a bar that fails must not stop the reading
                print(f"(progress not shown: {e})", file=sys.stderr)
        if self.bar is not None:
            self.bar.close()

    def _see(self, line: str) -> None:
        if m := STEP.search(line):
            total, done, left = int(m[1]), int(m[2]), m[4]
            if self.bar is None:
                self.bar = tqdm(total=total, unit="face", desc="indexing", unit_scale=True)
            self.bar.update(done - self.bar.n)
            self.bar.set_postfix_str(f"about {left} left", refresh=True)
        elif m := DONE.search(line):
            self.built_in = m[2]
            if self.bar is not None:
                self.bar.update(self.bar.total - self.bar.n)
        elif m := LOADED.search(line):
            self.loaded = f"{m[1]}, {m[2]} vectors read from the store"
        elif m := STORE.search(line):
            self.store = Path(m[1])
            self.index_file = m[1] if (m := INDEX.search(line)) else ""


def repository(model_dir: Path, library: Path, real_backends: Path,
               work: Path) -> tuple[Path, Path]:
    """A repository holding only `model_dir` (linked, so the index is saved in its own gallery
    folder), and a backend folder with the library when the model's folder has none, and the
    real backend folder's onnxruntime/ (where the ONNX engine looks for it in NGC images)."""
    models, backends = work / "models", work / "backends"
    models.mkdir()
    (models / model_dir.name).symlink_to(model_dir)
    (backends / "face").mkdir(parents=True)
    if (real_backends / "onnxruntime").is_dir():
        (backends / "onnxruntime").symlink_to(real_backends / "onnxruntime")
    if not (model_dir / "libtriton_face.so").exists():
        if not library.is_file():
            sys.exit(f"{library}: no backend library; build it with `bash scripts/build.sh` "
                     "or give --library")
        shutil.copy2(library, backends / "face" / "libtriton_face.so")
    return models, backends


def die_with_parent() -> None:
    """In the server's process before exec: killed when this script dies (it holds the store)."""
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def serve(models: Path, backends: Path, log) -> tuple[subprocess.Popen, Watch, str]:
    binary = os.environ.get("TRITONSERVER", "")
    if not binary or not os.access(binary, os.X_OK):
        sys.exit("TRITONSERVER is not set: `source assets/env.sh` (scripts/setup.sh writes it)")
    url = f"127.0.0.1:{free_port()}"
    server = subprocess.Popen(
        [binary, f"--model-repository={models}", f"--backend-directory={backends}",
         "--http-address=127.0.0.1", f"--http-port={url.split(':')[1]}", "--allow-grpc=false",
         "--allow-metrics=false", "--log-verbose=0", f"--exit-timeout-secs={EXIT_TIMEOUT_S}"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
        errors="replace", preexec_fn=die_with_parent)
    return server, Watch(server.stdout, log), url


def saved_rows(index: Path, since: float) -> int | None:
    """How many store rows the `index` saved after `since` (time.time()) holds, from its
    manifest's runs of row ids (None: no manifest written since)."""
    manifest = index.with_name(index.name + ".json")
    try:
        if manifest.stat().st_mtime < since:
            return None
        runs = json.loads(manifest.read_text())["keys"]
        return sum(last - first + 1 for first, last in runs)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model_dir", type=Path, help="the model's folder (config.pbtxt, gallery/)")
    ap.add_argument("--library", type=Path,
                    default=REPO_ROOT / "target/release/libtriton_face.so",
                    help="used when the model's folder has no libtriton_face.so")
    ap.add_argument("--log", type=Path, help="the server's log (default: a temporary file)")
    ap.add_argument("--backends", type=Path, default=Path("/opt/tritonserver/backends"),
                    help="Triton's backend folder, for its onnxruntime/ (default: the NGC image's)")
    args = ap.parse_args()
    model_dir = args.model_dir.resolve()
    if not (model_dir / "config.pbtxt").is_file():
        sys.exit(f"{model_dir}: no config.pbtxt; give a model's folder")
    started, wall = time.monotonic(), time.time()
    with tempfile.TemporaryDirectory(prefix="gallery-index-") as work:
        work = Path(work)
        log_path = args.log or work / "tritonserver.log"
        models, backends = repository(model_dir, args.library, args.backends, work)
        with open(log_path, "w") as log:
            server, watch, url = serve(models, backends, log)
            try:
                ready = wait_ready(url, lambda: server.poll() is None, float("inf"))
            finally:
                server.terminate()  # the model unloads: the index is saved if the load did not
                try:
                    server.wait(timeout=EXIT_TIMEOUT_S + 30)
                except subprocess.TimeoutExpired:
                    server.kill()
                    server.wait()
                watch.thread.join(timeout=30)
        if not ready:
            sys.exit(f"the model did not load (tritonserver exited {server.returncode}):\n"
                     f"{tail(log_path, 25)}")
        if server.returncode != 0:
            sys.exit(f"the model loaded, but tritonserver exited {server.returncode} as it "
                     f"unloaded (the index may not be saved):\n{tail(log_path, 25)}")
        # The store's folder as the server named it, through the link in `work`.
        gallery = (watch.store.parent if watch.store else model_dir / "gallery").resolve()
    took = time.monotonic() - started
    index = gallery / (watch.index_file or "gallery.(no index file named in the log).index")
    rows = saved_rows(index, wall)
    what = f"gallery index {watch.loaded or '(no index line in the log)'}"
    if watch.built_in:
        what += f" and indexed in {watch.built_in}"
    print(f"{model_dir.name}: {what}; {took:.0f} s in all")
    if rows is None:
        sys.exit(f"no index saved in {gallery} by this run (the store holds no enrolled rows, "
                 "or the save failed: run again with --log FILE and read it)")
    print(f"saved: {index}, {rows} store rows; a server loads it instead "
          "of building it")


if __name__ == "__main__":
    main()
