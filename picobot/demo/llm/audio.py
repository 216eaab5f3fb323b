"""The fake audio API of the demo model server: `/v1/audio/transcriptions` and `/v1/audio/speech`.

Transcription is deterministic: the uploaded bytes may carry a marker `SAY:<text>` (up to a NUL or a
newline, at most 2,000 bytes of UTF-8), and the transcript is that text; without one it is
"voice message of <n> bytes". `response_format` json (default), verbose_json and text are served in
OpenAI's shapes. A transcript `FAIL <status>` answers that HTTP status instead (a test's outage);
`WAIT <ms> <text>` answers `<text>` after that many milliseconds (a slow server, for /stop).

Speech is real audio made without an encoder: `opus` (the default) is a valid Ogg Opus stream of
silence (20 ms CELT frames, one per 60 characters of input, at least 5, at most 1,500), `wav` a PCM
WAV of the same length of silence; every other format is answered as WAV (so a client sees a server
that ignored its wish). The request's `input` is recorded, as the chat requests are.
"""

from __future__ import annotations

import re
import struct
from email.parser import BytesParser
from email.policy import HTTP
from typing import Any

SAMPLE_RATE = 48_000
FRAME_SAMPLES = 960  # 20 ms at 48 kHz
PRE_SKIP = 312
SILENT_FRAME = b"\xf8\xff\xfe"  # TOC: CELT-only fullband 20 ms mono, one frame; payload: silence
_MARKER = re.compile(rb"SAY:([^\x00\n]{1,2000})")
_FAIL = re.compile(r"FAIL (\d{3})")
_WAIT = re.compile(r"WAIT (\d{1,6}) (.+)", re.S)


def multipart(body: bytes, ctype: str) -> dict[str, Any]:
    """Fields of a multipart/form-data body: text as str, files as {"filename", "content_type", "data"}."""
    message = BytesParser(policy=HTTP).parsebytes(b"Content-Type: " + ctype.encode("latin-1", "replace") +
                                                  b"\r\n\r\n" + body)
    fields: dict[str, Any] = {}
    if not message.is_multipart():
        return fields
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if not name:
            continue
        payload = part.get_payload(decode=True)
        data = payload if isinstance(payload, bytes) else b""
        filename = part.get_filename()
        if filename is None:
            fields[str(name)] = data.decode("utf-8", "replace")
        else:
            fields[str(name)] = {"filename": filename, "content_type": part.get_content_type(), "data": data}
    return fields


def transcript_of(data: bytes) -> str:
    found = _MARKER.search(data)
    if found:
        return found.group(1).decode("utf-8", "replace").strip()
    return f"voice message of {len(data)} bytes"


def delay_of(transcript: str) -> tuple[float, str]:
    """(seconds to wait, the transcript) of a `WAIT <ms> <text>` transcript; (0, transcript) otherwise."""
    m = _WAIT.fullmatch(transcript)
    return (min(int(m.group(1)), 600_000) / 1000, m.group(2)) if m else (0.0, transcript)


def failure_of(transcript: str) -> int | None:
    m = _FAIL.fullmatch(transcript)
    return int(m.group(1)) if m and 400 <= int(m.group(1)) <= 599 else None


def transcription_body(text: str, response_format: str) -> tuple[str, bytes]:
    """(content type, body) of a transcription in OpenAI's shape for `response_format`."""
    import json

    if response_format == "text":
        return "text/plain; charset=utf-8", text.encode()
    if response_format == "verbose_json":
        body: dict[str, Any] = {"task": "transcribe", "language": "english", "duration": 1.0, "text": text,
                                "segments": []}
    else:
        body = {"text": text}
    return "application/json", json.dumps(body).encode()


def frames_for(text: str) -> int:
    return max(5, min(1500, len(text) // 60 + 5))


# ---- Ogg Opus, by hand (RFC 3533 pages, RFC 7845 headers) ---------------------------------------

def _crc_table() -> list[int]:
    table = []
    for i in range(256):
        r = i << 24
        for _ in range(8):
            r = ((r << 1) ^ 0x04C11DB7) if r & 0x80000000 else (r << 1)
        table.append(r & 0xFFFFFFFF)
    return table


_CRC = _crc_table()


def _crc(data: bytes) -> int:
    crc = 0
    for byte in data:
        crc = ((crc << 8) & 0xFFFFFFFF) ^ _CRC[((crc >> 24) & 0xFF) ^ byte]
    return crc


def _page(packets: list[bytes], granule: int, serial: int, sequence: int, flags: int) -> bytes:
    lacing = b""
    for packet in packets:
        lacing += b"\xff" * (len(packet) // 255) + bytes([len(packet) % 255])
    header = struct.pack("<4sBBqIIIB", b"OggS", 0, flags, granule, serial, sequence, 0, len(lacing)) + lacing
    body = b"".join(packets)
    crc = _crc(header + body)
    return header[:22] + struct.pack("<I", crc) + header[26:] + body


def ogg_opus_silence(frames: int, serial: int = 0x5049434F) -> bytes:
    """A valid Ogg Opus file of `frames` × 20 ms of silence (mono, 48 kHz)."""
    head = b"OpusHead" + struct.pack("<BBHIhB", 1, 1, PRE_SKIP, SAMPLE_RATE, 0, 0)
    vendor = b"picobot fake"
    tags = b"OpusTags" + struct.pack("<I", len(vendor)) + vendor + struct.pack("<I", 0)
    pages = [_page([head], 0, serial, 0, 0x02), _page([tags], 0, serial, 1, 0)]
    sequence, done, per_page = 2, 0, 50  # one page per second
    while done < frames:
        count = min(per_page, frames - done)
        done += count
        last = done >= frames
        pages.append(_page([SILENT_FRAME] * count, done * FRAME_SAMPLES, serial, sequence, 0x04 if last else 0))
        sequence += 1
    return b"".join(pages)


def wav_silence(frames: int) -> bytes:
    """A PCM WAV (16 bit mono, 16 kHz) of `frames` × 20 ms of silence."""
    rate, samples = 16_000, frames * 320
    data = b"\x00\x00" * samples
    return (b"RIFF" + struct.pack("<I", 36 + len(data)) + b"WAVE" +
            b"fmt " + struct.pack("<IHHIIHH", 16, 1, 1, rate, rate * 2, 2, 16) +
            b"data" + struct.pack("<I", len(data)) + data)


def speech_body(text: str, response_format: str) -> tuple[str, bytes]:
    frames = frames_for(text)
    if response_format == "opus":
        return "audio/ogg", ogg_opus_silence(frames)
    return "audio/wav", wav_silence(frames)
