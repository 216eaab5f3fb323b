"""The shape of config.json, as pydantic models.

Every section forbids unknown keys so a typo (`gateway.prot`) fails at start instead of
being silently ignored. Channels are the one exception: each channel type brings its own
keys (app_id, app_secret, token, ...), read by that channel's adapter.

`Config` also carries a few values that are not in the file (`home`, `config_path`,
`database_url`, `redis_url`); the loader fills them from the environment and they are
left out of `model_dump()`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Iterator, Literal, Mapping, Union
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import (AfterValidator, AliasChoices, BaseModel, ConfigDict, Field, PrivateAttr, field_validator,
                      model_validator)

from picobot.config.budgets import BudgetsConfig, Price, check_price_keys
from picobot.config.delegates import DelegateConfig, check_delegate_names
from picobot.config.home import RUNTIME_KEYS, default_database_url, picobot_home  # noqa: F401 (re-exported)
from picobot.config.model_refs import ModelChoice, check_profile_name, resolve_ref, shown, unique
from picobot.config.observability import LoggingConfig, MetricsConfig, TracingConfig
from picobot.config.workspace import choose_workspace
from picobot.domain.cron import check_cron  # noqa: F401 (re-exported)
from picobot.errors import ConfigError
from picobot.security.netpolicy import parse_allow_entry
from picobot.security.redact import masked_value

def _blank_to_none(value: Any) -> Any:
    # An env var set to "" (common in .env templates) means "not set".
    return None if isinstance(value, str) and not value.strip() else value


def _check_http_url(value: str | None) -> str | None:
    # The message never repeats the value: a URL may carry credentials.
    if value is not None and not value.startswith(("http://", "https://")):
        raise ValueError("must be an http:// or https:// URL")
    return value


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, protected_namespaces=())

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        # A config object may end up in a log line or a traceback; keep secrets out.
        for name, value in super().__repr_args__():
            yield name, masked_value(name or "", value)


# --- providers, models, agents ------------------------------------------------------


class ProviderConfig(_Section):
    # "openai" | "anthropic", or a type a plugin brings (picobot_providers); an unknown one fails at start
    type: str = Field(default="openai", pattern=r"^[a-z][a-z0-9_-]{0,39}$")
    base_url: str | None = None
    api_key: str | None = Field(default=None, repr=False)
    extra_headers: dict[str, str] = Field(default_factory=dict)
    llm_timeout_secs: float = Field(default=120.0, gt=0)
    memory_maintenance_timeout_secs: float = Field(default=600.0, gt=0)
    max_retries: int = Field(default=3, ge=0)
    # Circuit breaker (used when an agent has a fallback chain): skipped for the cool-down after
    # this many consecutive failures, then probed again. 0 = never skipped.
    breaker_failures: int = Field(default=3, ge=0, le=1000)
    breaker_cooldown_secs: float = Field(default=30.0, gt=0, le=86400)

    _blank = field_validator("base_url", "api_key", mode="before")(_blank_to_none)
    _url = field_validator("base_url")(_check_http_url)


class ModelConfig(_Section):
    model_id: str = Field(min_length=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    max_tokens: int | None = Field(default=None, gt=0)
    context_window_tokens: int = Field(default=128000, gt=0)
    # Extra request-body fields passed through to the provider as-is.
    options: dict[str, Any] = Field(default_factory=dict)


class AgentConfig(_Section):
    provider: str = "default"
    model: str = "default"
    max_tool_iterations: int = Field(default=100, ge=1)
    tool_result_max_chars: int = Field(default=20000, gt=0)
    context_tool_result_trim_chars: int = Field(default=2000, ge=0)
    system_prompt: str | None = None
    # "<provider>:<model>" keys (or profile names) tried in order when the agent's own provider is unavailable
    fallback: list[str] = Field(default_factory=list, max_length=16)
    # more "<provider>:<model>" keys (or profile names) a dialog may switch to with /model
    models: list[str] = Field(default_factory=list, max_length=64)


class ProfileConfig(_Section):
    """A named `<provider>:<model>` pair, accepted wherever such a reference is."""

    provider: str = Field(min_length=1)
    model: str = Field(min_length=1)


# --- gateway ------------------------------------------------------------------------


def _count_not_bool(value: Any) -> Any:
    if isinstance(value, bool):  # pydantic would read true as 1
        raise ValueError("must be a whole number (0 = off), not true/false")
    return value


class RateLimitsConfig(_Section):
    # 0 turns a limit off. Counters live in Redis; when Redis is down nobody is limited.
    messages_per_chat_per_minute: int = Field(default=30, ge=0)
    messages_per_device_per_minute: int = Field(default=120, ge=0)
    new_dialogs_per_chat_per_hour: int = Field(default=60, ge=0)
    sockets_per_device: int = Field(default=64, ge=0)

    _counts = field_validator("*", mode="before")(_count_not_bool)


class OpenAIApiConfig(_Section):
    """The OpenAI-compatible endpoint on the gateway (`/v1/chat/completions`, `/v1/models`)."""

    enabled: bool = False  # off: every /v1 path answers 404 in OpenAI's error shape
    # How long a request waits for its turn's answer; then 504 (the answer still lands in the dialog).
    timeout_secs: float = Field(default=300.0, gt=0, le=3600)


class GatewayConfig(_Section):
    host: str = "127.0.0.1"
    port: int = Field(default=19876, ge=0, le=65535)  # 0 = any free port (tests)
    show_tool_results: bool = False
    agent_prompt_reinject_every: int = Field(default=100, ge=0)
    max_message_chars: int = Field(default=32000, gt=0)
    max_frame_bytes: int = Field(default=1048576, gt=0)
    session_ttl_secs: int | None = Field(default=None, gt=0)
    turn_lease_secs: int = Field(default=30, gt=0)
    sweep_interval_secs: float = Field(default=5.0, gt=0)
    snapshot_interval_ms: int = Field(default=50, ge=0)
    max_turn_attempts: int = Field(default=2, ge=1)
    public_url: str | None = None
    # The web UI, /ws and /api need a paired device (see docs/WEB_UI.md); false only on a trusted network.
    pairing_required: bool = True
    rate_limits: RateLimitsConfig = Field(default_factory=RateLimitsConfig)
    # Reverse proxies in front of PicoBot (hops whose X-Forwarded-* headers are trusted); 0 = none:
    # the headers are ignored and the peer address is the client's.
    trusted_proxies: int = Field(default=0, ge=0, le=8)
    # Decoded bytes of all `data:` images in one message (they do not count as characters).
    max_image_bytes: int = Field(default=5 * 1024 * 1024, gt=0)
    # Decoded bytes of the `audio` block (a voice message) of one message.
    max_audio_bytes: int = Field(default=10 * 1024 * 1024, gt=0, le=100 * 1024 * 1024)
    # A socket whose client stops reading is dropped (close 1013) when this many frames or bytes
    # wait for it, or when it takes no data for ws_send_timeout_secs; other sockets never wait.
    ws_send_queue_frames: int = Field(default=256, ge=2)
    ws_send_queue_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    ws_send_timeout_secs: float = Field(default=10.0, gt=0)
    openai_api: OpenAIApiConfig = Field(default_factory=OpenAIApiConfig)

    _blank = field_validator("public_url", mode="before")(_blank_to_none)
    _url = field_validator("public_url")(_check_http_url)
    _hops = field_validator("trusted_proxies", mode="before")(_count_not_bool)


# --- scheduler ----------------------------------------------------------------------
# The cron grammar lives in picobot.domain.cron (the scheduler parses with it too); check_cron
# is re-exported here for picobot.config's importers.


class DelaySchedule(_Section):
    type: Literal["delay"]
    seconds: int = Field(gt=0)


class IntervalSchedule(_Section):
    type: Literal["interval"]
    seconds: int = Field(gt=0)


class AtSchedule(_Section):
    type: Literal["at"]
    at: datetime  # ISO 8601; without an offset it is read in time.timezone


class CronSchedule(_Section):
    type: Literal["cron"]
    expression: str

    _cron = field_validator("expression")(check_cron)


Schedule = Annotated[
    Union[DelaySchedule, IntervalSchedule, AtSchedule, CronSchedule],
    Field(discriminator="type"),
]

JobKind = Literal["internal_event", "outbound_message", "agent_task", "silent_agent_task"]
AGENT_JOB_KINDS = ("agent_task", "silent_agent_task")


class JobTarget(_Section):
    channel: str = Field(min_length=1)
    chat_id: str = Field(min_length=1)
    # silent_agent_task only: the background session; absent means scheduler/{job_id}.
    session_chat_id: str | None = None


def _job_zone(value: str | None) -> str | None:
    if value is not None:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown time zone {value[:64]!r}; use an IANA name such as 'Asia/Shanghai'") from None
    return value


class JobConfig(_Section):
    id: str = Field(min_length=1)
    kind: JobKind
    schedule: Schedule
    target: JobTarget | None = None
    payload: dict[str, Any] = Field(default_factory=dict)
    enabled: bool = True
    timezone: str | None = None  # IANA name for its cron and offset-less `at`; absent means time.timezone

    _zone = field_validator("timezone")(_job_zone)

    @model_validator(mode="after")
    def _kind_needs(self) -> JobConfig:
        if self.kind != "internal_event" and self.target is None:
            raise ValueError(f"a {self.kind} job needs a target (channel and chat_id)")
        prompt = self.payload.get("prompt")
        if self.kind in AGENT_JOB_KINDS and not (isinstance(prompt, str) and prompt.strip()):
            raise ValueError(f"a {self.kind} job needs payload.prompt (non-empty text)")
        return self


MAX_TICK_SECS = 5  # beat wakes at least this often, whatever tick_resolution_ms says (worker/celery_app.py)


class SchedulerConfig(_Section):
    enabled: bool = True
    tick_resolution_ms: int = Field(default=1000, gt=0)
    worker_queue_capacity: int = Field(default=128, gt=0)
    misfire_policy: Literal["skip", "run_once"] = "skip"
    misfire_grace_secs: int = Field(default=3600, ge=0)  # run_once: catch up only a due time this recent
    # beat's lock in Redis (renewed every tick): a standby beat takes over this long after the running one died
    beat_lock_secs: int = Field(default=30, gt=0, le=3600)  # Redis takes no expiry beyond its integer range
    jobs: list[JobConfig] = Field(default_factory=list)

    @model_validator(mode="after")
    def _lock_outlives_ticks(self) -> "SchedulerConfig":
        tick = min(self.tick_resolution_ms / 1000, MAX_TICK_SECS)
        if self.beat_lock_secs < 3 * tick:
            raise ValueError(f"beat_lock_secs ({self.beat_lock_secs}) must be at least three ticks "
                             f"({3 * tick:g} s with tick_resolution_ms {self.tick_resolution_ms}): beat renews its "
                             "lock once a tick, and a lock that lapses between ticks lets a second beat in")
        return self

    @field_validator("jobs")
    @classmethod
    def _unique_ids(cls, jobs: list[JobConfig]) -> list[JobConfig]:
        seen: set[str] = set()
        for job in jobs:
            if job.id in seen:
                raise ValueError(f"job id {job.id!r} is used twice")
            seen.add(job.id)
        return jobs


# --- channels, skills, sub-agents, MCP, tools, time ---------------------------------


class ChannelConfig(BaseModel):
    # Open on purpose: each channel adapter validates its own keys.
    model_config = ConfigDict(extra="allow", protected_namespaces=())

    type: str = ""  # empty means "the same as the channel's key"
    enabled: bool = False
    allow_from: list[str] = Field(default_factory=lambda: ["*"])
    agent: str = "default"

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        for name, value in super().__repr_args__():
            yield name, masked_value(name or "", value)


SkillSource = Literal[
    "user", "user_agent", "user_openclaw", "project", "project_agent", "project_openclaw"
]


class SkillsConfig(_Section):
    enabled: bool = True
    # Lowest priority first: a later source overrides a same-named skill.
    sources: list[SkillSource] = Field(
        default_factory=lambda: list[SkillSource]([
            "user", "user_agent", "user_openclaw", "project", "project_agent", "project_openclaw"
        ])
    )
    max_index_chars: int = Field(default=4000, gt=0)
    max_listed_skills: int = Field(default=32, ge=0)


class MemoryConfig(_Section):
    enabled: bool = True
    recall_limit: int = Field(default=5, ge=0, le=50)  # knowledge entries recalled into each turn; 0 = off
    max_content_chars: int = Field(default=4000, gt=0, le=100_000)  # one memory's content
    # Memory maintenance (docs/MEMORY.md): the scheduled pass, and its bounds per run.
    maintenance_enabled: bool = True
    maintenance_max_entries_per_scope: int = Field(default=100, ge=2, le=1000)  # newest first; older wait
    maintenance_max_scopes_per_run: int = Field(default=20, ge=1, le=10_000)  # the rest go next run
    maintenance_summary_max_chars: int = Field(default=2000, ge=100, le=20_000)  # one scope's summary

    _maintenance_counts = field_validator("maintenance_max_entries_per_scope", "maintenance_max_scopes_per_run",
                                          "maintenance_summary_max_chars", mode="before")(_count_not_bool)


class BrowserConfig(_Section):
    """The `browser` tool (docs/BROWSER.md): headless system Chromium driven by Playwright, one per worker process."""

    enabled: bool = True
    executable: str | None = None  # unset: $PICOBOT_CHROMIUM, else /usr/bin/chromium
    action_timeout_secs: float = Field(default=30.0, gt=0, le=600)
    idle_close_secs: float = Field(default=3600.0, gt=0, le=7 * 86400)  # a dialog's temporary context, a profile
    max_page_memory_mb: int = Field(default=512, ge=64, le=16384)  # V8 heap of a page (--max-old-space-size)
    max_text_chars: int = Field(default=8000, ge=500, le=200_000)  # page text in one answer
    max_download_mb: int = Field(default=50, ge=1, le=4096)
    extra_args: list[str] = Field(default_factory=list, max_length=64)  # more Chromium command-line flags
    profiles_tool: bool = False  # offer `browser_profiles` (list, label, delete the saved profiles)

    _counts = field_validator("max_page_memory_mb", "max_text_chars", "max_download_mb", mode="before")(
        _count_not_bool)


class TitlesConfig(_Section):
    """Automatic dialog titles (docs/CONFIGURATION.md `titles`): one short model call after a dialog's first answer."""

    enabled: bool = True
    provider: str | None = None  # a key of `providers`; None: the dialog's agent's
    model: str | None = None  # a key of `models`; None: the dialog's agent's
    max_chars: int = Field(default=60, ge=8, le=256)  # a longer reply is cut (sessions.title holds 256)
    timeout_secs: float = Field(default=30.0, gt=0, le=600)

    _blank = field_validator("provider", "model", mode="before")(_blank_to_none)
    _count = field_validator("max_chars", mode="before")(_count_not_bool)


