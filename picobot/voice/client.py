"""The two HTTP calls of voice: OpenAI-compatible speech to text and text to speech.

    transcribe(cfg.voice.stt, AudioClip(data, "audio/ogg", "ogg"))  -> "what was said"
    speak(cfg.voice.tts, "the answer")                                -> AudioClip(…, format="opus")

Both speak the wire of OpenAI's audio API (`POST {base_url}/audio/transcriptions`, multipart with
`file`, `model`, `response_format=json`; `POST {base_url}/audio/speech`, JSON with `model`, `input`,
`voice`, `response_format`), which local servers (faster-whisper servers, Piper or Kokoro front
ends) speak too. Errors are VoiceError with a text fit for the user: never the key, never the
server's body verbatim beyond a short, redacted excerpt.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

import httpx

from picobot.plugins.types import AudioClip
from picobot.security.redact import redact

log = logging.getLogger("picobot.voice")

MIME_OF = {"opus": "audio/ogg", "ogg": "audio/ogg", "mp3": "audio/mpeg", "aac": "audio/aac", "flac": "audio/flac",
           "wav": "audio/wav", "webm": "audio/webm", "m4a": "audio/mp4", "mp4": "audio/mp4", "pcm": "audio/L16"}
EXT_OF = {"audio/ogg": "ogg", "audio/opus": "ogg", "audio/mpeg": "mp3", "audio/mp3": "mp3", "audio/aac": "aac",
          "audio/flac": "flac", "audio/wav": "wav", "audio/x-wav": "wav", "audio/wave": "wav", "audio/webm": "webm",
          "audio/mp4": "m4a", "audio/x-m4a": "m4a", "audio/amr": "amr", "audio/silk": "silk"}
MAX_TRANSCRIPT_CHARS = 20_000
MAX_SPEECH_BYTES = 50 * 1024 * 1024


class VoiceError(Exception):
    """A transcription or a speech call failed; the message says why, for the user (no secrets)."""

    def __init__(self, message: str, *, transient: bool = True) -> None:
        super().__init__(message)
        self.transient = transient


def extension(mime: str) -> str:
    """The file extension servers recognise for a MIME type (they route on the upload's name)."""
    return EXT_OF.get(mime.split(";")[0].strip().lower(), "ogg")


def _endpoint(base_url: str, path: str) -> str:
    return base_url.rstrip("/") + path


def _headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def _secrets(api_key: str | None) -> set[str]:
    return {api_key} if api_key else set()


def _failure(what: str, exc: Exception, api_key: str | None) -> VoiceError:
    if isinstance(exc, httpx.TimeoutException):
        return VoiceError(f"the {what} server did not answer in time")
    if isinstance(exc, httpx.HTTPError):
        return VoiceError(f"the {what} server could not be reached ({type(exc).__name__})")
    return VoiceError(redact(f"the {what} call failed ({type(exc).__name__})", _secrets(api_key)))


def _refused(what: str, response: httpx.Response, api_key: str | None) -> VoiceError:
    detail = ""
    try:
        body = response.json()
        error = body.get("error") if isinstance(body, dict) else None
        message = error.get("message") if isinstance(error, dict) else error
        detail = str(message or "")[:200]
    except ValueError:
        pass
    detail = redact(detail, _secrets(api_key)).strip()
    status = response.status_code
    transient = status in (408, 409, 429) or status >= 500
    return VoiceError(f"the {what} server answered HTTP {status}" + (f": {detail}" if detail else ""),
                      transient=transient)


def transcribe(cfg: Any, audio: AudioClip, client: httpx.Client | None = None, cancel: Any = None) -> str:
    """The text of `audio` (stripped; may be empty when nothing was said). Raises VoiceError.

    `cancel` (a CancelToken: /stop) closes the connection of a transcription in flight."""
    if len(audio.data) > cfg.max_bytes:
        raise VoiceError(f"the voice message has {len(audio.data)} bytes; the limit is {cfg.max_bytes} "
                         "(voice.stt.max_bytes)", transient=False)
    if not audio.data:
        raise VoiceError("the voice message is empty", transient=False)
    fields = {"model": cfg.model, "response_format": "json"}
    if cfg.language:
        fields["language"] = cfg.language
    files = {"file": (f"voice.{extension(audio.mime)}", audio.data, audio.mime.split(";")[0] or "audio/ogg")}
    own = client is None
    http = client or httpx.Client(timeout=httpx.Timeout(cfg.timeout_secs, connect=min(cfg.timeout_secs, 10.0)),
                                  follow_redirects=False)

    def post() -> httpx.Response:
        return http.post(_endpoint(cfg.base_url, "/audio/transcriptions"), data=fields, files=files,
                         headers=_headers(cfg.api_key))

    try:
        response = post() if cancel is None else _unless_stopped(post, cancel)
    except VoiceError:
        raise
    except Exception as exc:
        raise _failure("speech-to-text", exc, cfg.api_key) from None
    finally:
        if own:
            http.close()
    if response.status_code >= 400:
        raise _refused("speech-to-text", response, cfg.api_key)
    return _transcript_text(response)[:MAX_TRANSCRIPT_CHARS].strip()


def _unless_stopped(call: Any, cancel: Any) -> Any:
    """`call()` in a thread of its own, given up (VoiceError "stopped") as soon as `cancel` is set: a blocking
    HTTP read cannot be interrupted, so /stop leaves it to end by its timeout and answers at once."""
    if cancel.cancelled:
        raise VoiceError("stopped", transient=False)
    done = threading.Event()
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # handed to the caller's thread
            box["error"] = exc
        finally:
            done.set()

    forget = cancel.on_cancel(done.set)
    try:
        threading.Thread(target=run, name="picobot-stt", daemon=True).start()
        done.wait()
    finally:
        forget()
    if "value" not in box and "error" not in box:
        raise VoiceError("stopped", transient=False)
    if "error" in box:
        raise box["error"]
    return box["value"]


def _transcript_text(response: httpx.Response) -> str:
    """`{"text": …}` (json, verbose_json) or the plain body (text)."""
    kind = response.headers.get("content-type", "")
    if "json" in kind:
        try:
            body = response.json()
        except (ValueError, json.JSONDecodeError):
            raise VoiceError("the speech-to-text server sent JSON that could not be read") from None
        text = body.get("text") if isinstance(body, dict) else None
        if not isinstance(text, str):
            raise VoiceError("the speech-to-text server's answer has no text")
        return text
    return response.text


def speak(cfg: Any, text: str, client: httpx.Client | None = None) -> AudioClip:
    """Speech for `text` in `cfg.format` (cut at `cfg.max_chars`). Raises VoiceError."""
    text = text.strip()[:cfg.max_chars]
    if not text:
        raise VoiceError("there is no text to speak", transient=False)
    body = {"model": cfg.model, "input": text, "voice": cfg.voice, "response_format": cfg.format}
    own = client is None
    http = client or httpx.Client(timeout=httpx.Timeout(cfg.timeout_secs, connect=min(cfg.timeout_secs, 10.0)),
                                  follow_redirects=False)
    try:
        with http.stream("POST", _endpoint(cfg.base_url, "/audio/speech"), json=body,
                         headers=_headers(cfg.api_key)) as response:
            if response.status_code >= 400:
                response.read()
                raise _refused("text-to-speech", response, cfg.api_key)
            chunks, size = [], 0
            for chunk in response.iter_bytes():
                size += len(chunk)
                if size > MAX_SPEECH_BYTES:
                    raise VoiceError(f"the text-to-speech server sent more than {MAX_SPEECH_BYTES} bytes",
                                     transient=False)
                chunks.append(chunk)
            kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
    except VoiceError:
        raise
    except Exception as exc:
        raise _failure("text-to-speech", exc, cfg.api_key) from None
    finally:
        if own:
            http.close()
    data = b"".join(chunks)
    if not data:
        raise VoiceError("the text-to-speech server sent no audio")
    fmt = sniff(data) or cfg.format
    return AudioClip(data=data, mime=MIME_OF.get(fmt, kind or "application/octet-stream"), format=fmt)


def sniff(data: bytes) -> str | None:
    """The format of audio bytes from their first bytes (`opus` = Ogg Opus), or None."""
    if data.startswith(b"OggS"):
        return "opus" if b"OpusHead" in data[:200] else "ogg"
    if data.startswith(b"ID3") or data[:2] in (b"\xff\xfb", b"\xff\xf3", b"\xff\xf2"):
        return "mp3"
    if data.startswith(b"RIFF") and data[8:12] == b"WAVE":
        return "wav"
    if data.startswith(b"fLaC"):
        return "flac"
    if data[:2] in (b"\xff\xf1", b"\xff\xf9"):
        return "aac"
    return None
