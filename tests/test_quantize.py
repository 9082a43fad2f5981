"""int8 (scripts/quantize.py, `model_precision`, face_onnx_int8), through the real server:

- dlib's ResNet as ONNX (scripts/models.sh: scripts/dlib_onnx.py over dlib's own net_to_xml) gives
  dlib's descriptors on dlib's aligned faces;
- the int8 copies scripts/models.sh made for face_onnx_int8 pass their check, and a quantization
  that fails its check writes nothing and says which figure failed;
- face_onnx_int8 names the photos as its float twin face_onnx_resnet does, in single requests,
  batches and a sequence, and is another embedder to the gallery (faces enrolled with the float
  models are kept, not matched)."""

from __future__ import annotations

import base64
import io
import subprocess
import sys

import numpy as np
import onnxruntime as ort
import pytest
from PIL import Image

from environment import REPO_ROOT
from face_client import encoded_tensors, infer, names, sequence_infer
from triton_server import TritonServer, made_onnx_files, parameters_of, set_parameter

sys.path.insert(0, str(REPO_ROOT / "scripts"))
import quantize  # noqa: E402  (the engine's normalisation, as quantize.py feeds a model)

pytestmark = pytest.mark.engines("onnx")

PHOTOS = ("obama2.jpg", "obama3.jpg", "biden.jpg", "group5.jpg")
RESNET, INT8 = "face_onnx_resnet", "face_onnx_int8"
RESNET_CONFIG = REPO_ROOT / "model_repository" / RESNET / "config.pbtxt"
# The roles of the int8 copies scripts/models.sh makes.
ROLES = {"dlib_resnet": "embedder"}


def int8_copies(suite_env) -> list:
    """The copies face_onnx_int8 serves: each of ROLES, or a failure naming the one missing."""
    copies = [p for p in made_onnx_files(suite_env, INT8) if ".int8." in p.name]
    missing = set(f"{m}.int8.onnx" for m in ROLES) - {p.name for p in copies}
    if missing:
        pytest.fail(f"{INT8} serves no {', '.join(sorted(missing))}: it failed its check or was "
                    "not made at build time (assets/logs/models.log, scripts/models.sh)",
                    pytrace=False)
    return copies


def quantize_script(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "quantize.py"), *args],
                          capture_output=True, text=True, timeout=600, cwd=REPO_ROOT / "scripts")


def test_dlib_resnet_as_onnx_gives_dlib_s_descriptors(suite_env, tmp_path, photos):
    [model] = [p for p in made_onnx_files(suite_env, RESNET) if p.name == "dlib_resnet.onnx"]
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    params = parameters_of(RESNET_CONFIG.read_text())
    server = TritonServer(suite_env, tmp_path, engine="dlib", params={"return_embeddings": "true"})
    try:
        client = server.start().http()
        faces = [face for photo in PHOTOS for face in infer(
            client, encoded_tensors([photos.bytes(photo)]), parameters={"return_crops": True})[0]
            ["faces"]]
    finally:
        server.stop()
    assert len(faces) == 8, faces  # one in each, five in group5.jpg
    for face in faces:
        chip = np.asarray(Image.open(io.BytesIO(base64.b64decode(face["crop"]))).convert("RGB"))
        x = quantize.normalized(chip, params["embedder_channels"], params["embedder_mean"],
                                params["embedder_scale"], nchw=True)
        ours = session.run(None, {"input": x})[0].ravel()
        dlib = np.array(face["embedding"], np.float32)
        cosine = ours @ dlib / np.linalg.norm(ours) / np.linalg.norm(dlib)
        assert cosine > 0.9999 and abs(np.linalg.norm(ours) / np.linalg.norm(dlib) - 1) < 1e-3


