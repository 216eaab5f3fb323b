"""Demo: a fake iLink next to `picobot up`. Lines typed on stdin become a user's messages; the bot's replies print.

    python -m scripts.fake_wechat --port 9400 [--auto-login]

PicoBot's config then needs channels.wechat: {"type": "wechat", "enabled": true, "base_url":
"http://127.0.0.1:9400", "cdn_base_url": "http://127.0.0.1:9400/c2c"}; log in with
`picobot channels login wechat` (with --auto-login the fake confirms the scan by itself; else type
`/scan` then `/confirm`). `/expire` revokes the login (-14), `/close` closes the delivery window.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time

from scripts.fake_wechat import FakeWeChat


def printer(fake: FakeWeChat, stop: threading.Event) -> None:
    shown = 0
    while not stop.is_set():
        with fake.lock:
            new = fake.sent[shown:]
            shown += len(new)
        for msg in new:
            text = "".join(str(i.get("text_item", {}).get("text") or f"[item type {i.get('type')}]")
                           for i in msg.get("item_list") or [])
            print(f"\n[bot → {msg.get('to_user_id')}] {text}\n> ", end="", flush=True)
        time.sleep(0.2)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scripts.fake_wechat", description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=9400)
    ap.add_argument("--user", default="demo@im.wechat", help="the sender (put it in allow_from if you restrict)")
    ap.add_argument("--auto-login", action="store_true", help="every QR is scanned and confirmed at once")
    ap.add_argument("--hold", type=float, default=35.0, help="seconds getupdates holds an empty poll")
    args = ap.parse_args(argv)
    fake = FakeWeChat(port=args.port, hold_secs=args.hold).start()
    print(f"fake iLink on {fake.base_url} (CDN {fake.cdn_url}); type a message, or /scan /confirm /expire /close")
    stop = threading.Event()
    threading.Thread(target=printer, args=(fake, stop), daemon=True).start()
    try:
        while True:
            if args.auto_login:
                fake.qr_plan = ["scaned", "confirmed"]
            line = input("> ").strip()
            if line in ("/scan", "/confirm"):
                fake.set_qr("scaned" if line == "/scan" else "confirmed")
            elif line == "/expire":
                fake.expire_session()
            elif line == "/close":
                fake.close_window(args.user)
            elif line:
                fake.offer(fake.message(args.user, line))
    except (EOFError, KeyboardInterrupt):
        pass
    finally:
        stop.set()
        fake.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
