"""One redactor for config, providers, tools and logs, and a config package without import cycles."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

import picobot.config.secrets as config_secrets
import picobot.logs.setup as logging_setup
import picobot.tools.registry as tool_registry
from picobot.providers._common import REDACTED, Redactor
from picobot.security import redact as one
from picobot.tools.base import ToolContext
from picobot.tools.http import HttpRequestTool

ROOT = Path(__file__).resolve().parents[1]


def test_every_caller_uses_the_one_function() -> None:
    assert config_secrets.redact is one.redact
    assert logging_setup.redact is one.redact
    assert tool_registry.redact is one.redact
    import picobot.tools.http as http_tool
    import picobot.providers._common as common

    assert http_tool.redact is one.redact and common.redact is one.redact


def test_provider_redactor_now_also_masks_url_credentials_and_query_tokens() -> None:
    redact = Redactor.for_config("k-123456", {"X-Signature": "sig-abcdef12", "Authorization": "Bearer tok-abcdefgh"})
    text = redact("https://bob:hunter22@llm.example/v1?access_token=t0k3n-zz sig-abcdef12 tok-abcdefgh")
    for leaked in ("hunter22", "t0k3n-zz", "sig-abcdef12", "tok-abcdefgh"):
        assert leaked not in text
    assert REDACTED in text and "********" not in text


def test_config_redact_now_masks_written_out_credential_headers() -> None:
    text = one.redact("headers {'x-api-key': 'plain-value-1', 'Accept': 'json'} api-key=other-value", [])
    assert "plain-value-1" not in text and "other-value" not in text and "'Accept': 'json'" in text


def test_header_secrets_keep_the_scheme_word_readable() -> None:
    found = one.header_secrets({"Authorization": "Bearer abcdef123", "Cookie": "sid=xyz1", "X-Trace": "visible",
                                "Api-Key": "abc"})
    assert found == {"Bearer abcdef123", "abcdef123", "sid=xyz1"}
    assert one.redact("Bearer is a word", found) == "Bearer is a word"


class _EchoHeaders(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        body = json.dumps(dict(self.headers.items())).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_http_tool_redacts_any_credential_header_it_was_given(tmp_path: Path) -> None:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _EchoHeaders)
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    ctx = ToolContext(session_id="s", channel="c", chat_id="c", sender_id="u", turn_id="t", workspace=tmp_path,
                      settings={"network": {"allow": ["127.0.0.1"]}})
    try:
        # x-goog-api-key was not on the tool's old fixed list; the shared rule judges by the name.
        args = {"method": "GET", "url": f"http://127.0.0.1:{httpd.server_address[1]}/",
                "headers": {"x-goog-api-key": "g00gle-secret", "X-Custom-Token": "tok-987654", "X-Trace": "seen"}}
        out = HttpRequestTool().execute(args, ctx)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert "g00gle-secret" not in out and "tok-987654" not in out and "seen" in out and REDACTED in out


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200), st.lists(st.text(alphabet=st.characters(categories=["L", "N"]), max_size=30),
                                       max_size=5))
def test_redact_never_fails_and_removes_every_known_secret(text: str, secrets: list[str]) -> None:
    out = one.redact(text, secrets)
    for secret in secrets:
        if len(secret) >= one.MIN_SECRET_LEN and secret not in one.MASK:
            assert secret not in out.replace(one.MASK, "\x00")


def _runtime_imports(path: Path) -> set[str]:
    """Modules a file imports when it runs (imports under `if TYPE_CHECKING:` left out)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
               and getattr(node.test, "id", "") == "TYPE_CHECKING" for n in ast.walk(node)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_schema_and_secrets_do_not_import_each_other() -> None:
    schema = _runtime_imports(ROOT / "picobot/config/schema.py")
    secrets = _runtime_imports(ROOT / "picobot/config/secrets.py")
    assert "picobot.config.secrets" not in schema
    assert "picobot.config.schema" not in secrets


def test_the_redactor_depends_on_nothing_of_picobot() -> None:
    code = ("import sys, picobot.security.redact; "
            "print(sorted(m for m in sys.modules if m.startswith('picobot')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "['picobot', 'picobot.security', 'picobot.security.redact']"


def test_a_logged_traceback_is_redacted_and_later_handlers_still_see_the_exception() -> None:
    import io
    import logging

    secret = "sk-live-0123456789abcdef"
    out, seen = io.StringIO(), []
    first = logging.StreamHandler(out)
    first.setFormatter(logging.Formatter("%(message)s"))
    first.addFilter(logging_setup.RedactingFilter({secret}))

    class Later(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append((record.exc_info, self.format(record)))

    logger = logging.getLogger("picobot.test.redact")
    logger.propagate = False
    logger.addHandler(first)
    logger.addHandler(Later())
    try:
        try:
            raise RuntimeError(f"bad key {secret}")
        except RuntimeError:
            logger.exception("call failed with %s", secret)
    finally:
        logger.handlers.clear()
        logger.propagate = True
    assert secret not in out.getvalue() and "RuntimeError: bad key" in out.getvalue()
    (exc_info, text), = seen
    assert exc_info is not None and exc_info[0] is RuntimeError
    assert secret not in text and "Traceback" in text
