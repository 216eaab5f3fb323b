"""Speech in another format made into Ogg Opus (what Telegram and Feishu play as a voice note).

PicoBot asks the speech server for `opus` (OpenAI's speech API and most local servers send Ogg Opus),
so usually nothing is converted. When the server sends another format (`voice.tts.format` set to
mp3 or wav, or a server that ignores `response_format`), `ffmpeg` converts it when it is on PATH;
without ffmpeg the audio is sent as it is, as an audio file rather than a voice note.
"""

from __future__ import annotations

import logging
import shutil
import subprocess

from picobot.plugins.types import AudioClip

log = logging.getLogger("picobot.voice")

TIMEOUT_SECS = 60


def ffmpeg() -> str | None:
    return shutil.which("ffmpeg")


def to_ogg_opus(clip: AudioClip) -> AudioClip:
    """The clip as Ogg Opus when it is not already and ffmpeg can make it; else the clip unchanged."""
    if clip.format == "opus":
        return clip
    binary = ffmpeg()
    if binary is None:
        return clip
    try:
        done = subprocess.run([binary, "-hide_banner", "-loglevel", "error", "-i", "pipe:0", "-vn", "-c:a", "libopus",
                               "-b:a", "32k", "-f", "ogg", "pipe:1"], input=clip.data, capture_output=True,
                              timeout=TIMEOUT_SECS, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("ffmpeg could not convert speech to Ogg Opus (%s); sent as %s", type(exc).__name__, clip.format)
        return clip
    if done.returncode != 0 or not done.stdout.startswith(b"OggS"):
        log.warning("ffmpeg could not convert speech to Ogg Opus (exit %s); sent as %s", done.returncode, clip.format)
        return clip
    return AudioClip(data=done.stdout, mime="audio/ogg", format="opus")
