"""`picobot chat` with stdout/stderr redirected to streams that are not files (an embedding program, a test)."""

import contextlib
import io
import socket

from picobot.cli.chat import EXIT_UNAVAILABLE
from picobot.cli.main import main


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_chat_with_redirected_streams_reports_the_gateway_not_an_attribute_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PICOBOT_HOME", str(tmp_path))
    out, err = io.StringIO(), io.StringIO()  # no reconfigure(): the command used to die on it
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["chat", "-m", "hi", "--gateway-url", f"ws://127.0.0.1:{_closed_port()}/ws",
                     "--ready-timeout", "2"])
    assert code == EXIT_UNAVAILABLE
    assert err.getvalue().startswith("error: ")