class SubagentsConfig(_Section):
    enabled: bool = True
    sources: list[Literal["user", "project"]] = Field(
        default_factory=lambda: list[Literal["user", "project"]](["user", "project"]))
    # Limits of every run; a definition's max_execution_secs can only lower timeout_secs.
    max_depth: int = Field(default=2, ge=1, le=8)  # 1: sub-agents cannot delegate further
    max_children_per_turn: int = Field(default=8, ge=1, le=64)  # runs one agent may start in one turn
    max_iterations: int = Field(default=30, ge=1, le=1000)  # tool rounds of one run
    timeout_secs: float = Field(default=600.0, gt=0, le=86_400)

    @field_validator("max_depth", "max_children_per_turn", "max_iterations", mode="before")
    @classmethod
    def _whole_number(cls, value: Any) -> Any:
        if isinstance(value, bool):  # pydantic would read true as 1
            raise ValueError("must be a whole number, not true/false")
        return value


McpType = Literal["stdio", "streamableHttp", "http", "sse"]
HTTP_MCP_TYPES = ("streamableHttp", "http", "sse")


class McpServerConfig(_Section):
    """One entry of `mcpServers`, in the Claude Desktop / Cursor / Cherry Studio shape."""

    type: McpType
    is_active: bool = Field(default=True, alias="isActive")
    name: str | None = None  # display name; the map key when absent
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None  # stdio: working directory, relative to the tool workspace (default: the workspace)
    # Seconds for each tool call, and for connecting (start, initialize, list tools).
    timeout: float = Field(default=60.0, gt=0, le=3600)
    connect_timeout: float = Field(default=30.0, gt=0, le=600, alias="connectTimeout")
    base_url: str | None = Field(
        default=None,
        alias="baseUrl",
        # Claude Desktop and Cursor spell it "url".
        validation_alias=AliasChoices("baseUrl", "base_url", "url"),
    )
    headers: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _infer_type(cls, data: Any) -> Any:
        # Claude Desktop entries have no "type": a command means stdio, a URL means HTTP.
        if isinstance(data, dict) and "type" not in data:
            if data.get("command"):
                data = {**data, "type": "stdio"}
            elif any(data.get(k) for k in ("baseUrl", "base_url", "url")):
                data = {**data, "type": "streamableHttp"}
        return data

    _url = field_validator("base_url")(_check_http_url)

    @model_validator(mode="after")
    def _transport_needs(self) -> McpServerConfig:
        if self.type == "stdio" and not self.command:
            raise ValueError("a stdio server needs 'command'")
        if self.type in HTTP_MCP_TYPES and not self.base_url:
            raise ValueError(f"a {self.type} server needs 'baseUrl'")
        return self


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class BashConfig(_Section):
    # auto: bubblewrap when installed and working here, else none; bwrap: required; none: plain bash.
    sandbox: Literal["auto", "bwrap", "none"] = "auto"
    # Variables `bash` gets beyond the harmless allowlist: a list of names passed through from
    # PicoBot's environment, or NAME -> value (null = pass that name through).
    env: dict[str, str | None] = Field(default_factory=dict)

    @field_validator("env", mode="before")
    @classmethod
    def _names_or_mapping(cls, value: Any) -> Any:
        if isinstance(value, list):
            if not all(isinstance(name, str) for name in value):
                raise ValueError("a list here holds variable names (strings)")
            return {name: None for name in value}
        return value

    @field_validator("env")
    @classmethod
    def _valid_names(cls, value: dict[str, str | None]) -> dict[str, str | None]:
        for name, text in value.items():
            if not _ENV_NAME.fullmatch(name):
                raise ValueError(f"{name[:40]!r} is not a variable name (letters, digits, _; not starting with a digit)")
            if text is not None and "\x00" in text:
                raise ValueError(f"the value of {name} contains a NUL character")
        return value


