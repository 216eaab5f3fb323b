"""What a call costs (from `prices`, else the documented estimates) and how big a request is."""

from __future__ import annotations

from typing import Any

from picobot.config.budgets import DEFAULT_PRICES, Price

CHARS_PER_TOKEN = 4


class PriceTable:
    """USD per million tokens by "<provider>:<model>", then "*:<model>"; a model with none costs 0."""

    def __init__(self, configured: dict[str, Price]) -> None:
        table = {k: Price(**v) for k, v in DEFAULT_PRICES.items()}
        table.update(configured)
        self._table = table
        self._found: dict[tuple[str, str], Price | None] = {}

    def price(self, provider: str, model: str) -> Price | None:
        key = (provider, model)
        if key not in self._found:  # a handful of models per process: remember each answer
            self._found[key] = self._table.get(f"{provider}:{model}") or self._table.get(f"*:{model}")
        return self._found[key]

    def cost(self, provider: str, model: str, input_tokens: int, output_tokens: int, cached: int = 0) -> float:
        """Estimated USD of a call; `cached` is the part of the input read from the provider's cache."""
        p = self.price(provider, model)
        if p is None:
            return 0.0
        cached = min(max(cached, 0), input_tokens)
        cached_price = p.input if p.cached_input is None else p.cached_input
        return ((input_tokens - cached) * p.input + cached * cached_price + output_tokens * p.output) / 1e6


def request_tokens(messages: Any, tools_chars: int) -> int:
    """A cheap estimate of a request's input tokens: its characters / 4."""
    chars = tools_chars
    for m in messages:
        content = m.content
        if isinstance(content, str):
            chars += len(content)
        elif isinstance(content, list):
            chars += sum(len(b.get("text") or "") if isinstance(b, dict) else 0 for b in content)
        chars += len(m.reasoning_content or "")
        for call in m.tool_calls:
            chars += len(call.name) + len(call.arguments)
    return chars // CHARS_PER_TOKEN + 1
