"""The platform connections as the channels plugin's processes: `picobot up` plans them like any plugin's,
`picobot run channels:<name>:<key>` and `picobot telegram|wechat` run them, and they stop on SIGTERM within
their own deadline — at once, abandoning a long poll in flight.

Real processes on a private Redis and a temp SQLite home, against the fake Bot API; the in-process test runs
the process runner in a thread, stopped by its event alone (no signal).
"""

from __future__ import annotations

import ast
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
import redis

from picobot.channels.telegram.poller import SHUTDOWN_DEADLINE_SECS as TELEGRAM_DEADLINE
from picobot.channels.wechat.poller import SHUTDOWN_DEADLINE_SECS as WECHAT_DEADLINE
from picobot.cli.embedded_redis import free_port
from picobot.config import Config
from picobot.coord import keys
from scripts.fake_telegram import FakeTelegram
from tests.stack import API_KEY, base_config, migrated, wait_for
from tests.telegram_fake import fake_tg, make_rt  # noqa: F401 (fixtures)

ROOT = Path(__file__).resolve().parent.parent


def test_up_plans_the_platform_connections_as_channels_processes() -> None:
    from picobot.cli.plugin_parts import planned

    config = Config.model_validate({"channels": {
        "tg": {"type": "telegram", "enabled": True, "token": "1:a"},
        "tghook": {"type": "telegram", "enabled": True, "token": "2:b", "mode": "webhook"},
        "tgoff": {"type": "telegram", "enabled": False, "token": "3:c"},
        "lc": {"type": "feishu", "enabled": True, "mode": "long_connection", "app_id": "a", "app_secret": "s"},
        "hooked": {"type": "feishu", "enabled": True, "app_id": "b", "app_secret": "s", "verification_token": "v"},
        "wx": {"type": "wechat", "enabled": True},
    }})
    targets = dict(planned(config))
    assert targets["channels:telegram (tg)"] == "channels:telegram:tg"
    assert targets["channels:feishu (lc)"] == "channels:feishu:lc"
    assert targets["channels:wechat (wx)"] == "channels:wechat:wx"
    ours = sorted(t for t in targets.values() if t.startswith("channels:"))
    assert ours == ["channels:feishu:lc", "channels:telegram:tg", "channels:wechat:wx"]


def test_picobot_up_starts_no_platform_of_its_own() -> None:
    """processes.py knows web, worker, beat and plugin processes; the platforms come through planned()."""
    tree = ast.parse((ROOT / "picobot" / "cli" / "processes.py").read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            names.add(node.module or "")
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.Name, ast.Attribute)):
            names.add(getattr(node, "name", None) or getattr(node, "id", None) or getattr(node, "attr", ""))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "\n" not in node.value:
            names.add(node.value)  # argv words, not docstrings
    assert not [n for n in names if any(p in n.lower() for p in ("feishu", "telegram", "wechat"))]


# --- real processes ------------------------------------------------------------------------------


