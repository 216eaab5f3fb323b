"""The `budgets` and `prices` sections of config.json (picobot/budgets enforces them).

Every limit is optional (absent or null: no limit). Token limits are whole numbers, cost limits
US dollars; none may be negative, NaN, infinite or absurdly large, and a string or a boolean where a
number belongs is an error, not a conversion. A `prices` key is `<provider>:<model>`: the
`providers` key and the model id, or `*` for any provider.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Iterator

from pydantic import BaseModel, ConfigDict, Field

from picobot.security.redact import masked_value

MAX_TOKENS = 10**15  # far above any real budget; bounds what Redis counters hold
MAX_USD = 1e9
MAX_PRICE = 1e6  # US dollars per million tokens
PRICE_KEY = re.compile(r"^(\*|[A-Za-z0-9_.\-]{1,64}):[^\s:][^\s]{0,255}$")

Tokens = Annotated[int | None, Field(default=None, strict=True, ge=0, le=MAX_TOKENS)]
Usd = Annotated[float | None, Field(default=None, strict=True, ge=0, le=MAX_USD, allow_inf_nan=False)]
PerMillion = Annotated[float, Field(strict=True, ge=0, le=MAX_PRICE, allow_inf_nan=False)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, protected_namespaces=())

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        for name, value in super().__repr_args__():
            yield name, masked_value(name or "", value)


class SessionBudget(_Strict):
    """One dialog's whole life (it never resets; `/new` starts a fresh dialog)."""

    tokens: Tokens = None
    cost_usd: Usd = None


class UserBudget(_Strict):
    """One sender (`<channel>:<sender_id>`), per UTC day and per UTC month, across all their dialogs."""

    daily_tokens: Tokens = None
    daily_cost_usd: Usd = None
    monthly_tokens: Tokens = None
    monthly_cost_usd: Usd = None


class JobBudget(_Strict):
    """One scheduled job: each run (one due time's turn), and per UTC day."""

    run_tokens: Tokens = None
    run_cost_usd: Usd = None
    daily_tokens: Tokens = None
    daily_cost_usd: Usd = None


class GlobalBudget(_Strict):
    """Everything this deployment spends per UTC day."""

    daily_tokens: Tokens = None
    daily_cost_usd: Usd = None


class BudgetsConfig(_Strict):
    session: SessionBudget = Field(default_factory=SessionBudget)
    user: UserBudget = Field(default_factory=UserBudget)
    job: JobBudget = Field(default_factory=JobBudget)
    global_: GlobalBudget = Field(default_factory=GlobalBudget, alias="global")
    # A call's size is estimated as its input (characters / 4) plus the model's max_tokens, or this
    # when the model sets none.
    output_estimate_tokens: int = Field(default=1024, strict=True, ge=1, le=10_000_000)

    def any_limit(self) -> bool:
        """True when some limit is set (otherwise only the ledger is written)."""
        return any(v is not None for part in (self.session, self.user, self.job, self.global_)
                   for v in part.model_dump().values())


class Price(_Strict):
    """US dollars per million tokens; cached input defaults to the input price."""

    input: PerMillion
    output: PerMillion
    cached_input: PerMillion | None = None


# Estimates of list prices (USD per million tokens) of common models, used when `prices` names no
# price for a call's `<provider>:<model>`; `*` matches any provider key. Check your provider's price
# list and set `prices` for what you pay: a model with no price counts tokens but costs 0.
DEFAULT_PRICES: dict[str, dict[str, float]] = {
    "*:gpt-4o": {"input": 2.5, "output": 10.0, "cached_input": 1.25},
    "*:gpt-4o-mini": {"input": 0.15, "output": 0.6, "cached_input": 0.075},
    "*:gpt-4.1": {"input": 2.0, "output": 8.0, "cached_input": 0.5},
    "*:gpt-4.1-mini": {"input": 0.4, "output": 1.6, "cached_input": 0.1},
    "*:o3-mini": {"input": 1.1, "output": 4.4, "cached_input": 0.55},
    "*:claude-3-5-haiku-latest": {"input": 0.8, "output": 4.0, "cached_input": 0.08},
    "*:claude-sonnet-4-0": {"input": 3.0, "output": 15.0, "cached_input": 0.3},
    "*:claude-opus-4-0": {"input": 15.0, "output": 75.0, "cached_input": 1.5},
    "*:deepseek-chat": {"input": 0.27, "output": 1.1, "cached_input": 0.07},
}


def check_price_keys(prices: dict[str, Price]) -> dict[str, Price]:
    for key in prices:
        if not PRICE_KEY.match(key):
            shown = key[:80].encode("utf-8", "backslashreplace").decode("utf-8")
            raise ValueError(f"key {shown!r} is not '<provider>:<model>' (or '*:<model>')")
    return prices

