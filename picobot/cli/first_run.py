"""What `picobot up` tells a newcomer when no model is configured, and where a local Ollama answers.

The probe only ever talks to loopback (Ollama's default 127.0.0.1:11434), with a short timeout.
"""

from __future__ import annotations

import json
import urllib.request

OLLAMA_URL = "http://127.0.0.1:11434"
PROBE_TIMEOUT_SECS = 0.5


def ollama_models(base: str = OLLAMA_URL, timeout: float = PROBE_TIMEOUT_SECS) -> list[str] | None:
    """The models a local Ollama serves on its OpenAI-compatible endpoint; None when none answers."""
    try:
        with urllib.request.urlopen(f"{base}/v1/models", timeout=timeout) as resp:  # noqa: S310 (loopback only)
            data = json.loads(resp.read(1_000_000) or b"{}")
    except (OSError, ValueError):
        return None
    rows = data.get("data") if isinstance(data, dict) else None
    return [str(m.get("id")) for m in rows if isinstance(m, dict) and m.get("id")] if isinstance(rows, list) else []


def no_model_lines(ollama: list[str] | None) -> list[str]:
    """The banner's lines for a PicoBot with no provider configured."""
    lines = ["  no model is configured yet: messages will be answered with an error until you set one.",
             "    OpenAI or any OpenAI-compatible server: OPENAI_API_KEY=... [OPENAI_BASE_URL=...] [OPENAI_MODEL=...]",
             "    Anthropic: ANTHROPIC_API_KEY=...      or `providers` in config.json (docs/CONFIGURATION.md)",
             "    just looking? `picobot up --demo` runs the same stack with the built-in demo model"]
    if ollama is not None:
        model = ollama[0] if ollama else "<model>"
        lines.append(f"    a local Ollama answers at {OLLAMA_URL}: OPENAI_BASE_URL={OLLAMA_URL}/v1 "
                     f"OPENAI_API_KEY=ollama OPENAI_MODEL={model} picobot up")
    return lines