@pytest.mark.parametrize("model", sorted(ROLES))
def test_the_shipped_int8_copies_pass_their_check(suite_env, model):
    copies = {p.name: p for p in int8_copies(suite_env)}
    copy = copies[f"{model}.int8.onnx"]
    done = quantize_script(str(copy.with_name(f"{model}.onnx")), "--check", str(copy),
                           "--role", ROLES[model], "--config", str(RESNET_CONFIG))
    text = done.stdout + done.stderr
    assert done.returncode == 0, text
    assert "held-apart photos:" in done.stdout and "names differing 0" in done.stdout, text
    assert "checked:" in done.stdout, text


def test_a_copy_that_fails_its_check_writes_nothing(suite_env, tmp_path):
    """The sample embedder's int8 copy: its embeddings' cosine to the float ones stays under
    0.99 on real faces (docs/engines.md), so the script prints its figures, names the one that
    failed, and writes no file."""
    out = tmp_path / "fr_feature.int8.onnx"
    done = quantize_script(str(suite_env.onnx_models / "fr_feature.onnx"), str(out),
                           "--role", "embedder")
    text = done.stdout + done.stderr
    assert done.returncode == 1, text
    assert "held-apart photos:" in done.stdout and "embedding cosine >=" in done.stdout, text
    assert "the check failed, nothing written" in done.stderr, text
    assert "embedding cosine 0.9" in done.stderr and "(at least 0.99)" in done.stderr, text
    assert not out.exists()


def test_face_onnx_int8_names_as_float_and_is_another_embedder(suite_env, start_server, photos):
    server = start_server(model=RESNET)
    client = server.http()
    [ack] = infer(client, encoded_tensors([photos.bytes("obama3.jpg")], "barack"), RESNET)
    assert ack["enrolled"]["added"], ack
    float_docs = [infer(client, encoded_tensors([photos.bytes(p)]), RESNET)[0] for p in PHOTOS]
    assert names(float_docs[1]) == ["barack"], float_docs[1]
    server.stop()
    # The float twin's folder becomes face_onnx_int8's: its copies beside, model_precision int8.
    for copy in int8_copies(suite_env):
        (server.model_dir / "1" / copy.name).symlink_to(copy)
    config = server.model_dir / "config.pbtxt"
    config.write_text(set_parameter(config.read_text(), "model_precision", "int8"))
    server.start()
    log = server.log_text()
    assert "embedder dlib_resnet.int8.onnx" in log and "detector fr_detect.onnx" in log, log
    assert "1 enrolled faces in the gallery store were made by another embedder" in log, log
    client = server.http()
    int8_docs = [infer(client, encoded_tensors([photos.bytes(p)]), RESNET)[0] for p in PHOTOS]
    expected = [names(d) for d in float_docs]
    expected[1] = ["obama"]  # barack was enrolled by the float models: kept, not matched
    assert [names(d) for d in int8_docs] == expected, int8_docs
    batch = infer(client, encoded_tensors([photos.bytes(p) for p in PHOTOS]), RESNET)
    assert [names(d) for d in batch] == expected, batch


def test_face_onnx_int8_in_a_sequence(suite_env, tmp_path, photos):
    """face_sequence with face_onnx_int8's models and parameters: each frame's faces named."""
    params = parameters_of((REPO_ROOT / "model_repository" / INT8 / "config.pbtxt").read_text())
    server = TritonServer(suite_env, tmp_path, model="face_sequence", engine="onnx", params=params)
    for made in made_onnx_files(suite_env, INT8):
        (server.model_dir / "1" / made.name).symlink_to(made)
    try:
        client = server.start().http()
        frames = ("two_faces.jpg", "biden_small.jpg", "obama2_small.jpg")
        docs = [sequence_infer(client, 401, encoded_tensors([photos.bytes(f)]), start=i == 0)
                for i, f in enumerate(frames)]
        end = sequence_infer(client, 401, end=True)
        assert "embedder dlib_resnet.int8.onnx" in server.log_text()
    finally:
        server.stop()
    assert [sorted(names(d)) for d in docs] == [["biden", "obama"], ["biden"], ["obama"]], docs
    assert sorted(p["name"] for p in end["summary"]["people"]) == ["biden", "obama"], end
