"""WeChatAdapter: delivers outbox rows to WeChat (sendmessage) and normalises recorded iLink messages.

Text goes in parts under `max_message_chars`, one item per request, each with a `client_id` derived
from the outbox row and the part (`pb-<row id>-<part>`), so a retry sends the same ids; the parts
already accepted are noted on the row and not sent again. A reply needs the user's latest
context_token (kept by intake.py). The delivery window: iLink takes a bot's message only within 24 h
of the user's last one (and answers -2 otherwise). A scheduled or background message (`message`
kind) to a user outside the window, or any send answered -2, is held — outbox `deferred` — and
released when that user writes again, with a line saying it was held. Files named in the payload's
`media` ([{"path", "name"}]; only files inside the workspace) follow the text, each uploaded to the
CDN encrypted (AES-128-ECB) and sent as its own image or file item. -14 (the login expired) marks
the channel login_required and retries after a minute: a new login makes the retry go through.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from picobot.channels.base import Capabilities, Delivery, DeliveryError, LiveHooks
from picobot.channels.outbound import media_entries, workspace_file
from picobot.channels.wechat import creds, state, status
from picobot.channels.wechat.api import WINDOW, IlinkApi, IlinkError
from picobot.channels.wechat.config import WeChatConfig
from picobot.channels.wechat.media import MediaError, upload

if TYPE_CHECKING:
    from picobot.channels.ports import ChannelPorts
    from picobot.gateway.inbound import InboundMessage

log = logging.getLogger("picobot.channels.wechat")

WINDOW_SECS = 24 * 3600 - 300  # a little inside iLink's 24 h, so a send does not race its end
LOGIN_RETRY_SECS = 60.0
IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".gif", ".webp"})


def _media_paths(payload: Any, workspace: Path) -> list[dict[str, Any]]:
    """`payload["media"]`: [{"path": absolute path, "name": optional}] (images and files), those naming a file
    inside the workspace only (the payload is not trusted); the others are skipped with a log line."""
    kept: list[dict[str, Any]] = []
    for index, entry in enumerate(media_entries(payload)):
        path = workspace_file(entry, workspace)
        if isinstance(path, str):
            log.warning("wechat: file %d of a delivery skipped: %s", index, path)
            continue
        kept.append({**entry, "path": str(path)})
    return kept


def client_id(row_id: int, part: int) -> str:
    return f"pb-{row_id}-{part}"


def split_text(text: str, limit: int) -> list[str]:
    """Parts of at most `limit` characters, cut at a paragraph, line or space boundary when there is one."""
    text = text.strip()
    parts: list[str] = []
    while len(text) > limit:
        cut = max(text.rfind("\n\n", 0, limit), text.rfind("\n", 0, limit), text.rfind(" ", 0, limit))
        if cut < limit // 2:
            cut = limit
        parts.append(text[:cut].rstrip())
        text = text[cut:].lstrip()
    if text:
        parts.append(text)
    return parts


def held_note(held_at: float) -> str:
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(held_at))
    return f"(held since {when}: WeChat lets a bot write only after you have written; here it is now)"


class WeChatAdapter:
    def __init__(self, name: str, config: Any, rt: ChannelPorts):
        self.name = name
        self.cfg = config if isinstance(config, WeChatConfig) else WeChatConfig.from_channel(config)
        self.rt = rt
        self.capabilities = Capabilities(max_message_chars=self.cfg.max_message_chars, markdown=False, live=True)
        self._live: LiveHooks | None = None

    def credentials(self) -> creds.Credentials | None:
        return creds.load(self.cfg.credentials_path(self.rt.config.home))

    def api(self) -> IlinkApi | None:
        login = self.credentials()
        if login is None or not login.usable:
            return None
        return IlinkApi(login.base_url or self.cfg.base_url, login.token)

    def live(self) -> LiveHooks | None:
        if self._live is None:
            from picobot.channels.wechat.live import WeChatTyping

            self._live = WeChatTyping(self)
        return self._live

    def normalize(self, event: dict) -> list[InboundMessage]:
        from picobot.channels.wechat.inbound import to_inbound

        return to_inbound(event, self.cfg, self.name, self.cfg.media_path(self.rt.config.home, self.name))

    # ---- outbound ----------------------------------------------------------------------------

    def deliver(self, delivery: Delivery) -> dict | None:
        from picobot.storage import outbox

        with self.rt.db.connect() as conn:
            progress = outbox.progress_of(conn, delivery.id)
        ctx = state.context(self.rt.db, self.name, delivery.chat_id)
        if ctx is None or (delivery.kind == "message" and time.time() - ctx[1] > WINDOW_SECS):
            raise DeliveryError("the user has not written within WeChat's 24 h window; held until they do",
                                defer=True, code="window")
        api = self.api()
        if api is None:
            status.set_state(self.rt.redis, self.name, status.LOGIN_REQUIRED, status.login_hint(self.name))
            raise DeliveryError("WeChat is not logged in", retry_after=LOGIN_RETRY_SECS, code="login_required")
        parts: list[Any] = [*self._parts(delivery, progress), *_media_paths(delivery.payload, self.rt.config.workspace_path())] or ["(empty)"]
        done = int(progress.get("parts_sent") or 0)
        try:
            for index in range(done, len(parts)):
                item = self._item(api, delivery.chat_id, parts[index])
                api.send_message(delivery.chat_id, client_id(delivery.id, index), ctx[0], item)
                self._note(delivery.id, {**progress, "parts_sent": index + 1})
        except IlinkError as exc:
            raise self._error(exc) from None
        except MediaError as exc:
            raise DeliveryError(f"a file could not be sent: {exc}", code="media") from None
        finally:
            api.close()
        return {"client_ids": [client_id(delivery.id, i) for i in range(len(parts))]}

    def _item(self, api: IlinkApi, to_user: str, part: Any) -> dict[str, Any]:
        """One sendmessage item: a text part, or an image/file uploaded to the CDN (AES-128-ECB)."""
        if isinstance(part, str):
            return {"type": 1, "text_item": {"text": part}}
        path = Path(part["path"])
        try:
            data = path.read_bytes()
        except OSError as exc:  # a retry will not make the file appear
            raise DeliveryError(f"{path.name}: {exc.strerror or type(exc).__name__}", permanent=True,
                                code="media") from None
        if len(data) > self.cfg.max_download_bytes:
            raise DeliveryError(f"{path.name} is larger than {self.cfg.max_download_bytes} bytes", permanent=True,
                                code="media")
        image = path.suffix.lower() in IMAGE_SUFFIXES
        ref = upload(api, data, to_user, media_type=1 if image else 3)
        if image:
            return {"type": 2, "image_item": {"media": ref, "mid_size": (len(data) // 16 + 1) * 16}}
        name = str(part.get("name") or path.name)
        return {"type": 4, "file_item": {"media": ref, "file_name": name, "len": str(len(data))}}

    def _parts(self, delivery: Delivery, progress: dict[str, Any]) -> list[str]:
        text = str((delivery.payload or {}).get("text") or "")
        if progress.get("held_at"):
            text = f"{held_note(float(progress['held_at']))}\n\n{text}"
        return split_text(text, self.cfg.max_message_chars)

    def _note(self, row_id: int, progress: dict[str, Any]) -> None:
        from picobot.storage import outbox

        with self.rt.db.begin() as conn:
            outbox.note_progress(conn, row_id, progress)

    def _error(self, exc: IlinkError) -> DeliveryError:
        if exc.session_expired:
            status.set_state(self.rt.redis, self.name, status.LOGIN_REQUIRED,
                             f"the WeChat login expired (-14); {status.login_hint(self.name)}")
            return DeliveryError(str(exc), retry_after=LOGIN_RETRY_SECS, code="-14")
        if exc.code == WINDOW:
            return DeliveryError(f"{exc}: outside the delivery window; held until the user writes", defer=True,
                                 code="-2")
        return DeliveryError(str(exc), permanent=not exc.transient,
                             code=None if exc.code is None else str(exc.code))
