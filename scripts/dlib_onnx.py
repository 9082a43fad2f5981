#!/usr/bin/env python3
"""dlib's ResNet face encoder (dlib_face_recognition_resnet_model_v1.dat: 99.38% on LFW) as an
ONNX embedder the ONNX engine serves, and int8 quantizes where its time is: dense 3x3
convolutions.

    target/release/examples/dlib_xml assets/dlib/dlib_face_recognition_resnet_model_v1.dat net.xml
    python scripts/dlib_onnx.py net.xml dlib_resnet.onnx

The network is read from dlib's own `net_to_xml` (layers listed from the loss down to the input)
and rebuilt layer for layer: each `affine` folded into the convolution before it, dlib's
`add_prev` of tensors of different sizes as dlib computes it (each zero-padded to the larger, at
the end of channels, rows and columns), `fc_no_bias` as a MatMul. Its input is the 150x150 face
chip already normalised as dlib's `input_rgb_image` does ((pixel - channel mean) / 256, RGB): the
engine's `embedder_mean` and `embedder_scale` (printed). The five-point template of dlib's chip
(`embedder_template`) is printed too: where the ArcFace points (eye centres, nose tip, mouth
corners) of dlib's mean face shape fall in a 150x150 chip with dlib's padding of 0.25.
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# dlib's mean face shape (points 17-67 of the 68, image_transforms/interpolation.h), in a unit
# square: the ArcFace five taken from it.
_EYE_LEFT = [(0.121737, 0.216423), (0.187122, 0.178758), (0.265825, 0.179852),
             (0.334606, 0.231733), (0.260918, 0.245099), (0.182743, 0.244077)]
_EYE_RIGHT = [(0.645647, 0.231733), (0.714428, 0.179852), (0.793132, 0.178758),
              (0.858516, 0.216423), (0.79751, 0.244077), (0.719335, 0.245099)]
_NOSE_TIP, _MOUTH = (0.490127, 0.515625), [(0.254149, 0.780233), (0.726104, 0.780233)]


def template(size: int = 150, padding: float = 0.25) -> list[float]:
    """Eye centres, nose tip and mouth corners of dlib's chip, in its pixels (x, y, ...)."""
    points = [np.mean(_EYE_LEFT, 0), np.mean(_EYE_RIGHT, 0), _NOSE_TIP, *_MOUTH]
    return [round(float((padding + v) / (2 * padding + 1) * size), 2) for p in points for v in p]


def numbers(el: ET.Element) -> np.ndarray:
    return np.array((el.text or "").split(), np.float32)


