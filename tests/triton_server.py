"""A real tritonserver on a temporary model repository holding one model (`face` by default).

    server = TritonServer(env, tmp_path, params={"pixel_format": "BGR"}, gallery={...})
    server.start()          # free ports, waits for /v2/health/ready, fails with the log on timeout
    client = server.http()  # or server.grpc()
    server.stop()           # SIGTERM, SIGKILL after 15 s; server.kill() is SIGKILL at once

Options: `model="face_sequence"` serves that model of model_repository/ instead;
`more_models=("face_sequence",)` serves further models beside it (see __init__);
`env={"FACE_GALLERY_DSN": dsn}` sets (None: unsets) variables of the server's environment;
`engine="onnx"` serves it with the ONNX engine (`"onnx-tract"`: on the tract runtime) (see engine_config: `face` is then the sample
model_repository/face_onnx, other models get `engine: onnx` switched into their own config);
`config_edits=[(regex, replacement)]` rewrites its config.pbtxt text (each regex must match);
`metrics=True` opens the metrics port (`metrics_url`, `metric(...)`); `rss_kib()` is the
server's resident memory.

The repository survives stop(), so start() again serves the same model directory (gallery store
included): that is how the restart tests work.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Mapping, Sequence

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from environment import ONNX_MODEL_FILES, MissingAsset, SuiteEnv

MODEL = "face"
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0
# Client-side timeout for one inference: the CNN detector on a big photo takes seconds on 2 cores.
NETWORK_TIMEOUT_S = 300.0

_LIVE: set["TritonServer"] = set()
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via a proxy


def set_parameter(config: str, key: str, value: str) -> str:
    """Replace the string parameter `key` in a config.pbtxt text, or append it if absent."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    line = f'parameters {{ key: "{key}" value: {{ string_value: "{escaped}" }} }}'
    pattern = re.compile(
        r'parameters\s*\{\s*key:\s*"' + re.escape(key) + r'"\s*'
        r'value:\s*\{\s*string_value:\s*"(?:[^"\\]|\\.)*"\s*\}\s*\}'
    )
    config, count = pattern.subn(lambda _match: line, config)
    if count == 0:
        config = config.rstrip("\n") + "\n" + line + "\n"
    return config


def edit_config(config: str, pattern: str, replacement: str) -> str:
    """re.sub(pattern, replacement) on a config.pbtxt text; the pattern must match somewhere."""
    config, count = re.subn(pattern, replacement, config)
    if count == 0:
        raise ValueError(f"config edit {pattern!r} matches nothing in the model config")
    return config


def remove_parameter(config: str, key: str) -> str:
    """Drop the string parameter `key` from a config.pbtxt text (if present)."""
    pattern = re.compile(
        r'[ \t]*parameters\s*\{\s*key:\s*"' + re.escape(key) + r'"\s*'
        r'value:\s*\{\s*string_value:\s*"(?:[^"\\]|\\.)*"\s*\}\s*\}[ \t]*\n?'
    )
    return pattern.sub("", config)


def parameters_of(config: str) -> dict[str, str]:
    """The string parameters of a config.pbtxt text, in order."""
    found = re.findall(
        r'parameters\s*\{\s*key:\s*"([^"]+)"\s*value:\s*\{\s*string_value:\s*'
        r'"((?:[^"\\]|\\.)*)"\s*\}\s*\}',
        config,
    )
    return {key: re.sub(r"\\(.)", r"\1", value) for key, value in found}


def rename_model(config: str, name: str) -> str:
    """Set the `name:` of a config.pbtxt text (Triton wants the model directory's name)."""
    config, count = re.subn(r'(?m)^name:\s*"[^"]*"', f'name: "{name}"', config)
    if count != 1:
        raise ValueError(f"expected one top-level name: in the model config, found {count}")
    return config


# The engines a TritonServer can configure its model for (tests/engines.py describes them).
ENGINE_NAMES = ("dlib", "onnx", "onnx-tract")
# The sample ONNX model: its config is what `face` runs as with engine="onnx", and its
# parameters are what switches another model (face_sequence) to the ONNX engine.
ONNX_SAMPLE_MODEL = "face_onnx"
# The sample models that stand for `face` and `face_sequence` on the ONNX engine.
ONNX_SAMPLES = {MODEL: ONNX_SAMPLE_MODEL, "face_sequence": "face_onnx_sequence"}
# Parameters that mean something to the dlib engine only; dropped when switching to onnx.
DLIB_PARAMETERS = ("detector", "weights_dir", "smallest_face")


