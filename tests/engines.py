"""The two face engines the end-to-end suite runs against, and what differs between them.

Every engine-specific expectation of the suite lives in ENGINES; tests get the entry of the
engine they run against from the `engine` fixture (conftest.py), which parametrises them as
test_x[dlib] / test_x[onnx]. A test for one engine only says so with
`@pytest.mark.engines("dlib")`.

How a server is configured for an engine (model_repository/face for dlib, the sample config
model_repository/face_onnx for onnx, `engine: onnx` switched into other models such as
face_sequence) is in triton_server.py.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np


@dataclass(frozen=True)
class Engine:
    name: str
    # How `distance` is measured between two (returned) embeddings: "euclidean" or "cosine"
    # (1 - cosine of the L2-normalised embeddings).
    metric: str
    # The model's same-person threshold (the engine default; both sample configs set it).
    match_threshold: float
    # Distances measured on the sample photos (obama, obama2, obama3, biden): between two
    # photos of one person, and the least between two people (docs/engines.md, "ONNX engine").
    same_person: tuple[float, float]
    different_people: float
    # The detector's confidence in `score`: None where the engine's detector reports none
    # (the document then has "score": null), else the range it must lie in.
    score: tuple[float, float] | None
    # Length of `embedding` with return_embeddings: true.
    embedding_len: int
    # Side of `crop` (return_crops): the aligned face the embedder sees.
    crop_side: int

    @property
    def kind(self) -> str:
        """The `engine` parameter: onnx-tract is the onnx engine on another runtime."""
        return self.name.split("-")[0]

    def __str__(self) -> str:  # the test id: test_x[dlib]
        return self.name

    def with_threshold(self, match_threshold: float) -> "Engine":
        """This engine on a model configured with another match_threshold."""
        return replace(self, match_threshold=match_threshold)

    def distance(self, a, b) -> float:
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        if self.metric == "euclidean":
            return float(np.linalg.norm(a - b))
        return float(1.0 - a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


ENGINES = {
    engine.name: engine
    for engine in (
        # HOG detector (no score), 5-point landmarks, ResNet 128-d embedder.
        Engine("dlib", "euclidean", 0.6, (0.33, 0.43), 0.81, None, 128, 150),
        # UltraFace RFB-320 (score >= detector_threshold 0.7), 68-point landmark model, 512-d
        # embedder; the sample models of model_repository/face_onnx.
        Engine("onnx", "cosine", 0.5, (0.16, 0.24), 0.87, (0.7, 1.0), 512, 112),
        # The same models on the tract runtime (runtime: tract).
        Engine("onnx-tract", "cosine", 0.5, (0.16, 0.24), 0.87, (0.7, 1.0), 512, 112),
    )
}
DLIB = ENGINES["dlib"]
ONNX = ENGINES["onnx"]
