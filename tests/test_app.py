"""The browser app's logic (scripts/app.py) through Streamlit's own AppTest, against a real
tritonserver: photos, the threshold slider, the JSON on demand, people (LIST, ENROLL, FORGET)
and every error the backend can give as a readable message, video through `face_sequence`,
the upload limit, and a server started by the app when none runs.

AppTest runs the script in this process, as `streamlit run` would, without a browser
(test_browser.py drives the same app in Chromium).
"""

from __future__ import annotations

import contextlib
import re
import sys

import pytest
from streamlit.testing.v1 import AppTest

from environment import REPO_ROOT
from face_client import SEQUENCE_MODEL

pytestmark = pytest.mark.engines("dlib", "onnx")

sys.path.insert(0, str(REPO_ROOT / "scripts"))  # the app's own modules, as streamlit run does
import local_server  # noqa: E402

APP = REPO_ROOT / "scripts" / "app.py"
TIMEOUT_S = 180  # one script run, the video included


def open_app(monkeypatch, url: str, **env: str) -> AppTest:
    monkeypatch.setenv("FACE_URL", url)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    app = AppTest.from_file(str(APP), default_timeout=TIMEOUT_S)
    app.run()
    assert not app.exception, [e.value for e in app.exception]
    return app


def consecutive_free_ports(count: int = 3) -> int:
    """A port p with p .. p+count-1 all free (the app's server takes HTTP, gRPC, metrics)."""
    import socket
    for base in range(20000, 60000, 97):
        with contextlib.ExitStack() as held:
            try:
                for port in range(base, base + count):
                    sock = held.enter_context(socket.socket())
                    sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return base
    raise AssertionError("no free port range")


def url_of(server) -> str:
    return f"127.0.0.1:{server.http_port}"


def texts(app, kind: str) -> list[str]:
    return [element.value for element in getattr(app, kind)]


def rerun(app) -> AppTest:
    app.run()
    assert not app.exception, [e.value for e in app.exception]
    return app


@pytest.fixture(scope="module")
def app_server(start_module_server):
    """`face` and `face_sequence`, gallery {obama, biden}; the photo and video tests only read."""
    return start_module_server(more_models=(SEQUENCE_MODEL,))


# ---- photos -----------------------------------------------------------------------------------

def test_models_listed_with_their_engines(app_server, monkeypatch, engine):
    app = open_app(monkeypatch, url_of(app_server))
    sidebar = " ".join(texts(app.sidebar, "markdown"))
    assert f"face ({engine.kind})" in sidebar
    assert f"{SEQUENCE_MODEL} ({engine.kind}, sequence)" in sidebar


def test_sample_photos_named_and_drawn(app_server, monkeypatch):
    app = open_app(monkeypatch, url_of(app_server))
    app.multiselect(key="photo_samples").set_value(["obama2.jpg", "biden.jpg", "noface.jpg"])
    rerun(app)
    said = " ".join(texts(app, "markdown"))
    assert "**obama2.jpg**: 1 face(s); obama" in said
    assert "**biden.jpg**: 1 face(s); biden" in said
    assert "**noface.jpg**: 0 face(s)" in said
    assert len(app.image) >= 3, "an annotated image per photo"
    # Distances as the answer gives them (distance_decimals 2), not a table's four decimals.
    distances = [d for t in app.table if "distance" in t.value for d in t.value["distance"]
                 if d is not None]
    assert distances and all(re.fullmatch(r"\d\.\d\d", d) for d in distances), distances
    assert not app.error


def test_threshold_slider_is_the_requests(app_server, monkeypatch):
    app = open_app(monkeypatch, url_of(app_server))
    app.multiselect(key="photo_samples").set_value(["obama2.jpg"])
    app.slider(key="threshold_face").set_value(0.01)  # nothing is that close: no name
    rerun(app)
    assert "**obama2.jpg**: 1 face(s)" in texts(app, "markdown")


def test_json_answer_on_demand(app_server, monkeypatch):
    app = open_app(monkeypatch, url_of(app_server))
    app.multiselect(key="photo_samples").set_value(["obama2.jpg"])
    rerun(app)
    assert not app.json
    app.toggle(key="show_json").set_value(True)
    rerun(app)
    [doc] = app.json
    assert '"obama"' in doc.value and '"faces"' in doc.value


