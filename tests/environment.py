"""Where the test inputs live: the tritonserver binary, the dlib weights, the sample ONNX models,
the photos, the backend.

Everything comes from the environment that scripts/setup.sh prepares (assets/env.sh), with the
default locations under the repository as a fallback. Which weights, models and photos must be
there, and their sha256, is scripts/assets.tsv (the manifest setup.sh fetches from). A missing
piece, or a file with another checksum, is a test FAILURE with a message saying how to get it,
never a skip.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path, PurePosixPath

import numpy as np
from PIL import Image

REPO_ROOT = Path(__file__).resolve().parent.parent
MODEL_REPOSITORY = REPO_ROOT / "model_repository"
MODEL_CONFIG = MODEL_REPOSITORY / "face" / "config.pbtxt"
SCHEMA_PATH = REPO_ROOT / "schema" / "result.schema.json"
MANIFEST = REPO_ROOT / "scripts" / "assets.tsv"


@dataclass(frozen=True)
class Asset:
    """One line of scripts/assets.tsv."""

    target: str  # path in the repository, e.g. assets/dlib/mmod_human_face_detector.dat
    mode: str
    sha256: str | None  # None: made by setup.sh from another asset (source `derived`)
    source: str
    member: str
    links: tuple[str, ...]

    @property
    def name(self) -> str:
        return PurePosixPath(self.target).name

    @property
    def folder(self) -> str:
        """The folder that groups it: dlib, onnx, photos, perf_analyzer."""
        return PurePosixPath(self.target).parent.name


def read_manifest(path: Path = MANIFEST) -> tuple[Asset, ...]:
    assets = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split("\t")
        if len(fields) != 6 or not all(fields):
            raise ValueError(f"{path}:{number}: expected 6 TAB-separated fields, got {fields}")
        target, mode, sha256, source, member, links = fields
        assets.append(Asset(
            target=target, mode=mode, sha256=None if sha256 == "-" else sha256, source=source,
            member=member, links=() if links == "-" else tuple(links.split(",")),
        ))
    return tuple(assets)


ASSETS = read_manifest()


def _files_in(folder: str) -> tuple[str, ...]:
    names = tuple(asset.name for asset in ASSETS if asset.folder == folder)
    if not names:
        raise ValueError(f"{MANIFEST} lists no file in a folder named {folder!r}")
    return names


WEIGHT_FILES = _files_in("dlib")
# The sample ONNX models that model_repository/face_onnx/config.pbtxt names.
ONNX_MODEL_FILES = _files_in("onnx")
PHOTO_FILES = _files_in("photos")


class MissingAsset(Exception):
    """A file the suite needs is not there; the message says how to get it."""


@dataclass(frozen=True)
class SuiteEnv:
    tritonserver: Path
    weights: Path
    photos: Path
    backend_lib: Path
    onnx_models: Path  # holds ONNX_MODEL_FILES
    model_config: Path = MODEL_CONFIG

    def config_of(self, model: str) -> Path:
        """config.pbtxt of a model of model_repository/ (`face`: model_config)."""
        path = self.model_config if model == "face" else MODEL_REPOSITORY / model / "config.pbtxt"
        if not path.is_file():
            raise MissingAsset(f"model config not found at {path}")
        return path


def _default_tritonserver() -> Path | None:
    pattern = ".venv/lib/python3.*/site-packages/pytriton/tritonserver/bin/tritonserver"
    found = sorted(REPO_ROOT.glob(pattern))
    return found[-1] if found else None


def _from_env(var: str, default: Path | None) -> Path | None:
    value = os.environ.get(var)
    return Path(value) if value else default


@lru_cache(maxsize=None)
def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _check_folder(what: str, folder: Path, manifest_folder: str, hint: str) -> list[str]:
    """Problems with the manifest's files of `manifest_folder`, looked for in `folder`."""
    missing, wrong = [], []
    for asset in ASSETS:
        if asset.folder != manifest_folder:
            continue
        path = folder / asset.name
        if not path.is_file():
            missing.append(asset.name)
        elif asset.sha256 is not None and _sha256(path) != asset.sha256:
            wrong.append(asset.name)
    problems = []
    if missing:
        problems.append(f"{what} missing in {folder}: {', '.join(missing)}: {hint}")
    if wrong:
        problems.append(
            f"{what} in {folder} differ from scripts/assets.tsv (sha256): {', '.join(wrong)}: "
            f"{hint} (it fetches them again)"
        )
    return problems


def resolve_env() -> SuiteEnv:
    """Locate every external input of the suite, or raise MissingAsset listing all that is missing."""
    setup_hint = "run scripts/setup.sh (and source assets/env.sh)"
    problems = []

    server = _from_env("TRITONSERVER", _default_tritonserver())
    if server is None or not os.access(server, os.X_OK):
        problems.append(f"tritonserver binary not found (TRITONSERVER={server}): {setup_hint}")

    weights = _from_env("FACE_WEIGHTS", REPO_ROOT / "assets" / "dlib")
    problems += _check_folder("dlib weights", weights, "dlib", setup_hint)

    assets = _from_env("FACE_ASSETS", REPO_ROOT / "assets")
    onnx_models = _from_env("FACE_ONNX_MODELS", assets / "onnx")
    problems += _check_folder("ONNX sample models", onnx_models, "onnx", setup_hint)

    photos = _from_env("FACE_PHOTOS", REPO_ROOT / "assets" / "photos")
    problems += _check_folder("test photos", photos, "photos", setup_hint)

    lib = _from_env("FACE_BACKEND_LIB", REPO_ROOT / "target" / "release" / "libtriton_face.so")
    if not lib.is_file():
        problems.append(f"backend library not found at {lib}: run cargo build --release")

    if not MODEL_CONFIG.is_file():
        problems.append(f"model config not found at {MODEL_CONFIG}")

    if problems:
        raise MissingAsset("\n".join(problems))
    return SuiteEnv(
        tritonserver=server.resolve(), weights=weights.resolve(), photos=photos.resolve(),
        backend_lib=lib.resolve(), onnx_models=onnx_models.resolve(),
    )


