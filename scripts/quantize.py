#!/usr/bin/env python3
"""An int8 copy of one model of a served face pipeline, written only when it passes its check.

    python scripts/quantize.py MODEL.onnx OUT.onnx --role detector|landmarks|embedder
        [--config model_repository/face_onnx/config.pbtxt] [--photos DIR]
    python scripts/quantize.py MODEL.onnx --check COPY.onnx --role ...   (the check alone)

MODEL is taken as the engine hands it to onnxruntime (examples/onnx_clean: tiny weights zeroed,
PRelu as depthwise convolutions), at opset 13, and quantized by onnxruntime's static
quantization: QDQ, int8 weights per channel, uint8 activations (x86's U8S8 kernels, VNNI where
the CPU has it), calibrated (MinMax) on what the model sees in the pipeline of --config (its
other models and settings; MODEL in the role's place) run on the calibration photos through the
real server: frames for a detector, the boxes' crops for a landmark model, the aligned faces for
an embedder.

The check, through the real server, float pipeline against the same with the copy, on the
calibration photos and on photos held apart from them (every third): every face the float
pipeline finds is found (box IoU >= 0.9), its five points within 1 px at 112x112 (in the aligned
face), its embedding's cosine to the float one >= 0.99, and its name (or `unknown`) the same
at the model's threshold (the gallery: each person's first photo). The copy must also be faster
than the float model in process (one thread). The script prints every figure; when one fails
it says which and writes nothing (exit status 1). `--check COPY` runs the check on a copy made
before (scripts/models.sh's, say) and writes nothing either way.

Photos: a folder per person (DIR/alice/*.jpg) or files named after their person (alice_1.jpg);
the sample photos (scripts/setup.sh) without --photos. Needs the built backend and its
onnx_clean example (`bash scripts/build.sh`).
"""

from __future__ import annotations

import argparse
import base64
import io
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import face_api
import local_server
import model_check
import video_score
from model_check import CheckFailed

REPO_ROOT = Path(__file__).resolve().parent.parent
CLEAN = REPO_ROOT / "target" / "release" / "examples" / "onnx_clean"
SAMPLE_CONFIG = REPO_ROOT / "model_repository" / "face_onnx" / "config.pbtxt"
ROLES = {"detector": "detector_model", "landmarks": "landmark_model", "embedder": "embedder_model"}
# ArcFace's five points in a 112x112 chip (src/pipeline/align.rs).
ARCFACE_112 = np.array([[38.2946, 51.6963], [73.5318, 51.5014], [56.0252, 71.7366],
                        [41.5493, 92.3655], [70.7299, 92.2041]])
MIN_IOU, MAX_POINT_PX, MIN_COSINE = 0.9, 1.0, 0.99
# Without --photos: the sample photos, and these of the same set for their faces alone (several
# people, other sizes, partial faces: named `unknown` or as the gallery's people).
MORE_SAMPLES = ("group5.jpg", "obama_640x480.jpg", "obama_partial_face.jpg",
                "obama_partial_face2.jpg")


# ---- the model as the engine runs it, quantized --------------------------------------------

def engine_form(model: Path, out: Path) -> Path:
    """`model` as the engine hands it to onnxruntime, at opset 13 or above (per-channel
    DequantizeLinear needs 13)."""
    import onnx
    import onnx.version_converter

    if not CLEAN.is_file():
        raise CheckFailed(f"{CLEAN} not built: run `bash scripts/build.sh`")
    done = subprocess.run([str(CLEAN), str(model), str(out)], capture_output=True, text=True)
    if done.returncode != 0:
        raise CheckFailed(done.stderr.strip() or f"onnx_clean failed on {model}")
    proto = onnx.load(str(out))
    if max(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")) < 13:
        proto = onnx.version_converter.convert_version(proto, 13)
        onnx.save(proto, str(out))
    return out


def quantize(model: Path, out: Path, inputs: list[np.ndarray], keep_float: str = "") -> Path:
    """QDQ, per-channel int8 weights, uint8 activations, calibrated on `inputs`; the nodes whose
    names match the regular expression `keep_float` stay float."""
    import onnx
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)

    proto = onnx.load(str(model))
    name = proto.graph.input[0].name
    floats = [n.name for n in proto.graph.node if keep_float and re.search(keep_float, n.name)]

    class Feed(CalibrationDataReader):
        def __init__(self):
            self.rows = iter(inputs)

        def get_next(self):
            x = next(self.rows, None)
            return None if x is None else {name: x}

    quantize_static(str(model), str(out), Feed(), quant_format=QuantFormat.QDQ,
                    per_channel=True, reduce_range=not vnni(), activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QInt8, nodes_to_exclude=floats)
    return out


