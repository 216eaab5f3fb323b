"""Shared fixtures: a fake LLM server, a real PicoBot stack (processes), database URLs."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from scripts.fake_llm import FakeLLM
from tests.stack import Stack
from tests.feishu_fake import *  # noqa: F401,F403  (fixtures: fake_feishu, feishu_config, event_sender)
from tests.file_order import pytest_collection_modifyitems, pytest_runtest_logreport, pytest_sessionfinish  # noqa: F401
from tests.http_client import HTTP

PG_URL = os.environ.get("PICOBOT_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """A failing test that ran real processes shows their logs: CI output is all we get."""
    outcome = yield
    report = outcome.get_result()
    if report.failed and call.when in ("setup", "call"):
        for stack in Stack.live:
            report.sections.append((f"PicoBot process logs ({stack.cwd.name})", stack.log_tails()))


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    """A private redis-server for one test (the embedded one `picobot up` would start)."""
    from picobot.cli.embedded_redis import start_embedded

    proc, url = start_embedded(tmp_path / "redis")
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(scope="session")
def fake_llm() -> Iterator[FakeLLM]:
    server = FakeLLM(host="127.0.0.1", port=0).start()
    yield server
    server.stop()


@pytest.fixture
def llm(fake_llm: FakeLLM) -> FakeLLM:
    """The fake LLM with no rules left from earlier tests."""
    HTTP.delete(fake_llm.url + "/_fake/rules")
    return fake_llm


def add_rule(llm: FakeLLM, match: str | None, *responses: dict, repeat: bool = False) -> None:
    r = HTTP.post(llm.url + "/_fake/rules", json={"match": match, "responses": list(responses), "repeat": repeat})
    r.raise_for_status()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, fake_llm: FakeLLM) -> Iterator[Stack]:
    """One running stack per test module (web + 1 worker + beat)."""
    s = Stack(tmp_path_factory.mktemp("stack"), fake_llm.url)
    try:
        s.start()
        yield s
    finally:
        s.stop()


def pg_available() -> bool:
    try:
        import sqlalchemy

        eng = sqlalchemy.create_engine(PG_URL)
        with eng.connect() as c:
            c.exec_driver_sql("SELECT 1")
        eng.dispose()
        return True
    except Exception:
        return False


def fresh_pg_schema() -> Iterator[str]:
    """The URL of a new PostgreSQL schema, dropped when the generator is closed."""
    if not pg_available():
        pytest.skip("PostgreSQL is not reachable at PICOBOT_TEST_PG_URL")
    import sqlalchemy

    schema = "t_" + uuid.uuid4().hex[:12]
    eng = sqlalchemy.create_engine(PG_URL)
    with eng.begin() as c:
        c.exec_driver_sql(f"CREATE SCHEMA {schema}")
    sep = "&" if "?" in PG_URL else "?"
    yield f"{PG_URL}{sep}options=-csearch_path%3D{schema}"
    with eng.begin() as c:
        c.exec_driver_sql(f"DROP SCHEMA {schema} CASCADE")
    eng.dispose()


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh PostgreSQL schema per test (dropped afterwards)."""
    yield from fresh_pg_schema()


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def stack_database(request: pytest.FixtureRequest) -> Iterator[str | None]:
    """The database of a module's stacks: None (SQLite in the stack's home) or a fresh PostgreSQL schema."""
    if request.param == "sqlite":
        yield None
        return
    yield from fresh_pg_schema()


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'picobot.db'}"
    return request.getfixturevalue("pg_url")
