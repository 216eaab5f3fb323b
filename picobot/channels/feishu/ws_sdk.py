"""The lark-oapi WebSocket glue of the long connection: loading the SDK, our Client subclass, the event sink.

lark-oapi is imported here only, and only by the long-connection process (`picobot feishu`, `picobot run
channels:feishu:<key>`): its ws client alone, without the package's `__init__` and the event dispatcher,
which import the models of every Feishu API (4.5 s of CPU and ~160 MB at each start, against 0.3 s for
what the long connection uses).
The SDK's own logger prints to stdout past our redaction, and its lines carry the ws URL, whose
query holds a session ticket: we drop its handler (records reach the root handler, which
redacts) and cut URL queries out of its messages.
"""

from __future__ import annotations

import importlib.util
import logging
import re
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from picobot.channels.ports import ChannelPorts

log = logging.getLogger(__name__)

_URL_QUERY = re.compile(r"(wss?://[^\s?'\"]+)\?[^\s'\"]*")


def scrub(text: str) -> str:
    return _URL_QUERY.sub(r"\1?…", text)


def describe(exc: BaseException) -> str:
    return scrub(f"{type(exc).__name__}: {exc}")[:300]


class EventSink:
    """Stands in for the SDK's EventDispatcherHandler: it calls `_do_without_validation(payload)` per event."""

    def __init__(self, rt: ChannelPorts, channel: str):
        self.rt = rt
        self.channel = channel

    def _do_without_validation(self, payload: bytes) -> None:
        from picobot.channels.feishu import webhook

        try:
            data = webhook.parse(payload)
        except webhook.Rejected as exc:  # redelivering a malformed frame would not help: acknowledge it
            log.info("feishu long connection (%s): ignored a frame: %s", self.channel, exc.reason)
            return None
        status, _ = webhook.accept_event(self.rt, self.channel, data)  # the webhook's own inbox step
        if status >= 500:  # the SDK answers 500 on an exception, and Feishu delivers the event again
            raise RuntimeError("the event inbox is unavailable")
        return None


def _import_ws_client() -> Any:
    """`lark_oapi.ws.client` without running `lark_oapi/__init__.py` or importing the event dispatcher.

    The client needs the dispatcher's class for an annotation only (we hand it our EventSink); the package's
    submodules import what they use by full name. When the full package is already loaded, it is used as is."""
    if "lark_oapi" not in sys.modules:
        spec = importlib.util.find_spec("lark_oapi")
        if spec is None or not spec.submodule_search_locations:
            raise ImportError("lark-oapi is not installed")
        sys.modules["lark_oapi"] = importlib.util.module_from_spec(spec)  # the package, its __init__ not run
        dispatcher = types.ModuleType("lark_oapi.event.dispatcher_handler")
        setattr(dispatcher, "EventDispatcherHandler", EventSink)
        sys.modules.setdefault(dispatcher.__name__, dispatcher)
    import lark_oapi.ws.client as sdk

    return sdk


def load_sdk() -> Any:
    sdk = _import_ws_client()

    for name in ("_connect", "_disconnect", "_ping_loop", "_get_conn_url"):
        if not hasattr(sdk.Client, name):
            raise RuntimeError(f"this lark-oapi version has no ws.Client.{name}; PicoBot needs lark-oapi 1.7")
    lark_log = logging.getLogger("Lark")
    for handler in list(lark_log.handlers):  # its own stdout handler would bypass our redaction
        lark_log.removeHandler(handler)
    lark_log.addFilter(_ScrubFilter())
    return sdk


class _ScrubFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.msg, record.args = scrub(record.getMessage()), None
        if record.msg.startswith("receive message loop exit"):  # a closed socket: we log and reconnect ourselves
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


def client_class(sdk: Any) -> type:
    class Client(sdk.Client):
        endpoint_url = ""

        def fetch_endpoint(self) -> str:
            """POST /callback/ws/endpoint (blocking: call it off the loop)."""
            return super()._get_conn_url()

        def _get_conn_url(self) -> str:  # _connect() asks on the loop: hand it the URL fetched before
            return self.endpoint_url

    return Client