class Home:
    """A PicoBot home with a polling Telegram channel (on the fake) and a WeChat channel with no login."""

    def __init__(self, tmp: Path, redis_url: str, fake: FakeTelegram):
        self.tmp = tmp
        self.home = tmp / "home"
        self.home.mkdir()
        cfg = base_config("http://127.0.0.1:9", free_port())
        cfg["channels"] = {
            "tg": {"type": "telegram", "enabled": True, "token": fake.token, "base_url": fake.base_url,
                   "poll_timeout_secs": 30},  # a poll is in flight when SIGTERM comes
            "wx": {"type": "wechat", "enabled": True, "base_url": "http://127.0.0.1:9"},
        }
        (self.home / "config.json").write_text(json.dumps(cfg, indent=2))
        self.redis_url = redis_url
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "DATABASE_URL"))}
        self.env.update(PICOBOT_HOME=str(self.home), REDIS_URL=redis_url, PICOBOT_TEST_KEY=API_KEY,
                        PYTHONUNBUFFERED="1")
        self.procs: list[subprocess.Popen] = []
        migrated(None, self.home)

    def spawn(self, name: str, *argv: str) -> subprocess.Popen:
        with open(self.tmp / f"{name}.log", "ab") as log:
            proc = subprocess.Popen([sys.executable, "-m", "picobot", *argv], env=self.env, cwd=self.tmp,
                                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        proc.log_path = self.tmp / f"{name}.log"  # type: ignore[attr-defined]
        self.procs.append(proc)
        return proc

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def log_of(proc: subprocess.Popen) -> str:
    return proc.log_path.read_text(errors="replace")  # type: ignore[attr-defined]


def stopped_in_time(proc: subprocess.Popen, sig: int, deadline: float) -> float:
    """Send `sig`; the seconds the process took to exit 0 (it must beat its own deadline)."""
    started = time.monotonic()
    os.killpg(proc.pid, sig)
    assert proc.wait(timeout=deadline + 5) == 0, log_of(proc)[-3000:]
    return time.monotonic() - started


def process_status(redis_url: str, name: str, instance: str) -> dict[str, Any]:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        raw = client.get(keys.plugin_process("channels", name, instance))
    finally:
        client.close()
    return json.loads(raw) if raw else {}


@pytest.fixture
def home(tmp_path: Path, redis_url: str, fake_tg: FakeTelegram) -> Iterator[Home]:
    h = Home(tmp_path, redis_url, fake_tg)
    try:
        yield h
    finally:
        h.stop_all()


def test_a_telegram_poller_run_by_picobot_run_stops_at_once_on_sigterm(home: Home, fake_tg: FakeTelegram) -> None:
    poller = home.spawn("run", "run", "channels:telegram:tg")
    wait_for(lambda: fake_tg.bot().polling == 1, 60, f"no getUpdates in flight:\n{log_of(poller)[-3000:]}")
    assert process_status(home.redis_url, "telegram", "tg")["state"] == "running"
    standby = home.spawn("thin", "telegram", "--channel", "tg")  # the user's command: the same process
    wait_for(lambda: "telegram poller (tg): standing by" in log_of(standby), 60,
             f"the second poller did not stand by:\n{log_of(standby)[-3000:]}")

    took = stopped_in_time(poller, signal.SIGTERM, TELEGRAM_DEADLINE)
    assert took < 3, f"the poll in flight was not abandoned ({took:.1f} s)"  # not the 30 s poll, not the deadline
    text = log_of(poller)
    assert "telegram poller (tg): stopped" in text and "exiting now" not in text
    wait_for(lambda: "this process polls bot" in log_of(standby), 30, "the standby did not take over")
    took = stopped_in_time(standby, signal.SIGINT, TELEGRAM_DEADLINE)
    assert took < 3 and "exiting now" not in log_of(standby)
    assert process_status(home.redis_url, "telegram", "tg")["state"] == "stopped"


def test_a_wechat_poller_waiting_for_a_login_stops_on_sigterm(home: Home) -> None:
    proc = home.spawn("wechat", "wechat", "--channel", "wx")
    wait_for(lambda: "wechat poller (wx): this process polls" in log_of(proc), 60,
             f"the poller did not start:\n{log_of(proc)[-3000:]}")
    took = stopped_in_time(proc, signal.SIGTERM, WECHAT_DEADLINE)
    assert took < 3 and "wechat poller (wx): stopped" in log_of(proc) and "exiting now" not in log_of(proc)
    assert process_status(home.redis_url, "wechat", "wx")["state"] == "stopped"


def test_picobot_run_names_the_instances_a_platform_has(home: Home) -> None:
    proc = home.spawn("nope", "run", "channels:telegram:nope")
    assert proc.wait(timeout=60) == 2
    assert "has no instance 'nope'" in log_of(proc) and "(it has: tg)" in log_of(proc)


# --- in process: the stop event alone -----------------------------------------------------------


def test_the_stop_event_alone_stops_a_poller_run_in_a_thread(fake_tg: FakeTelegram, make_rt: Any) -> None:
    from picobot.cli.plugin_parts import process_specs
    from picobot.runtime.plugin_ports import PluginPorts
    from picobot.runtime.processes import serve

    rt = make_rt(poll_timeout_secs=1)
    spec = next(s for s in process_specs(rt.plugins) if (s.plugin, s.name) == ("channels", "telegram"))
    stopping = threading.Event()
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(serve(PluginPorts(rt, "channels"), spec, "telegram",
                                                                 stopping, handle_signals=False)), daemon=True)
    thread.start()
    fake_tg.message(chat_id=51, text="hello")
    wait_for(lambda: fake_tg.pending() == 0, 20, "the update was not taken")
    assert rt.queue.events  # recorded and queued through the process's own runtime
    stopping.set()
    thread.join(timeout=5)  # the poll at hand (1 s), then out
    assert not thread.is_alive() and result == [0]
