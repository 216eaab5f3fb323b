"""What a client of a running gateway needs from the configuration, read without pydantic.

`picobot chat -m` runs once per message: validating the whole file would cost most of its time.
The values here are exactly the ones `load_config` gives: the same environment, file and
placeholders (`loader.read_sources`), and any value that is not plainly valid — a port given as
"80.0", a key that looks like a typo of one read here — goes to `load_config`, which either
accepts it the way the schema does or raises the ConfigError the user should see. Mistakes in
parts of the file a client does not read are left to the gateway and `picobot config`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from difflib import get_close_matches
from pathlib import Path
from typing import Any, Mapping

from picobot.config.loader import Sources, database_url, read_sources

_DEFAULTS = {"host": "127.0.0.1", "port": 19876, "pairing_required": True}  # as GatewayConfig's
_DIGITS = re.compile(r"[0-9]{1,5}")


@dataclass(frozen=True)
class ClientSettings:
    home: Path
    host: str
    port: int
    pairing_required: bool
    database_url: str


def load_client_settings(home: Path | str | None = None, environ: Mapping[str, str] | None = None,
                         cwd: Path | str | None = None) -> ClientSettings:
    """The gateway's address and pairing rule, the home and the database; ConfigError as load_config."""
    src = read_sources(home, environ, cwd)
    return _plain(src) or _from_full_config(home, environ, cwd)


def _plain(src: Sources) -> ClientSettings | None:
    """The settings when every value read is plainly valid; None when the schema must decide."""
    if _looks_like_typo(src.data, "gateway"):
        return None
    gateway = src.data.get("gateway", {})
    if not isinstance(gateway, dict) or _looks_like_typo(gateway, *_DEFAULTS):
        return None
    host = gateway.get("host", _DEFAULTS["host"])
    port = _port(gateway.get("port", _DEFAULTS["port"]))
    pairing = _flag(gateway.get("pairing_required", _DEFAULTS["pairing_required"]))
    if not isinstance(host, str) or port is None or pairing is None:
        return None
    return ClientSettings(src.home, host, port, pairing, database_url(src.env, src.home))


def _looks_like_typo(section: Mapping[str, Any], *names: str) -> bool:
    """True when a key is not one of `names` but close to one (`prot`): the schema names the mistake."""
    return any(key not in names and get_close_matches(key, names, n=1) for key in section)


def _port(value: Any) -> int | None:
    if isinstance(value, str) and _DIGITS.fullmatch(value):
        value = int(value)
    if type(value) is int and 0 <= value <= 65535:  # not bool: the schema reads true as 1
        return value
    return None


def _flag(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    return {"true": True, "false": False}.get(value) if isinstance(value, str) else None


def _from_full_config(home: Path | str | None, environ: Mapping[str, str] | None,
                      cwd: Path | str | None) -> ClientSettings:
    from picobot.config.loader import load_config

    config = load_config(home, environ, cwd)
    gateway = config.gateway
    return ClientSettings(config.home, gateway.host, gateway.port, gateway.pairing_required, config.database_url)
