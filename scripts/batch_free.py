#!/usr/bin/env python3
"""Make an ONNX model's batch dimension free, and prove it answers as the original.

    python scripts/batch_free.py FIXED.onnx OUT.onnx [--photos DIR]

The sample models (scripts/assets.tsv) were exported with a batch of 1: their input is
[1, C, H, W] and the embedder flattens with Reshape(x, [1, -1]). onnxruntime then runs them
one image at a time, which leaves a GPU waiting on kernel launches. This writes a copy whose
input and outputs have a symbolic first dimension `batch` and whose constant Reshape shapes
keep the batch instead of fixing it (a leading 1 becomes 0, ONNX's "copy this dimension").
Nothing else changes: the weights and every other node are the original's.

Then the check, on the CPU with onnxruntime: every photo of DIR (default assets/photos) made
into an input of the model's size (RGB or grey, resized, (x - 127) / 128) goes through the
original one at a time and through the copy, one at a time and all together as one batch;
each output must agree within TOLERANCE. A model the rewrite cannot free (a batch fixed
somewhere this does not look) fails the check, and nothing is written.

setup.sh runs it for the three sample models (`derived` assets); the engine batches a model
whose first input dimension is symbolic and runs any other one item at a time.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper
from PIL import Image

BATCH = "batch"
# Largest difference allowed between the copy's outputs and the original's. The same
# kernels run either way; a batch only changes how onnxruntime tiles the work.
TOLERANCE = 1e-4


def free_batch(model: onnx.ModelProto) -> list[str]:
    """Rewrite `model` in place; what was changed, in words."""
    graph = model.graph
    if len(graph.input) != 1:
        raise SystemExit(f"expected one input, found {len(graph.input)}")
    changes = []
    for value in [graph.input[0], *graph.output]:
        dims = value.type.tensor_type.shape.dim
        if not dims:
            raise SystemExit(f"{value.name}: no shape")
        first = dims[0]
        if first.HasField("dim_param"):
            continue
        if first.dim_value != 1:
            raise SystemExit(f"{value.name}: first dimension {first.dim_value}, expected 1")
        first.dim_param = BATCH
        changes.append(f"{value.name}[0] -> {BATCH}")
    # Intermediate shapes recorded at export time would pin the batch again.
    if len(graph.value_info):
        changes.append(f"{len(graph.value_info)} recorded intermediate shapes dropped")
        del graph.value_info[:]
    changes += _free_reshapes(graph)
    return changes


def _free_reshapes(graph: onnx.GraphProto) -> list[str]:
    """Reshapes to a constant shape [1, ...] keep the batch instead: [0, ...]."""
    initializers = {i.name: i for i in graph.initializer}
    constants = {
        n.output[0]: n for n in graph.node
        if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value"
    }
    changes = []
    for node in graph.node:
        if node.op_type != "Reshape":
            continue
        name = node.input[1]
        if name in initializers:
            shape = numpy_helper.to_array(initializers[name])
        elif name in constants:
            shape = numpy_helper.to_array(constants[name].attribute[0].t)
        else:
            continue  # computed from the input's own Shape: already follows the batch
        if shape.ndim != 1 or len(shape) < 2 or shape[0] != 1:
            continue
        freed = shape.copy()
        freed[0] = 0
        # A new constant of its own: another node may share the old one.
        new_name = f"{name}__batch_free"
        graph.initializer.append(numpy_helper.from_array(freed, new_name))
        node.input[1] = new_name
        changes.append(f"Reshape {node.name or node.output[0]}: {shape.tolist()} -> {freed.tolist()}")
    used = {name for node in graph.node for name in node.input}
    unused = [i for i in graph.initializer if i.name not in used]
    for initializer in unused:
        graph.initializer.remove(initializer)
    return changes


def photo_inputs(photos: Path, shape: list[int]) -> np.ndarray:
    """Every photo of `photos` as one input of `shape` ([1, C, H, W]), stacked."""
    _, channels, height, width = shape
    files = sorted(p for p in photos.iterdir() if p.suffix.lower() in (".jpg", ".png"))
    if len(files) < 2:
        raise SystemExit(f"{photos}: need at least two photos to check a batch")
    mode = {1: "L", 3: "RGB"}.get(channels)
    if mode is None:
        raise SystemExit(f"input has {channels} channels; the check knows 1 and 3")
    images = []
    for path in files:
        image = Image.open(path).convert(mode).resize((width, height), Image.BILINEAR)
        pixels = np.asarray(image, dtype=np.float32).reshape(height, width, channels)
        images.append(((pixels - 127.0) / 128.0).transpose(2, 0, 1))
    return np.stack(images)


def session(model: onnx.ModelProto) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def check(fixed: onnx.ModelProto, free: onnx.ModelProto, photos: Path) -> tuple[int, float]:
    """How many photos, and the largest difference between the two models' outputs on them."""
    shape = [d.dim_value for d in fixed.graph.input[0].type.tensor_type.shape.dim]
    inputs = photo_inputs(photos, shape)
    name = fixed.graph.input[0].name
    before, after = session(fixed), session(free)
    one_by_one = [before.run(None, {name: x[None]}) for x in inputs]
    alone = [after.run(None, {name: x[None]}) for x in inputs]
    together = after.run(None, {name: inputs})
    worst = 0.0
    for i, expected in enumerate(one_by_one):
        for k, want in enumerate(expected):
            for got in (alone[i][k], together[k][i:i + 1]):
                if got.shape != want.shape:
                    raise SystemExit(f"output {k} of photo {i}: shape {got.shape}, expected {want.shape}")
                worst = max(worst, float(np.max(np.abs(got - want))))
    if worst > TOLERANCE:
        raise SystemExit(f"the batch-free copy differs from the original by {worst:.3g} "
                         f"(more than {TOLERANCE})")
    return len(inputs), worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("fixed", type=Path, help="the model with a fixed batch of 1")
    parser.add_argument("out", type=Path, help="where the batch-free copy goes")
    root = Path(__file__).resolve().parent.parent
    parser.add_argument("--photos", type=Path, default=root / "assets" / "photos")
    args = parser.parse_args()

    fixed = onnx.load(args.fixed)
    free = onnx.ModelProto()
    free.CopyFrom(fixed)
    changes = free_batch(free)
    onnx.checker.check_model(free)
    count, worst = check(fixed, free, args.photos)
    tmp = args.out.with_name(args.out.name + ".part")
    onnx.save(free, tmp)
    os.replace(tmp, args.out)
    print(f"{args.fixed.name}: batch free ({'; '.join(changes) or 'already free'}); "
          f"{count} photos one by one and as one batch within {worst:.2g} of the original")


if __name__ == "__main__":
    sys.exit(main())
