"""Demo: a fake Feishu next to `picobot up`. Lines typed on stdin become p2p messages; the bot's replies print.

    python -m scripts.fake_feishu --port 9300 --webhook http://127.0.0.1:19876/feishu/events

PicoBot's config then needs channels.feishu: {"enabled": true, "app_id": "cli_demo", "app_secret":
"secret_demo", "domain": "http://127.0.0.1:9300", "verification_token": "vtok", "encrypt_key": "ekey"}.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time

from scripts.fake_feishu import EventSender, FakeFeishu


def printer(fake: FakeFeishu, stop: threading.Event) -> None:
    """Print every bot message (and the final text of streamed cards) as it arrives."""
    shown = 0
    while not stop.is_set():
        with fake.lock:
            new = fake.sent[shown:]
            shown += len(new)
        for msg in new:
            print(f"\n[bot → {msg['chat_id']}] {fake.text_of(msg)}\n> ", end="", flush=True)
        time.sleep(0.2)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scripts.fake_feishu", description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=9300)
    ap.add_argument("--webhook", default="http://127.0.0.1:19876/feishu/events", help="PicoBot's Feishu webhook URL")
    ap.add_argument("--app-id", default="cli_demo")
    ap.add_argument("--app-secret", default="secret_demo")
    ap.add_argument("--verification-token", default="vtok")
    ap.add_argument("--encrypt-key", default="ekey", help="empty string: send plain (unencrypted, unsigned) events")
    ap.add_argument("--chat-id", default="oc_demo")
    ap.add_argument("--open-id", default="ou_demo_user", help="the sender (put it in allow_from if you restrict)")
    args = ap.parse_args(argv)

    fake = FakeFeishu(args.app_id, args.app_secret, port=args.port).start()
    sender = EventSender(args.webhook, args.verification_token, args.encrypt_key or None, app_id=args.app_id,
                         fake=fake)
    print(f"fake Feishu API on {fake.base_url} (set channels.feishu.domain to it); events go to {args.webhook}")
    print(f"type a message and press Enter (chat {args.chat_id}, sender {args.open_id}); Ctrl-D quits")
    stop = threading.Event()
    threading.Thread(target=printer, args=(fake, stop), daemon=True).start()
    try:
        print("> ", end="", flush=True)
        for line in sys.stdin:
            text = line.strip()
            if text:
                try:
                    resp = sender.post(sender.message(chat_id=args.chat_id, text=text, sender_open_id=args.open_id))
                    if resp.status_code != 200:
                        print(f"webhook answered {resp.status_code}: {resp.text[:200]}")
                except Exception as exc:  # the demo keeps going when PicoBot is not up yet
                    print(f"could not reach {args.webhook}: {exc}")
            print("> ", end="", flush=True)
    except KeyboardInterrupt:
        pass
    finally:
        time.sleep(0.5)
        stop.set()
        sender.close()
        fake.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