def test_uploads_and_bad_files_are_messages(app_server, monkeypatch, photos):
    app = open_app(monkeypatch, url_of(app_server), FACE_APP_MAX_UPLOAD_MB="0.3")
    app.file_uploader(key="photo_uploads").set_value([
        ("mine.jpg", photos.bytes("obama2.jpg"), "image/jpeg"),  # 0.18 MB: taken
        ("big.jpg", photos.bytes("obama3.jpg"), "image/jpeg"),  # 0.6 MB: over the limit
        ("broken.jpg", b"this is not a photo", "image/jpeg"),
    ])
    rerun(app)
    assert "**mine.jpg**: 1 face(s); obama" in texts(app, "markdown")
    errors = texts(app, "error")
    assert any(e.startswith("big.jpg is 0.6 MB; this app takes files up to 0.3 MB") for e in errors), errors
    assert any(e.startswith("broken.jpg: The request was refused:") for e in errors), errors


def test_photos_on_a_sequence_model(app_server, monkeypatch):
    """A photo sent to a sequence model goes as a sequence of its own (START and END)."""
    app = open_app(monkeypatch, url_of(app_server))
    app.selectbox(key="model").select_index(1)  # face_sequence: sequence models come last
    app.multiselect(key="photo_samples").set_value(["biden.jpg"])
    rerun(app)
    assert "**biden.jpg**: 1 face(s); biden" in texts(app, "markdown")
    assert not app.error


def test_camera_photo(app_server, monkeypatch, photos):
    app = open_app(monkeypatch, url_of(app_server))
    assert not app.camera_input, "the camera is asked for only when wanted"
    app.toggle(key="use_camera").set_value(True)
    rerun(app)
    app.camera_input[0].set_value(("shot.jpg", photos.bytes("obama_640x480.jpg"), "image/jpeg"))
    rerun(app)
    assert "**camera**: 1 face(s); obama" in texts(app, "markdown")


# ---- video -----------------------------------------------------------------------------------

def test_sample_video_summary(app_server, monkeypatch):
    app = open_app(monkeypatch, url_of(app_server))
    app.checkbox(key="video_sample").check()
    app.number_input(key="video_every").set_value(3)
    rerun(app)
    app.button(key="video_process").click()
    rerun(app)
    assert any(s.startswith("sample.mp4: 50 frames at") and s.endswith("end of input")
               for s in texts(app, "success")), texts(app, "success") + texts(app, "error")
    table = app.table[-1].value
    assert {"obama", "biden"} <= set(table["name"]), table


# ---- people -----------------------------------------------------------------------------------

@pytest.fixture
def people_app(start_server, monkeypatch):
    """The app on a server of its own (it enrolls): `face` and `face_sequence`, each with the
    gallery {obama, biden} and room for 3; photos up to 0.5 MB."""
    server = start_server(params={"max_gallery_size": "3"}, more_models=(SEQUENCE_MODEL,))
    return open_app(monkeypatch, url_of(server), FACE_APP_MAX_UPLOAD_MB="0.5")


def listed(app) -> set[str]:
    return set(app.table[-1].value["name"])


def enroll(app, name: str, sample: str) -> AppTest:
    app.text_input(key="enroll_name").set_value(name)
    app.selectbox(key="enroll_sample").set_value(sample)
    app.button(key="enroll").click()
    return rerun(app)


def test_enroll_and_forget_change_the_list(people_app):
    app = people_app
    assert listed(app) == {"obama", "biden"}
    enroll(app, "alice", "obama2.jpg")
    assert texts(app, "success") == ["Enrolled alice (gallery: 3)"]
    assert listed(app) == {"obama", "biden", "alice"}
    app.selectbox(key="forget_name").set_value("alice")
    rerun(app)  # the button is enabled once a name is chosen
    app.button(key="forget").click()
    rerun(app)
    assert texts(app, "success") == ["Forgot alice: 1 embedding(s) removed"]
    assert listed(app) == {"obama", "biden"}


