"""face_onnx as a Triton Python-backend model: the reference `make bench` measures
the Rust backend against. Same three ONNX models, same pipeline, same answers as
model_repository/face_onnx (src/engine/onnx.rs, src/pipeline/), written the way a
Python user would: onnxruntime, OpenCV and numpy.

  UltraFace detector on the RGB image resized to its input (320x240), (x-127)/128;
  boxes scoring >= detector_threshold, greedy NMS at nms_iou;
  68 points from the grey box crop resized to 64x64, /256; five of them mapped by
  a similarity transform onto the ArcFace 112x112 points; the warped chip, BGR,
  (x-127)/128, into the embedder; cosine distance to the gallery.

Parameter `profile` (config.pbtxt) picks how onnxruntime runs the models:
  expert       weights with |w| < 1e-10 set to 0 at load (the embedder has ~200,000
               denormal weights: same outputs, several times faster), ORT_ENABLE_ALL
               for all three models;
  as_deployed  the files as shipped; the embedder at ORT_ENABLE_EXTENDED (ENABLE_ALL
               is ~3x slower on its denormal weights), the others at ORT_ENABLE_ALL.
Both: 1 intra-op thread, sequential execution (Triton instances give parallelism).

Inputs: ENCODED (image bytes, decoded by OpenCV) or IMAGE (HxWx3 pixels,
`pixel_format`); ENROLL is not supported. Output RESULT: one JSON document per image.
"""
import json
import os
import sys

import cv2
import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils

# reference_common.py sits beside this file in the served repository (scripts/bench.sh).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_common import (  # noqa: E402
    f32, load_gallery, request_images, respond, round_half_away)

# ArcFace reference points in a 112x112 chip (src/pipeline/align.rs).
ARCFACE_112 = np.array([[38.2946, 51.6963], [73.5318, 51.5014], [56.0252, 71.7366],
                        [41.5493, 92.3655], [70.7299, 92.2041]], dtype=np.float32)
PROFILES = ("expert", "as_deployed")
# Weights smaller than this are denormal-range noise (profile expert).
TINY = 1e-10


