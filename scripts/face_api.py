"""What our clients share (demo, browser app, video client): one request to a face model,
its error as a sentence a person can read, faces drawn on a picture, and a sequence that
always ends.

    import face_api
    client = face_api.connect("localhost:8000")
    doc = face_api.infer(client, "face", photo=open("obama.jpg", "rb").read())

A model with `gallery_key_file` needs a key for every request: `infer` sends the environment
variable FACE_GALLERY_KEY with each (as the request parameter `gallery_key`).
"""

from __future__ import annotations

import json
import os
import re
import secrets

import numpy as np
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as system_shm
from PIL import Image, ImageDraw, ImageFont
from tritonclient.utils import InferenceServerException

# The key a model with gallery_key_file asks of every request.
GALLERY_KEY_VAR = "FACE_GALLERY_KEY"

# Colours of a named face, an unknown face and the text on them.
KNOWN, UNKNOWN, TEXT = (40, 200, 60), (230, 60, 40), (255, 255, 255)


def connect(url: str, timeout: float = 60.0) -> httpclient.InferenceServerClient:
    """An HTTP client of the server at `url` (host:port)."""
    return httpclient.InferenceServerClient(url, connection_timeout=timeout, network_timeout=timeout)


def _bytes(name: str, value: bytes) -> httpclient.InferInput:
    tensor = httpclient.InferInput(name, [1, 1], "BYTES")
    tensor.set_data_from_numpy(np.array([[value]], dtype=object))
    return tensor


def inputs_of(photo=None, image=None, enroll=None, forget=None, list_people=False, reference=None):
    """The request's input tensors: an encoded photo (bytes) or decoded RGB pixels (H x W x 3
    uint8), at most one gallery operation, and a REFERENCE embedding to verify against."""
    inputs = []
    if photo is not None:
        inputs.append(_bytes("ENCODED", photo))
    if isinstance(image, httpclient.InferInput):  # already placed (SharedFrames)
        inputs.append(image)
    elif image is not None:
        pixels = np.ascontiguousarray(image, dtype=np.uint8)[None]
        tensor = httpclient.InferInput("IMAGE", list(pixels.shape), "UINT8")
        tensor.set_data_from_numpy(pixels)
        inputs.append(tensor)
    if enroll is not None:
        inputs.append(_bytes("ENROLL", enroll.encode()))
    if forget is not None:
        inputs.append(_bytes("FORGET", forget.encode()))
    if list_people:
        tensor = httpclient.InferInput("LIST", [1, 1], "BOOL")
        tensor.set_data_from_numpy(np.array([[True]]))
        inputs.append(tensor)
    if reference is not None:
        vector = np.asarray([reference], dtype=np.float32)
        tensor = httpclient.InferInput("REFERENCE", list(vector.shape), "FP32")
        tensor.set_data_from_numpy(vector)
        inputs.append(tensor)
    return inputs


def infer(client, model: str, parameters: dict | None = None, **request) -> dict:
    """One request (see `inputs_of` for the keywords; sequence_id / sequence_start /
    sequence_end pass through) -> its RESULT document."""
    sequence = {k: request.pop(k) for k in ("sequence_id", "sequence_start", "sequence_end") if k in request}
    key = os.environ.get(GALLERY_KEY_VAR)
    if key:
        parameters = {**(parameters or {}), "gallery_key": key}
    result = client.infer(
        model,
        inputs_of(**request),
        outputs=[httpclient.InferRequestedOutput("RESULT")],
        parameters=parameters or None,
        **sequence,
    )
    return json.loads(result.as_numpy("RESULT")[0][0])


def people(client, model: str, **sequence) -> list[dict]:
    """The gallery's people (LIST): [{"name", "embeddings", "source"}, ...]."""
    return infer(client, model, list_people=True, **sequence)["people"]


def readable(error: BaseException) -> str:
    """One sentence for a person: what went wrong, without a traceback."""
    if isinstance(error, InferenceServerException):
        text = (error.message() or str(error)).strip()
        # The server's text sometimes repeats the gRPC/HTTP status in brackets.
        text = re.sub(r"^\[[^\]]*\]\s*", "", text)
        status = str(error.status() or "")
        if status in ("400", "StatusCode.INVALID_ARGUMENT"):
            return f"The request was refused: {text}"
        if status in ("503", "StatusCode.UNAVAILABLE"):
            return f"The server cannot do this now: {text}"
        return f"The server answered with an error: {text}"
    if isinstance(error, (ConnectionError, OSError)):
        return f"Cannot reach the server: {error}"
    return f"{type(error).__name__}: {error}"


def label(face: dict, tracks: bool = False) -> str:
    """The text drawn under a face: name, distance and (in a sequence) its track."""
    text = face.get("name") or "?"
    if face.get("distance") is not None:
        text += f" {face['distance']:.2f}"
    if tracks and face.get("track") is not None:
        text = f"#{face['track']} {text}"
    return text


