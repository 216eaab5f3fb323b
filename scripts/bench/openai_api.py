"""OpenAI-compatible API overhead: a turn through `POST /v1/chat/completions` (the official SDK,
non-streamed and streamed) against the same turn over `/ws`, on one stack, in the same run.

Each iteration sends one message over /ws (send -> the turn_completed that lists its seq) and one
through /v1 (request -> the completion, or the stream's [DONE]), both answered by the fake LLM's
one-call echo, on dialogs that each path keeps reusing; the order alternates so drift hits both.
The /v1 figure includes what only it does: bearer check, body checks, the dialog lookup, its own
subscription and reading the answer from SQL. Target: p50 overhead <= 5 ms.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import httpx

from scripts.bench.common import Bench, Result, log, main, p50_p99, running_stack, timed_turn

NAME = "openai_api"
MARK = "BENCH-OAI"
TARGET_P50_MS = 5.0


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-n", "--turns", type=int, default=150, help="measured turns per path (default 150)")
    p.add_argument("--warmup", type=int, default=15, help="unmeasured turns per path first (default 15)")
    p.add_argument("--sessions", type=int, default=3, help="dialogs each path rotates over (default 3)")


def run(args: argparse.Namespace) -> Result:
    with running_stack(NAME, gateway={"openai_api": {"enabled": True}}) as bench:
        return measure(bench, args.turns, args.warmup, args.sessions)


class V1Client:
    def __init__(self, bench: Bench):
        import openai

        made = bench.stack.cli("apikeys", "create", "bench", "--json")
        if made.returncode != 0:
            raise RuntimeError(f"picobot apikeys create failed: {made.stderr}")
        key = json.loads(made.stdout)["key"]
        self.sdk = openai.OpenAI(base_url=bench.stack.http + "/v1", api_key=key, max_retries=0, timeout=60)
        self.http = httpx.Client(base_url=bench.stack.http, headers={"Authorization": f"Bearer {key}"}, timeout=60)
        self.sessions: list[str] = []

    def open(self, n: int) -> None:
        for i in range(n):
            raw = self.sdk.chat.completions.with_raw_response.create(
                model="picobot", messages=[{"role": "user", "content": f"{MARK} open {i}"}])
            self.sessions.append(raw.headers["x-picobot-session"])

    def complete(self, i: int, text: str) -> float:
        started = time.perf_counter()
        done = self.sdk.chat.completions.create(model="picobot", messages=[{"role": "user", "content": text}],
                                                extra_headers={"X-PicoBot-Session": self._session(i)})
        ms = (time.perf_counter() - started) * 1000
        if done.choices[0].message.content != f"You said: {text}":
            raise RuntimeError(f"unexpected /v1 answer: {done.choices[0].message.content!r}")
        return ms

    def plain(self, i: int, text: str) -> float:
        """The same request with a bare HTTP client: what the SDK itself adds is the difference."""
        started = time.perf_counter()
        r = self.http.post("/v1/chat/completions", json={"model": "picobot", "messages": [
            {"role": "user", "content": text}]}, headers={"X-PicoBot-Session": self._session(i)})
        ms = (time.perf_counter() - started) * 1000
        if r.json()["choices"][0]["message"]["content"] != f"You said: {text}":
            raise RuntimeError(f"unexpected /v1 answer: {r.text[:200]}")
        return ms

    def stream(self, i: int, text: str) -> float:
        started = time.perf_counter()
        parts = [c.choices[0].delta.content or "" for c in self.sdk.chat.completions.create(
            model="picobot", messages=[{"role": "user", "content": text}], stream=True,
            extra_headers={"X-PicoBot-Session": self._session(i)}) if c.choices]
        ms = (time.perf_counter() - started) * 1000
        if "".join(parts) != f"You said: {text}":
            raise RuntimeError(f"unexpected /v1 stream: {''.join(parts)!r}")
        return ms

    def _session(self, i: int) -> str:
        return self.sessions[i % len(self.sessions)]


def ws_turn(clients: list[Any], i: int, text: str) -> float:
    t = timed_turn(clients[i % len(clients)], text)
    if t.frame.get("status") != "completed" or t.frame.get("final_text") != f"You said: {text}":
        raise RuntimeError(f"unexpected /ws turn: {t.frame}")
    return t.total_ms


def measure(bench: Bench, turns: int, warmup: int, sessions: int) -> Result:
    v1 = V1Client(bench)
    v1.open(sessions)
    clients = [bench.client(f"bench-oai-{i}") for i in range(sessions)]
    rows: dict[str, list[float]] = {"ws": [], "v1": [], "v1_stream": [], "v1_httpx": []}
    log(f"openai_api: {warmup} warm-up + {turns} measured turns per path over {sessions} dialog(s)")
    for i in range(warmup + turns):
        runs = [("ws", lambda: ws_turn(clients, i, f"{MARK} ws {i}")),
                ("v1", lambda: v1.complete(i, f"{MARK} v1 {i}")),
                ("v1_stream", lambda: v1.stream(i, f"{MARK} stream {i}")),
                ("v1_httpx", lambda: v1.plain(i, f"{MARK} httpx {i}"))]
        if i % 2:
            runs.reverse()
        for key, fn in runs:
            ms = fn()
            if i >= warmup:
                rows[key].append(ms)
    for c in clients:
        c.close()
    return report(rows)


def report(rows: dict[str, list[float]]) -> Result:
    ws50, ws99 = p50_p99(rows["ws"])
    v50, v99 = p50_p99(rows["v1"])
    s50, s99 = p50_p99(rows["v1_stream"])
    res = Result(NAME)
    res.add("p50 overhead /v1 over /ws", v50 - ws50, "ms", f"<= {TARGET_P50_MS:g}", v50 - ws50 <= TARGET_P50_MS,
            f"/ws turn p50 {ws50:.1f} ms", f"{v50 / ws50:.2f}x /ws")
    res.add("p50 overhead /v1 stream over /ws", s50 - ws50, "ms", f"<= {TARGET_P50_MS:g}",
            s50 - ws50 <= TARGET_P50_MS, f"/ws turn p50 {ws50:.1f} ms", f"{s50 / ws50:.2f}x /ws")
    res.add("p99 overhead /v1 over /ws", v99 - ws99, "ms", baseline=f"/ws turn p99 {ws99:.1f} ms")
    res.add("p50 /ws turn (raw)", ws50, "ms")
    res.add("p50 /v1 completion (raw)", v50, "ms")
    res.add("p50 /v1 stream (raw)", s50, "ms")
    h50 = p50_p99(rows["v1_httpx"])[0]
    res.add("p50 /v1 completion, bare httpx client (raw)", h50, "ms", baseline=f"SDK {v50:.1f} ms")
    res.notes += [f"{len(rows['ws'])} turns per path; each turn = 1 model call (the fake LLM's echo)",
                  f"of the /v1 overhead, the SDK's own client work is about {v50 - h50:.1f} ms "
                  "(the same request through a bare httpx client)"]
    res.raw = {"rows": rows}
    return res


if __name__ == "__main__":
    raise SystemExit(main(NAME, run, add_args, __doc__))
