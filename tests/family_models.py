"""Small synthetic ONNX face detectors, one per output layout the ONNX engine's detector
families read (src/engine/onnx/detect/), built from the layouts' spec sheets (the reference
code of insightface, biubug6, OpenCV, MediaPipe / keijiro, yolov5-face, Ultralytics and
derronqi), not from the Rust decoders: an independent check of them.

The marker scheme. Test images are black with small saturated squares ("dots") of pure red,
green or blue. A model undoes its family's input normalisation (channel order, mean, scale,
NCHW or NHWC) to get each channel's brightness b in 0..1, max-pools it over the cells of a
stride (kernel = stride = s), and scores each place clip((maxpool(b) - 0.75) * 4, 0, 1): red
fires stride 8, green stride 16, blue stride 32 (BlazeFace: red its 16-pixel map, blue its
32-pixel one). Where a place has several anchors one fires: anchor 0, green's anchor 1 (two
anchors a place), BlazeFace's blue anchor 3. Everything else a model writes is constant per
stride: a box of 3s x 3s centred on the place's anchor centre in the family's convention and
five points at fixed offsets from that centre (`POINTS`), encoded as the family's raw outputs
(distances in strides, prior deltas with variances, logits, DFL two-hot bins, decoded rows...).
`Variant.planted` says where a fired place's face is in the model's input pixels.

Models are opset 13, IR version 8 (onnxruntime 1.31 and tract 0.23 both load them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 13
IR_VERSION = 8

CHANNEL = {"red": 0, "green": 1, "blue": 2}
# Which colour fires which stride, and which anchor of a place with two.
FIRES = {"red": 8, "green": 16, "blue": 32}
TWO_ANCHOR_FIRING = {8: 0, 16: 1, 32: 0}
# A face's box side and its five points (image-left eye, image-right eye, nose tip, mouth
# corners left and right), in strides from the anchor centre.
BOX = 3.0
POINTS = ((-0.6, -0.4), (0.6, -0.4), (0.0, 0.0), (-0.5, 0.6), (0.5, 0.6))
# BlazeFace's six keypoints: eyes, nose tip, mouth centre, ears.
BLAZE_POINTS = ((-0.6, -0.4), (0.6, -0.4), (0.0, 0.0), (0.0, 0.6), (-1.1, -0.2), (1.1, -0.2))
# insightface's arcface_dst (face_align.py): the template the engine puts mouth corners by.
ARCFACE_DST = ((38.29, 51.70), (73.53, 51.50), (56.03, 71.74), (41.55, 92.37), (70.73, 92.20))
# Raw logits: a firing place's 20 * 1 - 10 = 10 (sigmoid 0.99995), a dark one's -10.
LOGIT_LOW, LOGIT_SPAN = -10.0, 20.0


# ---- graph building ------------------------------------------------------------------------

class Graph:
    """Nodes and initializers of one model, with generated names."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._count = 0

    def _name(self, what: str) -> str:
        self._count += 1
        return f"{what}_{self._count}"

    def const(self, value, dtype=np.float32) -> str:
        name = self._name("c")
        self.initializers.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def op(self, op_type: str, *inputs: str, out: str | None = None, **attrs) -> str:
        return self.ops(op_type, inputs, 1, out=out, **attrs)[0]

    def ops(self, op_type: str, inputs, count: int, out: str | None = None, **attrs) -> list[str]:
        outputs = [out] if out is not None else [self._name(op_type.lower()) for _ in range(count)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outputs, **attrs))
        return outputs

    def model(self, inputs: list[onnx.ValueInfoProto], outputs: list[tuple[str, list]],
              name: str) -> onnx.ModelProto:
        """`outputs`: (name, declared dims: ints, or strings for free dims)."""
        graph = helper.make_graph(
            self.nodes, name, inputs,
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, dims) for n, dims in outputs],
            self.initializers,
        )
        model = helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="triton-face tests"
        )
        model.ir_version = IR_VERSION
        onnx.checker.check_model(model)
        return model


def image_input(name: str, dims: list) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, dims)


