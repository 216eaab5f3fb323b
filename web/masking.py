"""Text from the database shown to the operator, with secrets masked and length capped.

Error texts and model output (a delivery's last error, a sub-agent's result) can hold a credential
the platform or a tool echoed back. Before such text leaves through the API it passes `redact` with
the config's own secret values and the credential shapes it knows.
"""

from __future__ import annotations

from typing import Any

from flask import current_app

from picobot.security.redact import redact, redact_tree

MARGIN = 1_000  # masked beyond a cut: a secret up to this long that starts before the cut is masked whole


def _secrets() -> frozenset[str]:
    return current_app.extensions["picobot"].secrets  # the config's secret values, computed once per process


def shown(text: Any, cap: int | None = None) -> str | None:
    """`text` masked, then cut to `cap` characters (None stays None).

    Masked before the cut, so a cut never leaves half a secret the patterns no longer recognise; only
    the first `cap + MARGIN` characters are masked, since masking is what a long text costs most.
    """
    if text is None:
        return None
    raw = str(text)
    if cap is None:
        return redact(raw, _secrets())
    return redact(raw[:cap + MARGIN], _secrets())[:cap]


def shown_tree(value: Any) -> Any:
    """A JSON-like value with every string in it masked."""
    return redact_tree(value, _secrets())