def _check_allow_entry(value: str) -> str:
    parse_allow_entry(value)  # raises ValueError saying what is wrong with the entry
    return value


class NetworkConfig(_Section):
    # Hosts (exact or *.example.com), addresses and CIDRs the URL-fetching tools and bash's
    # proxy may reach even though they are loopback, private, link-local, ... (see netpolicy).
    allow: list[Annotated[str, AfterValidator(_check_allow_entry)]] = Field(default_factory=list)


_RULE_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
_TOOL_GLOB = re.compile(r"[A-Za-z0-9_*?.-]{1,128}")


class ApprovalRule(_Section):
    """One approval rule: the calls of `tool` whose `argument` (or all arguments as JSON) match `pattern`."""

    name: str | None = None  # shown in the request and /info; default "rule <index>"
    tool: str = Field(min_length=1, max_length=128)  # a tool name or a glob ("mcp_*", "*")
    argument: str | None = Field(default=None, min_length=1, max_length=128)
    pattern: str | None = Field(default=None, max_length=2000)  # a regular expression; None: every call
    action: Literal["ask", "deny", "allow"] = "ask"

    @field_validator("name")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        if value is not None and not _RULE_NAME.fullmatch(value):
            raise ValueError("must be 1-64 letters, digits or _ . : -")
        return value

    @field_validator("tool")
    @classmethod
    def _tool(cls, value: str) -> str:
        if not _TOOL_GLOB.fullmatch(value):
            raise ValueError("must be a tool name or a glob of letters, digits, _ - . * ?")
        return value

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except (re.error, RecursionError, OverflowError) as exc:
                raise ValueError(f"not a valid regular expression: {exc}") from None
        return value


