"""triton-face in a browser: photos, people and video against a tritonserver.

    bash scripts/app.sh          # set up, build, then open http://localhost:8501

It talks to the server with tritonclient (URL and model in the sidebar) and, when no server
answers at a local URL, starts one on model_repository/. Settings (environment):
FACE_URL (default localhost:8000), FACE_APP_MAX_UPLOAD_MB (default 50; larger files are
refused with a message), FACE_PHOTOS (sample photos), FACE_VIDEO (the sample video).
"""

from __future__ import annotations

import io
import json
import os
import tempfile
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import streamlit as st
from PIL import Image

import face_api
import local_server
import video

REPO_ROOT = Path(__file__).resolve().parent.parent
PHOTOS = Path(os.environ.get("FACE_PHOTOS", REPO_ROOT / "assets" / "photos"))
SAMPLE_VIDEO = Path(os.environ.get("FACE_VIDEO", REPO_ROOT / "assets" / "video" / "sample.mp4"))
MAX_UPLOAD_MB = float(os.environ.get("FACE_APP_MAX_UPLOAD_MB", "50"))
PHOTO_TYPES = ["jpg", "jpeg", "png", "bmp", "webp"]
VIDEO_TYPES = ["mp4", "webm", "mov", "mkv", "avi"]
LONG_TABLE = 200  # rows; longer tables scroll
# Selected first where the server has them: the accurate pipeline (OpenCV zoo's YuNet + SFace).
DEFAULT_MODELS = ("face_onnx_yunet", "face_onnx_yunet_sequence")


@dataclass(frozen=True)
class Model:
    name: str
    engine: str
    sequence: bool
    threshold: float
    decimals: int  # of the distances it answers (its distance_decimals)

    def __str__(self) -> str:
        return f"{self.name} ({self.engine}{', sequence' if self.sequence else ''})"


def reach(url: str):
    """A client of a ready server at `url`, starting one for a local URL; None (and a message
    on the page) when there is none."""
    if not local_server.is_ready(url):
        try:
            with st.spinner(f"No server at {url}: starting one on model_repository/ if local ..."):
                local_server.ensure(url)
        except local_server.NotStarted as e:
            st.error(str(e))
            return None
    return face_api.connect(url)


@st.cache_data(ttl=30, show_spinner=False)
def face_models(url: str) -> list[Model]:
    """The repository's ready models of backend `face`, with engine and threshold."""
    found = []
    with closing(face_api.connect(url)) as client:
        for entry in client.get_model_repository_index():
            if entry.get("state") != "READY":
                continue
            config = client.get_model_config(entry["name"])
            if config.get("backend") != "face":
                continue
            params = {k: v.get("string_value", "") for k, v in config.get("parameters", {}).items()}
            engine = params.get("engine", "dlib")
            threshold = float(params.get("match_threshold") or (0.6 if engine == "dlib" else 0.5))
            decimals = int(params.get("distance_decimals") or 2)
            found.append(Model(entry["name"], engine, "sequence_batching" in config, threshold,
                               decimals))
    return sorted(found, key=lambda m: (m.sequence, m.name))


def too_large(name: str, data: bytes) -> str | None:
    """Why a file is refused for its size, or None."""
    if len(data) > MAX_UPLOAD_MB * 1e6:
        return (f"{name} is {len(data) / 1e6:.1f} MB; this app takes files up to "
                f"{MAX_UPLOAD_MB:g} MB (FACE_APP_MAX_UPLOAD_MB).")
    return None


def sample_photos() -> list[str]:
    return sorted(p.name for p in PHOTOS.glob("*") if p.suffix.lower().lstrip(".") in PHOTO_TYPES)


def one_step(model: Model) -> dict:
    """A sequence model takes a photo or a gallery operation as a sequence of its own."""
    return face_api.one_step() if model.sequence else {}


def table(rows: list[dict]) -> None:
    """Rows as a plain table (text a reader and a browser test can find); a long one scrolls."""
    if len(rows) <= LONG_TABLE:
        st.table(rows)
    else:
        st.dataframe(rows, hide_index=True)


def shown(distance: float | None, decimals: int) -> str | None:
    """A distance with the decimals the answer has (a table would show four)."""
    return None if distance is None else f"{distance:.{decimals}f}"


def face_rows(faces: list[dict], decimals: int) -> list[dict]:
    return [{"name": f.get("name"), "distance": shown(f.get("distance"), decimals),
             "score": f.get("score"), "box": "{left},{top} - {right},{bottom}".format(**f["box"])}
            for f in faces]


