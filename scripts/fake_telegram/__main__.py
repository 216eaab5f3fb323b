"""Demo: a fake Telegram next to `picobot up`. Lines typed on stdin become messages; the bot's replies print.

    python -m scripts.fake_telegram --port 9400

PicoBot's config then needs channels.telegram: {"enabled": true, "token": "<the token printed>",
"base_url": "http://127.0.0.1:9400"} — `picobot up` starts the poller for it.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time

from scripts.fake_telegram import DEFAULT_TOKEN, FakeTelegram


def printer(fake: FakeTelegram, stop: threading.Event) -> None:
    shown = 0
    while not stop.is_set():
        with fake.lock:
            new = fake.bot().sent[shown:]
            shown += len(new)
        for msg in new:
            print(f"\n[bot → {msg['chat_id']}] {msg['text']}\n> ", end="", flush=True)
        time.sleep(0.2)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scripts.fake_telegram", description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=9400)
    ap.add_argument("--token", default=DEFAULT_TOKEN)
    ap.add_argument("--chat-id", type=int, default=1001, help="the private chat (= the user's id; allow_from)")
    ap.add_argument("--lenient", action="store_true", help="accept tags inside code blocks, as Telegram does")
    args = ap.parse_args(argv)

    fake = FakeTelegram([args.token], port=args.port, strict=not args.lenient).start()
    print(f"fake Telegram Bot API on {fake.base_url}; bot token {args.token}")
    print(f"type a message and press Enter (chat {args.chat_id}); Ctrl-D quits")
    stop = threading.Event()
    threading.Thread(target=printer, args=(fake, stop), daemon=True).start()
    try:
        print("> ", end="", flush=True)
        for line in sys.stdin:
            if line.strip():
                fake.message(chat_id=args.chat_id, text=line.rstrip("\n"))
            print("> ", end="", flush=True)
    except KeyboardInterrupt:
        pass
    finally:
        time.sleep(0.5)
        stop.set()
        fake.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