class ApprovalConfig(_Section):
    """Tool calls that wait for a person's yes or no (docs/APPROVALS.md)."""

    # off: no rule is checked; ask: a matching call waits for a decision; deny: it is refused at once
    mode: Literal["off", "ask", "deny"] = "off"
    timeout_secs: float = Field(default=300.0, gt=0, le=86400)  # no decision by then: denied
    default_rules: bool = True  # the built-in rules (rm -rf, sudo, curl | sh, writes outside the workspace)
    rules: list[ApprovalRule] = Field(default_factory=list, max_length=200)  # checked before the built-in ones

    @field_validator("timeout_secs", mode="before")
    @classmethod
    def _not_a_bool(cls, value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError("must be a number of seconds, not true/false")
        return value


class ToolsConfig(_Section):
    disabled: list[str] = Field(default_factory=list)
    # Unset: $PICOBOT_WORKSPACE, else `<home>-workspace` beside the home (see config/workspace.py).
    # A relative path is relative to the PicoBot home.
    workspace: str | None = None
    # Each chat gets `<workspace>/<channel>/<chat id>/` and its tools are confined to it.
    workspace_per_chat: bool = False
    # A folder every worker host mounts (NFS, a shared volume): the workspace of every host, so any
    # worker runs any turn. Unset: each host works on its own disk and a chat's turns follow the host
    # holding its files (runtime/placement.py). An absolute path; not together with `workspace`.
    workspace_storage: str | None = None
    bash: BashConfig = Field(default_factory=BashConfig)
    network: NetworkConfig = Field(default_factory=NetworkConfig)
    approval: ApprovalConfig = Field(default_factory=ApprovalConfig)
    bash_timeout_secs: float = Field(default=60.0, gt=0)
    bash_output_max_chars: int = Field(default=20000, gt=0)
    http_max_chars: int = Field(default=20000, gt=0)
    web_fetch_max_chars: int = Field(default=50000, gt=0)
    # content_search skips files larger than this; both search tools stop after the time limit.
    search_max_file_bytes: int = Field(default=2_000_000, gt=0, le=1_000_000_000)
    search_timeout_secs: float = Field(default=20.0, gt=0, le=600, allow_inf_nan=False)
    # Tool calls of one model response run at once up to this many; the rest wait their turn.
    max_parallel: int = Field(default=8, ge=1, le=64)

    @field_validator("max_parallel", mode="before")
    @classmethod
    def _not_a_bool(cls, value: Any) -> Any:
        if isinstance(value, bool):  # pydantic would read true as 1
            raise ValueError("must be a whole number from 1 to 64, not true/false")
        return value

    @field_validator("workspace_storage")
    @classmethod
    def _absolute_folder(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not value.strip() or "\x00" in value:
            raise ValueError("must be the absolute path of a folder every worker host mounts")
        if not Path(value).expanduser().is_absolute():
            raise ValueError(f"must be an absolute path (every host mounts it at the same place), not {value!r}")
        return value

    @model_validator(mode="after")
    def _one_workspace(self) -> "ToolsConfig":
        if self.workspace_storage and self.workspace:
            raise ValueError("set tools.workspace or tools.workspace_storage, not both (workspace_storage is "
                             "the workspace, shared by every host)")
        return self


class TimeConfig(_Section):
    timezone: str = "UTC"

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(
                f"unknown time zone {value!r}; use an IANA name such as 'Asia/Shanghai' or 'UTC'"
            ) from None
        return value

    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)


# --- inbound webhooks (picobot/webhooks) -----------------------------------------------

HOOK_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
HOOK_RESERVED = frozenset({"runs"})  # /hooks/runs/<id> is the run status endpoint


class HookDeliver(_Section):
    channel: str = Field(min_length=1)
    chat_id: str = Field(min_length=1)


class HookConfig(_Section):
    """One inbound webhook `POST /hooks/<name>`: a signed JSON body becomes an agent run."""

    secret: str = Field(min_length=16, repr=False)  # HMAC-SHA256 key of the signature, both ways
    agent: str = "default"
    prompt: str = Field(min_length=1)  # a template: {{ payload.a.b }} (see picobot/webhooks/template.py)
    mode: Literal["agent_task", "silent_agent_task"] = "silent_agent_task"
    deliver: HookDeliver | None = None  # agent_task: the chat whose dialog runs the task and gets the answer
    callback_url: str | None = None  # POSTed the signed result JSON when the run ends
    enabled: bool = True
    max_body_bytes: int = Field(default=256 * 1024, ge=2, le=16 * 1024 * 1024)
    prompt_max_chars: int = Field(default=20000, ge=1, le=1_000_000)
    callback_max_attempts: int = Field(default=6, ge=1, le=20)

    _blank = field_validator("callback_url", mode="before")(_blank_to_none)
    _url = field_validator("callback_url")(_check_http_url)

    @model_validator(mode="after")
    def _mode_needs(self) -> HookConfig:
        if self.mode == "agent_task" and self.deliver is None:
            raise ValueError("an agent_task hook needs deliver (channel and chat_id): the chat it runs in")
        if self.mode == "silent_agent_task" and self.deliver is not None:
            raise ValueError("a silent_agent_task hook delivers to no chat; drop deliver or use mode agent_task")
        return self


# --- the whole file -----------------------------------------------------------------


@dataclass(frozen=True)
class ResolvedAgent:
    """An agent with its provider and model looked up (a dialog's `/model` choice, when `chosen`)."""

    name: str
    agent: AgentConfig
    provider_key: str
    provider: ProviderConfig
    model: ModelConfig
    model_key: str = ""
    chosen: bool = False

    # An agent file's parts (picobot/config/agent_files.py); a config agent has none of them.
    source: str = "config"  # config | file
    instructions: str = ""  # sent as a system message with every model call of its turns
    tools: tuple[str, ...] | None = None  # allowlists: None = no limit
    skills: tuple[str, ...] | None = None
    delegates: tuple[str, ...] | None = None  # agents its `task` tool may hand work to
    timeout_secs: float | None = None  # of a sub-agent run of it
    generation: int = 0  # of the agent files it was read from

    @property
    def ref(self) -> str:
        return f"{self.provider_key}:{self.model_key or self.agent.model}"


def _known(names: Mapping[str, Any]) -> str:
    return ", ".join(sorted(names)) or "none"


class AuditLogConfig(_Section):
    """The shipped audit-log plugin: each tool call and answer as one JSON line, secrets masked."""

    enabled: bool = False
    path: str = "logs/audit.jsonl"  # relative to the PicoBot home


class ToolPolicyRule(_Section):
    tool: str = Field(default="*", min_length=1)  # a tool name, or a glob ("mcp_*", "*")
    argument: str | None = None  # the argument the pattern is matched against; None: all of them as JSON
    pattern: str | None = None  # a regular expression; None: every call of the tool
    reason: str = "denied by the tool policy"

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"not a valid regular expression: {exc}") from None
        return value


