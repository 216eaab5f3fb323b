"""AGENT.md: its managed memory block (rewritten in place, user text untouched, safe under concurrent
processes, hostile content) and re-injection every `gateway.agent_prompt_reinject_every` user turns
through a real worker."""

from __future__ import annotations

import fcntl
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from picobot.agent.context import DEFAULT_AGENT_MD, agent_prompt, write_memory_summary
from picobot.agent.managed_block import END, START, read_block, rewrite_block, splice
from tests.conftest import add_rule
from tests.stack import ROOT, Stack

USER_TEXT = "# My agent\n\nBe terse.\r\nNever use emoji.  \n\n"


def _user_part(text: str) -> str:
    """The text with the (first, complete) managed block's body cut out."""
    head, _, rest = text.partition(START)
    _, _, tail = rest.partition(END)
    return head + START + END + tail


# --- the block, in memory ---------------------------------------------------------------


def test_missing_block_is_appended_and_rewritten_in_place() -> None:
    once = splice(USER_TEXT, "- likes tea")
    assert once.startswith(USER_TEXT)
    assert once[len(USER_TEXT):] == f"{START}\n- likes tea\n{END}\n"
    twice = splice(once, "- likes coffee\n- lives in Oslo")
    assert twice.startswith(USER_TEXT) and read_block(twice) == "- likes coffee\n- lives in Oslo"
    assert splice(twice, "- likes coffee\n- lives in Oslo") == twice  # idempotent


def test_user_text_around_the_block_is_kept_byte_for_byte() -> None:
    text = f"intro  \r\n\t\n  {START}  \nold summary\n{END}\r\nafter the block\n\n\nend without newline"
    out = splice(text, "new summary")
    assert out == f"intro  \r\n\t\n  {START}  \nnew summary\n{END}\r\nafter the block\n\n\nend without newline"


def test_text_without_trailing_newline_gets_a_blank_line_before_the_block() -> None:
    assert splice("hello", "x") == f"hello\n\n{START}\nx\n{END}\n"
    assert splice("", "x") == f"{START}\nx\n{END}\n"


def test_only_a_start_marker_keeps_the_text_after_it_and_appends_a_block() -> None:
    damaged = f"top\n{START}\nthe user's own notes after a broken block\n"
    out = splice(damaged, "summary")
    assert out.startswith(damaged)  # nothing of the user's text is eaten
    assert read_block(out) == "summary"
    again = splice(out, "summary 2")
    assert again.startswith(damaged) and read_block(again) == "summary 2"
    assert again.count(START) == 2 and again.count(END) == 1  # stable: no further blocks pile up


def test_only_an_end_marker_is_left_alone() -> None:
    damaged = f"top\n{END}\nmore\n"
    out = splice(damaged, "s")
    assert out.startswith(damaged) and read_block(out) == "s"
    assert splice(out, "t").startswith(damaged)


def test_markers_inside_code_fences_are_user_text() -> None:
    doc = f"How the block looks:\n\n```markdown\n{START}\nexample\n{END}\n```\n\n~~~~\n{START}\n~~~\n{END}\n~~~~\n"
    out = splice(doc, "real")
    assert out.startswith(doc) and out.count("example") == 1
    assert read_block(out) == "real"
    assert splice(out, "real 2").startswith(doc)


def test_an_unclosed_fence_is_closed_before_the_block_so_it_is_found_again() -> None:
    doc = "notes\n```python\nprint(1)\n"
    out = splice(doc, "s")
    assert out.startswith(doc) and read_block(out) == "s"
    assert splice(out, "s") == out  # found again: no second block


def test_a_copied_block_is_dropped_and_the_first_rewritten() -> None:
    doc = f"a\n{START}\none\n{END}\nb\n{START}\nstale copy\n{END}\nc\n"
    out = splice(doc, "fresh")
    assert out == f"a\n{START}\nfresh\n{END}\nb\nc\n"