@pytest.mark.parametrize("name, sample, says", [
    ("carol", "noface.jpg", "found 0"),
    ("carol", "group5.jpg", "found 5"),
    ("unknown", "obama2.jpg", "reserved"),
])
def test_enroll_refusals_are_messages(people_app, name, sample, says):
    app = enroll(people_app, name, sample)
    [error] = texts(app, "error")
    assert error.startswith("The request was refused:") and says in error, error
    assert listed(app) == {"obama", "biden"}


def test_full_gallery_is_a_message(people_app):
    app = enroll(people_app, "alice", "obama2.jpg")
    app = enroll(app, "bob", "obama_640x480.jpg")
    [error] = texts(app, "error")
    assert error.startswith("The server cannot do this now:") and "gallery is full" in error, error


def test_too_large_photo_is_a_message(people_app):
    app = enroll(people_app, "alice", "obama3.jpg")
    assert texts(app, "error") == [
        "obama3.jpg is 0.6 MB; this app takes files up to 0.5 MB (FACE_APP_MAX_UPLOAD_MB)."]
    assert listed(app) == {"obama", "biden"}


def test_sequence_model_gallery(people_app):
    """A sequence model's gallery is managed like any other (each operation a one-request
    sequence of its own), and it is its own: `face` does not change."""
    app = people_app
    app.selectbox(key="model").select_index(1)  # face_sequence (sequence models last)
    rerun(app)
    enroll(app, "alice", "obama2.jpg")
    assert texts(app, "success") == ["Enrolled alice (gallery: 3)"]
    assert listed(app) == {"obama", "biden", "alice"}
    app.selectbox(key="model").select_index(0)
    rerun(app)
    assert listed(app) == {"obama", "biden"}


@pytest.mark.engines("onnx")
def test_store_unavailable_is_a_message(postgres, start_server, monkeypatch):
    from postgres_server import SUITE_DB
    server = start_server(params={"gallery_store": "postgres", "gallery_name": "app"}, gallery={},
                          env={"FACE_GALLERY_DSN": postgres.dsn(SUITE_DB, "face-app")})
    app = open_app(monkeypatch, url_of(server))
    postgres.stop()
    try:
        enroll(app, "alice", "obama3.jpg")
    finally:
        postgres.start()
    error = texts(app, "error")[0]
    assert error.startswith("The server cannot do this now:"), error


# ---- the server ---------------------------------------------------------------------------------

@pytest.mark.engines("dlib")
def test_no_server_at_a_remote_url_is_a_message(monkeypatch, engine):
    app = open_app(monkeypatch, "nowhere.invalid:8000")
    assert texts(app, "error") == ["No Triton server answers at nowhere.invalid:8000."]


@pytest.mark.engines("dlib")
def test_starts_a_server_when_none_runs(monkeypatch, suite_env, engine):
    """At a free local port the app starts tritonserver on model_repository/ (the library
    scripts/build.sh installed there), lists its sample models and picks the accurate
    pipeline (YuNet + SFace) for photos and for video."""
    for model in ("face", "face_onnx", SEQUENCE_MODEL, "face_onnx_yunet", "face_onnx_yunet_sequence"):
        lib = REPO_ROOT / "model_repository" / model / "libtriton_face.so"
        if not lib.is_file():
            pytest.fail(f"{lib} missing: run scripts/build.sh (scripts/test.sh does)", pytrace=False)
    monkeypatch.setenv("TRITONSERVER", str(suite_env.tritonserver))
    port = consecutive_free_ports()
    try:
        app = open_app(monkeypatch, f"localhost:{port}")
        assert local_server.is_ready(f"localhost:{port}")
        sidebar = " ".join(texts(app.sidebar, "markdown"))
        for shown in ("face (dlib)", "face_onnx (onnx)", f"{SEQUENCE_MODEL} (dlib, sequence)"):
            assert shown in sidebar
        assert app.selectbox(key="model").value.name == "face_onnx_yunet"
        assert app.selectbox(key="video_model").value.name == "face_onnx_yunet_sequence"
    finally:
        local_server.stop_all()
