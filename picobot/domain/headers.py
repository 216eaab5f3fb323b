"""Request headers as the web layer hands them to the framework-free handlers (webhooks, channel webhooks).

Either a plain dict (tests, other front ends) or werkzeug's `Headers`, which is not a `Mapping` but looks
names up case-insensitively; the handlers use only these two methods.
"""

from __future__ import annotations

from typing import Iterable, Protocol


class RequestHeaders(Protocol):
    def get(self, key: str) -> str | None: ...

    def items(self) -> Iterable[tuple[str, str]]: ...
