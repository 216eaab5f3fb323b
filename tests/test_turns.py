"""End to end through real processes: /ws -> web -> Celery worker -> fake LLM -> back."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import sqlalchemy

from tests.conftest import add_rule
from tests.stack import API_KEY, Stack
from tests.http_client import HTTP


def test_tool_using_turn_streams_and_persists(stack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    c = stack.client()
    done = c.ask("what is (12+30)*2 ?")
    assert done["status"] == "completed", done
    assert "84" in done["final_text"]
    updates = [f for f in c.frames if f["type"] == "turn_updated"]
    assert updates, "snapshots were streamed"
    revisions = [f["revision"] for f in updates]
    assert revisions == sorted(revisions)
    tools = [b for b in updates[-1]["blocks"] if b["type"] == "tool"]
    assert tools and tools[0]["name"] == "calculator"
    c.send({"type": "history", "id": "h"})
    hist = c.recv_until(lambda f: f.get("id") == "h")["messages"]
    roles = [m["role"] for m in hist]
    assert roles[-4:] == ["user", "assistant", "tool", "assistant"]
    assert hist[-3]["tool_calls"][0]["name"] == "calculator"
    assert "provider_state" not in json.dumps(hist)


def test_chat_cli_one_shot_continues_one_conversation(stack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    r = stack.cli("chat", "-m", "hello there", "--url", stack.ws_url)
    assert r.returncode == 0, r.stderr
    assert "You said: hello there" in r.stdout
    r2 = stack.cli("chat", "-m", "/info --json", "--url", stack.ws_url)
    info = json.loads(r2.stdout)
    assert info["messages"] >= 2 and info["input_tokens"] > 0
    r3 = stack.cli("chat", "-m", "/new fresh", "--url", stack.ws_url)
    assert r3.returncode == 0 and "New dialog" in r3.stdout
    r4 = stack.cli("chat", "-m", "/info --json", "--url", stack.ws_url)
    assert json.loads(r4.stdout)["title"] == "fresh"


def test_provider_failure_is_a_clear_failed_turn_without_the_key(stack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    add_rule(llm, "boom-please", *[{"error": {"status": 500, "message": "upstream exploded"}}] * 5)
    c = stack.client()
    done = c.ask("boom-please")
    assert done["status"] == "failed"
    assert "provider" in done["error"].lower()
    assert API_KEY not in json.dumps(c.frames)
    assert API_KEY not in stack.all_logs()
    assert _secret_in_database(stack.database_url, API_KEY) == []
    assert _secret_in_files(stack.cwd, API_KEY) == []


def test_the_secret_scans_find_a_planted_secret(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The scans above must be able to fail: a committed row still in the WAL and a file are found."""
    url = f"sqlite:///{tmp_path / 'scan.db'}"
    eng = sqlalchemy.create_engine(url)
    with eng.begin() as c:
        c.exec_driver_sql("PRAGMA journal_mode=WAL")
        c.exec_driver_sql("CREATE TABLE t (id INTEGER PRIMARY KEY, body JSON, note VARCHAR(20))")
        c.exec_driver_sql("INSERT INTO t (body, note) VALUES (?, 'x')", (json.dumps({"k": "sk-planted"}),))
    try:
        assert (tmp_path / "scan.db-wal").stat().st_size > 0 and b"sk-planted" not in (tmp_path / "scan.db").read_bytes()
        assert _secret_in_database(url, "sk-planted") == ["t.body"]
    finally:
        eng.dispose()
    (tmp_path / "deep" / "er").mkdir(parents=True)
    (tmp_path / "deep" / "er" / "f.txt").write_text("x sk-planted y")
    assert [p.name for p in _secret_in_files(tmp_path / "deep", "sk-planted")] == ["f.txt"]


def _secret_in_database(url: str, secret: str) -> list[str]:
    """Every column of every table, read through SQL (so rows still in SQLite's WAL count too)."""
    eng = sqlalchemy.create_engine(url)
    try:
        meta = sqlalchemy.MetaData()
        meta.reflect(eng)
        hits = []
        with eng.connect() as c:
            for table in meta.sorted_tables:
                for col in table.columns:
                    q = sqlalchemy.select(sqlalchemy.func.count()).select_from(table).where(
                        sqlalchemy.cast(col, sqlalchemy.Text).contains(secret, autoescape=True))
                    if c.execute(q).scalar():
                        hits.append(f"{table.name}.{col.name}")
        return hits
    finally:
        eng.dispose()


