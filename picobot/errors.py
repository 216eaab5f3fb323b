"""One error hierarchy for PicoBot.

    PicoBotError
    ├── ConfigError            bad or missing configuration (carries the key path)
    ├── ProviderError          an LLM call failed
    │   ├── ProviderRateLimited      429, retryable
    │   ├── ProviderUnavailable      5xx, timeouts, dropped streams, retryable
    │   ├── ProviderAuthError        401/403, not retryable
    │   ├── ProviderBadRequest       other 4xx, not retryable
    │   └── ContextLengthExceeded    the prompt does not fit the model's window
    ├── ToolError              a tool failed; its text is shown to the model
    │   ├── ToolArgumentsError       arguments failed JSON parsing or schema validation
    │   ├── NetworkRefused           the network guard refused an address (says how to allow it)
    │   ├── SkillError               a skill cannot be read or written (says what to fix)
    │   │   └── SkillNotFound            no skill of that name
    │   └── MemoryRejected           a memory or knowledge write refused (scope, size, bad text)
    ├── InputRejected          bad user input at the edge (oversize, malformed frame, ...)
    ├── StorageError           the database failed
    ├── ModelCallRefused       a plugin refused a model call before it was sent (a budget); ends the turn
    └── TurnCancelled          /stop cancelled the running turn

Errors become user-facing text only at the edges (HTTP/WebSocket handlers, tasks, CLI).
Messages never contain secrets: providers redact keys before raising.
"""

from __future__ import annotations


class PicoBotError(Exception):
    """Base of every error PicoBot raises on purpose."""


class ConfigError(PicoBotError):
    problems: list[tuple[str, str]]  # every (key_path, reason) when validation found several (config.loader)

    def __init__(self, key_path: str, reason: str):
        self.key_path = key_path
        self.reason = reason
        super().__init__(f"config error at {key_path or '<root>'}: {reason}")


class ProviderError(PicoBotError):
    retryable = False
    retry_after: float | None = None  # seconds the server asked to wait (set by providers._common)

    def __init__(self, message: str, *, status: int | None = None, provider: str = ""):
        self.status = status
        self.provider = provider
        super().__init__(message)


class ProviderRateLimited(ProviderError):
    retryable = True


class ProviderUnavailable(ProviderError):
    retryable = True


class ProviderAuthError(ProviderError):
    pass


class ProviderBadRequest(ProviderError):
    pass


class ContextLengthExceeded(ProviderError):
    pass


class ToolError(PicoBotError):
    """A tool failure the model can read and act on."""


class ToolArgumentsError(ToolError):
    pass


class NetworkRefused(ToolError):
    """A connection the network policy does not allow; the text says why and how to allow it."""


class SkillError(ToolError):
    """A skill operation refused or failed; the text says what to fix (shown to the model or the web user)."""


class SkillNotFound(SkillError):
    pass


class MemoryRejected(ToolError):
    """A memory or knowledge operation refused (bad input, wrong scope, too large); the text says why."""


class InputRejected(PicoBotError):
    def __init__(self, code: str, message: str):
        self.code = code
        super().__init__(message)


class StorageError(PicoBotError):
    pass


class ModelCallRefused(PicoBotError):
    """A `picobot_model_call_gate` hook refused the call: the turn ends with `status` and this message."""

    def __init__(self, status: str, message: str):
        self.status = status
        super().__init__(message)


class TurnCancelled(PicoBotError):
    pass
