"""Model hygiene at load (src/engine/onnx/hygiene.rs) changes speed, not answers: the ONNX engine
with its defaults (tiny weights zeroed, PRelu rewritten on onnxruntime, denormals flushed) and the
same models untouched (all three parameters false) give the same faces, names and distances
(within 1e-4) on real photos, on both runtimes; the load log says what the cleaning did, and on
tract which ops run on the engine's own kernels (src/engine/onnx/tract_ops/)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from face_client import infer_encoded

UNTOUCHED = {"zero_tiny_weights": "false", "rewrite_prelu": "false", "flush_denormals": "false"}
# Both servers answer with the embeddings, to compare them too.
# Distances unrounded: compared within TOLERANCE.
EMBEDDINGS = {"return_embeddings": "true", "distance_decimals": "6"}
PHOTOS = ("obama2.jpg", "obama3.jpg", "biden.jpg", "noface.jpg", "32bit.png")
TOLERANCE = 1e-4
EMBEDDING_TOLERANCE = 1e-6
pytestmark = pytest.mark.engines("onnx", "onnx-tract")


@pytest.fixture(scope="module")
def cleaned(start_module_server):
    return start_module_server(params=EMBEDDINGS)


@pytest.fixture(scope="module")
def untouched(start_module_server):
    return start_module_server(params={**UNTOUCHED, **EMBEDDINGS})


def hygiene_line(server) -> str:
    found = re.search(r"model hygiene[^\n]*", server.log_text())
    assert found, f"no model hygiene in the load log:\n{server.log_tail()}"
    return found.group(0)


def test_load_log_says_what_was_cleaned(engine, cleaned, untouched):
    line = hygiene_line(cleaned)
    counts = dict(
        (role, (int(zeroed), int(prelu), int(as_conv)))
        for role, zeroed, prelu, as_conv in re.findall(
            r"(detector|landmarks|embedder): (\d+) tiny weights zeroed, (\d+) PRelu rewritten "
            r"\((\d+) as depthwise convolutions\)",
            line,
        )
    )
    assert set(counts) == {"detector", "landmarks", "embedder"}, line
    # Measured on the sample models: the embedder holds ~200,000 denormal weights and PRelus.
    zeroed, prelu, as_conv = counts["embedder"]
    assert zeroed > 100_000, line
    if engine.name == "onnx":
        # Each of its PRelus follows a Conv with a per-channel slope: on onnxruntime (CPU)
        # all become convolutions.
        assert prelu > 0 and as_conv == prelu, line
    else:
        # tract keeps them PRelu and runs them on the engine's own one-pass kernel, next to
        # its own depthwise convolutions.
        assert prelu == 0 and as_conv == 0, line
        kernels = own_kernels(cleaned)
        embedder, detector = kernels["embedder"], kernels["detector"]
        assert embedder["PRelu"] >= 30 and detector["depthwise"] > 0, kernels
        # Convolutions of one group run on the engine's own matrix product where the CPU has
        # AVX2 and FMA. The sample embedder has 32 1x1 ones: all but the last (one pixel)
        # are ours; its first layer (3x3, stride 2) goes through im2col.
        ours = (31, 1) if has_avx2_fma() else (0, 0)
        assert (embedder["pointwise"], embedder["im2col"]) == ours, kernels
        # The detector's class scores: one softmax over rows of two.
        assert detector["softmax"] == 1, kernels
        assert own_kernels(untouched) == kernels, "the untouched models run on other kernels"
    assert counts["landmarks"][0] > 0, line
    assert hygiene_line(untouched).startswith("model hygiene off;"), hygiene_line(untouched)


def has_avx2_fma() -> bool:
    flags = re.search(r"^flags\s*:(.*)$", Path("/proc/cpuinfo").read_text(), re.M)
    return bool(flags) and {"avx2", "fma"} <= set(flags.group(1).split())


KERNELS = ("depthwise", "pointwise", "im2col", "PRelu", "softmax")


def own_kernels(server) -> dict[str, dict[str, int]]:
    """How many ops of each kind (KERNELS) run on the engine's own tract kernels, per model."""
    found = re.search(r"on the engine's own kernels in tract: ([^\n]*)", server.log_text())
    assert found, f"no own kernels in tract in the load log:\n{server.log_tail()}"
    return {
        role: dict(zip(KERNELS, map(int, counts)))
        for role, *counts in re.findall(
            r"(detector|landmarks|embedder): (\d+) depthwise convolutions, "
            r"(\d+) pointwise convolutions, (\d+) im2col convolutions, (\d+) PRelu, "
            r"(\d+) softmax",
            found.group(1),
        )
    }


@pytest.mark.parametrize("photo", PHOTOS)
def test_same_answers_with_and_without_hygiene(cleaned, untouched, photos, photo):
    [a] = infer_encoded(cleaned.http(), [photos.bytes(photo)])
    [b] = infer_encoded(untouched.http(), [photos.bytes(photo)])
    assert len(a["faces"]) == len(b["faces"]), (a, b)
    for fa, fb in zip(a["faces"], b["faces"]):
        assert fa["name"] == fb["name"], (fa, fb)
        assert abs(fa["distance"] - fb["distance"]) <= TOLERANCE, (fa, fb)
        for side in ("left", "top", "right", "bottom"):
            assert abs(fa["box"][side] - fb["box"][side]) <= 1, (fa["box"], fb["box"])
        # The embeddings themselves (L2-normalised): the PRelu rewrite on onnxruntime is within
        # one rounding of the exact PRelu per layer; zeroing and flushing change nothing.
        ea, eb = fa["embedding"], fb["embedding"]
        assert len(ea) == len(eb) == 512
        worst = max(abs(x - y) for x, y in zip(ea, eb))
        assert worst <= EMBEDDING_TOLERANCE, f"{photo}: embeddings differ by up to {worst:.3g}"
