"""`picobot plugins list` as a subprocess against a home with a good, a broken and a disabled plugin
file, and GET /api/plugins (paired devices only) from the real Flask app."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

from picobot.app import App, build_runtime
from picobot.config import Config
from tests.stack import ROOT, issue_token

GOOD = '''\
from picobot.plugins import hookimpl

__version__ = "1.2.3"


@hookimpl
def before_output(ctx, text):
    return None


@hookimpl
def after_output(ctx, turn):
    pass
'''
BROKEN = 'raise RuntimeError("broken on purpose\\nsecond line")\n'


def make_home(root: Path, config: dict[str, Any] | None = None) -> Path:
    home = root / "home"
    plugins = home / "plugins"
    plugins.mkdir(parents=True)
    (plugins / "good.py").write_text(GOOD)
    (plugins / "broken.py").write_text(BROKEN)
    (plugins / "off.py").write_text(GOOD)
    (plugins / "_helper.py").write_text("raise SystemExit('helpers are not plugins')\n")
    (home / "config.json").write_text(json.dumps(config or {"plugins": {"disabled": ["off"]}}))
    return home


def plugins_cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "DATABASE_URL"))}
    env.update(PICOBOT_HOME=str(home), PYTHONUNBUFFERED="1")
    return subprocess.run([sys.executable, "-m", "picobot", "plugins", *args], env=env, cwd=home.parent,
                          capture_output=True, text=True, timeout=120)


def by_name(plugins: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in plugins}


def test_list_prints_one_line_per_plugin(tmp_path: Path) -> None:
    r = plugins_cli(make_home(tmp_path), "list")
    assert r.returncode == 0, r.stderr
    rows = {line.split()[0]: line for line in r.stdout.splitlines()}
    assert {"channels", "memory", "skills", "good", "broken", "off"} <= set(rows)
    assert "_helper" not in rows
    good = rows["good"].split()
    assert good[:4] == ["good", "file", "1.2.3", "active"]
    assert "hooks: after_output,before_output" in rows["good"] and "error" not in rows["good"]
    broken = rows["broken"].split()
    assert broken[:4] == ["broken", "file", "-", "failed"]
    assert rows["broken"].endswith("error: RuntimeError: broken on purpose second line")  # one line each
    assert rows["off"].split()[:4] == ["off", "file", "-", "disabled"]
    assert rows["channels"].split()[1] == "builtin"
    assert "broken on purpose" in r.stderr  # the load failure is logged too


def test_list_json_is_the_hosts_statuses(tmp_path: Path) -> None:
    r = plugins_cli(make_home(tmp_path), "list", "--json")
    assert r.returncode == 0, r.stderr
    plugins = by_name(json.loads(r.stdout)["plugins"])
    assert plugins["good"] == {"name": "good", "source": "file", "version": "1.2.3", "state": "active",
                               "hooks": ["after_output", "before_output"], "error": None, "errors": 0}
    assert plugins["broken"]["state"] == "failed" and plugins["broken"]["hooks"] == []
    assert plugins["broken"]["error"].startswith("RuntimeError: broken on purpose")
    assert plugins["off"]["state"] == "disabled"
    assert all(p["state"] == "active" for p in plugins.values() if p["source"] == "builtin")


def test_third_party_plugins_off_leaves_the_builtins(tmp_path: Path) -> None:
    r = plugins_cli(make_home(tmp_path, {"plugins": {"enabled": False}}), "list", "--json")
    assert r.returncode == 0, r.stderr
    plugins = json.loads(r.stdout)["plugins"]
    assert plugins and {p["source"] for p in plugins} == {"builtin"}


def test_plugins_needs_an_action(tmp_path: Path) -> None:
    r = plugins_cli(make_home(tmp_path))
    assert r.returncode == 2 and "plugins" in r.stderr


# --- GET /api/plugins -----------------------------------------------------------------------


class _NoQueue:
    def enqueue_turn(self, session_id: str) -> None:
        raise AssertionError("no turns here")


@pytest.fixture
def runtime(tmp_path: Path, redis_url: str) -> Iterator[App]:
    home = make_home(tmp_path)
    config = Config.model_validate({"home": str(home), "redis_url": redis_url,
                                    **json.loads((home / "config.json").read_text())})
    rt = build_runtime(config, _NoQueue(), migrate=True)  # type: ignore[arg-type]
    yield rt
    rt.close()


def test_api_plugins_lists_statuses_for_paired_devices_only(runtime: App) -> None:
    from web.app import create_app

    client = create_app(runtime=runtime).test_client()
    refused = client.get("/api/plugins")
    assert refused.status_code == 401 and refused.get_json()["error"] == "not_paired"
    token = issue_token(runtime.config.database_url, "plugins test")
    resp = client.get("/api/plugins", headers={"Authorization": f"Bearer {token}"})
    assert resp.status_code == 200
    plugins = by_name(resp.get_json()["plugins"])
    assert plugins["good"]["state"] == "active" and plugins["good"]["version"] == "1.2.3"
    assert plugins["broken"]["state"] == "failed" and "broken on purpose" in plugins["broken"]["error"]
    assert plugins["off"]["state"] == "disabled"
    assert resp.get_json()["plugins"] == runtime.plugins.statuses()


def test_the_plugins_page_is_in_the_navigation() -> None:
    pages = (ROOT / "web" / "static" / "js" / "pages.js").read_text()
    assert 'id: "plugins"' in pages and "./pages/plugins.js" in pages
    page = (ROOT / "web" / "static" / "js" / "pages" / "plugins.js").read_text()
    assert "/api/plugins" in page and "export function createPage" in page
