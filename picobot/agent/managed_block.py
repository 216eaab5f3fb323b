"""The block of AGENT.md that PicoBot owns: rewritten in place, the user's text around it untouched.

    <!-- picobot:memory:start -->
    ...the memory summary, rewritten by memory maintenance...
    <!-- picobot:memory:end -->

Rules (docs/MEMORY.md repeats them for users):

- A marker counts only on a line of its own (spaces around it allowed) and outside fenced code
  blocks, so a README-style example of the markers inside ``` fences is left alone.
- The block is a start marker and the first end marker after it. Everything between them is
  PicoBot's; everything else is kept byte for byte (invalid UTF-8 included).
- No block: one is appended at the end of the file.
- A damaged block (a start marker with no end after it, or an end marker with no start) is left
  where it is, as the user's text, and a complete block is appended; the stray marker line can be
  deleted by hand. Further complete blocks after the first are removed: they are PicoBot's own
  text, and a stale copy would contradict the fresh one (and so is a block that two stray markers
  form once a copy between them is gone).
- Rewrites take an exclusive lock file beside AGENT.md and replace the file atomically (a temp file
  and os.replace), so concurrent rewriters never interleave and readers see the old or the new file.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

log = logging.getLogger("picobot.agent_md")

START = "<!-- picobot:memory:start -->"
END = "<!-- picobot:memory:end -->"
_MARKER_STEM = "<!-- picobot:memory:"


@dataclass(frozen=True)
class _Block:
    start: int  # index of the start marker line
    end: int  # index of the end marker line


def _fence(line: str) -> str | None:
    """The fence opener of a ``` or ~~~ line ("```", "~~~~", ...), else None."""
    text = line.lstrip(" ")
    if len(line) - len(text) > 3:  # indented 4+: an indented code line, not a fence
        return None
    for char in "`~":
        run = len(text) - len(text.lstrip(char))
        if run >= 3:
            return char * run
    return None


def _closes(line: str, opener: str) -> bool:
    text = line.strip()
    return text.startswith(opener) and set(text) == {opener[0]}


def _is(line: str, marker: str) -> bool:
    return line.strip() == marker


@dataclass
class _Scan:
    blocks: list[_Block] = field(default_factory=list)
    stray: bool = False  # an unpaired marker was seen
    open_fence: str | None = None  # the text ends inside this code fence


def find_blocks(lines: list[str]) -> _Scan:
    """Complete blocks outside code fences, stray markers, and a fence left open at the end."""
    scan = _Scan()
    fence: str | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        if fence is not None:
            fence = None if _closes(line, fence) else fence
        elif _is(line, START):
            end = _end_of_block(lines, i)
            if end is None:
                scan.stray = True  # damaged: everything after it stays the user's text
            else:
                scan.blocks.append(_Block(i, end))
                i = end
        elif _is(line, END):
            scan.stray = True
        else:
            fence = _fence(line)
        i += 1
    scan.open_fence = fence
    return scan


def _end_of_block(lines: list[str], start: int) -> int | None:
    # Inside a block only markers matter: fences in PicoBot's own text must not hide the end marker.
    for j in range(start + 1, len(lines)):
        if _is(lines[j], START):
            return None  # the first start has no end of its own
        if _is(lines[j], END):
            return j
    return None


def clean_body(body: str) -> str:
    """Text safe to put between the markers: valid UTF-8, no marker lookalikes, one trailing newline."""
    body = body.encode("utf-8", "replace").decode("utf-8")  # lone surrogates become "?"
    body = body.replace(_MARKER_STEM, "<!-- picobot memory:")  # a memory quoting a marker cannot end the block
    return body.strip("\n") + "\n" if body.strip() else ""


def splice(text: str, body: str) -> str:
    """`text` with its managed block holding `body` (see the module docstring for the rules)."""
    lines = text.split("\n")
    scan = find_blocks(lines)
    inner = clean_body(body).split("\n")[:-1]  # lines of the body, without the final empty piece
    if not scan.blocks:
        if scan.stray:
            log.warning("AGENT.md has a stray memory marker; leaving it and appending a complete block")
        return _append(text, inner, scan.open_fence)
    first = scan.blocks[0]
    head = lines[:first.start + 1] + inner + [lines[first.end]]
    return "\n".join(head + _without_blocks(lines[first.end + 1:]))