class ToolPolicyConfig(_Section):
    """The shipped tool-policy plugin: deny rules by tool name and argument pattern."""

    enabled: bool = False
    deny: list[ToolPolicyRule] = Field(default_factory=list)


# --- voice (picobot/voice) -------------------------------------------------------------


def _check_audio_name(value: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}", value):
        raise ValueError("must be 1 to 128 letters, digits or . _ : / - (no spaces)")
    return value


class SttConfig(_Section):
    """Speech to text: an OpenAI-compatible `POST {base_url}/audio/transcriptions`."""

    base_url: Annotated[str, AfterValidator(_check_http_url)] = Field(min_length=1, max_length=2000)
    api_key: str | None = Field(default=None, repr=False, max_length=4000)
    model: Annotated[str, AfterValidator(_check_audio_name)] = "whisper-1"
    language: str | None = Field(default=None, pattern=r"^[A-Za-z]{2,3}(-[A-Za-z0-9]{2,8})?$")  # ISO-639-1, e.g. "en"
    timeout_secs: float = Field(default=60.0, gt=0, le=600)
    max_bytes: int = Field(default=25 * 1024 * 1024, gt=0, le=100 * 1024 * 1024)  # OpenAI's own limit

    _blank = field_validator("api_key", "language", mode="before")(_blank_to_none)
    _count = field_validator("max_bytes", "timeout_secs", mode="before")(_count_not_bool)