def vnni() -> bool:
    """Whether this CPU multiplies uint8 by int8 with VNNI. Without it (AVX2's vpmaddubsw) a
    product pair can saturate 16 bits, so the weights keep 7 bits (onnxruntime's reduce_range).
    The copy is made and checked on the machine that serves it (scripts/models.sh)."""
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    return any(f in flags.split() for f in ("avx512_vnni", "avx_vnni", "amx_int8"))


def ms(model: Path, x: np.ndarray, runs: int = 5, each: int = 50) -> float:
    """Milliseconds per inference: onnxruntime, one thread, ORT_ENABLE_ALL, median of runs."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
    feed = {session.get_inputs()[0].name: x}
    for _ in range(10):
        session.run(None, feed)
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        for _ in range(each):
            session.run(None, feed)
        times.append((time.perf_counter() - started) * 1000 / each)
    return statistics.median(times)


# ---- what each model sees in the pipeline ---------------------------------------------------

@dataclass
class Seen:
    """What the float pipeline answered for one photo."""
    photo: Path
    person: str
    faces: list[dict]


def input_shape(model: Path) -> list[int]:
    import onnx

    dims = onnx.load(str(model)).graph.input[0].type.tensor_type.shape.dim
    return [d.dim_value if d.dim_value > 0 else 1 for d in dims]


def normalized(pixels: np.ndarray, channels: str, mean: str, scale: str, nchw: bool) -> np.ndarray:
    """HxWx3 RGB uint8 as the engine feeds a model: channel order, (x - mean) * scale, layout."""
    x = pixels.astype(np.float32)
    if channels.upper() == "BGR":
        x = x[..., ::-1]
    means = np.array([float(m) for m in mean.split(",")], np.float32)
    x = (x - means) * np.float32(float(scale))
    return np.ascontiguousarray(x.transpose(2, 0, 1) if nchw else x)[None]


def detector_inputs(seen: list[Seen], settings: dict[str, str], model: Path) -> list[np.ndarray]:
    from PIL import Image

    shape = input_shape(model)
    nchw = shape[1] == 3
    h, w = (shape[2], shape[3]) if nchw else (shape[1], shape[2])
    out = []
    for s in seen:
        image = Image.open(s.photo).convert("RGB")
        if settings.get("detector_resize", "stretch") == "stretch":
            frame = image.resize((w, h), Image.BILINEAR)
        else:  # letterbox: the long side fits, the rest black
            k = min(w / image.width, h / image.height)
            frame = Image.new("RGB", (w, h))
            frame.paste(image.resize((max(1, round(image.width * k)),
                                      max(1, round(image.height * k))), Image.BILINEAR))
        out.append(normalized(np.asarray(frame), settings.get("detector_channels", "RGB"),
                              settings.get("detector_mean", "127"),
                              settings.get("detector_scale", "0.0078125"), nchw))
    return out


def landmark_inputs(seen: list[Seen], model: Path) -> list[np.ndarray]:
    """Each face's box, grey, at the model's size, /256 (the engine's landmark input)."""
    from PIL import Image

    h, w = input_shape(model)[2:]
    out = []
    for s in seen:
        grey = Image.open(s.photo).convert("L")
        for face in s.faces:
            b = face["box"]
            crop = grey.crop((b["left"], b["top"], b["right"], b["bottom"])).resize((w, h),
                                                                                     Image.BILINEAR)
            out.append((np.asarray(crop, np.float32) / 256)[None, None])
    return out


def embedder_inputs(seen: list[Seen], settings: dict[str, str], model: Path) -> list[np.ndarray]:
    """Each face as the server aligned it (`return_crops`), normalized as the engine does."""
    from PIL import Image

    nchw = input_shape(model)[1] == 3
    out = []
    for s in seen:
        for face in s.faces:
            chip = np.asarray(Image.open(io.BytesIO(base64.b64decode(face["crop"]))).convert("RGB"))
            x = normalized(chip, settings.get("embedder_channels", "RGB"),
                           settings.get("embedder_mean", "127.5"),
                           settings.get("embedder_scale", "0.0078125"), nchw)
            if settings.get("embedder_normalize") == "standardize":
                x = (x - x.mean()) / max(float(x.std()), 1e-6)
            out.append(x)
    return out


# ---- the pipeline through the real server ----------------------------------------------------

def config_params(config: Path) -> dict[str, str]:
    """A config.pbtxt's parameters, its *_model paths made absolute (its version folder 1/)."""
    text = config.read_text()
    params = dict(re.findall(r'key:\s*"([^"]+)"\s*value:\s*\{\s*string_value:\s*"([^"]*)"', text))
    for key in ROLES.values():
        if key in params:
            params[key] = str((config.parent / "1" / params[key]).resolve())
    return params


def run_pipeline(params: dict[str, str], photos: list[tuple[Path, str]], folder: Path,
                 ) -> tuple[list[Seen], dict[str, str]]:
    """Every photo through a server serving `params` (gallery: each person's first photo)."""
    gallery = {}
    for photo, person in photos:
        if person and f"{person}{photo.suffix}" not in gallery:
            gallery[f"{person}{photo.suffix}"] = photo
    served = {k: v for k, v in params.items() if k not in ("gallery_dir", "gallery_key_file")}
    served["return_embeddings"] = "true"
    url, log = model_check.serve(served, folder, gallery)
    try:
        _, settings = model_check.engine_line(log)
        client = face_api.connect(url)
        seen = [Seen(photo, person, face_api.infer(client, model_check.MODEL,
                                                   parameters={"return_crops": True},
                                                   photo=photo.read_bytes())["faces"])
                for photo, person in photos]
    finally:
        local_server.stop_all()
    return seen, settings


# ---- the check --------------------------------------------------------------------------------

def iou(a: dict, b: dict) -> float:
    """Of two answers' boxes (video_score's rule on their corners)."""
    corners = lambda r: (r["left"], r["top"], r["right"], r["bottom"])  # noqa: E731
    return video_score.iou(corners(a), corners(b))


def chip_scale(points: np.ndarray) -> float:
    """How many chip pixels (112x112) one image pixel is for a face with these five points:
    the scale of the similarity that aligns them."""
    src = points - points.mean(axis=0)
    dst = ARCFACE_112 - ARCFACE_112.mean(axis=0)
    a = (src * dst).sum() / (src * src).sum()
    b = (src[:, 0] * dst[:, 1] - src[:, 1] * dst[:, 0]).sum() / (src * src).sum()
    return float(np.hypot(a, b))


@dataclass
class Figures:
    faces: int = 0
    missed: int = 0
    min_iou: float = 1.0
    max_point_px: float = 0.0
    min_cosine: float = 1.0
    names_differ: int = 0

    def failures(self) -> list[str]:
        failed = []
        if self.missed:
            failed.append(f"{self.missed} of {self.faces} faces not found (IoU >= {MIN_IOU})")
        if self.max_point_px > MAX_POINT_PX:
            failed.append(f"five points {self.max_point_px:.2f} px apart at 112x112 "
                          f"(at most {MAX_POINT_PX})")
        if self.min_cosine < MIN_COSINE:
            failed.append(f"embedding cosine {self.min_cosine:.4f} (at least {MIN_COSINE})")
        if self.names_differ:
            failed.append(f"{self.names_differ} names differ")
        return failed

    def line(self) -> str:
        return (f"{self.faces} faces: found {self.faces - self.missed}, box IoU >= "
                f"{self.min_iou:.3f}, points within {self.max_point_px:.2f} px at 112x112, "
                f"embedding cosine >= {self.min_cosine:.4f}, names differing {self.names_differ}")


def compare(floats: list[Seen], int8s: list[Seen]) -> Figures:
    fig = Figures()
    for f, q in zip(floats, int8s):
        for face in f.faces:
            fig.faces += 1
            best = max(q.faces, key=lambda g: iou(face["box"], g["box"]), default=None)
            overlap = iou(face["box"], best["box"]) if best else 0.0
            fig.min_iou = min(fig.min_iou, overlap)
            if best is None or overlap < MIN_IOU:
                fig.missed += 1
                continue
            a, b = np.array(face["landmarks"]), np.array(best["landmarks"])
            moved = float(np.linalg.norm(a - b, axis=1).max()) * chip_scale(a)
            fig.max_point_px = max(fig.max_point_px, moved)
            u, v = np.array(face["embedding"]), np.array(best["embedding"])
            fig.min_cosine = min(fig.min_cosine,
                                 float(u @ v / np.linalg.norm(u) / np.linalg.norm(v)))
            fig.names_differ += face.get("name") != best.get("name")
    return fig


def calibration(seen: list[Seen], role: str, settings: dict[str, str], model: Path):
    if role == "detector":
        return detector_inputs(seen, settings, model)
    if role == "landmarks":
        return landmark_inputs(seen, model)
    return embedder_inputs(seen, settings, model)


def run(args: argparse.Namespace) -> None:
    model = model_check.read_onnx(args.model, args.role)
    params = config_params(args.config)
    params[ROLES[args.role]] = str(model)
    samples = REPO_ROOT / "assets" / "photos"
    people = model_check.people_of(args.photos, samples)
    photos = [(p, person) for person, ps in people.items() for p in ps]
    if args.photos is None:
        photos += [(samples / name, "") for name in MORE_SAMPLES]
    held = {p for i, (p, _) in enumerate(photos) if i % 3 == 2}
    with tempfile.TemporaryDirectory(prefix="quantize.") as tmp:
        work = Path(tmp)
        floats, settings = run_pipeline(params, photos, work / "float")
        if not any(s.faces for s in floats):
            raise CheckFailed("the float pipeline finds no face in the photos")
        base = engine_form(model, work / "engine_form.onnx")
        inputs = calibration([s for s in floats if s.photo not in held], args.role, settings, base)
        if not inputs:
            raise CheckFailed(f"no calibration input for the {args.role}: no face found")
        int8 = args.check.resolve() if args.check else quantize(
            base, work / "int8.onnx", inputs, args.keep_float)
        float_ms, int8_ms = ms(base, inputs[0]), ms(int8, inputs[0])
        print(f"{args.role}: {len(inputs)} calibration inputs from "
              f"{len(photos) - len(held)} photos; {len(held)} photos held apart")
        print(f"in process, one thread: float {float_ms:.2f} ms, int8 {int8_ms:.2f} ms "
              f"({float_ms / int8_ms:.2f}x)")
        params[ROLES[args.role]] = str(int8)
        int8s, _ = run_pipeline(params, photos, work / "int8")
        failed = []
        for part, keep in (("calibration photos", lambda s: s.photo not in held),
                           ("held-apart photos", lambda s: s.photo in held)):
            pairs = [(f, q) for f, q in zip(floats, int8s) if keep(f)]
            fig = compare([f for f, _ in pairs], [q for _, q in pairs])
            print(f"{part}: {fig.line()}")
            failed += [f"{part}: {why}" for why in fig.failures()]
        if int8_ms >= float_ms:
            failed.append(f"int8 is not faster ({int8_ms:.2f} against {float_ms:.2f} ms)")
        if failed:
            raise CheckFailed("the check failed, nothing written: " + "; ".join(failed))
        if args.check:
            print(f"checked: {args.check}")
            return
        shutil.copy2(int8, args.out)
    print(f"written: {args.out}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("out", type=Path, nargs="?")
    parser.add_argument("--check", type=Path, metavar="COPY",
                        help="check this int8 copy of MODEL instead of making one")
    parser.add_argument("--role", choices=sorted(ROLES), required=True)
    parser.add_argument("--config", type=Path, default=SAMPLE_CONFIG,
                        help="the served model whose pipeline runs around MODEL")
    parser.add_argument("--photos", type=Path, help="a folder per person, or name_*.jpg files")
    parser.add_argument("--keep-float", default="", metavar="REGEX",
                        help="nodes (of the model as the engine runs it) whose names match stay "
                             "float, e.g. '^Conv_0$|^PRelu_' (the first convolution, the PRelu)")
    args = parser.parse_args()
    if (args.out is None) == (args.check is None):
        parser.error("give OUT (make a copy) or --check COPY (check one), not both")
    try:
        run(args)
    except CheckFailed as e:
        print(f"quantize: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
