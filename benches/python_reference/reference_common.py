"""What the two Python reference models share: the gallery folder's layout, reading a request's
images, one response per request, and distances written as the Rust backend writes them.
scripts/bench.sh copies this file beside each model.py (the Python backend imports from there)."""

import math
import os

import numpy as np
import triton_python_backend_utils as pb_utils

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".webp", ".bmp")


def f32(x):
    """A float32 as JSON writes it: its shortest round-trip form (as the Rust backend's
    serde_json does), not float64 noise."""
    return float(str(np.float32(x)))


def round_half_away(x):
    """Rust's f32::round (half away from zero), as the backend rounds its boxes; not Python's
    banker's rounding."""
    return int(math.copysign(math.floor(abs(x) + 0.5), x))


def gallery_images(folder):
    """(name, path) of the gallery's images, as the backend reads the folder: name.jpg ->
    name, name/*.jpg -> name; hidden files skipped; sorted by path."""
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
    return sorted(images, key=lambda item: item[1])


def load_gallery(folder, embeddings_of):
    """(names, stacked embeddings) of the gallery's one-face images; `embeddings_of(path)`
    gives an image's face embeddings. Other images are skipped with a warning."""
    names, embeddings = [], []
    for name, path in gallery_images(folder):
        faces = embeddings_of(path)
        if len(faces) != 1:
            pb_utils.Logger.log_warn(
                f"gallery image {path} skipped: it has {len(faces)} faces, needs exactly one")
            continue
        names.append(name)
        embeddings.append(faces[0])
    return names, (np.stack(embeddings) if embeddings else np.zeros((0, 1), np.float32))


def request_images(request, decode, pixels_to_rgb):
    """The request's images (one per batch row): ENCODED rows through `decode(bytes)` (None:
    not an image), IMAGE rows through `pixels_to_rgb(array)`. ValueError for a bad request."""
    encoded = pb_utils.get_input_tensor_by_name(request, "ENCODED")
    pixels = pb_utils.get_input_tensor_by_name(request, "IMAGE")
    if pb_utils.get_input_tensor_by_name(request, "ENROLL") is not None:
        raise ValueError("ENROLL is not supported by this reference model")
    if (encoded is None) == (pixels is None):
        raise ValueError("send exactly one of IMAGE or ENCODED")
    if encoded is not None:
        out = []
        for i, data in enumerate(encoded.as_numpy().reshape(-1)):
            image = decode(data)
            if image is None:
                raise ValueError(f"ENCODED[{i}]: not a decodable image ({len(data)} bytes)")
            out.append(image)
        return out
    batch = pixels.as_numpy()
    if batch.ndim != 4 or batch.shape[-1] != 3:
        raise ValueError(f"IMAGE: expected [batch, height, width, 3], got {list(batch.shape)}")
    return [pixels_to_rgb(image) for image in batch]


def respond(requests, answer):
    """One response per request: RESULT with `answer(request)`'s JSON documents, or the
    ValueError it raised as that request's error."""
    responses = []
    for request in requests:
        try:
            result = np.array([[doc.encode()] for doc in answer(request)], dtype=object)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("RESULT", result)]))
        except ValueError as e:
            responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(e))))
    return responses
