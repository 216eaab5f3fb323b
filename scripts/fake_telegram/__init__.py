"""A fake Telegram Bot API for tests and demos (getUpdates, webhooks, sendMessage with HTML parsing, files
in and sendVoice / sendAudio out).

    from scripts.fake_telegram import FakeTelegram
    fake = FakeTelegram().start()
    fake.message(chat_id=42, text="hi")          # PicoBot's poller picks it up
    fake.wait_sent(1, 42)

Demo next to `picobot up`: `python -m scripts.fake_telegram --port 9400` (see its --help).
"""

from scripts.fake_telegram.entities import EntityError, parse_html, u16
from scripts.fake_telegram.server import DEFAULT_TOKEN, FakeTelegram

__all__ = ["DEFAULT_TOKEN", "EntityError", "FakeTelegram", "parse_html", "u16"]