def brightness(g: Graph, x: str, *, nhwc: bool, rgb: bool, mean, scale: float) -> str:
    """Each channel's brightness b = pixel / 255, NCHW [1, 3, H, W] in R, G, B order, from the
    input the engine feeds: (pixel - mean) * scale in the family's channel order (mean given
    in that order) and layout."""
    if nhwc:
        x = g.op("Transpose", x, perm=[0, 3, 1, 2])
    mean = np.broadcast_to(np.asarray(mean, np.float32), (3,)).reshape(1, 3, 1, 1)
    b = g.op("Add", g.op("Mul", x, g.const(np.full((1, 3, 1, 1), 1.0 / (255.0 * scale)))),
             g.const(mean / 255.0))
    if not rgb:  # BGR in, R G B out
        b = g.op("Gather", b, g.const([2, 1, 0], np.int64), axis=1)
    return b


def score_map(g: Graph, b: str, stride: int, colour: str, ceil: bool = False) -> str:
    """[1, 1, H/s, W/s]: clip((maxpool_s(b_colour) - 0.75) * 4, 0, 1)."""
    pooled = g.op("MaxPool", b, kernel_shape=[stride, stride], strides=[stride, stride],
                  ceil_mode=int(ceil))
    c = CHANNEL[colour]
    one = g.op("Slice", pooled, g.const([c], np.int64), g.const([c + 1], np.int64),
               g.const([1], np.int64))
    raised = g.op("Mul", g.op("Sub", one, g.const(0.75)), g.const(4.0))
    return g.op("Clip", raised, g.const(0.0), g.const(1.0))


def head(g: Graph, score: str, base, delta, grid=None) -> str:
    """A conv-head-like NCHW map [1, K, h, w]: channel k at each place is
    base[k] + delta[k] * score (+ gx * grid[0][k] + gy * grid[1][k], `grid` = (cols, rows,
    x coefficients, y coefficients))."""
    base, delta = np.asarray(base, np.float32), np.asarray(delta, np.float32)
    k = base.size
    t = g.op("Add", g.op("Mul", score, g.const(delta.reshape(1, k, 1, 1))),
             g.const(base.reshape(1, k, 1, 1)))
    if grid is not None:
        cols, rows, xs, ys = grid
        gx = np.arange(cols, dtype=np.float32).reshape(1, 1, 1, cols)
        gy = np.arange(rows, dtype=np.float32).reshape(1, 1, rows, 1)
        t = g.op("Add", t, g.op("Mul", g.const(gx), g.const(np.reshape(xs, (1, k, 1, 1)))))
        t = g.op("Add", t, g.op("Mul", g.const(gy), g.const(np.reshape(ys, (1, k, 1, 1)))))
    return t


def rows(g: Graph, nchw: str, width: int, batched: bool = True, out: str | None = None) -> str:
    """Conv output [1, A*C, h, w] -> Transpose(0,2,3,1) -> Reshape [1, h*w*A, C] (or [h*w*A, C]):
    row (y*w + x)*A + a, column c = channel a*C + c, as every per-anchor export writes it."""
    t = g.op("Transpose", nchw, perm=[0, 2, 3, 1])
    shape = [1, -1, width] if batched else [-1, width]
    return g.op("Reshape", t, g.const(shape, np.int64), out=out)


def tile(per_anchor: list[list[float]]) -> np.ndarray:
    """Channels a*C + c of a head from each anchor's C values."""
    return np.asarray(per_anchor, np.float32).reshape(-1)


def logit(p: float) -> float:
    return math.log(p / (1.0 - p))


# ---- the variants ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Variant:
    """One served detector model and what it plants."""

    name: str                     # the model's name on the server
    file: str                     # its detector file in the version folder
    build: Callable[[], onnx.ModelProto]
    family: str                   # the family the load must read it as
    size: tuple[int, int]         # the input it is served at (W, H)
    placement: str                # "letterbox" (top left) or "letterbox-centre"
    fires: dict[str, int]         # colour -> cell side (stride) in input pixels
    centre: float = 0.5           # anchor centre within a cell (SCRFD: 0, the cell's corner)
    points: str = "five"          # "five", "blazeface" (mouth corners from its centre), "none"
    params: dict[str, str] = field(default_factory=dict)
    runtime: str = "onnxruntime"

    def planted(self, colour: str, cell: tuple[int, int]) -> tuple[list[float], list[list[float]]]:
        """The face a fired place at `cell` (column, row) answers: its box (left, top, right,
        bottom) and five points, in the model's input pixels."""
        s = self.fires[colour]
        cx, cy = (cell[0] + self.centre) * s, (cell[1] + self.centre) * s
        half = BOX * s / 2
        box = [cx - half, cy - half, cx + half, cy + half]
        if self.points == "blazeface":
            eye_l, eye_r, nose, mouth = ([cx + dx * s, cy + dy * s] for dx, dy in BLAZE_POINTS[:4])
            t = ARCFACE_DST
            ratio = (t[4][0] - t[3][0]) / (t[1][0] - t[0][0])
            half_mouth = [(eye_r[0] - eye_l[0]) * ratio / 2, (eye_r[1] - eye_l[1]) * ratio / 2]
            corners = [[mouth[0] - half_mouth[0], mouth[1] - half_mouth[1]],
                       [mouth[0] + half_mouth[0], mouth[1] + half_mouth[1]]]
            return box, [eye_l, eye_r, nose, *corners]
        return box, [[cx + dx * s, cy + dy * s] for dx, dy in POINTS]


