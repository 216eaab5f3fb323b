"""Web UI timings in a real Chromium (Debian's, via Playwright; see scripts/install-browser).

1. First paint of history: a paired browser opens `/` on a 500-message dialog (user, tool-calling
   assistant, tool result, Markdown answer with a code block, repeated). Measured in the page:
   navigation start -> the frame that shows the history has been painted (the app marks
   `picobot:history-painted`; the newest messages are drawn first, older ones follow above).
   Cold (fresh browser context, empty HTTP cache) and warm (cached
   assets, as on every visit after the first). Target: < 300 ms.
2. Snapshot latency: turn_updated snapshots are published on the session's Redis channel (as a
   worker's EventPublisher does) with the publish time; the page records when each one is in its
   DOM and when the frame showing it is painted. Target: < 100 ms.

    .venv/bin/python -m scripts.bench.ui [--runs 15] [--snapshots 100]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from scripts.bench.common import Result, log, main, p50_p99, percentile, running_stack

NAME = "ui"
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]
CHAT_ID = "bench-ui"
MESSAGES = 500
TARGET_PAINT_MS = 300.0
TARGET_SNAPSHOT_MS = 100.0

ANSWER = """Here is what I found about **item {i}**:

- the first point, with `inline code`
- the second point, with a [link](https://example.com/{i})

```python
def item_{i}(x):
    return x * {i}
```

That is all for now."""


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--runs", type=int, default=15, help="page loads per variant (default 15)")
    p.add_argument("--snapshots", type=int, default=100, help="snapshots to time (default 100)")


def seed_dialog(database_url: str) -> str:
    """A web dialog with MESSAGES messages in true order; returns its session id."""
    from picobot.domain.messages import ChatMessage, ToolCall
    from picobot.storage import messages, sessions
    from picobot.storage.db import Database

    db = Database(database_url)
    try:
        with db.write() as s:
            row = sessions.create(s, "web", CHAT_ID, title="A long dialog")
            sid = row.id
            batch: list[ChatMessage] = []
            for i in range(MESSAGES // 4):
                call = ToolCall(id=f"call_{i}", name="calculator", arguments=json.dumps({"expression": f"{i}*7"}))
                batch += [ChatMessage(role="user", content=f"Question {i}: what is {i} times seven, and why?"),
                          ChatMessage(role="assistant", content="", tool_calls=[call]),
                          ChatMessage(role="tool", content=str(i * 7), tool_call_id=call.id, name="calculator"),
                          ChatMessage(role="assistant", content=ANSWER.format(i=i))]
            messages.append(s, sid, None, batch)
        return sid
    finally:
        db.dispose()


def issue_token(database_url: str) -> str:
    from picobot.auth.pairing import Pairing
    from picobot.storage.db import Database

    db = Database(database_url)
    try:
        return Pairing(db).issue_token("ui bench", kind="browser").token
    finally:
        db.dispose()


def new_context(browser: Any, base: str, token: str) -> Any:
    ctx = browser.new_context(viewport={"width": 1280, "height": 800})
    ctx.add_cookies([{"name": "picobot_token", "value": token, "url": base, "httpOnly": True, "sameSite": "Strict"}])
    # The page's chat id lives in localStorage; point it at the seeded dialog before any app code runs.
    ctx.add_init_script(f"localStorage.setItem('picobot.chat_id', {json.dumps(CHAT_ID)})")
    return ctx


def load_once(ctx: Any, base: str) -> dict[str, float]:
    page = ctx.new_page()
    try:
        page.goto(base + "/")
        page.wait_for_selector("body[data-history-painted]", timeout=30_000)
        page.wait_for_function("() => performance.getEntriesByName('picobot:history-complete').length", timeout=30_000)
        return page.evaluate("""() => ({
          complete: performance.getEntriesByName('picobot:history-complete')[0].startTime,
          painted: performance.getEntriesByName('picobot:history-painted')[0].startTime,
          fcp: (performance.getEntriesByName('first-contentful-paint')[0] || {}).startTime || 0,
          shown: Number(document.body.dataset.historyPainted),
        })""")
    finally:
        page.close()


OBSERVER = """() => {
  window.__seen = {};
  const root = document.querySelector('.transcript');
  new MutationObserver(() => {
    const now = performance.timeOrigin + performance.now();
    for (const m of root.querySelectorAll('.turn.live .md')) {
      const hit = /BENCH-(\\d+)/.exec(m.textContent);
      if (hit && !window.__seen[hit[1]]) {
        const rec = window.__seen[hit[1]] = { dom: now };
        requestAnimationFrame(() => setTimeout(() => { rec.painted = performance.timeOrigin + performance.now(); }, 0));
      }
    }
  }).observe(root, { childList: true, subtree: true, characterData: true });
}"""


def snapshot_latency(ctx: Any, base: str, redis_url: str, session_id: str, count: int) -> dict[str, list[float]]:
    import redis

    from picobot.coord import keys

    r = redis.Redis.from_url(redis_url)
    page = ctx.new_page()
    try:
        page.goto(base + "/")
        page.wait_for_selector("body[data-history-painted]")
        page.wait_for_selector(".app[data-conn=open]")
        page.evaluate(OBSERVER)
        dom, painted = [], []
        text = ""
        for i in range(count):
            text += f"BENCH-{i} and some more streamed words. "
            frame = {"type": "turn_updated", "session_id": session_id, "turn_id": "bench-turn", "revision": i + 1,
                     "status": "running", "inbound_seqs": [], "blocks": [{"type": "text", "text": f"BENCH-{i} " + text}]}
            published = time.time() * 1000
            r.publish(keys.events(session_id), json.dumps(frame))
            page.wait_for_function(f"() => window.__seen['{i}'] && window.__seen['{i}'].painted", timeout=10_000)
            seen = page.evaluate(f"window.__seen['{i}']")
            dom.append(seen["dom"] - published)
            painted.append(seen["painted"] - published)
            time.sleep(0.03)  # apart, so the web's latest-wins coalescing never merges two of them
        return {"dom": dom, "painted": painted}
    finally:
        page.close()
        r.close()


def run(args: argparse.Namespace) -> Result:
    if not Path(CHROMIUM).exists():
        raise SystemExit(f"{CHROMIUM} is missing: run scripts/install-browser")
    from playwright.sync_api import sync_playwright

    result = Result(NAME)
    with running_stack(NAME, beat=False) as bench:
        stack = bench.stack
        log(f"ui: seeding a {MESSAGES}-message dialog")
        sid = seed_dialog(stack.database_url)
        token = issue_token(stack.database_url)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            try:
                log(f"ui: {args.runs} cold and {args.runs} warm page loads")
                cold = []
                for _ in range(args.runs):
                    ctx = new_context(browser, stack.http, token)
                    cold.append(load_once(ctx, stack.http))
                    ctx.close()
                ctx = new_context(browser, stack.http, token)
                load_once(ctx, stack.http)  # fills the HTTP cache
                warm = [load_once(ctx, stack.http) for _ in range(args.runs)]
                log(f"ui: {args.snapshots} snapshots")
                lat = snapshot_latency(ctx, stack.http, stack.redis_url, sid, args.snapshots)
                ctx.close()
            finally:
                browser.close()

    shown = int(warm[0]["shown"])
    for label, runs in (("cold", cold), ("warm", warm)):
        values = [r["painted"] for r in runs]
        p50, p95 = percentile(values, 50), percentile(values, 95)
        result.add(f"first paint of history, {label} p50", p50, "ms", f"< {TARGET_PAINT_MS:g}", p50 < TARGET_PAINT_MS,
                   f"FCP p50 {percentile([r['fcp'] for r in runs], 50):.0f} ms")
        result.add(f"first paint of history, {label} p95", p95, "ms", f"< {TARGET_PAINT_MS:g}", p95 < TARGET_PAINT_MS)
    complete = [r["complete"] for r in warm]
    result.add(f"all {shown} delivered messages drawn, warm p50", percentile(complete, 50), "ms")
    dom50, dom99 = p50_p99(lat["dom"])
    paint50, paint99 = p50_p99(lat["painted"])
    result.add("snapshot publish -> in page DOM p50", dom50, "ms", f"< {TARGET_SNAPSHOT_MS:g}", dom50 < TARGET_SNAPSHOT_MS)
    result.add("snapshot publish -> painted p50", paint50, "ms", f"< {TARGET_SNAPSHOT_MS:g}", paint50 < TARGET_SNAPSHOT_MS)
    result.add("snapshot publish -> painted p99", paint99, "ms", f"< {TARGET_SNAPSHOT_MS:g}", paint99 < TARGET_SNAPSHOT_MS)
    result.add("snapshot publish -> painted max", max(lat["painted"]), "ms", f"< {TARGET_SNAPSHOT_MS:g}",
               max(lat["painted"]) < TARGET_SNAPSHOT_MS)
    result.notes.append(f"dialog of {MESSAGES} messages; the `ready` frame carries the newest {shown}; the first "
                        f"paint draws the newest of those (16), the rest are added above in later tasks "
                        f"(older than {shown}: 'Load earlier messages')")
    result.notes.append(f"snapshot DOM p99 {dom99:.1f} ms; runs: {args.runs} loads per variant, "
                        f"{args.snapshots} snapshots")
    result.raw.update(cold=cold, warm=warm, snapshot_ms=lat)
    return result


if __name__ == "__main__":
    raise SystemExit(main(NAME, run, add_args, __doc__))