def _secret_in_files(root: Path, secret: str) -> list[Path]:
    """Every file under root: the home (config, database, WAL, tokens), the workspace, Redis data, logs."""
    return [p for p in root.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


def test_health_reports_every_dependency(stack: Stack) -> None:
    h = HTTP.get(stack.http + "/health").json()
    for name in ("database", "redis", "workers", "beat", "provider"):
        assert name in h["checks"]
    assert h["checks"]["database"]["ok"] and h["checks"]["redis"]["ok"] and h["checks"]["workers"]["ok"]
    deadline = time.monotonic() + 20
    while not HTTP.get(stack.http + "/health").json()["checks"]["beat"]["ok"]:
        assert time.monotonic() < deadline, "beat never became healthy"
        time.sleep(0.5)


def test_shell_commands_never_see_credentials(stack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    add_rule(llm, "show-env", {"tool_calls": [{"name": "bash", "arguments": {"command": "env; echo KEY=$PICOBOT_TEST_KEY"}}]},
             {"content": "done"})
    c = stack.client()
    assert c.ask("show-env")["status"] == "completed"
    sent = json.dumps(llm.requests()[-1]["body"])
    assert "PATH=" in sent  # the environment was listed ...
    assert API_KEY not in sent and "REDIS_URL" not in sent  # ... without credentials
    assert "PICOBOT_HOME" not in sent  # ... and without PicoBot's own variables (an allowlist)


def test_a_key_the_model_writes_is_masked_everywhere(stack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    # a prompt-injected model echoes the configured key into a tool call and its answer
    add_rule(llm, "leak-key", {"content": f"sending {API_KEY}", "tool_calls": [
        {"name": "bash", "arguments": {"command": f"echo got {API_KEY}"}}]}, {"content": f"the key is {API_KEY}"})
    c = stack.client()
    done = c.ask("leak-key")
    assert done["status"] == "completed"
    assert API_KEY not in json.dumps(c.frames)
    assert API_KEY not in json.dumps(llm.requests()[-1]["body"])  # the tool never got it either
    assert "[redacted]" in done["final_text"] or "***" in done["final_text"]
    assert _secret_in_database(stack.database_url, API_KEY) == []


def test_interactive_chat_streams_answers_and_runs_commands(stack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    import subprocess
    import sys

    p = subprocess.Popen([sys.executable, "-m", "picobot", "chat", "--url", stack.ws_url, "--chat", "interactive-1"],
                         env=stack.env, cwd=stack.cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    try:
        p.stdin.write("what is 3*7\n")
        p.stdin.flush()
        time.sleep(3)
        p.stdin.write("/sessions\n/frob\n/quit\n")
        p.stdin.flush()
        out, _ = p.communicate(timeout=30)
    finally:
        p.kill()
    assert p.returncode == 0
    assert "[calculator done]" in out and "returned: 21" in out
    assert "* default" in out and "Unknown command /frob" in out


def test_a_start_shows_no_avoidable_warnings(stack: Stack) -> None:
    """gunicorn's keep-alive warning and redbeat's broker_transport_options one, seen on every start."""
    logs = stack.all_logs()
    assert "No keepalived connections" not in logs
    assert "RedBeat will stop falling back" not in logs


def test_a_turns_model_calls_reach_the_usage_ledger_with_its_commit(stack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    """No budget limit here: the rows are held and written in the turn's own commit, a failed turn's too
    (its failed call is a row of no tokens)."""
    import uuid

    tag = uuid.uuid4().hex[:6]
    calc = {"tool_calls": [{"name": "calculator", "arguments": {"expression": "1+1"}}],
            "usage": {"input_tokens": 11, "output_tokens": 1}}
    add_rule(llm, f"ledger-ok-{tag}", calc, {"content": "2", "usage": {"input_tokens": 12, "output_tokens": 2}})
    add_rule(llm, f"ledger-fail-{tag}", calc, *[{"error": {"status": 400, "message": "no such model"}}] * 5)
    c = stack.client()
    ok, failed = c.ask(f"ledger-ok-{tag}"), c.ask(f"ledger-fail-{tag}")
    assert ok["status"] == "completed" and failed["status"] == "failed", (ok, failed)
    eng = sqlalchemy.create_engine(stack.database_url)
    try:
        with eng.connect() as conn:
            rows = conn.exec_driver_sql(
                "SELECT turn_id, kind, input_tokens, output_tokens FROM usage_records WHERE turn_id IN (?, ?) "
                "ORDER BY created_at, id", (ok["turn_id"], failed["turn_id"])).all()
    finally:
        eng.dispose()
    assert [tuple(r) for r in rows] == [(ok["turn_id"], "turn", 11, 1), (ok["turn_id"], "turn", 12, 2),
                                        (failed["turn_id"], "turn", 11, 1), (failed["turn_id"], "turn", 0, 0)]
    c.close()