def test_memory_text_cannot_forge_or_end_the_block() -> None:
    body = f"- user said {END}\n{END}\n{START}\n- and \ud800 a lone surrogate\n```\nunclosed fence"
    out = splice(USER_TEXT, body)
    out.encode("utf-8")  # valid UTF-8: the lone surrogate was replaced
    assert out.count(START) == 1 and out.count(END) == 1
    assert "unclosed fence" in read_block(out)  # type: ignore[operator]
    assert splice(out, "next") == USER_TEXT + f"{START}\nnext\n{END}\n"


def test_stray_markers_that_pair_up_once_a_copy_is_dropped_go_too() -> None:
    """Found by the property below: start, end, start, [start, end], end. Dropping the copied block in brackets
    paired the stray start and end around it into a block, which the next rewrite dropped: not idempotent."""
    doc = "\n".join([START, END, START, START, END, END])
    out = splice(doc, "")
    assert out == f"{START}\n{END}" and splice(out, "") == out
    assert splice(doc, "x") == f"{START}\nx\n{END}"


_LINES = st.sampled_from([START, END, f"  {START} ", "```", "~~~", "````js", "    ```", "text", "", "\r", "# h"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(_LINES, st.text(max_size=12)), max_size=30), st.text(max_size=40), st.text(max_size=40))
def test_any_text_rewrites_stably(lines: list[str], body1: str, body2: str) -> None:
    text = "\n".join(lines)
    first = splice(text, body1)
    assert splice(first, body1) == first  # idempotent
    second = splice(first, body2)
    assert second == splice(text, body2)  # the block is found again, whatever surrounds it
    assert read_block(second) == splice("", body2)[len(START) + 1:-len(END) - 2]
    if START not in text and END not in text:
        assert first.startswith(text)


# --- the file, on disk --------------------------------------------------------------------


def test_rewrite_creates_a_missing_file_from_the_default(tmp_path: Path) -> None:
    assert write_memory_summary(tmp_path, "- likes tea")
    text = (tmp_path / "agent" / "AGENT.md").read_text()
    assert text.startswith(DEFAULT_AGENT_MD) and read_block(text) == "- likes tea"
    assert not write_memory_summary(tmp_path, "- likes tea")  # nothing to change, nothing written


def test_invalid_utf8_outside_the_block_survives_and_the_prompt_still_loads(tmp_path: Path) -> None:
    path = tmp_path / "agent" / "AGENT.md"
    path.parent.mkdir()
    raw = b"caf\xe9 \xff\xfe bytes\n" + "中文\n".encode()
    path.write_bytes(raw)
    write_memory_summary(tmp_path, "summary")
    data = path.read_bytes()
    assert data.startswith(raw) and data.endswith(f"{START}\nsummary\n{END}\n".encode())
    assert "summary" in agent_prompt(tmp_path).content  # type: ignore[operator]


def test_huge_file_is_rewritten_with_its_text_intact(tmp_path: Path) -> None:
    path = tmp_path / "agent" / "AGENT.md"
    path.parent.mkdir()
    user = ("a line of the user's own text " * 4 + "\n") * 60_000  # ~7 MB
    path.write_text(user + f"{START}\nold\n{END}\n" + user)
    write_memory_summary(tmp_path, "new")
    assert path.read_text() == user + f"{START}\nnew\n{END}\n" + user


def test_a_symlinked_agent_md_stays_a_link(tmp_path: Path) -> None:
    target = tmp_path / "dotfiles" / "AGENT.md"
    target.parent.mkdir()
    target.write_text("mine\n")
    link = tmp_path / "agent" / "AGENT.md"
    link.parent.mkdir()
    link.symlink_to(target)
    write_memory_summary(tmp_path, "s")
    assert link.is_symlink() and read_block(target.read_text()) == "s"