def show_photo(client, model: Model, name: str, data: bytes, threshold: float, as_json: bool):
    """One photo: its answer drawn on it, a table of its faces, the JSON on demand."""
    if refused := too_large(name, data):
        st.error(refused)
        return
    try:
        doc = face_api.infer(client, model.name, {"match_threshold": threshold}, photo=data,
                             **one_step(model))
    except Exception as e:  # noqa: BLE001 - every failure becomes a message
        st.error(f"{name}: {face_api.readable(e)}")
        return
    faces = doc.get("faces", [])
    left, right = st.columns([3, 2])
    try:
        left.image(face_api.draw(Image.open(io.BytesIO(data)), faces), caption=name)
    except OSError:  # the server read it, PIL cannot: show the answer without the picture
        left.info(f"{name}: this app cannot draw this image format")
    named = [f["name"] for f in faces if f.get("name") not in (None, "unknown")]
    right.markdown(f"**{name}**: {len(faces)} face(s)" + (f"; {', '.join(named)}" if named else ""))
    if faces:
        with right:
            table(face_rows(faces, model.decimals))
    if as_json:
        right.json(doc)


def photos_tab(client, model: Model):
    threshold = st.slider("match_threshold (same person below this distance)", 0.01,
                          1.5 if model.engine == "dlib" else 1.0, model.threshold, 0.01,
                          key=f"threshold_{model.name}")
    uploads = st.file_uploader("Photos", type=PHOTO_TYPES, accept_multiple_files=True, key="photo_uploads")
    samples = st.multiselect("or sample photos", sample_photos(), key="photo_samples")
    camera = st.camera_input("Take a photo") if st.toggle("Use the camera", key="use_camera") else None
    as_json = st.toggle("Show the JSON answers", key="show_json")
    chosen = [(u.name, u.getvalue()) for u in uploads or []]
    chosen += [(s, (PHOTOS / s).read_bytes()) for s in samples]
    if camera is not None:
        chosen.append(("camera", camera.getvalue()))
    for name, data in chosen:
        show_photo(client, model, name, data, threshold, as_json)


def gallery_change(client, model: Model, **change) -> tuple[str, str]:
    """ENROLL or FORGET -> (kind, text) of the message that says how it went."""
    try:
        doc = face_api.infer(client, model.name, **change, **one_step(model))
    except Exception as e:  # noqa: BLE001 - every failure becomes a message
        return "error", face_api.readable(e)
    if "enroll" in change:
        done = doc["enrolled"]
        if not done["added"]:
            return "info", f"{done['name']} already has this face (nothing added)"
        return "success", f"Enrolled {done['name']} (gallery: {done['gallery_size']})"
    gone = doc["forgotten"]
    text = f"Forgot {gone['name']}: {gone['removed']} embedding(s) removed"
    if gone["folder_files"]:
        text += f"; still known from the gallery folder: {', '.join(gone['folder_files'])}"
    return "success", text


def enroll_form(client, model: Model) -> None:
    """Name + photo -> ENROLL; the outcome is shown after the rerun that lists the change."""
    with st.form("enroll", clear_on_submit=True):
        name = st.text_input("Name", key="enroll_name").strip()
        upload = st.file_uploader("A photo of that person alone", type=PHOTO_TYPES, key="enroll_upload")
        sample = st.selectbox("or a sample photo", [""] + sample_photos(), key="enroll_sample")
        if not st.form_submit_button("Enroll", key="enroll"):
            return
    if upload is not None:
        photo, data = upload.name, upload.getvalue()
    else:
        photo, data = sample, (PHOTOS / sample).read_bytes() if sample else None
    if not name or data is None:
        outcome = ("error", "Give a name and a photo.")
    elif refused := too_large(photo, data):
        outcome = ("error", refused)
    else:
        outcome = gallery_change(client, model, enroll=name, photo=data)
    st.session_state["people_message"] = outcome
    st.rerun()


def people_tab(client, model: Model):
    kind, text = st.session_state.pop("people_message", (None, None))
    if kind:
        getattr(st, kind)(text)
    enroll_form(client, model)
    try:
        listed = face_api.people(client, model.name, **one_step(model))
    except Exception as e:  # noqa: BLE001
        st.error(face_api.readable(e))
        return
    st.subheader(f"{len({p['name'] for p in listed})} people")
    table(listed)
    names = sorted({p["name"] for p in listed if p["source"] == "enrolled"})
    forget = st.selectbox("Forget an enrolled person", [""] + names, key="forget_name")
    if st.button("Forget", disabled=not forget, key="forget"):
        st.session_state["people_message"] = gallery_change(client, model, forget=forget)
        st.rerun()


