#!/usr/bin/env python3
"""The sample models and dlib's ResNet as ONNX quantized with onnxruntime's static quantization,
measured in process against their float form: what int8 buys on this CPU, and each model's
floor (its GOP at this core's float and int8 GEMM rates).

Each model as the engine hands it to onnxruntime (examples/onnx_clean: tiny weights zeroed,
PRelu as depthwise convolutions), opset 13 (per-channel DequantizeLinear needs it), quantized
QDQ with per-channel int8 weights and uint8 activations (x86's U8S8 kernels, VNNI where the CPU
has it), calibrated (MinMax) on inputs made from the sample photos. The sample embedder also
with its PRelu in the elementwise form `Relu(x) - s*Relu(-x)`, which int8 runs without 1x1
depthwise convolutions (against the float form the engine runs). One onnxruntime thread,
ORT_ENABLE_ALL, median of 5 runs of 100 inferences; agreement on the first calibration input
(a crop of a photo). GOP: 2 x the multiply-adds of the convolutions and matrix products; the
rates: onnxruntime's MatMul (float) and MatMulInteger (uint8 x int8) of 512 x 512 matrices on
one thread.

    bash scripts/build.sh        # the onnx_clean example, dlib_resnet.onnx (scripts/models.sh)
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


def dlib_inputs():
    """dlib's input_rgb_image: (pixel - its channel mean) / 256, RGB, 150x150."""
    mean = np.array([122.782, 117.001, 104.298], np.float32)
    for c in crops("RGB", 150, 4, 3):
        yield ((np.asarray(c, np.float32) - mean) / 256).transpose(2, 0, 1)[None].copy()


def gop(path: Path) -> float:
    """2 x the multiply-adds of the model's Conv, MatMul and Gemm nodes, in billions."""
    m = onnx.shape_inference.infer_shapes(onnx.load(str(path)))
    dims = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
            for v in (*m.graph.value_info, *m.graph.output, *m.graph.input)}
    dims.update({i.name: list(i.dims) for i in m.graph.initializer})
    macs = 0
    for n in m.graph.node:
        if n.op_type == "Conv":
            w, out = dims[n.input[1]], dims[n.output[0]]
            macs += int(np.prod(out)) * int(np.prod(w[1:]))
        elif n.op_type in ("MatMul", "Gemm"):
            a, out = dims[n.input[0]], dims[n.output[0]]
            macs += int(np.prod(out)) * a[-1]
    return 2 * macs / 1e9


def gemm_rates(size: int = 512) -> tuple[float, float]:
    """GOP/s of onnxruntime's float MatMul and uint8 x int8 MatMulInteger on one thread."""
    rates = []
    for kind, a_type, b in (("float", onnx.TensorProto.FLOAT, np.float32),
                            ("int8", onnx.TensorProto.UINT8, np.int8)):
        rng = np.random.default_rng(0)
        w = (rng.standard_normal((size, size)) * (1 if b == np.float32 else 40)).astype(b)
        op = "MatMul" if kind == "float" else "MatMulInteger"
        graph = helper.make_graph(
            [helper.make_node(op, ["a", "w"], ["y"])], "gemm",
            [helper.make_tensor_value_info("a", a_type, [size, size])],
            [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT if kind == "float"
                                           else onnx.TensorProto.INT32, [size, size])],
            [numpy_helper.from_array(w, "w")])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        model.ir_version = 8
        with tempfile.NamedTemporaryFile(suffix=".onnx") as f:
            onnx.save(model, f.name)
            a = (rng.random((size, size)) * (1 if kind == "float" else 255)).astype(
                np.float32 if kind == "float" else np.uint8)
            rates.append(2 * size ** 3 / (ms(Path(f.name), a, each=20) / 1e3) / 1e9)
    return rates[0], rates[1]


def agreement(a: list[np.ndarray], b: list[np.ndarray], role: str) -> str:
    if role.startswith("embedder"):
        u, v = a[0].ravel(), b[0].ravel()
        return f"cosine {u @ v / np.linalg.norm(u) / np.linalg.norm(v):.4f}"
    return "max |diff| " + ", ".join(f"{float(np.abs(x - y).max()):.3f}" for x, y in zip(a, b))


def measure(role: str, float_model: Path, inputs, work: Path, rates: tuple[float, float],
            engine: Path | None = None) -> str:
    """One row: `float_model` quantized, against `engine` (the float form the engine runs;
    `float_model` itself unless given), with its floors at `rates` (float, int8 GOP/s)."""
    engine = engine or float_model
    name = onnx.load(str(float_model)).graph.input[0].name
    int8 = quantize(float_model, work / f"{float_model.stem}.int8.onnx", list(inputs()))
    x = next(inputs())
    f, q = ms(engine, x, each=100), ms(int8, x, each=100)
    a, b = (ort.InferenceSession(str(m), providers=["CPUExecutionProvider"]).run(None, {name: x})
            for m in (engine, int8))
    g = gop(engine)
    floor_f, floor_q = g / rates[0] * 1e3, g / rates[1] * 1e3
    return (f"| {role} | {g:.2f} | {f:.2f} ({f / floor_f:.1f}× floor) | "
            f"{q:.2f} ({q / floor_q:.1f}× floor) | {f / q:.2f}× | {agreement(a, b, role)} |")


def cpu() -> str:
    flags = Path("/proc/cpuinfo").read_text()
    model = next((line.split(":", 1)[1].strip() for line in flags.splitlines()
                  if line.startswith("model name")), "?")
    isa = "AVX-512 VNNI" if "avx512_vnni" in flags else "AVX2" if "avx2" in flags else "?"
    return f"{model} ({isa})"


def main() -> int:
    rates = gemm_rates()
    rows = [f"onnxruntime {ort.__version__}, {cpu()}, one thread; GEMM 512^3: float "
            f"{rates[0]:.1f} GOP/s, int8 {rates[1]:.1f} GOP/s ({rates[1] / rates[0]:.2f}x)",
            "", "| model | GOP | float ms | int8 ms | float / int8 | int8 against float |",
            "|---|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        floats = {}
        for role, stem, inputs in (("detector", "fr_detect", detector_inputs),
                                   ("landmarks", "fr_landmark", landmark_inputs),
                                   ("embedder", "fr_feature", embedder_inputs),
                                   ("embedder: dlib's ResNet", "dlib_resnet", dlib_inputs)):
            floats[role] = engine_form(ONNX / f"{stem}.onnx", work / f"{stem}.onnx")
            rows.append(measure(role, floats[role], inputs, work, rates))
            print(rows[-1], file=sys.stderr, flush=True)
        native = zero_tiny(ONNX / "fr_feature.onnx", work / "native.onnx")
        elementwise = prelu_elementwise(native, work / "fr_feature_elementwise.onnx")
        rows.append(measure("embedder, PRelu elementwise", elementwise, embedder_inputs, work,
                            rates, engine=floats["embedder"]))
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
