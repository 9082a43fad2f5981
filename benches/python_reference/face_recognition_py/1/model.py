"""The `face` model (dlib engine) as most Python users would serve it: the
`face_recognition` PyPI library in a Triton Python-backend model. The reference
`make bench` measures the Rust backend's dlib engine against.

  face_locations(image, number_of_times_to_upsample=`upsample`, model="hog"),
  face_encodings(image, those locations, num_jitters=1, model="small"),
  face_distance to the gallery; a name within `match_threshold` (its `tolerance`).

Same gallery folder and JSON shape as `face` (image, faces with box, name,
distance; score null). No landmarks: face_recognition's encoding call does not
return the points it used. Inputs: ENCODED (decoded with
face_recognition.load_image_file, i.e. PIL) or IMAGE (HxWx3 RGB pixels).
"""
import io
import json
import os
import sys
import types

# dlib links OpenBLAS, which reads this once, when dlib's library is loaded: one
# thread per model instance, as the Rust backend (Triton instances give parallelism).
os.environ["OPENBLAS_NUM_THREADS"] = "1"

import numpy as np  # noqa: E402
import triton_python_backend_utils as pb_utils  # noqa: E402

# reference_common.py sits beside this file in the served repository (scripts/bench.sh).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_common import f32, load_gallery, request_images, respond  # noqa: E402

def weights_module(folder):
    """Stands in for the `face_recognition_models` package (100 MB of weights
    that assets/dlib/ already holds: face_recognition is installed --no-deps).
    face_recognition loads every model at import; the 68-point predictor
    (not in assets/dlib/) is never used with model="small", so the 5-point file
    stands in for it too."""
    path = lambda name: os.path.join(folder, name)  # noqa: E731
    five = path("shape_predictor_5_face_landmarks.dat")
    module = types.ModuleType("face_recognition_models")
    module.pose_predictor_model_location = lambda: five
    module.pose_predictor_five_point_model_location = lambda: five
    module.face_recognition_model_location = lambda: path("dlib_face_recognition_resnet_model_v1.dat")
    module.cnn_face_detector_model_location = lambda: path("mmod_human_face_detector.dat")
    for location in (five, module.face_recognition_model_location(),
                     module.cnn_face_detector_model_location()):
        if not os.path.isfile(location):
            raise pb_utils.TritonModelException(f"weights_dir: {location} not found")
    return module


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        model_dir = args["model_repository"]  # this model's folder
        weights = os.path.join(model_dir, params.get("weights_dir", "weights"))
        sys.modules.setdefault("face_recognition_models", weights_module(weights))
        import dlib
        import face_recognition

        self.fr = face_recognition
        self.upsample = int(params.get("upsample", "0"))
        self.tolerance = float(params.get("match_threshold", "0.6"))
        self.names, self.gallery = load_gallery(
            os.path.join(model_dir, params.get("gallery_dir", "gallery")), self.gallery_embeddings)
        pb_utils.Logger.log_info(
            f"{config['name']}: face_recognition with dlib {dlib.__version__}, upsample "
            f"{self.upsample}, tolerance {self.tolerance}, gallery: {len(self.names)} faces, "
            f"OPENBLAS_NUM_THREADS={os.environ['OPENBLAS_NUM_THREADS']}")

    def gallery_embeddings(self, path):
        image = self.fr.load_image_file(path)
        locations = self.fr.face_locations(image, self.upsample, "hog")
        return self.fr.face_encodings(image, locations, 1, "small")

    def document(self, image):
        locations = self.fr.face_locations(image, self.upsample, "hog")
        encodings = self.fr.face_encodings(image, locations, 1, "small")
        faces = []
        for (top, right, bottom, left), encoding in zip(locations, encodings):
            name, distance = "unknown", None
            if self.names:
                distances = self.fr.face_distance(self.gallery, encoding)
                best = int(np.argmin(distances))
                distance = f32(distances[best])
                if distances[best] <= self.tolerance:
                    name = self.names[best]
            faces.append({"box": {"left": left, "top": top, "right": right, "bottom": bottom},
                          "score": None, "name": name, "distance": distance})
        height, width = image.shape[:2]
        return json.dumps({"image": {"width": width, "height": height}, "faces": faces},
                          separators=(",", ":"))

    def decode(self, data):
        try:
            return self.fr.load_image_file(io.BytesIO(data))
        except Exception:  # PIL's errors have no common base class
            return None

    def execute(self, requests):
        def answer(request):
            images = request_images(request, self.decode, np.ascontiguousarray)
            return [self.document(image) for image in images]
        return respond(requests, answer)