# ---- SCRFD (insightface model_zoo/scrfd.py; spec §1) ----------------------------------------

SCRFD_NUMERIC = ["448", "471", "494", "451", "474", "497", "454", "477", "500"]  # det_10g


def scrfd(outputs: int = 9, batched: bool = False, free: bool = True, named: bool = False,
          size: int = 640, nan: bool = False) -> onnx.ModelProto:
    """SCRFD: 6/9 outputs (strides 8/16/32, two anchors a place) or 10/15 (strides 8..128, one
    anchor), in order every stride's scores [N,1] (sigmoid), boxes [N,4] (distances l, t, r, b
    from the anchor at (x*s, y*s), in strides), points [N,10] (offsets in strides); row
    (y*W/s + x)*A + a. Input `input.1`, RGB, (v - 127.5) / 128 (spec §1.7). `nan`: one output
    holds a NaN."""
    g = Graph()
    dims = [1, 3, "?", "?"] if free else [1, 3, size, size]
    strides = [8, 16, 32] if outputs in (6, 9) else [8, 16, 32, 64, 128]
    anchors = 2 if outputs in (6, 9) else 1
    points = outputs in (9, 15)
    b = brightness(g, "input.1", nhwc=False, rgb=True, mean=127.5, scale=1 / 128)
    groups: dict[str, list[str]] = {"score": [], "bbox": [], "kps": []}
    for s in strides:
        colour = next((c for c, fs in FIRES.items() if fs == s), "red")
        fired = s in FIRES.values()
        # 15 outputs at a free size: maps of partial cells, as the grid counts them.
        S = score_map(g, b, s, colour, ceil=outputs in (10, 15))
        firing = TWO_ANCHOR_FIRING[s] if anchors == 2 else 0
        delta = [[1.0 if (fired and a == firing) else 0.0] for a in range(anchors)]
        score = head(g, S, tile([[0.0]] * anchors), tile(delta))
        groups["score"].append(rows(g, score, 1, batched))
        box = [[BOX / 2] * 4] * anchors
        groups["bbox"].append(rows(g, head(g, S, tile(box), np.zeros(4 * anchors)), 4, batched))
        kps = [[v for p in POINTS for v in p]] * anchors
        groups["kps"].append(rows(g, head(g, S, tile(kps), np.zeros(10 * anchors)), 10, batched))
    order = groups["score"] + groups["bbox"] + (groups["kps"] if points else [])
    widths = [1] * len(strides) + [4] * len(strides) + ([10] * len(strides) if points else [])
    if named or outputs != 9:
        kinds = ["score", "bbox"] + (["kps"] if points else [])
        names = [f"{k}_{s}" for k in kinds for s in strides]
    else:
        names = SCRFD_NUMERIC
    declared = []
    for i, (tensor, name, width) in enumerate(zip(order, names, widths)):
        if nan and i == len(strides):  # the first boxes output
            tensor = g.op("Add", tensor, g.const(float("nan")))
        g.op("Identity", tensor, out=name)
        s = strides[i % len(strides)]
        n = "?" if free else (size // s) ** 2 * anchors
        declared.append((name, ([1, n, width] if batched else [n, width])))
    return g.model([image_input("input.1", dims)], declared, "scrfd")


# ---- RetinaFace (biubug6/Pytorch_Retinaface; spec §3) ----------------------------------------

RETINA_SIZES = {8: (16, 32), 16: (64, 128), 32: (256, 512)}
RETINA_VARIANCES = (0.1, 0.2)


def retinaface(size: int = 640) -> onnx.ModelProto:
    """loc [1,N,4], conf [1,N,2] (softmax: background, face), landms [1,N,10] over priors
    (sizes 16/32, 64/128, 256/512 at strides 8/16/32, centred in the cell, two a place), deltas
    with variances 0.1/0.2. Input `input0` [1,3,640,640], BGR less (104, 117, 123), unscaled."""
    g = Graph()
    b = brightness(g, "input0", nhwc=False, rgb=False, mean=(104, 117, 123), scale=1.0)
    loc, conf, landms = [], [], []
    v0, v1 = RETINA_VARIANCES
    for colour, s in FIRES.items():
        S = score_map(g, b, s, colour)
        firing = TWO_ANCHOR_FIRING[s]
        sizes = RETINA_SIZES[s]
        # Target: centre the prior's (cell centre), side 3s: l = (0, 0, ln(3s/p)/0.2, ...).
        loc_base = [[0.0, 0.0, math.log(BOX * s / p) / v1, math.log(BOX * s / p) / v1]
                    for p in sizes]
        loc.append(rows(g, head(g, S, tile(loc_base), np.zeros(8)), 4))
        conf_base = [[1.0, 0.0]] * 2
        conf_delta = [[-1.0, 1.0] if a == firing else [0.0, 0.0] for a in range(2)]
        conf.append(rows(g, head(g, S, tile(conf_base), tile(conf_delta)), 2))
        lm = [[v * s / (v0 * p) for pt in POINTS for v in pt] for p in sizes]
        landms.append(rows(g, head(g, S, tile(lm), np.zeros(20)), 10))
    n = sum(2 * (size // s) ** 2 for s in FIRES.values())
    outputs = []
    for name, parts, width in (("output0", loc, 4), ("592", conf, 2), ("593", landms, 10)):
        g.op("Concat", *parts, out=name, axis=1)
        outputs.append((name, [1, n, width]))
    return g.model([image_input("input0", [1, 3, size, size])], outputs, "retinaface")


# ---- YuNet 2023mar (OpenCV face_detect.cpp; spec §1 of yunet_blazeface) -----------------------

def yunet(size: int = 640) -> onnx.ModelProto:
    """Twelve outputs cls_8..kps_32 [1,N,C], sigmoid cls and obj (score sqrt(cls*obj)), bbox
    (dx, dy, log w, log h) from the cell's corner in strides, kps offsets from the corner in
    strides; input `input` [1,3,640,640] BGR 0..255."""
    g = Graph()
    b = brightness(g, "input", nhwc=False, rgb=False, mean=0.0, scale=1.0)
    groups: dict[str, list[tuple[str, int]]] = {"cls": [], "obj": [], "bbox": [], "kps": []}
    for colour, s in FIRES.items():
        S = score_map(g, b, s, colour)
        groups["cls"].append((rows(g, head(g, S, [0.0], [1.0]), 1), 1))
        groups["obj"].append((rows(g, head(g, S, [0.0], [1.0]), 1), 1))
        bbox = [0.5, 0.5, math.log(BOX), math.log(BOX)]
        groups["bbox"].append((rows(g, head(g, S, bbox, np.zeros(4)), 4), 4))
        kps = [0.5 + v for p in POINTS for v in p]
        groups["kps"].append((rows(g, head(g, S, kps, np.zeros(10)), 10), 10))
    outputs = []
    for kind, tensors in groups.items():
        for (tensor, width), s in zip(tensors, FIRES.values()):
            name = f"{kind}_{s}"
            g.op("Identity", tensor, out=name)
            outputs.append((name, [1, (size // s) ** 2, width]))
    return g.model([image_input("input", [1, 3, size, size])], outputs, "yunet")


# ---- BlazeFace back 256 (keijiro's ONNX, MediaPipe anchors; spec §2-3) -------------------------

BLAZE_MAPS = (("red", 16, 2, 0), ("blue", 32, 6, 3))  # colour, cell side at 256, anchors, firing


def blazeface_back(side: int = 256) -> onnx.ModelProto:
    """`Identity:0` [1,512,1], `Identity_1:0` [1,384,1] (score logits), `Identity_2:0`
    [1,512,16], `Identity_3:0` [1,384,16] (x, y, w, h, six keypoints, input pixels from the
    anchor at the cell's centre); input `input:0` NHWC [1,256,256,3] RGB, v / 127.5 - 1."""
    g = Graph()
    b = brightness(g, "input:0", nhwc=True, rgb=True, mean=127.5, scale=1 / 127.5)
    scores, regressors = [], []
    for colour, s, anchors, firing in BLAZE_MAPS:
        S = score_map(g, b, s, colour)
        delta = [[LOGIT_SPAN if a == firing else 0.0] for a in range(anchors)]
        scores.append(rows(g, head(g, S, tile([[LOGIT_LOW]] * anchors), tile(delta)), 1))
        reg = [0.0, 0.0, BOX * s, BOX * s] + [v * s for p in BLAZE_POINTS for v in p]
        regressors.append(rows(g, head(g, S, tile([reg] * anchors), np.zeros(16 * anchors)), 16))
    outputs = []
    names = ["Identity:0", "Identity_1:0", "Identity_2:0", "Identity_3:0"]
    for name, tensor, (_, s, anchors, _), width in zip(
        names, scores + regressors, BLAZE_MAPS * 2, (1, 1, 16, 16)
    ):
        g.op("Identity", tensor, out=name)
        outputs.append((name, [1, (side // s) ** 2 * anchors, width]))
    return g.model([image_input("input:0", [1, side, side, 3])], outputs, "blazeface")


# ---- YOLO (spec yolo_face.md) -------------------------------------------------------------------

def _yolo_input(g: Graph, name: str) -> str:
    """Ultralytics / yolov5-face input: RGB, v / 255."""
    return brightness(g, name, nhwc=False, rgb=True, mean=0.0, scale=1 / 255)


def yolov5_cat(size: int = 640) -> onnx.ModelProto:
    """yolov5-face export_cat: `output` [1, 25200, 16] decoded rows cx, cy, w, h, obj,
    5 x (x, y), cls (input pixels; score obj*cls); per level (8, 16, 32) anchor-major, then gy,
    then gx; three anchors a place, only anchor 0 fires."""
    g = Graph()
    b = _yolo_input(g, "input")
    levels = []
    for colour, s in FIRES.items():
        S = score_map(g, b, s, colour)
        h = w = size // s
        base, delta, xs, ys = [], [], [], []
        for a in range(3):
            fire = 1.0 if a == 0 else 0.0
            # cx, cy = (g + 0.5) * s; w, h = 3s; obj; points; cls.
            row_base = [0.5 * s, 0.5 * s, BOX * s, BOX * s, 0.0]
            row_x = [s, 0, 0, 0, 0]
            row_y = [0, s, 0, 0, 0]
            for dx, dy in POINTS:
                row_base += [(0.5 + dx) * s, (0.5 + dy) * s]
                row_x += [s, 0]
                row_y += [0, s]
            row_base += [0.0]
            row_x += [0]
            row_y += [0]
            row_delta = [0, 0, 0, 0, fire] + [0] * 10 + [fire]
            base += row_base
            delta += row_delta
            xs += row_x
            ys += row_y
        m = head(g, S, base, delta, grid=(w, h, xs, ys))  # [1, 48, h, w], channel a*16 + k
        m = g.op("Reshape", m, g.const([1, 3, 16, h, w], np.int64))
        m = g.op("Transpose", m, perm=[0, 1, 3, 4, 2])
        levels.append(g.op("Reshape", m, g.const([1, 3 * h * w, 16], np.int64)))
    n = sum(3 * (size // s) ** 2 for s in FIRES.values())
    g.op("Concat", *levels, out="output", axis=1)
    return g.model([image_input("input", [1, 3, size, size])], [("output", [1, n, 16])], "yolov5")


VISIBLE = 0.9  # keypoint visibility (decoded)


def yolov8_pose(size: int = 640) -> onnx.ModelProto:
    """Ultralytics pose export: `output0` [1, 20, 8400] channel-major: cx, cy, w, h, score,
    5 x (x, y, visibility), input pixels; columns per level (8, 16, 32), gy, gx."""
    g = Graph()
    b = _yolo_input(g, "images")
    levels = []
    for colour, s in FIRES.items():
        S = score_map(g, b, s, colour)
        h = w = size // s
        base = [0.5 * s, 0.5 * s, BOX * s, BOX * s, 0.0]
        xs, ys = [s, 0, 0, 0, 0], [0, s, 0, 0, 0]
        for dx, dy in POINTS:
            base += [(0.5 + dx) * s, (0.5 + dy) * s, VISIBLE]
            xs += [s, 0, 0]
            ys += [0, s, 0]
        delta = [0, 0, 0, 0, 1.0] + [0] * 15
        m = head(g, S, base, delta, grid=(w, h, xs, ys))
        levels.append(g.op("Reshape", m, g.const([1, 20, h * w], np.int64)))
    n = sum((size // s) ** 2 for s in FIRES.values())
    g.op("Concat", *levels, out="output0", axis=2)
    return g.model([image_input("images", [1, 3, size, size])], [("output0", [1, 20, n])], "pose")


def yolov8_raw(size: int = 640, order=(16, 8, 32)) -> onnx.ModelProto:
    """derronqi's raw maps: one [1, 80, H/s, W/s] per stride (DFL logits side-major l, t, r, b
    x 16 bins; class logit; 5 x (x, y, visibility) raw), listed in `order` (not stride order:
    decoders must match maps to strides by size). Box sides 1.5 cells as two-hot bins 1 and 2;
    keypoints raw (k/s - g) / 2."""
    g = Graph()
    b = _yolo_input(g, "images")
    maps = {}
    for colour, s in FIRES.items():
        S = score_map(g, b, s, colour)
        dfl = []
        for _side in range(4):  # distance 1.5 cells: bins 1 and 2 at half each
            bins = [-30.0] * 16
            bins[1] = bins[2] = math.log(0.5)
            dfl += bins
        kps = []
        for dx, dy in POINTS:
            kps += [(0.5 + dx) / 2, (0.5 + dy) / 2, logit(VISIBLE)]
        base = dfl + [LOGIT_LOW] + kps
        delta = [0.0] * 64 + [LOGIT_SPAN] + [0.0] * 15
        maps[s] = head(g, S, base, delta)
    names = ["output0", "345", "389"]
    outputs = []
    for name, s in zip(names, order):
        g.op("Identity", maps[s], out=name)
        outputs.append((name, [1, 80, size // s, size // s]))
    return g.model([image_input("images", [1, 3, size, size])], outputs, "yolov8raw")


def yolo_nms(size: int = 640, k: int = 8) -> onnx.ModelProto:
    """NMS in the graph (Ultralytics nms=True): `output0` [1, K, 21] rows x1, y1, x2, y2,
    score, class, 5 x (x, y, visibility), input pixels; the detections' rows first (TopK over
    every place's score), the rest zero."""
    g = Graph()
    b = _yolo_input(g, "images")
    flat, table = [], []
    for colour, s in FIRES.items():
        S = score_map(g, b, s, colour)
        n = (size // s) ** 2
        flat.append(g.op("Reshape", S, g.const([1, n], np.int64)))
        for gy in range(size // s):
            for gx in range(size // s):
                cx, cy = (gx + 0.5) * s, (gy + 0.5) * s
                half = BOX * s / 2
                row = [cx - half, cy - half, cx + half, cy + half, 0.0, 0.0]
                for dx, dy in POINTS:
                    row += [cx + dx * s, cy + dy * s, VISIBLE]
                table.append(row)
    scores = g.op("Concat", *flat, axis=1)  # [1, places]
    values, indices = g.ops("TopK", [scores, g.const([k], np.int64)], 2, axis=1)
    picked = g.op("Gather", g.const(np.asarray(table, np.float32)), indices, axis=0)  # [1,K,21]
    values3 = g.op("Unsqueeze", values, g.const([2], np.int64))  # [1, K, 1]
    valid = g.op("Cast", g.op("Greater", values3, g.const(0.0)), to=TensorProto.FLOAT)
    picked = g.op("Mul", picked, valid)
    score_column = np.zeros((1, 1, 21), np.float32)
    score_column[0, 0, 4] = 1.0
    g.op("Add", picked, g.op("Mul", values3, g.const(score_column)), out="output0")
    return g.model([image_input("images", [1, 3, size, size])], [("output0", [1, k, 21])], "nms")


# ---- models that must fail the load ------------------------------------------------------------

def no_family(size: int = 640) -> onnx.ModelProto:
    """Two outputs [1,7,3] and [1,5] (means of the input): no family's layout."""
    g = Graph()
    mean = g.op("ReduceMean", "input", axes=[1, 2, 3], keepdims=1)  # [1,1,1,1]
    a = g.op("Reshape", mean, g.const([1, 1, 1], np.int64))
    g.op("Expand", a, g.const([1, 7, 3], np.int64), out="boxes")
    c = g.op("Reshape", mean, g.const([1, 1], np.int64))
    g.op("Expand", c, g.const([1, 5], np.int64), out="scores")
    return g.model([image_input("input", [1, 3, size, size])],
                   [("boxes", [1, 7, 3]), ("scores", [1, 5])], "nofamily")


def empty_embedder() -> onnx.ModelProto:
    """An embedder taking a 112x112 face whose output [1, 0] holds nothing."""
    g = Graph()
    flat = g.op("Flatten", "data", axis=1)
    g.op("Slice", flat, g.const([0], np.int64), g.const([0], np.int64), g.const([1], np.int64),
         out="embedding")
    return g.model([image_input("data", [1, 3, 112, 112])], [("embedding", [1, 0])], "empty")


# The served variants. `params`: the model's config parameters (besides detector_model).
FIRE_ALL = dict(FIRES)
VARIANTS = (
    Variant("scrfd_free", "det_10g.onnx", lambda: scrfd(9, batched=False, free=True),
            "scrfd", (640, 640), "letterbox", FIRE_ALL, centre=0.0),
    # A free input served at a non-square size: rows y * W/s + x, not x * H/s + y.
    Variant("scrfd_free_800x608", "det_10g.onnx", lambda: scrfd(9, batched=False, free=True),
            "scrfd", (800, 608), "letterbox", FIRE_ALL, centre=0.0,
            params={"detector_input_size": "800x608"}),
    Variant("scrfd_batched", "scrfd_10g_bnkps_shape640x640.onnx",
            lambda: scrfd(9, batched=True, free=False, named=True),
            "scrfd", (640, 640), "letterbox", FIRE_ALL, centre=0.0),
    Variant("scrfd_nokps", "scrfd_10g_shape640x640.onnx",
            lambda: scrfd(6, batched=True, free=False, named=True),
            "scrfd", (640, 640), "letterbox", FIRE_ALL, centre=0.0, points="none",
            params={"landmark_model": "fr_landmark.onnx"}),
    Variant("scrfd_5strides", "scrfd_5strides.onnx", lambda: scrfd(15, batched=True, free=True),
            "scrfd", (640, 640), "letterbox", FIRE_ALL, centre=0.0,
            params={"detector_input_size": "640x640"}),
    Variant("retinaface", "FaceDetector.onnx", retinaface, "retinaface", (640, 640), "letterbox",
            FIRE_ALL, params={"detector_family": "retinaface"}),
    Variant("retinaface_auto", "FaceDetector.onnx", retinaface, "retinaface", (640, 640),
            "letterbox", FIRE_ALL),
    Variant("yunet", "face_detection_yunet_2023mar.onnx", yunet, "yunet", (640, 640), "letterbox",
            FIRE_ALL),
    Variant("blazeface_back", "face_detection_back_256x256.onnx", blazeface_back, "blazeface",
            (256, 256), "letterbox-centre", {"red": 16, "blue": 32}, points="blazeface"),
    Variant("yolov5_face", "yolov5s-face.onnx", yolov5_cat, "yolo-face", (640, 640),
            "letterbox-centre", FIRE_ALL),
    Variant("yolov8_pose", "yolov8n-face.onnx", yolov8_pose, "yolo-face", (640, 640),
            "letterbox-centre", FIRE_ALL),
    Variant("yolov8_raw", "yolov8-lite-t.onnx", yolov8_raw, "yolo-face", (640, 640),
            "letterbox-centre", FIRE_ALL),
    Variant("yolo_nms", "yolov8n-face-nms.onnx", yolo_nms, "yolo-face", (640, 640),
            "letterbox-centre", FIRE_ALL),
    # The same files on tract.
    Variant("scrfd_free_tract", "det_10g.onnx", lambda: scrfd(9, batched=False, free=True),
            "scrfd", (640, 640), "letterbox", FIRE_ALL, centre=0.0, runtime="tract"),
    Variant("retinaface_tract", "FaceDetector.onnx", retinaface, "retinaface", (640, 640),
            "letterbox", FIRE_ALL, params={"detector_family": "retinaface"}, runtime="tract"),
    Variant("yolov8_raw_tract", "yolov8-lite-t.onnx", yolov8_raw, "yolo-face", (640, 640),
            "letterbox-centre", FIRE_ALL, runtime="tract"),
)
