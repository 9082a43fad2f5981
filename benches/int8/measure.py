#!/usr/bin/env python3
"""The sample models quantized with onnxruntime's static quantization, measured in process
against their float form: what int8 buys on this CPU before anything is built on it.

Each model as the engine hands it to onnxruntime (examples/onnx_clean: tiny weights zeroed,
PRelu as depthwise convolutions), opset 13 (per-channel DequantizeLinear needs it), quantized
QDQ with per-channel int8 weights and uint8 activations (x86's U8S8 kernels, VNNI where the CPU
has it), calibrated (MinMax) on inputs made from the sample photos. The embedder also with its
PRelu in the elementwise form `Relu(x) - s*Relu(-x)`, which int8 runs without 1x1 depthwise
convolutions (against the float form the engine runs); and an IResNet-like stack of 3x3
convolutions with random weights, for what int8 does where the time is in dense convolutions. One onnxruntime thread, ORT_ENABLE_ALL,
median of 5 runs of 100 inferences; agreement on the first calibration input (a crop of a photo).

    cargo build --release --example onnx_clean
    .venv/bin/python benches/int8/measure.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper
from PIL import Image

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))
from quantize import engine_form, ms, quantize  # noqa: E402  (the copies' own steps)

ONNX = REPO / "assets" / "onnx"
PHOTOS = REPO / "assets" / "photos"
NAMES = ("obama.jpg", "obama2.jpg", "obama3.jpg", "biden.jpg", "group5.jpg", "obama_640x480.jpg")


def images(mode: str):
    for name in NAMES:
        yield Image.open(PHOTOS / name).convert(mode)


def crops(mode: str, size: int, count: int, seed: int):
    """Square crops of the photos (a third to a half of the short side) at `size`."""
    rng = np.random.default_rng(seed)
    for im in images(mode):
        w, h = im.size
        for _ in range(count):
            s = int(min(w, h) * rng.uniform(0.33, 0.5))
            x, y = int(rng.integers(0, w - s)), int(rng.integers(0, h - s))
            yield im.crop((x, y, x + s, y + s)).resize((size, size), Image.BILINEAR)


def detector_inputs():
    for im in images("RGB"):
        x = (np.asarray(im.resize((320, 240), Image.BILINEAR), np.float32) - 127) / 128
        yield x.transpose(2, 0, 1)[None].copy()


def landmark_inputs():
    for c in crops("L", 64, 4, 1):
        yield (np.asarray(c, np.float32) / 256)[None, None].copy()


def embedder_inputs():
    for c in crops("RGB", 112, 4, 2):
        x = (np.asarray(c, np.float32)[..., ::-1] - 127) / 128  # BGR
        yield x.transpose(2, 0, 1)[None].copy()


def prelu_elementwise(path: Path, out: Path) -> Path:
    """Every PRelu(x, s) as Relu(x) + (-s) * Relu(-x)."""
    m = onnx.load(str(path))
    g = m.graph
    inits = {i.name: i for i in g.initializer}
    nodes = []
    for k, n in enumerate(g.node):
        if n.op_type != "PRelu":
            nodes.append(n)
            continue
        (x, s), y = n.input, n.output[0]
        t = [f"prelu{k}_{v}" for v in ("r", "neg", "rn", "srn", "ns")]
        g.initializer.append(numpy_helper.from_array(-numpy_helper.to_array(inits[s]), t[4]))
        nodes += [helper.make_node("Relu", [x], [t[0]]), helper.make_node("Neg", [x], [t[1]]),
                  helper.make_node("Relu", [t[1]], [t[2]]),
                  helper.make_node("Mul", [t[2], t[4]], [t[3]]),
                  helper.make_node("Add", [t[0], t[3]], [y])]
    del g.node[:]
    g.node.extend(nodes)
    onnx.save(m, str(out))
    return out


def zero_tiny(path: Path, out: Path) -> Path:
    """Tiny weights zeroed, PRelu kept, at opset 13."""
    import onnx.version_converter

    m = onnx.version_converter.convert_version(onnx.load(str(path)), 13)
    for init in m.graph.initializer:
        w = numpy_helper.to_array(init)
        if w.dtype.kind == "f" and ((np.abs(w) < 1e-10) & (w != 0)).any():
            w = np.where(np.abs(w) < 1e-10, np.zeros((), w.dtype), w)
            init.CopyFrom(numpy_helper.from_array(w, init.name))
    onnx.save(m, str(out))
    return out


def resnet_like(out: Path) -> Path:
    """A stack of 3x3 convolutions as an IResNet-50-like embedder has them (64 to 512 channels
    at 56 to 7 pixels, 3+4+8+3 blocks of two), random weights, Relu: what int8 does for a model
    whose time is in dense convolutions (buffalo_l's w600k_r50 and its kin)."""
    rng = np.random.default_rng(0)
    nodes, inits = [], []

    def conv(x: str, cin: int, cout: int, stride: int, name: str) -> str:
        w = rng.standard_normal((cout, cin, 3, 3)) * np.sqrt(2 / (cin * 9))
        inits.extend([numpy_helper.from_array(w.astype(np.float32), name + "w"),
                      numpy_helper.from_array(np.zeros(cout, np.float32), name + "b")])
        nodes.append(helper.make_node("Conv", [x, name + "w", name + "b"], [name + "y"],
                                      pads=[1] * 4, strides=[stride] * 2))
        nodes.append(helper.make_node("Relu", [name + "y"], [name + "r"]))
        return name + "r"

    x, cin = conv("input", 3, 64, 1, "c0"), 64
    for stage, (c, blocks) in enumerate(((64, 3), (128, 4), (256, 8), (512, 3))):
        for b in range(blocks):
            x, cin = conv(x, cin, c, 2 if b == 0 else 1, f"s{stage}b{b}a"), c
            x = conv(x, c, c, 1, f"s{stage}b{b}b")
    graph = helper.make_graph(
        nodes, "resnet_like",
        [helper.make_tensor_value_info("input", onnx.TensorProto.FLOAT, [1, 3, 112, 112])],
        [helper.make_tensor_value_info(x, onnx.TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(out))
    return out


def agreement(a: list[np.ndarray], b: list[np.ndarray], role: str) -> str:
    if role.startswith("embedder"):
        u, v = a[0].ravel(), b[0].ravel()
        return f"cosine {u @ v / np.linalg.norm(u) / np.linalg.norm(v):.4f}"
    return "max |diff| " + ", ".join(f"{float(np.abs(x - y).max()):.3f}" for x, y in zip(a, b))


def measure(role: str, float_model: Path, inputs, work: Path, engine: Path | None = None) -> str:
    """One row: `float_model` quantized, against `engine` (the float form the engine runs;
    `float_model` itself unless given)."""
    engine = engine or float_model
    name = onnx.load(str(float_model)).graph.input[0].name
    int8 = quantize(float_model, work / f"{float_model.stem}.int8.onnx", list(inputs()))
    x = next(inputs())
    f, q = ms(engine, x, each=100), ms(int8, x, each=100)
    a, b = (ort.InferenceSession(str(m), providers=["CPUExecutionProvider"]).run(None, {name: x})
            for m in (engine, int8))
    return f"| {role} | {f:.2f} | {q:.2f} | {f / q:.2f}× | {agreement(a, b, role)} |"


def cpu() -> str:
    flags = Path("/proc/cpuinfo").read_text()
    model = next((line.split(":", 1)[1].strip() for line in flags.splitlines()
                  if line.startswith("model name")), "?")
    isa = "AVX-512 VNNI" if "avx512_vnni" in flags else "AVX2" if "avx2" in flags else "?"
    return f"{model} ({isa})"


def main() -> int:
    rows = [f"onnxruntime {ort.__version__}, {cpu()}, one thread",
            "", "| model | float ms | int8 ms | float / int8 | int8 against float |",
            "|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        floats = {}
        for role, stem, inputs in (("detector", "fr_detect", detector_inputs),
                                   ("landmarks", "fr_landmark", landmark_inputs),
                                   ("embedder", "fr_feature", embedder_inputs)):
            floats[role] = engine_form(ONNX / f"{stem}.onnx", work / f"{stem}.onnx")
            rows.append(measure(role, floats[role], inputs, work))
            print(rows[-1], file=sys.stderr, flush=True)
        native = zero_tiny(ONNX / "fr_feature.onnx", work / "native.onnx")
        elementwise = prelu_elementwise(native, work / "fr_feature_elementwise.onnx")
        rows.append(measure("embedder, PRelu elementwise", elementwise, embedder_inputs, work,
                            engine=floats["embedder"]))
        rows.append(measure("embedder-like 3×3 stack, random weights", resnet_like(
            work / "resnet_like.onnx"), embedder_inputs, work))
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
