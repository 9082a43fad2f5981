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

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".webp", ".bmp")


def f32(x):
    """A distance as the Rust backend writes it (f32, shortest form)."""
    return float(str(np.float32(x)))


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
        self.names, self.gallery = self.load_gallery(
            os.path.join(model_dir, params.get("gallery_dir", "gallery")))
        pb_utils.Logger.log_info(
            f"{config['name']}: face_recognition with dlib {dlib.__version__}, upsample "
            f"{self.upsample}, tolerance {self.tolerance}, gallery: {len(self.names)} faces, "
            f"OPENBLAS_NUM_THREADS={os.environ['OPENBLAS_NUM_THREADS']}")

    def load_gallery(self, folder):
        """name.jpg -> name, name/*.jpg -> name; images with one face each."""
        images = []
        if os.path.isdir(folder):
            for entry in sorted(os.listdir(folder)):
                path = os.path.join(folder, entry)
                if entry.startswith("."):
                    continue
                if os.path.isdir(path):
                    images += [(entry, os.path.join(path, f)) for f in os.listdir(path)
                               if not f.startswith(".") and f.lower().endswith(IMAGE_EXTENSIONS)]
                elif entry.lower().endswith(IMAGE_EXTENSIONS):
                    images.append((os.path.splitext(entry)[0], path))
        images.sort(key=lambda item: item[1])
        names, encodings = [], []
        for name, path in images:
            image = self.fr.load_image_file(path)
            locations = self.fr.face_locations(image, self.upsample, "hog")
            if len(locations) != 1:
                pb_utils.Logger.log_warn(
                    f"gallery image {path} skipped: it has {len(locations)} faces, needs exactly one")
                continue
            names.append(name)
            encodings.append(self.fr.face_encodings(image, locations, 1, "small")[0])
        return names, np.array(encodings)

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

    def images(self, request):
        encoded = pb_utils.get_input_tensor_by_name(request, "ENCODED")
        pixels = pb_utils.get_input_tensor_by_name(request, "IMAGE")
        if (encoded is None) == (pixels is None):
            raise ValueError("send exactly one of IMAGE or ENCODED")
        if encoded is not None:
            out = []
            for i, data in enumerate(encoded.as_numpy().reshape(-1)):
                try:
                    out.append(self.fr.load_image_file(io.BytesIO(data)))
                except Exception as e:  # PIL's errors have no common base class
                    raise ValueError(f"ENCODED[{i}]: cannot decode image: {e}") from None
            return out
        batch = pixels.as_numpy()
        if batch.ndim != 4 or batch.shape[-1] != 3:
            raise ValueError(f"IMAGE: expected [batch, height, width, 3], got {list(batch.shape)}")
        return [np.ascontiguousarray(image) for image in batch]

    def execute(self, requests):
        responses = []
        for request in requests:
            try:
                docs = [self.document(image) for image in self.images(request)]
                result = np.array([[d.encode()] for d in docs], dtype=object)
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("RESULT", result)]))
            except ValueError as e:
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(e))))
        return responses