class Builder:
    """The ONNX graph, built from the input up, with each tensor's (channels, rows, columns)."""

    def __init__(self) -> None:
        self.nodes: list = []
        self.inits: list = []
        self.shape: dict[str, tuple[int, int, int]] = {}
        self.n = 0

    def name(self, kind: str) -> str:
        self.n += 1
        return f"{kind}_{self.n}"

    def const(self, value: np.ndarray, kind: str) -> str:
        name = self.name(kind)
        self.inits.append(numpy_helper.from_array(value, name))
        return name

    def node(self, op: str, inputs: list[str], shape: tuple[int, int, int], **attrs) -> str:
        out = self.name(op)
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        self.shape[out] = shape
        return out

    def conv(self, x: str, el: ET.Element) -> str:
        a = el.attrib
        f, kh, kw = int(a["num_filters"]), int(a["nr"]), int(a["nc"])
        sy, sx, py, px = (int(a[k]) for k in ("stride_y", "stride_x", "padding_y", "padding_x"))
        c, h, w = self.shape[x]
        values = numbers(el)
        weights = values[: f * c * kh * kw].reshape(f, c, kh, kw)
        bias = values[f * c * kh * kw:] if a.get("use_bias", "true") == "true" else np.zeros(f)
        if bias.size != f:
            raise SystemExit(f"con: {values.size} numbers for {f}x{c}x{kh}x{kw} and biases")
        shape = (f, 1 + (h + 2 * py - kh) // sy, 1 + (w + 2 * px - kw) // sx)
        return self.node("Conv", [x, self.const(weights.astype(np.float32), "w"),
                                  self.const(bias.astype(np.float32), "b")], shape,
                         kernel_shape=[kh, kw], strides=[sy, sx], pads=[py, px, py, px])

    def pool(self, x: str, el: ET.Element) -> str:
        a = el.attrib
        c, h, w = self.shape[x]
        kh, kw = int(a["nr"]), int(a["nc"])
        if kh == 0 and kw == 0:
            return self.node("GlobalAveragePool", [x], (c, 1, 1))
        sy, sx, py, px = (int(a[k]) for k in ("stride_y", "stride_x", "padding_y", "padding_x"))
        if py or px:
            raise SystemExit(f"{el.tag}: padded pooling is not converted")
        shape = (c, 1 + (h - kh) // sy, 1 + (w - kw) // sx)
        op = "MaxPool" if el.tag == "max_pool" else "AveragePool"
        return self.node(op, [x], shape, kernel_shape=[kh, kw], strides=[sy, sx])

    def padded(self, x: str, to: tuple[int, int, int]) -> str:
        """`x` zero-padded at the end of each dimension to `to`, as dlib's add_prev does."""
        extra = [t - s for t, s in zip(to, self.shape[x])]
        if not any(extra):
            return x
        pads = np.array([0, 0, 0, 0, 0, *extra], np.int64)
        return self.node("Pad", [x, self.const(pads, "pads")], to)

    def add(self, x: str, y: str) -> str:
        to = tuple(max(a, b) for a, b in zip(self.shape[x], self.shape[y]))
        return self.node("Add", [self.padded(x, to), self.padded(y, to)], to)


def convert(xml: Path) -> onnx.ModelProto:
    layers = list(ET.parse(xml).getroot())
    b = Builder()
    x, tags, size = "input", {}, (0, 0)
    for layer in reversed(layers):  # net_to_xml lists the loss first, the input last
        kind = layer.attrib["type"]
        if kind == "input":
            el = layer[0]
            size = (int(el.attrib["nr"]), int(el.attrib["nc"]))
            b.shape[x] = (3, *size)
        elif kind == "tag":
            tags[layer.attrib["id"]] = x
        elif kind == "skip":
            x = tags[layer.attrib["id"]]
        elif kind == "loss":
            continue
        else:
            el = layer[0]
            x = step(b, x, el, tags)
    c = b.shape[x][0]
    flat = b.node("Flatten", [x], (c, 1, 1), axis=1)
    fc = [layer[0] for layer in layers if layer.attrib["type"] == "comp"][0]
    if fc.tag != "fc_no_bias":
        raise SystemExit(f"expected fc_no_bias at the top, found {fc.tag}")
    return finish(b, flat, fc, size)


def step(b: Builder, x: str, el: ET.Element, tags: dict[str, str]) -> str:
    """One dlib layer on `x`; an affine is folded into the convolution that made `x`."""
    if el.tag == "con":
        return b.conv(x, el)
    if el.tag == "affine_con":
        return fold_affine(b, x, numbers(el))
    if el.tag == "relu":
        return b.node("Relu", [x], b.shape[x])
    if el.tag in ("max_pool", "avg_pool"):
        return b.pool(x, el)
    if el.tag == "add_prev":
        return b.add(x, tags[el.attrib["tag"]])
    if el.tag == "fc_no_bias":
        return x  # finish() adds it after the flatten
    raise SystemExit(f"dlib layer {el.tag} is not converted")


def fold_affine(b: Builder, x: str, affine: np.ndarray) -> str:
    """gamma * conv(x) + beta (dlib's affine_con: gamma then beta, one each a channel), folded
    into the Conv node that made `x`."""
    node = b.nodes[-1]
    if node.op_type != "Conv" or node.output[0] != x:
        raise SystemExit("affine_con not directly after a con: not converted")
    inits = {i.name: i for i in b.inits}
    w, bias = (numpy_helper.to_array(inits[n]) for n in node.input[1:3])
    f = w.shape[0]
    gamma, beta = affine[:f], affine[f:]
    inits[node.input[1]].CopyFrom(numpy_helper.from_array(
        (w * gamma[:, None, None, None]).astype(np.float32), node.input[1]))
    inits[node.input[2]].CopyFrom(numpy_helper.from_array(
        (bias * gamma + beta).astype(np.float32), node.input[2]))
    return x


def finish(b: Builder, flat: str, fc: ET.Element, size: tuple[int, int]) -> onnx.ModelProto:
    outputs = int(fc.attrib["num_outputs"])
    weights = numbers(fc)
    inputs = weights.size // outputs
    matrix = weights.reshape(inputs, outputs)  # dlib's fc: output = input x W
    b.node("MatMul", [flat, b.const(matrix, "fc")], (outputs, 1, 1))
    nodes = b.nodes
    nodes[-1].output[0] = "embedding"
    graph = helper.make_graph(
        nodes, "dlib_face_recognition_resnet_model_v1",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, *size])],
        [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, [1, outputs])], b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                              producer_name="triton-face scripts/dlib_onnx.py")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("xml", type=Path, help="the network as examples/dlib_xml writes it")
    ap.add_argument("out", type=Path, help="the ONNX embedder to write")
    args = ap.parse_args()
    model = convert(args.xml)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(args.out))
    means = [el.attrib for el in ET.parse(args.xml).getroot().iter("input_rgb_image_sized")][0]
    print(f"{args.out}: embedder_mean {means['r']},{means['g']},{means['b']} "
          f"embedder_scale 0.00390625 embedder_channels RGB "
          f"embedder_template {','.join(str(v) for v in template())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
