"""The Telegram channel: Bot API over httpx, long polling (`picobot telegram`) or a webhook.

    config.py    TelegramConfig, the keys of `channels.<key>` with type "telegram"
    api.py       TelegramApi: the few Bot API methods PicoBot calls, TelegramError
    markup.py    Markdown -> Telegram HTML (markdown-it-py tokens, our own tags)
    split.py     HTML -> parts of at most 4096 UTF-16 units, tags balanced in every part
    inbound.py   a stored update -> InboundMessage (text, commands, replies, photos, documents, voice)
    intake.py    check an update and record it in the event inbox (poller and webhook)
    poller.py    getUpdates long polling, one poller per bot token (Redis lease)
    webhook.py   POST /telegram/<channel>, framework-free
    adapter.py   TelegramAdapter: deliveries (parts, reply threading, plain fallback, resume)
    live.py      typing while a turn runs, an optional live message edited as it grows
    status.py    the poller's heartbeat in Redis, read by /health
"""
