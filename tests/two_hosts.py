"""Two worker hosts that share no disk, for tests: web + worker `a1` (host alpha) + worker `b1` (host
beta) + beat, each worker with a home and a workspace of its own, all on one database and one Redis.

The database is PostgreSQL when a URL is given, else one SQLite file named to every process through
DATABASE_URL (the web's home holds it): the two "hosts" are processes on one machine, and one machine
may share a SQLite file; the workspaces stay apart, as on two machines.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

from sqlalchemy import text

from picobot.storage.db import Database
from tests.stack import Stack, wait_for

HOSTS = ("alpha", "beta")
WORKER = {"alpha": "a1", "beta": "b1"}  # each host's one worker process
OTHER = {"alpha": "beta", "beta": "alpha"}


class TwoHosts(Stack):
    def __init__(self, tmp: Path, llm_url: str, database_url: str | None = None):
        # the turn lease is 10 s: a killed worker's turn comes back once its heartbeat has expired (7 s)
        # anyway, and a shorter lease is lost by live turns when the machine is busy (the sweeper then
        # reruns a turn that was not dead)
        super().__init__(tmp, llm_url, database_url=database_url or f"sqlite:///{tmp / 'home' / 'data' / 'picobot.db'}")
        cfg = json.loads((self.home / "config.json").read_text())
        cfg["gateway"]["turn_lease_secs"] = 10
        self.homes: dict[str, Path] = {}
        for host in HOSTS:
            home = tmp / f"home-{host}"
            home.mkdir(exist_ok=True)
            (home / "config.json").write_text(json.dumps({**cfg, "tools": {"workspace": str(self.workspace(host))}}))
            self.homes[host] = home
        (self.home / "config.json").write_text((self.homes["alpha"] / "config.json").read_text())  # web and beat
        self.db = Database(self.database_url)

    def workspace(self, host: str) -> Path:
        return self.cwd / f"ws-{host}"

    def files(self, host: str, prefix: str) -> set[str]:
        """The names of the files in `host`'s workspace that start with `prefix`."""
        return {p.name for p in self.workspace(host).glob(prefix + "*")}

    def start_hosts(self) -> "TwoHosts":
        """Every process at once (they start sooner together), then wait until all serve."""
        self.start_web(wait=False)
        for host in HOSTS:
            self.start_host(host, wait=False)
        self.start_beat()
        self.wait_web(60)  # four processes starting on a busy machine
        self.wait_workers(*WORKER.values())
        wait_for(lambda: set(HOSTS) <= set(self.redis().zrange("picobot:hosts", 0, -1)), 20, "hosts never beat")
        return self

    def start_host(self, host: str, wait: bool = True) -> None:
        self.start_worker(WORKER[host], env={"PICOBOT_HOST_ID": host, "PICOBOT_HOME": str(self.homes[host])}, wait=wait)

    def kill_host(self, host: str) -> None:
        """kill -9 the host's only worker."""
        self.kill(WORKER[host])

    def pause_host(self, host: str, pause: bool = True) -> None:
        """SIGSTOP the host's worker (a stall: no beat, no work), or SIGCONT it with pause=False."""
        os.killpg(self.procs[WORKER[host]].pid, signal.SIGSTOP if pause else signal.SIGCONT)

    def stop(self) -> None:
        super().stop()
        self.db.dispose()

    # --- what the database says ------------------------------------------------------------

    def sql(self, query: str, **params: Any) -> list[Any]:
        with self.db.connect() as conn:
            return list(conn.execute(text(query), params).all())

    def host_of(self, chat_id: str) -> str | None:
        rows = self.sql("SELECT host FROM chat_hosts WHERE channel = 'cli_chat' AND chat_id = :c", c=chat_id)
        return str(rows[0][0]) if rows else None

    def holders(self) -> dict[str, tuple[str, str | None]]:
        """chat id -> (host, moved_from) of every pinned cli_chat chat."""
        rows = self.sql("SELECT chat_id, host, moved_from FROM chat_hosts WHERE channel = 'cli_chat'")
        return {str(r[0]): (str(r[1]), r[2]) for r in rows}

    def turns_of(self, session_id: str) -> list[dict[str, Any]]:
        """The session's turns in the order they started: worker, status, times, inbound seqs."""
        rows = self.sql("SELECT worker, status, started_at, finished_at, inbound_seqs FROM turns "
                        "WHERE session_id = :s ORDER BY started_at", s=session_id)
        return [{"worker": r[0], "status": r[1], "started_at": r[2], "finished_at": r[3],
                 "seqs": json.loads(r[4]) if isinstance(r[4], str) else list(r[4] or [])} for r in rows]