class TtsConfig(_Section):
    """Text to speech: an OpenAI-compatible `POST {base_url}/audio/speech`."""

    base_url: Annotated[str, AfterValidator(_check_http_url)] = Field(min_length=1, max_length=2000)
    api_key: str | None = Field(default=None, repr=False, max_length=4000)
    model: Annotated[str, AfterValidator(_check_audio_name)] = "tts-1"
    voice: Annotated[str, AfterValidator(_check_audio_name)] = "alloy"
    # opus: Ogg Opus, what Telegram and Feishu voice notes are; anything else is converted with
    # ffmpeg when it is on PATH, else sent as an audio file
    format: Literal["opus", "mp3", "aac", "flac", "wav"] = "opus"
    timeout_secs: float = Field(default=60.0, gt=0, le=600)
    max_chars: int = Field(default=4000, gt=0, le=100_000)  # a longer answer is spoken up to here

    _blank = field_validator("api_key", mode="before")(_blank_to_none)
    _count = field_validator("max_chars", "timeout_secs", mode="before")(_count_not_bool)


class VoiceConfig(_Section):
    """Voice messages in (stt) and spoken answers out (tts); each off while unset (docs/VOICE.md)."""

    stt: SttConfig | None = None
    tts: TtsConfig | None = None


class PluginsConfig(_Section):
    enabled: bool = True  # false: no third-party plugin loads (the built-in capabilities always do)
    disabled: list[str] = Field(default_factory=list)  # plugin names (entry-point or file names) not to load
    # entry-point or file plugins whose PluginPorts are the full ones (the built-ins always are); any other
    # gets the restricted tier (picobot/runtime/plugin_ports.py): its own Redis keys and settings, no SQL
    trusted: list[str] = Field(default_factory=list)
    hook_timeout_secs: float = Field(default=5.0, gt=0, le=600)
    audit_log: AuditLogConfig = Field(default_factory=AuditLogConfig)
    tool_policy: ToolPolicyConfig = Field(default_factory=ToolPolicyConfig)
    # settings for third-party plugins, by plugin name; each plugin reads its own
    settings: dict[str, dict[str, Any]] = Field(default_factory=dict)


