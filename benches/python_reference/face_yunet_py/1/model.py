"""face_onnx_yunet as a Triton Python-backend model written the way an OpenCV user would: the
anchor `make bench` measures the Rust backend against (issue 83). OpenCV's own API on the same
two files: cv2.FaceDetectorYN at each image's own size (setInputSize(w, h), as OpenCV's
samples do), cv2.FaceRecognizerSF's alignCrop and feature per face, the features L2-normalised
and matched with numpy (distance 1 - cosine, as the backend). One OpenCV thread per instance:
Triton's instances give the parallelism.

Inputs: ENCODED (image bytes, decoded by OpenCV) or IMAGE (HxWx3 RGB pixels); ENROLL is not
supported. Output RESULT: one JSON document per image, the backend's shape.
"""
import json
import os
import sys

import cv2
import numpy as np
import triton_python_backend_utils as pb_utils

# reference_common.py sits beside this file in the served repository (scripts/bench.sh).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_common import (  # noqa: E402
    f32, load_gallery, request_images, respond, round_half_away)


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        model_dir = args["model_repository"]
        version_dir = os.path.join(model_dir, args["model_version"])
        cv2.setNumThreads(1)
        self.detector = cv2.FaceDetectorYN.create(
            os.path.join(version_dir, params["detector_model"]), "", (320, 320),
            float(params.get("detector_threshold", "0.9")), float(params.get("nms_iou", "0.3")),
            5000)
        self.recognizer = cv2.FaceRecognizerSF.create(
            os.path.join(version_dir, params["embedder_model"]), "")
        self.match_threshold = np.float32(params.get("match_threshold", "0.637"))
        self.gallery_names, self.gallery = load_gallery(
            os.path.join(model_dir, params.get("gallery_dir", "gallery")), self.gallery_embeddings)
        pb_utils.Logger.log_info(f"{config['name']}: OpenCV {cv2.__version__}, gallery: "
                                 f"{len(self.gallery_names)} faces")

    def gallery_embeddings(self, path):
        bgr = cv2.imread(path, cv2.IMREAD_COLOR)
        return [feature for _, feature in self.analyze(bgr)] if bgr is not None else []

    def analyze(self, bgr):
        """(YuNet's row, unit SFace feature) per face of one BGR image."""
        h, w = bgr.shape[:2]
        self.detector.setInputSize((w, h))
        _, found = self.detector.detect(bgr)
        faces = []
        for row in [] if found is None else found:
            feature = self.recognizer.feature(self.recognizer.alignCrop(bgr, row)).ravel()
            faces.append((row, feature / max(np.linalg.norm(feature), 1e-12)))
        return faces

    def document(self, bgr):
        faces = []
        for row, feature in self.analyze(bgr):
            name, distance = "unknown", None
            if self.gallery_names:
                d = np.maximum(np.float32(1.0) - self.gallery @ feature, np.float32(0.0))
                best = int(np.argmin(d))
                distance = f32(d[best])
                if d[best] <= self.match_threshold:
                    name = self.gallery_names[best]
            x, y, bw, bh = (float(v) for v in row[:4])
            faces.append({
                "box": {"left": round_half_away(x), "top": round_half_away(y),
                        "right": round_half_away(x + bw), "bottom": round_half_away(y + bh)},
                "score": f32(row[14]),
                "landmarks": [[f32(px), f32(py)] for px, py in row[4:14].reshape(5, 2)],
                "name": name,
                "distance": distance,
            })
        h, w = bgr.shape[:2]
        return json.dumps({"image": {"width": w, "height": h}, "faces": faces},
                          separators=(",", ":"))

    @staticmethod
    def decode(data):
        return cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)

    @staticmethod
    def pixels_to_bgr(rgb):
        return np.ascontiguousarray(rgb[..., ::-1])

    def execute(self, requests):
        return respond(requests, lambda r: [self.document(bgr) for bgr in
                                            request_images(r, self.decode, self.pixels_to_bgr)])