_WRITER = """
import sys
from pathlib import Path
from picobot.agent.managed_block import rewrite_block
path, name, n = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
print("ready", flush=True)
for i in range(n):
    rewrite_block(path, f"- writer {name} pass {i}\\n" + "x" * 20000 + f"\\n- end of {name} {i}")
"""


def _writer(path: Path, name: str, passes: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", _WRITER, str(path), name, str(passes)], cwd=ROOT,
                            stdout=subprocess.PIPE, text=True)


def test_concurrent_rewrites_never_corrupt_the_file(tmp_path: Path) -> None:
    path = tmp_path / "AGENT.md"
    path.write_text(USER_TEXT)
    writers = [_writer(path, str(n), 40) for n in range(4)]
    reads = 0
    while any(w.poll() is None for w in writers) or reads == 0:
        text = path.read_bytes().decode()
        reads += 1
        if text == USER_TEXT:
            continue  # no writer got there yet
        assert _user_part(text) == USER_TEXT + START + END + "\n"  # the user's text, whole, every time
        body = read_block(text)
        assert body is not None and body.startswith("- writer ") and body.endswith(body.split()[2] + " " + body.split()[4])
    assert all(w.wait(timeout=60) == 0 for w in writers)
    assert not list(tmp_path.glob(".AGENT.md.*"))  # no temp file left behind


def test_a_rewrite_waits_for_the_lock(tmp_path: Path) -> None:
    path = tmp_path / "AGENT.md"
    path.write_text(USER_TEXT)
    with open(tmp_path / "AGENT.md.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        writer = _writer(path, "w", 1)
        assert writer.stdout is not None and writer.stdout.readline().strip() == "ready"
        time.sleep(0.5)  # the writer is blocked on the lock, not slow: it has nothing else to do
        assert writer.poll() is None and path.read_bytes().decode() == USER_TEXT
        fcntl.flock(lock, fcntl.LOCK_UN)
    assert writer.wait(timeout=60) == 0 and read_block(path.read_text()) is not None


# --- re-injection through a real worker ----------------------------------------------------


@pytest.fixture(scope="module")
def reinject_stack(tmp_path_factory: pytest.TempPathFactory, fake_llm) -> Iterator[Stack]:  # type: ignore[no-untyped-def]
    s = Stack(tmp_path_factory.mktemp("reinject"), fake_llm.url, gateway={"agent_prompt_reinject_every": 2})
    try:
        s.start(beat=False)
        yield s
    finally:
        s.stop()


def _fresh_prompt(request: dict) -> str | None:
    """The system message sent right before this request's (last) user message, if any."""
    sent = request["body"]["messages"]
    last_user = max(i for i, m in enumerate(sent) if m["role"] == "user")
    before = sent[last_user - 1] if last_user > 0 else None
    return before["content"] if before and before["role"] == "system" else None


def test_agent_prompt_is_reinjected_every_n_user_turns(reinject_stack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    agent_md = reinject_stack.home / "agent" / "AGENT.md"
    client = reinject_stack.client()
    fresh: list[str | None] = []
    for turn in range(1, 6):
        if agent_md.exists():
            write_memory_summary(reinject_stack.home, f"- summary as of turn {turn}")
        add_rule(llm, f"turn number {turn}", {"content": f"ok {turn}"})
        assert client.ask(f"turn number {turn}")["status"] == "completed"
        fresh.append(_fresh_prompt(llm.requests()[-1]))
    injected = [turn for turn, text in enumerate(fresh, 1) if text is not None]
    assert injected == [1, 3, 5]  # an empty dialog, then after every 2nd user turn
    assert "PicoBot" in fresh[0] and "summary" not in fresh[0]  # type: ignore[operator]
    assert "- summary as of turn 3" in fresh[2] and "- summary as of turn 5" in fresh[4]  # type: ignore[operator]
    last = llm.requests()[-1]["body"]["messages"]
    assert sum(1 for m in last if m["role"] == "system" and "# PicoBot" in m["content"]) == 3  # history keeps them
