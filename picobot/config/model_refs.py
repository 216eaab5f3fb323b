"""Model references: `"<provider>:<model>"` or the name of a profile, resolved in one place.

A reference is accepted wherever an agent names a model beside its own (`agents.<name>.fallback`,
`agents.<name>.models`) and by the `/model` command. Errors are ValueErrors whose text never
repeats more than a short, escaped part of the reference (it may be hostile input).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

MAX_REF_CHARS = 200
PROFILE_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
DEFAULT_WORD = "default"  # `/model default` goes back to the agent's own model: no profile may take it
SHAPE = "'<provider>:<model>' or a profile name"
# C0 and C1 controls, lone surrogates, line/paragraph separators, and U+FFFD (what the gateway turns
# undecodable input into)
_BAD_CHARS = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff\u2028\u2029\ufffd]")


@dataclass(frozen=True)
class ModelChoice:
    """A provider key and a model key of the config."""

    provider: str
    model: str

    @property
    def ref(self) -> str:
        return f"{self.provider}:{self.model}"


def shown(text: str, limit: int = 64) -> str:
    """`text` quoted and escaped for an error message: control characters and lone surrogates visible."""
    cut = text[:limit] + ("…" if len(text) > limit else "")
    return repr(cut.encode("utf-8", "backslashreplace").decode("utf-8"))


def _known(names: Mapping[str, Any]) -> str:
    listed = sorted(names)
    return (", ".join(listed[:20]) + (", …" if len(listed) > 20 else "")) or "none"


def _bad_text(ref: str) -> str | None:
    if not ref:
        return f"is empty; expected {SHAPE}"
    if len(ref) > MAX_REF_CHARS:
        return f"is {len(ref)} characters long; a model reference has at most {MAX_REF_CHARS}"
    if _BAD_CHARS.search(ref):
        return f"{shown(ref)} contains control characters or invalid text; expected {SHAPE}"
    if ref != ref.strip():
        return f"{shown(ref)} has spaces around it; expected {SHAPE}"
    return None


def resolve_ref(ref: Any, providers: Mapping[str, Any], models: Mapping[str, Any],
                profiles: Mapping[str, Any]) -> ModelChoice:
    """The provider and model `ref` names; ValueError saying what is wrong."""
    if not isinstance(ref, str):
        raise ValueError(f"must be a string ({SHAPE}), not {type(ref).__name__}")
    problem = _bad_text(ref)
    if problem:
        raise ValueError(problem)
    provider, sep, model = ref.partition(":")
    if not sep:
        profile = profiles.get(ref)
        if profile is None:
            raise ValueError(f"unknown profile {shown(ref)} (profiles: {_known(profiles)}); "
                             f"expected {SHAPE}")
        provider, model = profile.provider, profile.model
    elif not provider or not model:
        raise ValueError(f"expected {SHAPE}, got {shown(ref)}")
    if provider not in providers:
        raise ValueError(f"unknown provider {shown(provider)} (known: {_known(providers)})")
    if model not in models:
        raise ValueError(f"unknown model {shown(model)} (known: {_known(models)})")
    return ModelChoice(provider, model)


def check_profile_name(name: str) -> str | None:
    """Why `name` cannot be a profile's name, or None."""
    if not PROFILE_NAME.fullmatch(name):
        return "a profile name is 1-64 letters, digits, '_', '.' or '-' (no ':')"
    if name == DEFAULT_WORD:
        return "'default' is reserved: `/model default` means the agent's own model"
    return None


def unique(choices: list[ModelChoice]) -> list[ModelChoice]:
    """Each pair once, first place kept."""
    return list(dict.fromkeys(choices))