def engine_config(env: SuiteEnv, model: str, engine: str) -> str:
    """The config.pbtxt text of `model` served by `engine`, before the test's own edits.

    dlib: model_repository/<model>/config.pbtxt with the suite's weights folder.
    onnx: for `face` and `face_sequence`, the sample face_onnx and face_onnx_sequence configs as
    shipped (renamed); a model whose own config runs the ONNX engine (face_onnx_resnet,
    face_onnx_int8), that config; for another model, its own config with the dlib parameters
    replaced by face_onnx's parameters (`engine: onnx`, the three models, channels, threshold,
    ...). The .onnx files are linked into the version folder (see TritonServer)."""
    if engine not in ENGINE_NAMES:
        raise ValueError(f"unknown engine {engine!r}; known: {', '.join(ENGINE_NAMES)}")
    if engine == "dlib":
        return set_parameter(env.config_of(model).read_text(), "weights_dir", str(env.weights))
    tract = engine == "onnx-tract"  # the same models on the pure-Rust runtime
    if model in ONNX_SAMPLES:
        own = env.config_of(ONNX_SAMPLES[model]).read_text()
        return rename_model(set_parameter(own, "runtime", "tract") if tract else own, model)
    config = env.config_of(model).read_text()
    if parameters_of(config).get("engine") == "onnx":
        return set_parameter(config, "runtime", "tract") if tract else config
    sample = env.config_of(ONNX_SAMPLE_MODEL).read_text()
    if tract:
        sample = set_parameter(sample, "runtime", "tract")
    for key in DLIB_PARAMETERS:
        config = remove_parameter(config, key)
    for key, value in parameters_of(sample).items():
        config = set_parameter(config, key, value)
    return config


def made_onnx_files(env: SuiteEnv, model: str) -> list[Path]:
    """The files of model_repository/<model>/1/ beside the sample models: what scripts/models.sh
    makes (dlib's ResNet as ONNX, the int8 copies it links), or MissingAsset saying how to make
    them."""
    shipped = env.config_of(model).parent / "1"
    made = [p for p in sorted(shipped.glob("*.onnx")) if p.name not in ONNX_MODEL_FILES]
    missing = [p.name for p in made if not p.exists()]
    if missing:
        raise MissingAsset(f"{model}: {', '.join(missing)} not made: run `bash scripts/build.sh` "
                           "(scripts/models.sh makes them; assets/logs/models.log says why not)")
    return [p.resolve() for p in made]


def free_ports(count: int) -> list[int]:
    """Ports nobody listens on right now (bound to port 0 together, then released)."""
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def default_gallery(env: SuiteEnv) -> dict[str, Path]:
    return {"obama.jpg": env.photos / "obama.jpg", "biden.jpg": env.photos / "biden.jpg"}


