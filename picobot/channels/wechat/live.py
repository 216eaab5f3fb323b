"""WeChatTyping: "typing…" in the user's chat while a turn runs (getconfig's typing_ticket, sendtyping).

Best effort: every error is logged and swallowed; the ticket is cached in Redis for a day.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from picobot.channels.wechat import keys, state

if TYPE_CHECKING:
    from picobot.channels.wechat.adapter import WeChatAdapter

log = logging.getLogger("picobot.channels.wechat")

TICKET_SECS = 23 * 3600


class WeChatTyping:
    def __init__(self, adapter: WeChatAdapter):
        self.adapter = adapter

    def _typing(self, user_id: str, on: bool) -> None:
        ctx = state.context(self.adapter.rt.db, self.adapter.name, user_id)
        api = self.adapter.api()
        if ctx is None or api is None:
            return
        r, key = self.adapter.rt.redis, keys.typing(self.adapter.name, user_id)
        try:
            raw = r.get(key)
            ticket = raw.decode() if isinstance(raw, bytes) else raw
            if not ticket:
                ticket = api.typing_ticket(user_id, ctx[0])
                if not ticket:
                    return
                r.set(key, ticket, ex=TICKET_SECS)
            api.send_typing(user_id, ticket, on)
        finally:
            api.close()

    def turn_started(self, chat_id: str, reply_to: str | None, turn_id: str) -> None:
        try:
            self._typing(chat_id, True)
        except Exception as exc:  # progress is best effort
            log.info("wechat: typing for turn %s not shown (%s)", turn_id, type(exc).__name__)

    def snapshot(self, chat_id: str, turn_id: str, snapshot: dict) -> None:
        return None

    def turn_finished(self, chat_id: str, turn_id: str, event: dict) -> None:
        try:
            self._typing(chat_id, False)
        except Exception as exc:
            log.info("wechat: typing for turn %s not cleared (%s)", turn_id, type(exc).__name__)