@dataclass(frozen=True)
class SampleVideo:
    """The sample video and its truth (scripts/sample_video.py): per frame, the people whose
    face is fully in view."""
    path: Path
    truth: dict

    @staticmethod
    def find() -> "SampleVideo":
        path = _from_env("FACE_VIDEO", REPO_ROOT / "assets" / "video" / "sample.mp4")
        truth = path.with_suffix(".json")
        if not path.is_file() or not truth.is_file():
            raise MissingAsset(
                f"sample video missing ({path}, {truth.name}): run scripts/setup.sh (it makes "
                "it from the sample photos with scripts/sample_video.py)")
        return SampleVideo(path, json.loads(truth.read_text()))

    @property
    def frames(self) -> int:
        return len(self.truth["frames"])

    def names_in(self, frame: int) -> list[str]:
        return sorted(person["name"] for person in self.truth["frames"][frame])


class Photos:
    """The test photos: file paths, encoded bytes, RGB pixels, and a few images derived from them.

    Derived images are written once into `workdir` (a session temporary directory).
    """

    def __init__(self, root: Path, workdir: Path):
        self.root = root
        self.workdir = workdir

    def path(self, name: str) -> Path:
        """An original photo, or one made from them with Pillow (see DERIVED) on first use."""
        original = self.root / name
        if original.is_file():
            return original
        if name not in DERIVED:
            raise MissingAsset(f"photo {name} not found in {self.root}: run scripts/setup.sh")
        target = self.workdir / name
        if not target.is_file():
            # Written aside, then renamed: another thread asking for it meanwhile (the tests
            # send frames from threads) must never read a partly written file.
            partial = target.with_name(f"{target.stem}.{threading.get_ident()}{target.suffix}")
            DERIVED[name](self).save(partial)
            partial.replace(target)
        return target

    def bytes(self, name: str) -> bytes:
        return self.path(name).read_bytes()

    def size(self, name: str) -> tuple[int, int]:
        """(width, height) of a photo, as Pillow reads it."""
        with Image.open(self.path(name)) as img:
            return img.size

    def rgb(self, name: str, scale: float = 1.0) -> np.ndarray:
        """uint8 [H, W, 3] RGB pixels of a photo, optionally resized by `scale`."""
        return _rgb_pixels(self.path(name), scale).copy()

    def bgr(self, name: str) -> np.ndarray:
        return np.ascontiguousarray(self.rgb(name)[..., ::-1])


@lru_cache(maxsize=32)
def _rgb_pixels(path: Path, scale: float) -> np.ndarray:
    with Image.open(path) as img:
        img = img.convert("RGB")
        if scale != 1.0:
            img = img.resize((round(img.width * scale), round(img.height * scale)), Image.LANCZOS)
        return np.asarray(img, dtype=np.uint8)


def _two_faces(photos: Photos) -> Image.Image:
    """obama.jpg and biden.jpg side by side: one picture with two people, under a megapixel."""
    heads = []
    for name, crop_fraction in (("obama.jpg", 0.53), ("biden.jpg", 0.36)):
        with Image.open(photos.path(name)) as img:
            img = img.convert("RGB")
            head = img.crop((0, 0, img.width, round(img.height * crop_fraction)))
        heads.append(head.resize((round(head.width * 500 / head.height), 500), Image.LANCZOS))
    canvas = Image.new("RGB", (sum(h.width for h in heads), 500))
    x = 0
    for head in heads:
        canvas.paste(head, (x, 0))
        x += head.width
    return canvas


def _reencoded(source: str, mode: str = "RGB", scale: float = 1.0):
    def make(photos: Photos) -> Image.Image:
        if mode == "RGB":
            return Image.fromarray(photos.rgb(source, scale))
        with Image.open(photos.path(source)) as img:
            return img.convert(mode)
    return make


# name -> how to make it; the file extension picks the encoder.
DERIVED = {
    "two_faces.jpg": _two_faces,
    "obama2.webp": _reencoded("obama2.jpg"),
    "obama2.bmp": _reencoded("obama2.jpg"),
    "obama2_gray.jpg": _reencoded("obama2.jpg", "L"),
    "obama_half.jpg": _reencoded("obama.jpg", scale=0.5),
    # Small copies (under 0.4 megapixels) for the sequence tests, which send many frames.
    "obama2_small.jpg": _reencoded("obama2.jpg", scale=0.5),
    "obama3_small.jpg": _reencoded("obama3.jpg", scale=0.25),
    "biden_small.jpg": _reencoded("biden.jpg", scale=0.3),
    "biden_smaller.jpg": _reencoded("biden.jpg", scale=0.2),
}