def video_tab(client, model: Model | None):
    if model is None:
        st.warning("No ready sequence model (like face_sequence) on this server.")
        return
    upload = st.file_uploader("A video", type=VIDEO_TYPES, key="video_upload")
    use_sample = st.checkbox(f"or the sample video ({SAMPLE_VIDEO.name})", key="video_sample",
                             disabled=not SAMPLE_VIDEO.exists())
    every = st.number_input("Send every n-th frame", 1, 1000, 1, key="video_every")
    if st.button("Process", disabled=not (upload or use_sample), key="video_process"):
        with tempfile.TemporaryDirectory(prefix="face-app-") as work:
            source = SAMPLE_VIDEO if use_sample and not upload else None
            if upload is not None:
                if refused := too_large(upload.name, upload.getvalue()):
                    st.error(refused)
                else:
                    source = Path(work) / Path(upload.name).name
                    source.write_bytes(upload.getvalue())
            if source is not None:
                st.session_state["video_result"] = run_video(client, model, source, int(every), Path(work))
    if "video_result" in st.session_state:
        show_video_result(st.session_state["video_result"])


def run_video(client, model: Model, source: Path, every: int, work: Path) -> dict:
    """The video through `model` as one sequence, with a progress bar and the latest frame; the
    annotated video is kept in memory (files in `work` go when the caller is done)."""
    run = video.Run(str(source), work / "annotated.mp4", work / "report.json")
    bar, preview = st.progress(0.0, text="starting ..."), st.empty()

    def on_frame(run: video.Run, index: int, image, doc: dict):
        share = min(1.0, run.sent / run.total) if run.total else 0.0
        bar.progress(share, text=f"frame {run.sent}" + (f" of {run.total}" if run.total else ""))
        preview.image(image, caption=f"frame {index}")

    video.process(client, model.name, run, every, on_frame=on_frame)
    bar.empty()
    preview.empty()
    return {"source": source.name, "ended": run.ended, "failed": run.failed, "frames": run.sent,
            "fps": run.fps,
            "rows": [{**row, "best_distance": shown(row["best_distance"], model.decimals)}
                     for row in video.people_table(run)],
            "video": run.video.read_bytes() if run.video.exists() else None,
            "report": run.document(model.name)}


def show_video_result(result: dict):
    text = f"{result['source']}: {result['frames']} frames at {result['fps']:.1f}/s, {result['ended']}"
    (st.error if result["failed"] else st.success)(text)
    if result["video"]:
        st.video(result["video"], format="video/mp4")
    st.subheader("Who appeared")
    if result["rows"]:
        table(result["rows"])
    else:
        st.info("No face in the frames sent.")
    st.download_button("Download the report (JSON)", json.dumps(result["report"], indent=1),
                       file_name="report.json", mime="application/json")


def main():
    st.set_page_config(page_title="triton-face", layout="wide")
    st.title("triton-face")
    url = st.sidebar.text_input("Triton server (HTTP host:port)", os.environ.get("FACE_URL", "localhost:8000"))
    client = reach(url.strip())
    if client is None:
        return
    # Each run of the page opens its own connection and closes it: a connection left open
    # would hold the server's shutdown for its exit timeout.
    with closing(client):
        page(client, url)


def preferred(models: list[Model]) -> int:
    """The first of DEFAULT_MODELS the list holds, else its first."""
    names = [m.name for m in models]
    return next((names.index(n) for n in DEFAULT_MODELS if n in names), 0)


def page(client, url: str):
    """The sidebar and the three tabs, on the server at `url`."""
    try:
        models = face_models(url.strip())
    except Exception as e:  # noqa: BLE001
        st.error(face_api.readable(e))
        return
    if not models:
        st.error(f"The server at {url} has no ready model of backend `face`.")
        return
    st.sidebar.markdown("**Models**\n\n" + "\n".join(f"- {m}" for m in models))
    model = st.sidebar.selectbox("Model (photos, people)", models, index=preferred(models),
                                 format_func=str, key="model")
    sequences = [m for m in models if m.sequence]
    video_model = st.sidebar.selectbox("Sequence model (video)", sequences,
                                       index=preferred(sequences), format_func=str,
                                       key="video_model") if sequences else None
    st.sidebar.caption(f"Uploads up to {MAX_UPLOAD_MB:g} MB")
    photos, people, clips = st.tabs(["Photos", "People", "Video"])
    with photos:
        photos_tab(client, model)
    with people:
        people_tab(client, model)
    with clips:
        video_tab(client, video_model)


main()