def draw(image: Image.Image, faces: list[dict], tracks: bool = False) -> Image.Image:
    """A copy of `image` with each face's box, landmarks and label."""
    out = image.convert("RGB")
    pen = ImageDraw.Draw(out)
    width = max(2, out.width // 300)
    font = ImageFont.load_default(size=max(14, out.width // 40))
    for face in faces:
        b = face["box"]
        colour = UNKNOWN if face.get("name") in (None, "unknown") else KNOWN
        pen.rectangle([b["left"], b["top"], b["right"], b["bottom"]], outline=colour, width=width)
        for x, y in face.get("landmarks") or []:
            pen.ellipse([x - width, y - width, x + width, y + width], fill=colour)
        text = label(face, tracks)
        at = (b["left"] + 4, b["bottom"] + 2)
        _, _, x1, y1 = pen.textbbox(at, text, font=font)
        pen.rectangle([b["left"], b["bottom"], x1 + 4, y1 + 4], fill=colour)
        pen.text(at, text, fill=TEXT, font=font)
    return out


def new_sequence_id() -> int:
    """A correlation ID no other client picks: 63 random bits (never 0, which Triton reads as
    'no sequence')."""
    return secrets.randbits(63) or 1


def one_step() -> dict:
    """The sequence keywords of a request to a sequence model that is not part of a video (a
    gallery operation): a sequence of its own, started and ended by this one request."""
    return {"sequence_id": new_sequence_id(), "sequence_start": True, "sequence_end": True}


class SharedFrames:
    """Frames for a server on this machine, through Triton's system shared memory: each frame is
    written into one region the server reads in place, instead of travelling in the HTTP body
    (which both sides copy and parse, see docs/clients.md). The region is made at the first
    frame, again when the frame's size changes, and unregistered and removed by `close()`. (A
    client killed outright leaves its registration on the server, which keeps the region mapped
    until it restarts; Python removes the file in /dev/shm when the process ends.)"""

    def __init__(self, client, fallback: bool = False):
        self.client, self.fallback = client, fallback
        self.name = f"triton-face-{os.getpid()}-{secrets.token_hex(4)}"
        self.handle, self.size = None, 0
        # Why frames go in the HTTP body after all (fallback: the server could not map the
        # region, e.g. it runs in a container without this machine's /dev/shm).
        self.unavailable: str | None = None

    def input(self, image):
        """IMAGE (H x W x 3 uint8 RGB) placed in the region, or (fallback, the region refused)
        the pixels themselves, to send as they are."""
        if self.unavailable:
            return image
        pixels = np.ascontiguousarray(image, dtype=np.uint8)[None]
        if pixels.nbytes != self.size:
            self.close()
            try:
                self._open(pixels.nbytes)
            except Exception as e:  # noqa: BLE001 - anything the region or the server refuses
                if not self.fallback:
                    raise
                self.unavailable = readable(e)
                return image
        system_shm.set_shared_memory_region(self.handle, [pixels])
        tensor = httpclient.InferInput("IMAGE", list(pixels.shape), "UINT8")
        tensor.set_shared_memory(self.name, pixels.nbytes)
        return tensor

    def _open(self, size: int) -> None:
        self.handle = system_shm.create_shared_memory_region(self.name, "/" + self.name, size,
                                                             create_only=True)
        self.size = size
        try:
            self.client.register_system_shared_memory(self.name, "/" + self.name, size)
        except Exception:
            self._destroy()
            raise

    def close(self) -> None:
        if self.handle is None:
            return
        try:
            self.client.unregister_system_shared_memory(self.name)
        finally:
            self._destroy()

    def _destroy(self) -> None:
        system_shm.destroy_shared_memory_region(self.handle)
        self.handle, self.size = None, 0


class Sequence:
    """One stateful sequence on a sequence model: the first frame STARTs it, `end()` ENDs it and
    returns the summary. As a context manager it is ENDed on every way out (an error, Ctrl-C), so
    the server's state for it is dropped at once, not at its idle timeout. With `shared`, its
    RGB frames go through that shared memory."""

    def __init__(self, client, model: str, parameters: dict | None = None,
                 shared: SharedFrames | None = None):
        self.client, self.model, self.parameters = client, model, parameters
        self.shared = shared
        self.id = new_sequence_id()
        self.frames = 0
        # Set before the first request: a START that failed may still have opened state.
        self.started = False
        self.ended = False

    def send(self, image=None, photo=None) -> dict:
        """One frame (RGB pixels or encoded bytes) -> its document (faces with tracks)."""
        if image is not None and self.shared is not None:
            image = self.shared.input(image)  # before START: a region refused sends nothing
        start, self.started = not self.started, True
        doc = infer(
            self.client, self.model, self.parameters, image=image, photo=photo,
            sequence_id=self.id, sequence_start=start,
        )
        self.frames += 1
        return doc

    def end(self) -> dict | None:
        """END without a frame -> the summary document (None if nothing was ever sent)."""
        if self.ended or not self.started:
            self.ended = True
            return None
        self.ended = True
        return infer(self.client, self.model, sequence_id=self.id, sequence_end=True)

    def __enter__(self) -> "Sequence":
        return self

    def __exit__(self, *exc) -> None:
        if not self.ended:
            try:
                self.end()
            except Exception:  # noqa: BLE001 - the first error is the one to report
                if exc[0] is None:
                    raise