class TritonServer:
    """One tritonserver process (at a time) serving `<root>/models/<model>`."""

    def __init__(
        self,
        suite: SuiteEnv,
        root: Path,
        params: Mapping[str, str] | None = None,
        gallery: Mapping[str, Path] | None = None,
        extra_args: tuple[str, ...] = (),
        model: str = MODEL,
        config_edits: Sequence[tuple[str, str]] = (),
        metrics: bool = False,
        engine: str = "dlib",
        env: Mapping[str, str | None] | None = None,
        more_models: Sequence[str] = (),
        copies: Mapping[str, Sequence[tuple[str, str]]] | None = None,
        detached: bool = False,
    ):
        """`gallery` maps file names inside the gallery dir ("alice.jpg", "bob/1.jpg") to source
        images; None means the default {obama, biden}, {} an empty gallery. `config_edits` are
        (regex, replacement) pairs applied in order to the model's config.pbtxt text (after the
        engine's set-up, before `params`). `more_models` are served too, each set up like
        `model` (engine, params, its own copy of the gallery) but without the config_edits;
        the backend library then sits once in backends/face/ for all of them, as in the image
        (Dockerfile.build). `copies` are served too: each a copy of `model` under its own name,
        with its own config edits instead of `config_edits`. `env` is added to the test's environment for the server process (a
        None value removes that variable). `detached` starts it in a session of its own, out of
        reach of the terminal's Ctrl-C (tests/dev_server.py: a server that outlives its
        command)."""
        self.env = suite
        self.root = Path(root)
        self.model = model
        self.copies = dict(copies or {})
        self.models = (model, *more_models, *self.copies)
        self.engine = engine
        self.model_dir = self.root / "models" / model
        self.gallery_dir = self.model_dir / "gallery"
        self.extra_args = tuple(extra_args)
        self.metrics = metrics
        self.process_env = dict(env or {})
        self.detached = detached
        self.proc: subprocess.Popen | None = None
        self.log_path: Path | None = None
        self.http_port = self.grpc_port = self.metrics_port = 0
        self._runs = 0
        self.exited_early = False
        self._clients: list = []
        self._build_repository(
            dict(params or {}), default_gallery(suite) if gallery is None else gallery,
            config_edits,
        )

    # ---- repository -------------------------------------------------------------------------

    def _build_repository(
        self, params: dict[str, str], gallery: Mapping[str, Path],
        config_edits: Sequence[tuple[str, str]],
    ) -> None:
        backends = self.root / "backends"
        backends.mkdir(parents=True)  # --backend-directory: only our library is found
        if len(self.models) == 1:
            library = self.model_dir / "libtriton_face.so"
        else:
            library = backends / "face" / "libtriton_face.so"
            library.parent.mkdir()
        # A copy: a rebuild during the test does not change what the server loads.
        self.model_dir.mkdir(parents=True)
        shutil.copy2(self.env.backend_lib, library)
        for model in self.models:
            edits = config_edits if model == self.model else self.copies.get(model, ())
            self._build_model(model, params, gallery, edits)

    def _build_model(
        self, model: str, params: dict[str, str], gallery: Mapping[str, Path],
        config_edits: Sequence[tuple[str, str]],
    ) -> None:
        model_dir = self.root / "models" / model
        version_dir = model_dir / "1"
        version_dir.mkdir(parents=True)
        if model in self.copies:
            config = rename_model(engine_config(self.env, self.model, self.engine), model)
        else:
            config = engine_config(self.env, model, self.engine)
        if self.engine.startswith("onnx"):  # *_model parameters are relative to the version folder
            for name in ONNX_MODEL_FILES:
                (version_dir / name).symlink_to(self.env.onnx_models / name)
            for path in made_onnx_files(self.env, self.model if model in self.copies else model):
                (version_dir / path.name).symlink_to(path)
        for pattern, replacement in config_edits:
            config = edit_config(config, pattern, replacement)
        for key, value in params.items():
            config = set_parameter(config, key, value)
        (model_dir / "config.pbtxt").write_text(config)
        (model_dir / "gallery").mkdir()
        for name, source in gallery.items():
            target = model_dir / "gallery" / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)

    # ---- process ----------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = READY_TIMEOUT_S) -> "TritonServer":
        """Start on fresh free ports and wait until ready; retried if a port was taken meanwhile."""
        assert not self.running, "server already running"
        for _attempt in range(3):
            self._spawn()
            if self._wait_ready(timeout):
                return self
            self.stop()
            log = self.log_text()
            if "ddress already in use" not in log:
                break
        if self.exited_early:
            what = f"tritonserver exited with code {self.proc.returncode} before it was ready"
        else:
            what = f"tritonserver was not ready within {timeout:.0f} s (stopped it)"
        pytest.fail(
            f"{what}; command: {' '.join(self.proc.args)}\n"
            f"---- server log {self.log_path} ----\n{log}",
            pytrace=False,
        )

    def start_expecting_exit(self, timeout: float = READY_TIMEOUT_S) -> str:
        """Start a server that must exit during start-up (a model that fails to load, with
        Triton's default --exit-on-error); returns its log. Fails the test if it gets ready."""
        assert not self.running, "server already running"
        self._spawn()
        ready = self._wait_ready(timeout)
        if not self.exited_early:
            self.stop()
            what = "got ready" if ready else f"neither exited nor got ready within {timeout:.0f} s"
            pytest.fail(
                f"tritonserver {what}; expected it to exit at start-up\n"
                f"---- server log {self.log_path} ----\n{self.log_text()}",
                pytrace=False,
            )
        _LIVE.discard(self)
        return self.log_text()

    def _spawn(self) -> None:
        self._runs += 1
        self.http_port, self.grpc_port, self.metrics_port = free_ports(3)
        if self.metrics:
            metrics_args = [
                "--allow-metrics=true", "--metrics-address=127.0.0.1",
                f"--metrics-port={self.metrics_port}",
            ]
        else:
            metrics_args = ["--allow-metrics=false"]
        self.log_path = self.root / f"server-{self._runs}.log"
        command = [
            str(self.env.tritonserver),
            f"--model-repository={self.root / 'models'}",
            "--http-address=127.0.0.1",
            f"--http-port={self.http_port}",
            "--grpc-address=127.0.0.1",
            f"--grpc-port={self.grpc_port}",
            *metrics_args,
            f"--backend-directory={self.root / 'backends'}",
            "--log-verbose=0",
            "--exit-timeout-secs=10",
            *self.extra_args,
        ]
        environment = dict(os.environ)
        for name, value in self.process_env.items():
            if value is None:
                environment.pop(name, None)
            else:
                environment[name] = value
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                cwd=self.root, env=environment, start_new_session=self.detached,
            )
        _LIVE.add(self)

    def _wait_ready(self, timeout: float) -> bool:
        self.exited_early = False
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.exited_early = True
                return False
            if self.is_ready():
                return True
            time.sleep(0.2)
        return False

    def is_ready(self) -> bool:
        """GET /v2/health/ready answers 200 (all models ready, with --strict-readiness default)
        and, with metrics on, the metrics port answers too."""
        urls = [f"http://127.0.0.1:{self.http_port}/v2/health/ready"]
        if self.metrics:
            urls.append(self.metrics_url)
        try:
            for url in urls:
                with _DIRECT.open(url, timeout=2) as response:
                    if response.status != 200:
                        return False
            return True
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM, then SIGKILL after `timeout`; returns the exit code (None if never started)."""
        return self._terminate(signal.SIGTERM, timeout)

    def kill(self) -> int | None:
        """SIGKILL at once, as a crash would."""
        return self._terminate(signal.SIGKILL, STOP_TIMEOUT_S)

    def _terminate(self, sig: int, timeout: float) -> int | None:
        self._close_clients()
        _LIVE.discard(self)
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(STOP_TIMEOUT_S)
        return self.proc.returncode

    def restart(self) -> "TritonServer":
        self.stop()
        return self.start()

    def rss_kib(self) -> int:
        """Resident memory of the running server process (VmRSS of /proc/<pid>/status), KiB."""
        assert self.running, "server is not running"
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        match = re.search(r"^VmRSS:\s+(\d+)\s+kB", status, re.MULTILINE)
        assert match, f"no VmRSS in /proc/{self.proc.pid}/status"
        return int(match.group(1))

    # ---- metrics ----------------------------------------------------------------------------

    @property
    def metrics_url(self) -> str:
        """The Prometheus endpoint (the server must run with metrics=True)."""
        assert self.metrics, "server started without metrics=True"
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def metrics_text(self) -> str:
        with _DIRECT.open(self.metrics_url, timeout=10) as response:
            return response.read().decode("utf-8")

    def metric(self, name: str, **labels: str) -> float | None:
        """The value of the sample `name{...}` whose labels include `labels`; None if absent."""
        line = re.compile(r"^" + re.escape(name) + r"(?:\{(.*)\})?\s+(\S+)\s*$")
        for text in self.metrics_text().splitlines():
            match = line.match(text)
            if match is None:
                continue
            found = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', match.group(1) or ""))
            if all(found.get(key) == value for key, value in labels.items()):
                return float(match.group(2))
        return None

    # ---- logs and clients -------------------------------------------------------------------

    def log_text(self) -> str:
        """The log (stdout + stderr) of the current or last run."""
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def http(self, concurrency: int = 16) -> httpclient.InferenceServerClient:
        assert self.running, "server is not running"
        client = httpclient.InferenceServerClient(
            f"127.0.0.1:{self.http_port}", concurrency=concurrency,
            connection_timeout=NETWORK_TIMEOUT_S, network_timeout=NETWORK_TIMEOUT_S,
        )
        self._clients.append(client)
        return client

    def grpc(self) -> grpcclient.InferenceServerClient:
        assert self.running, "server is not running"
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{self.grpc_port}")
        self._clients.append(client)
        return client

    def _close_clients(self) -> None:
        while self._clients:
            try:
                self._clients.pop().close()
            except Exception:  # a client of a dead server may fail to close; nothing to do
                pass

    def discard_library(self) -> None:
        """Remove this repository's copies of the library (~200 MB each, debug build) once the
        server is stopped for good; logs and galleries stay for a failed test's report."""
        for folder in ("models", "backends"):
            for copy in (self.root / folder).glob("*/libtriton_face.so"):
                copy.unlink(missing_ok=True)

    def __enter__(self) -> "TritonServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def live_servers() -> list[TritonServer]:
    return list(_LIVE)


@atexit.register
def _kill_leftovers() -> None:
    """Last resort (e.g. pytest interrupted before fixture teardown): never leak a server."""
    for server in list(_LIVE):
        server.kill()
