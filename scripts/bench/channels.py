"""Telegram and WeChat channels: delivery lag (turn committed -> reply accepted by the fake platform) at
light load and with 200 chats writing at once, against the fake's own latency, and the poller's RSS.

One stack (web, one worker, beat) with a polling Telegram channel on scripts/fake_telegram and a
WeChat channel on scripts/fake_wechat (logged in through the fake's QR flow), each with its poller
process (`picobot telegram`, `picobot wechat`). The fakes run in this process. Light load: 40 messages
at 5 per second, each from its own chat; burst: 200 chats write at the same moment. The lag of a
reply is the time the fake recorded it minus the answering turn's `finished_at` (the commit). The
baseline is the fake's own latency: sendMessage / sendmessage posted straight from this process.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Callable

import httpx
import sqlalchemy

from scripts.bench.common import (
    BENCH_GATEWAY, FakeLLMProcess, Result, Stack, log, main, p50_p99, process_tree, rss_mb,
)
from scripts.fake_telegram import FakeTelegram
from scripts.fake_wechat import FakeWeChat
from tests.stack import wait_for

NAME = "channels"
TOKEN = "333333333:AAChannelsBenchTokenForTheLagFigures_x"
LIGHT, RATE, BURST = 40, 5.0, 200
TARGET_LAG_MS = 100


def _finished(stack: Stack, channel: str) -> dict[str, float]:
    """chat_id -> the commit time of the (only) turn that answered it."""
    eng = sqlalchemy.create_engine(stack.database_url)
    with eng.connect() as c:
        rows = c.execute(sqlalchemy.text(
            "SELECT s.chat_id, t.finished_at FROM turns t JOIN sessions s ON s.id = t.session_id "
            "WHERE s.channel = :ch AND t.finished_at IS NOT NULL"), {"ch": channel}).all()
    eng.dispose()
    return {str(r[0]): float(r[1]) for r in rows}


def _lags(stack: Stack, channel: str, chats: list[str], sent_at: Callable[[str], float | None]) -> list[float]:
    finished = _finished(stack, channel)
    found = []
    for chat in chats:
        at = sent_at(chat)
        if at is not None and chat in finished:
            found.append((at - finished[chat]) * 1000)
    return found


def _await(what: str, chats: list[str], sent_at: Callable[[str], float | None], timeout: float = 300) -> None:
    wait_for(lambda: all(sent_at(c) is not None for c in chats), timeout, f"{what}: not every chat was answered")


def _telegram_sent(fake: FakeTelegram) -> Callable[[str], float | None]:
    def first(chat: str) -> float | None:
        sent = fake.sent_to(int(chat), TOKEN)
        return min(m["time"] for m in sent) if sent else None
    return first


def _wechat_sent(fake: FakeWeChat) -> Callable[[str], float | None]:
    def first(user: str) -> float | None:
        with fake.lock:
            times = [at for m, at in zip(fake.sent, fake.sent_at) if m.get("to_user_id") == user]
        return min(times) if times else None
    return first


def _own_latency(post: Callable[[int], None], n: int = 50) -> tuple[float, float]:
    samples = []
    for i in range(n):
        start = time.perf_counter()
        post(i)
        samples.append((time.perf_counter() - start) * 1000)
    return p50_p99(samples)


def _paced(send: Callable[[int], None], count: int, rate: float) -> None:
    start = time.monotonic()
    for i in range(count):
        delay = start + i / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        send(i)


def _stack(tmp: Path, llm: FakeLLMProcess, tg: FakeTelegram, wx: FakeWeChat) -> Stack:
    stack = Stack(tmp, llm.url, gateway=BENCH_GATEWAY)
    cfg = json.loads((stack.home / "config.json").read_text())
    cfg["channels"] = {
        "telegram": {"enabled": True, "token": TOKEN, "base_url": tg.base_url, "allow_from": ["*"],
                     "poll_timeout_secs": 5},
        "wechat": {"type": "wechat", "enabled": True, "base_url": wx.base_url, "cdn_base_url": wx.cdn_url,
                   "allow_from": ["*"], "poll_timeout_secs": 1},
    }
    (stack.home / "config.json").write_text(json.dumps(cfg, indent=2))
    stack.start_web()
    stack.start_worker("w1", concurrency=200)
    stack.start_beat()
    wx.qr_plan = ["scaned", "confirmed"]
    done = stack.cli("channels", "login", "wechat", timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"WeChat login failed: {done.stdout}{done.stderr}")
    stack._spawn("tgpoll", ["telegram", "--channel", "telegram"])
    stack._spawn("wxpoll", ["wechat", "--channel", "wechat"])
    return stack


def _measure(res: Result, label: str, stack: Stack, channel: str, chats: list[str], send: Callable[[int], None],
             sent_at: Callable[[str], float | None], own: tuple[float, float], rate: float | None) -> None:
    log(f"{channel}: {label}, {len(chats)} chats")
    if rate is None:
        for i in range(len(chats)):
            send(i)
    else:
        _paced(send, len(chats), rate)
    _await(f"{channel} {label}", chats, sent_at)
    l50, l99 = p50_p99(_lags(stack, channel, chats, sent_at))
    light = label == "light load"
    res.add(f"{channel} delivery lag p50, {label}", round(l50, 1), "ms")
    res.add(f"{channel} delivery lag p99, {label}", round(l99, 1), "ms",
            target=f"<= fake + {TARGET_LAG_MS}" if light else "",
            ok=(l99 - own[1]) <= TARGET_LAG_MS if light else None,
            baseline=f"fake's own p50/p99 {own[0]:.1f}/{own[1]:.1f} ms", ratio=f"{l99 - own[1]:+.0f} ms")


def run(args: argparse.Namespace) -> Result:
    res = Result(NAME)
    tmp = Path(tempfile.mkdtemp(prefix="picobot-bench-channels-"))
    tg = FakeTelegram([TOKEN]).start()
    wx = FakeWeChat(hold_secs=1.0, qr_hold_secs=0.1).start()
    llm = FakeLLMProcess(tmp / "fake_llm.log")
    stack: Stack | None = None
    try:
        with httpx.Client(timeout=10) as client:
            tg_own = _own_latency(lambda i: client.post(f"{tg.base_url}/bot{TOKEN}/sendMessage",
                                                        json={"chat_id": 1, "text": f"own {i}"}))
        stack = _stack(tmp, llm, tg, wx)
        wait_for(lambda: stack.health()["checks"].get("channel:wechat", {}).get("state") == "polling", 60,
                 "the WeChat poller did not start")
        tg_sent, wx_sent = _telegram_sent(tg), _wechat_sent(wx)
        warm = [str(900000 + i) for i in range(5)]  # threads, pools and connections start (not counted)
        for c in warm:
            tg.message(chat_id=int(c), text="warm up", token=TOKEN)
        _await("telegram warm-up", warm, tg_sent)
        light = [str(100000 + i) for i in range(LIGHT)]
        _measure(res, "light load", stack, "telegram", light,
                 lambda i: tg.message(chat_id=int(light[i]), text=f"hello {i}", token=TOKEN), tg_sent, tg_own, RATE)
        burst = [str(200000 + i) for i in range(BURST)]
        _measure(res, f"{BURST} chats at once", stack, "telegram", burst,
                 lambda i: tg.message(chat_id=int(burst[i]), text=f"burst {i}", token=TOKEN), tg_sent, tg_own, None)
        with httpx.Client(timeout=10) as client:
            token = next(iter(wx.tokens))
            wx.offer(wx.message("own@im.wechat", "open the window"))
            wx_own = _own_latency(lambda i: client.post(
                f"{wx.base_url}/ilink/bot/sendmessage", headers={"Authorization": f"Bearer {token}",
                                                                 "AuthorizationType": "ilink_bot_token"},
                json={"msg": {"to_user_id": "own@im.wechat", "client_id": f"own-{i}", "message_type": 2,
                              "item_list": [{"type": 1, "text_item": {"text": f"own {i}"}}]}}))
        wx_users = [f"light{i}@im.wechat" for i in range(LIGHT)]
        _measure(res, "light load", stack, "wechat", wx_users,
                 lambda i: wx.offer(wx.message(wx_users[i], f"hello {i}")), wx_sent, wx_own, RATE)
        wx_burst = [f"burst{i}@im.wechat" for i in range(BURST)]
        _measure(res, f"{BURST} chats at once", stack, "wechat", wx_burst,
                 lambda i: wx.offer(wx.message(wx_burst[i], f"burst {i}")), wx_sent, wx_own, None)
        for name in ("tgpoll", "wxpoll"):
            res.add(f"RSS of the {'Telegram' if name == 'tgpoll' else 'WeChat'} poller", round(
                rss_mb(process_tree(stack.procs[name].pid)), 1), "MB")
        res.notes.append(f"light load: {LIGHT} chats at {RATE:g}/s; burst: {BURST} chats at once; one worker (200 threads)")
    finally:
        if stack is not None:
            stack.stop()
        llm.stop()
        tg.stop()
        wx.stop()
    return res


if __name__ == "__main__":
    raise SystemExit(main(NAME, run, doc=__doc__))