def _without_blocks(lines: list[str]) -> list[str]:
    """The text after the first block with every complete block dropped, markers included (a copied block).

    Dropping one can pair the stray markers around it (a start before it, an end after it) into a new block,
    which the next rewrite would drop: so until none is left, or a rewrite would not be idempotent. The text
    after a block is scanned as from a fresh start (no fence is open after a block)."""
    while True:
        blocks = find_blocks(lines).blocks
        if not blocks:
            return lines
        kept: list[str] = []
        tail_from = 0
        for extra in blocks:
            kept += lines[tail_from:extra.start]
            tail_from = extra.end + 1
        lines = kept + lines[tail_from:]


def _append(text: str, inner: list[str], open_fence: str | None) -> str:
    block = "\n".join([START, *inner, END]) + "\n"
    if open_fence is not None:
        # markdown runs an unclosed fence to the end of the file: close it, or the block would be code
        # (and never found again, so every rewrite would append another)
        text = text + ("" if text.endswith("\n") else "\n") + open_fence
    if not text:
        return block
    sep = "" if text.endswith("\n\n") else "\n" if text.endswith("\n") else "\n\n"  # one blank line before it
    return f"{text}{sep}{block}"


def read_block(text: str) -> str | None:
    """The current body of the managed block, or None when there is no complete block."""
    lines = text.split("\n")
    blocks = find_blocks(lines).blocks
    if not blocks:
        return None
    return "\n".join(lines[blocks[0].start + 1:blocks[0].end])


# Inside the block, memory maintenance writes one section per user scope, each opened by a scope
# marker line. A turn's prompt keeps the text before the first section and its own user's section
# only: one user's memories never reach the model while it talks to another.
_SCOPE_OPEN = "<!-- picobot:scope "
_SCOPE_CLOSE = " -->"


def scope_section(scope_key: str, text: str) -> str:
    """One user's section of the block: its marker line, a heading, and `text`."""
    heading = scope_key.replace("\n", " ").replace("\r", " ")
    text = text.replace("<!-- picobot:", "<!-- picobot ")  # a summary cannot open someone else's section
    return f"{_SCOPE_OPEN}{json.dumps(scope_key)}{_SCOPE_CLOSE}\n### {heading}\n\n{text.strip()}\n"


def _section_scope(line: str) -> str | None:
    """The scope key of a scope marker line, else None."""
    text = line.strip()
    if not (text.startswith(_SCOPE_OPEN) and text.endswith(_SCOPE_CLOSE)):
        return None
    try:
        key = json.loads(text[len(_SCOPE_OPEN):-len(_SCOPE_CLOSE)])
    except ValueError:
        return None
    return key if isinstance(key, str) else None


def visible_to(text: str, scope_key: str | None) -> str:
    """AGENT.md as the model may see it in a chat of `scope_key`: other users' sections cut out."""
    if _SCOPE_OPEN not in text:
        return text  # the common case: nothing to cut, no parsing
    lines = text.split("\n")
    blocks = find_blocks(lines).blocks
    if not blocks:
        return text
    kept, showing = [], True
    block = blocks[0]
    for line in lines[block.start + 1:block.end]:
        owner = _section_scope(line)
        if owner is not None:
            showing = owner == scope_key
        if showing:
            kept.append(line)
    return "\n".join(lines[:block.start + 1] + kept + lines[block.end:])


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    lock_path = path.with_name(path.name + ".lock")
    with open(lock_path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def rewrite_block(path: Path, body: str, default_text: str = "") -> bool:
    """Put `body` into the managed block of the file at `path`; False when nothing had to change.

    A missing file starts as `default_text`. A symlinked AGENT.md is followed, so the link stays.
    """
    real = Path(os.path.realpath(path))
    real.parent.mkdir(parents=True, exist_ok=True)
    with _locked(real):
        try:
            raw = real.read_bytes()
        except FileNotFoundError:
            raw = default_text.encode("utf-8")
        # surrogateescape: bytes that are not UTF-8 come back out exactly as they went in
        text = raw.decode("utf-8", "surrogateescape")
        if not body.strip() and read_block(text) is None:
            return False  # nothing to say and no block to empty: leave the file as the user has it
        new = splice(text, body).encode("utf-8", "surrogateescape")
        if new == raw and real.exists():
            return False
        _replace(real, new)
        return True


def _replace(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.chmod(tmp, path.stat().st_mode & 0o7777)
        except FileNotFoundError:
            os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