class Config(_Section):
    """The effective configuration. Build it with `load_config()`."""

    providers: dict[str, ProviderConfig] = Field(default_factory=dict)
    models: dict[str, ModelConfig] = Field(default_factory=dict)
    profiles: dict[str, ProfileConfig] = Field(default_factory=dict)  # name -> a provider and a model
    agents: dict[str, AgentConfig] = Field(default_factory=lambda: {"default": AgentConfig()})
    gateway: GatewayConfig = Field(default_factory=GatewayConfig)
    scheduler: SchedulerConfig = Field(default_factory=SchedulerConfig)
    channels: dict[str, ChannelConfig] = Field(default_factory=dict)
    skills: SkillsConfig = Field(default_factory=SkillsConfig)
    subagents: SubagentsConfig = Field(default_factory=SubagentsConfig)
    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    titles: TitlesConfig = Field(default_factory=TitlesConfig)  # picobot/titles
    browser: BrowserConfig = Field(default_factory=BrowserConfig)  # picobot/browser
    mcp_servers: dict[str, McpServerConfig] = Field(default_factory=dict, alias="mcpServers")
    tools: ToolsConfig = Field(default_factory=ToolsConfig)
    time: TimeConfig = Field(default_factory=TimeConfig)
    plugins: PluginsConfig = Field(default_factory=PluginsConfig)
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)  # picobot/observability
    tracing: TracingConfig = Field(default_factory=TracingConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    hooks: dict[str, HookConfig] = Field(default_factory=dict)  # inbound webhooks by name
    budgets: BudgetsConfig = Field(default_factory=BudgetsConfig)  # picobot/budgets
    voice: VoiceConfig = Field(default_factory=VoiceConfig)  # picobot/voice
    prices: dict[str, Price] = Field(default_factory=dict)  # "<provider>:<model>" -> USD per million tokens
    delegates: dict[str, DelegateConfig] = Field(default_factory=dict)  # picobot/delegates: coding CLIs by name

    _price_keys = field_validator("prices")(check_price_keys)
    _delegate_names = field_validator("delegates")(check_delegate_names)

    # Not part of the file: computed by the loader (see RUNTIME_KEYS).
    home: Path = Field(default_factory=picobot_home, exclude=True)
    config_path: Path | None = Field(default=None, exclude=True)
    database_url: str = Field(default="", exclude=True, repr=False)  # "" = SQLite in home
    redis_url: str | None = Field(default=None, exclude=True, repr=False)
    broker_url: str | None = Field(default=None, exclude=True, repr=False)  # CELERY_BROKER_URL; None = redis_url
    # model_choices per agent (every turn asks): keyed with the agent's own entries; the rest of a loaded
    # config does not change
    _choices: dict[str, tuple[Any, tuple[ModelChoice, ...], tuple[ModelChoice, ...]]] = PrivateAttr(default_factory=dict)
    _agent_files: Any = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _complete(self) -> Config:
        if not self.database_url:
            self.database_url = default_database_url(self.home)
        for key, channel in self.channels.items():
            channel.type = channel.type or key
        self._localise_at_times()
        # Raised as ConfigError (not ValueError) so the key path survives pydantic.
        self._check_references()
        return self

    def _localise_at_times(self) -> None:
        zone = self.time.zone()
        for job in self.scheduler.jobs:
            if isinstance(job.schedule, AtSchedule) and job.schedule.at.tzinfo is None:
                job.schedule.at = job.schedule.at.replace(tzinfo=ZoneInfo(job.timezone) if job.timezone else zone)

    def _check_references(self) -> None:
        for name, profile in self.profiles.items():
            self._check_profile(name, profile)
        if "default" not in self.agents:
            raise ConfigError("agents", "an agent named 'default' is required")
        for name, agent in self.agents.items():
            self._check_agent(name, agent)
        for key, channel in self.channels.items():
            self._check_agent_name(f"channels.{key}.agent", channel.agent)
            # a channel type's own keys are its plugin's to check (picobot_config_check, at start)
        for i, job in enumerate(self.scheduler.jobs):
            job_agent = job.payload.get("agent")
            if isinstance(job_agent, str):
                self._check_agent_name(f"scheduler.jobs[{i}].payload.agent", job_agent)
        self._check_titles()
        for name, hook in self.hooks.items():
            if not HOOK_NAME.match(name) or name in HOOK_RESERVED:
                raise ConfigError(f"hooks.{name[:64]}", "a hook name is 1-64 letters, digits, '_' or '-', and not 'runs'")
            self._check_agent_name(f"hooks.{name}.agent", hook.agent)

    def _check_agent(self, name: str, agent: AgentConfig) -> None:
        # No providers at all is a valid, unconfigured setup (the gateway starts and says
        # so); naming a provider or model that does not exist is a mistake.
        unconfigured = not self.providers
        if agent.provider not in self.providers and not (unconfigured and agent.provider == "default"):
            raise ConfigError(
                f"agents.{name}.provider",
                f"unknown provider {agent.provider!r} (known: {_known(self.providers)})",
            )
        if agent.model not in self.models and not (unconfigured and agent.model == "default"):
            raise ConfigError(
                f"agents.{name}.model",
                f"unknown model {agent.model!r} (known: {_known(self.models)})",
            )
        for i, entry in enumerate(agent.fallback):
            self.resolve_model_ref(entry, f"agents.{name}.fallback[{i}]")
        for i, entry in enumerate(agent.models):
            self.resolve_model_ref(entry, f"agents.{name}.models[{i}]")

    def _check_profile(self, name: str, profile: ProfileConfig) -> None:
        problem = check_profile_name(name)
        if problem:
            raise ConfigError(f"profiles.{shown(name)}", problem)
        if profile.provider not in self.providers:
            raise ConfigError(f"profiles.{name}.provider",
                              f"unknown provider {shown(profile.provider)} (known: {_known(self.providers)})")
        if profile.model not in self.models:
            raise ConfigError(f"profiles.{name}.model",
                              f"unknown model {shown(profile.model)} (known: {_known(self.models)})")

    def resolve_model_ref(self, ref: Any, key_path: str) -> ModelChoice:
        """The provider and model a `"<provider>:<model>"` or profile reference names; ConfigError at `key_path`."""
        try:
            return resolve_ref(ref, self.providers, self.models, self.profiles)
        except ValueError as exc:
            raise ConfigError(key_path, str(exc)) from None

    def fallback_choices(self, name: str) -> list[ModelChoice]:
        """The agent's fallback entries, resolved, in order (empty for an unknown agent)."""
        return list(self._resolved(name)[0])

    def model_choices(self, name: str) -> list[ModelChoice]:
        """What a dialog of agent `name` may use: its own model, its fallback entries, then `models`; each once.

        Empty for an unknown agent; without the agent's own pair while that is not configured.
        """
        return list(self._resolved(name)[1])

    def _resolved(self, name: str) -> tuple[tuple[ModelChoice, ...], tuple[ModelChoice, ...]]:
        """(fallback entries, choices) of agent `name`, resolved once per version of its entries."""
        agent = self.agents.get(name)
        if agent is None:  # an agent file: its own model is its one choice
            found = self.agent_files().current().agents.get(name)
            if found is None or found.provider not in self.providers or found.model not in self.models:
                return (), ()
            return (), (ModelChoice(found.provider, found.model),)
        key = (agent.provider, agent.model, tuple(agent.fallback), tuple(agent.models))
        memo = self._choices.get(name)
        if memo is None or memo[0] != key:
            fallback = [self.resolve_model_ref(e, f"agents.{name}.fallback[{i}]") for i, e in enumerate(agent.fallback)]
            listed = [self.resolve_model_ref(e, f"agents.{name}.models[{i}]") for i, e in enumerate(agent.models)]
            own = [ModelChoice(agent.provider, agent.model)]
            if agent.provider not in self.providers or agent.model not in self.models:
                own = []
            memo = (key, tuple(fallback), tuple(unique(own + fallback + listed)))
            self._choices[name] = memo
        return memo[1], memo[2]

    def dialog_choice(self, name: str, provider: str | None, model: str | None) -> ModelChoice | None:
        """A dialog's stored choice while the agent may still use it (config can change), else None."""
        if not provider or not model:
            return None
        choice = ModelChoice(provider, model)
        return choice if choice in self.model_choices(name) else None

    def _check_titles(self) -> None:
        if self.titles.provider is not None and self.titles.provider not in self.providers:
            raise ConfigError("titles.provider", f"unknown provider {self.titles.provider[:64]!r} "
                              f"(known: {_known(self.providers)})")
        if self.titles.model is not None and self.titles.model not in self.models:
            raise ConfigError("titles.model", f"unknown model {self.titles.model[:64]!r} (known: {_known(self.models)})")

    def _check_agent_name(self, key_path: str, name: str) -> None:
        # an agent file's name counts even when the file has an error: its turns say what it is
        if name not in self.agents and name not in self.agent_files().current().files:
            raise ConfigError(key_path, f"unknown agent {name!r} (known: {self._agent_names()})")

    def _agent_names(self) -> str:
        return _known(dict.fromkeys(self.agent_names()))

    def agent_names(self) -> list[str]:
        """Every usable agent's name: config `agents`, then the agent files' (their current generation)."""
        return list(dict.fromkeys([*self.agents, *self.agent_files().current().agents]))

    def agent_files(self) -> Any:
        """The agent files of this home (`<home>/agents/*.md`): an AgentFiles; `.current()` is the newest
        generation of them."""
        if self._agent_files is None:
            from picobot.config.agent_files import AgentFiles, Known

            default = self.agents.get("default") or AgentConfig()
            known = Known(frozenset(self.providers), frozenset(self.models), frozenset(self.agents),
                          default.provider, default.model,
                          tuple((k, p.provider, p.model) for k, p in sorted(self.profiles.items())))
            self._agent_files = AgentFiles(self.home, known)
        return self._agent_files

    def agent(self, name: str = "default", choice: ModelChoice | None = None) -> ResolvedAgent:
        """The agent `name` (in config, else an agent file) with its provider and model (or `choice`'s);
        ConfigError if any is missing.

        `choice` is taken as given: callers check it against `model_choices` (see `dialog_choice`).
        """
        agent = self.agents.get(name)
        if agent is None:
            return self._file_agent(name, choice)
        provider = self.providers.get(agent.provider)
        if provider is None:
            hint = "" if self.providers else "; set OPENAI_API_KEY or add a provider to config.json"
            raise ConfigError(
                f"agents.{name}.provider",
                f"unknown provider {agent.provider!r} (known: {_known(self.providers)}){hint}",
            )
        model = self.models.get(agent.model)
        if model is None:
            raise ConfigError(
                f"agents.{name}.model", f"unknown model {agent.model!r} (known: {_known(self.models)})"
            )
        if choice is not None:
            where = f"agents.{name}"
            return ResolvedAgent(name, agent, choice.provider, self._lookup(self.providers, choice.provider, where),
                                 self._lookup(self.models, choice.model, where), choice.model, chosen=True)
        return ResolvedAgent(name, agent, agent.provider, provider, model, agent.model)

    @staticmethod
    def _lookup(table: Mapping[str, Any], key: str, where: str) -> Any:
        if key not in table:
            raise ConfigError(where, f"{shown(key)} is not configured any more (known: {_known(table)})")
        return table[key]

    def _file_agent(self, name: str, choice: ModelChoice | None = None) -> ResolvedAgent:
        generation = self.agent_files().current()
        found = generation.agents.get(name)
        if found is None:
            broken = generation.error_of(name)
            if broken is not None:
                raise ConfigError(f"agents/{name}.md", broken.error)
            raise ConfigError(f"agents.{name[:64]}", f"unknown agent {name[:64]!r} (known: {self._agent_names()})")
        base = self.agents.get("default") or AgentConfig()
        agent = base.model_copy(update={
            "provider": found.provider, "model": found.model, "system_prompt": None, "fallback": [],
            "max_tool_iterations": found.max_tool_iterations or base.max_tool_iterations})
        provider, model = self.providers.get(found.provider), self.models.get(found.model)
        if provider is None or model is None:  # an unconfigured setup: nothing to call
            raise ConfigError(f"agents/{name}.md", f"unknown provider or model {found.provider}:{found.model}")
        provider_key, model_key, chosen = found.provider, found.model, False
        if choice is not None:
            where = f"agents/{name}.md"
            provider_key, model_key, chosen = choice.provider, choice.model, True
            provider = self._lookup(self.providers, choice.provider, where)
            model = self._lookup(self.models, choice.model, where)
        return ResolvedAgent(name, agent, provider_key, provider, model, model_key, chosen, source="file",
                             instructions=found.instructions, tools=found.tools, skills=found.skills,
                             delegates=found.delegates, timeout_secs=found.timeout_secs,
                             generation=generation.number)

    def provider_configured(self) -> bool:
        """True when the default agent's provider exists and has a key or a URL."""
        agent = self.agents.get("default")
        provider = self.providers.get(agent.provider) if agent else None
        return bool(provider and (provider.api_key or provider.base_url))

    def workspace_path(self) -> Path:
        """The file and shell tools' workspace, absolute (see config/workspace.py for the default)."""
        if self.tools.workspace_storage:
            return Path(self.tools.workspace_storage).expanduser()
        return choose_workspace(self.home, self.tools.workspace).path

    def workspace_storage_problem(self) -> str | None:
        """Why this host cannot use `tools.workspace_storage`, or None (unset, or an existing folder).

        The shared folder is never created here: a host where it is missing (the mount failed) would
        otherwise write the chats' files to its own disk, where no other host finds them."""
        if not self.tools.workspace_storage:
            return None
        path = Path(self.tools.workspace_storage).expanduser()
        try:
            if path.is_dir():
                return None
        except OSError:  # a stale network mount, a path too long
            pass
        return (f"tools.workspace_storage {str(path)[:200]!r} is not a folder on this host: mount the shared "
                "storage there (every worker host mounts it at the same path), or remove the setting")