def cleaned(path):
    """The model with every float initializer's |w| < TINY set to 0, serialized,
    and how many weights that changed."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(path)
    changed = 0
    for init in model.graph.initializer:
        w = numpy_helper.to_array(init)
        if w.dtype.kind != "f":
            continue
        tiny = (np.abs(w) < TINY) & (w != 0)
        if tiny.any():
            changed += int(tiny.sum())
            w = np.where(tiny, np.zeros((), w.dtype), w)
            init.CopyFrom(numpy_helper.from_array(w, init.name))
    return model.SerializeToString(), changed


def session(path, level, clean):
    options = ort.SessionOptions()
    options.graph_optimization_level = level
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    source, changed = cleaned(path) if clean else (path, 0)
    sess = ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
    return sess, changed


def similarity(src, dst):
    """Least-squares similarity transform src -> dst (Umeyama, closed form in 2-D),
    as a 2x3 matrix; None for degenerate points."""
    src = src.astype(np.float64)
    dst = dst.astype(np.float64)
    s = src - src.mean(axis=0)
    d = dst - dst.mean(axis=0)
    var = (s * s).sum()
    if not np.isfinite(var) or var < 1e-4 * len(src):
        return None
    a = (s * d).sum() / var
    b = (s[:, 0] * d[:, 1] - s[:, 1] * d[:, 0]).sum() / var
    mx, my = src.mean(axis=0)
    nx, ny = dst.mean(axis=0)
    return np.array([[a, -b, nx - (a * mx - b * my)], [b, a, ny - (b * mx + a * my)]])


def nms(found, max_iou):
    """Greedy non-maximum suppression over (box, score) sorted by score."""
    kept = []
    for box, score in found:
        if all(iou(k, box) <= max_iou for k, _ in kept):
            kept.append((box, score))
    return kept


def iou(a, b):
    w = max(min(a[2], b[2]) - max(a[0], b[0]), 0.0)
    h = max(min(a[3], b[3]) - max(a[1], b[1]), 0.0)
    inter = w * h
    area = lambda r: max(r[2] - r[0], 0.0) * max(r[3] - r[1], 0.0)  # noqa: E731
    union = area(a) + area(b) - inter
    return inter / union if union > 0 else 0.0


def to_nchw(images, rgb, mean=127.0, scale=1.0 / 128.0):
    """HxWx3 RGB uint8 images of one size -> NCHW float32, channels RGB or BGR."""
    batch = np.stack(images).astype(np.float32)
    if not rgb:
        batch = batch[..., ::-1]
    return np.ascontiguousarray(((batch - np.float32(mean)) * np.float32(scale)).transpose(0, 3, 1, 2))


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        model_dir = args["model_repository"]  # this model's folder
        version_dir = os.path.join(model_dir, args["model_version"])

        def param(key, default=None):
            value = params.get(key, default)
            if value is None:
                raise pb_utils.TritonModelException(f"parameter {key} is required")
            return value

        self.profile = param("profile", "expert")
        if self.profile not in PROFILES:
            raise pb_utils.TritonModelException(
                f"parameter profile: {self.profile!r}, expected one of {', '.join(PROFILES)}")
        self.threshold = float(param("detector_threshold", "0.7"))
        self.nms_iou = float(param("nms_iou", "0.3"))
        self.match_threshold = float(param("match_threshold", "0.5"))
        self.max_faces = int(param("max_faces_per_image", "64"))
        self.pixel_format = param("pixel_format", "RGB").upper()

        expert = self.profile == "expert"
        full = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        embedder_level = full if expert else ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        load = lambda key, level: session(  # noqa: E731
            os.path.join(version_dir, param(key)), level, clean=expert)
        self.detector, c1 = load("detector_model", full)
        self.landmarker, c2 = load("landmark_model", full)
        self.embedder, c3 = load("embedder_model", embedder_level)
        d = self.detector.get_inputs()[0].shape
        self.det_size = (d[3], d[2])  # (w, h)
        lm = self.landmarker.get_inputs()[0].shape
        self.lm_size = (lm[3], lm[2])
        e = self.embedder.get_inputs()[0].shape
        self.emb_size = (e[3], e[2])
        # A symbolic batch dimension: all faces of an image in one run.
        self.emb_batch_free = not isinstance(e[0], int)
        reference = ARCFACE_112 * np.float32([self.emb_size[0] / 112.0, self.emb_size[1] / 112.0])
        self.reference = reference.astype(np.float32)

        self.gallery_names, self.gallery = load_gallery(
            os.path.join(model_dir, param("gallery_dir", "gallery")), self.gallery_embeddings)
        pb_utils.Logger.log_info(
            f"{config['name']}: profile {self.profile}, onnxruntime {ort.__version__}, "
            f"denormal weights zeroed: {c1 + c2 + c3}, gallery: {len(self.gallery_names)} faces")

    def gallery_embeddings(self, path):
        with open(path, "rb") as f:
            rgb = self.decode(f.read())
        return [face["embedding"] for face in self.analyze(rgb)] if rgb is not None else []

    @staticmethod
    def decode(data):
        bgr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
        return None if bgr is None else cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)

    def detect(self, rgb):
        h, w = rgb.shape[:2]
        small = cv2.resize(rgb, self.det_size, interpolation=cv2.INTER_LINEAR)
        scores, boxes = self.detector.run(None, {self.detector.get_inputs()[0].name:
                                                 to_nchw([small], rgb=True)})[:2]
        scores = scores.reshape(-1, 2)[:, 1]
        boxes = boxes.reshape(-1, 4)
        keep = np.nonzero(scores >= np.float32(self.threshold))[0]
        scale = np.float32([w, h, w, h])
        found = [((boxes[i] * scale).tolist(), float(scores[i])) for i in keep]
        found.sort(key=lambda item: -item[1])
        return nms(found, self.nms_iou)

    def five_points(self, grey, box):
        """68 points from the landmark model on the grey crop, reduced to five."""
        ih, iw = grey.shape
        left = np.float32(min(max(box[0], 0.0), iw - 1.0))
        top = np.float32(min(max(box[1], 0.0), ih - 1.0))
        right = np.float32(min(max(box[2], left + 1.0), iw))
        bottom = np.float32(min(max(box[3], top + 1.0), ih))
        x, y = int(left), int(top)
        cw, ch = int(right - left), int(bottom - top)
        crop = cv2.resize(grey[y:y + ch, x:x + cw], self.lm_size, interpolation=cv2.INTER_LINEAR)
        data = (crop.astype(np.float32) / np.float32(256.0))[np.newaxis, np.newaxis]
        values = self.landmarker.run(None, {self.landmarker.get_inputs()[0].name: data})[0]
        p = values.reshape(68, 2) * np.float32([cw, ch]) + np.float32([x, y])
        return np.stack([
            p[[37, 38, 40, 41]].mean(axis=0), p[[43, 44, 46, 47]].mean(axis=0), p[30],
            p[[48, 60]].mean(axis=0), p[[54, 64]].mean(axis=0),
        ]).astype(np.float32)

    def embed(self, chips):
        name = self.embedder.get_inputs()[0].name
        batches = [chips] if self.emb_batch_free else [[c] for c in chips]
        out = np.concatenate([self.embedder.run(None, {name: to_nchw(b, rgb=False)})[0]
                              for b in batches]).reshape(len(chips), -1)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return np.where(norms > 0, out / np.where(norms > 0, norms, 1), out)

    def analyze(self, rgb):
        """Faces of one RGB image: box, score, five points, embedding."""
        found = self.detect(rgb)
        if len(found) > self.max_faces:
            raise ValueError(f"found {len(found)} faces, more than max_faces_per_image = "
                             f"{self.max_faces}")
        if not found:
            return []
        grey = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)
        faces, chips = [], []
        for box, score in found:
            five = self.five_points(grey, box)
            m = similarity(five, self.reference)
            if m is None:
                raise ValueError("landmarks are degenerate (all at one point); cannot align the face")
            chips.append(cv2.warpAffine(rgb, m, self.emb_size, flags=cv2.INTER_LINEAR,
                                        borderMode=cv2.BORDER_CONSTANT, borderValue=0))
            faces.append({"box": box, "score": score, "landmarks": five})
        for face, embedding in zip(faces, self.embed(chips)):
            face["embedding"] = embedding
        return faces

    def document(self, rgb):
        faces = []
        for face in self.analyze(rgb):
            name, distance = "unknown", None
            if self.gallery_names:
                e = face["embedding"]
                cos = self.gallery @ e / (np.linalg.norm(self.gallery, axis=1) * np.linalg.norm(e))
                d = np.maximum(np.float32(1.0) - cos.astype(np.float32), np.float32(0.0))
                best = int(np.argmin(d))
                distance = f32(d[best])
                if d[best] <= np.float32(self.match_threshold):
                    name = self.gallery_names[best]
            left, top, right, bottom = face["box"]
            faces.append({
                "box": {"left": round_half_away(left), "top": round_half_away(top),
                        "right": round_half_away(right), "bottom": round_half_away(bottom)},
                "score": f32(face["score"]),
                "landmarks": [[f32(x), f32(y)] for x, y in face["landmarks"]],
                "name": name,
                "distance": distance,
            })
        h, w = rgb.shape[:2]
        return json.dumps({"image": {"width": w, "height": h}, "faces": faces},
                          separators=(",", ":"))

    def images(self, request):
        """The request's images as RGB arrays (one per batch row)."""
        return request_images(request, self.decode, self.pixels_to_rgb)

    def pixels_to_rgb(self, image):
        return image if self.pixel_format == "RGB" else np.ascontiguousarray(image[..., ::-1])

    def execute(self, requests):
        return respond(requests, lambda r: [self.document(rgb) for rgb in self.images(r)])
