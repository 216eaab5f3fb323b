"""Split Telegram HTML into messages of at most 4096 characters, every part's tags balanced.

Telegram counts a message's length after parsing its entities, in UTF-16 code units (emoji and
other astral characters count two); tags do not count, `&amp;` counts one. We cut between
paragraphs where we can, else between lines, else between words, else anywhere (never inside a
tag, an entity or a surrogate pair). The tags open at a cut are closed at the end of the part and
opened again, with the same attributes, at the start of the next: a code block split in two is two
code blocks of the same language. Parts with nothing visible in them are dropped.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass

MAX_UNITS = 4096
_ATOM = re.compile(r"<[^>]*>|&(?:#\d+|#x[0-9a-fA-F]+|[a-zA-Z]+);|.", re.S)
_TAG_NAME = re.compile(r"</?\s*([a-zA-Z][\w-]*)")
# where to prefer a cut: after a blank line, after a line, after a space
_PARAGRAPH, _LINE, _WORD = 3, 2, 1


def units(text: str) -> int:
    """Length in UTF-16 code units (what Telegram counts)."""
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)


def visible(part_html: str) -> str:
    """The text Telegram shows for a part (tags removed, entities decoded)."""
    return html.unescape(re.sub(r"<[^>]*>", "", part_html))


@dataclass
class _Atom:
    raw: str
    units: int = 0  # 0 for a tag
    tag: str | None = None  # the tag's name
    closing: bool = False
    char: str = ""  # the visible character


def _atoms(markup: str) -> list[_Atom]:
    atoms = []
    for m in _ATOM.finditer(markup):
        raw = m.group(0)
        if raw.startswith("<") and len(raw) > 1 and raw.endswith(">"):
            name = _TAG_NAME.match(raw)
            atoms.append(_Atom(raw, tag=(name.group(1).lower() if name else ""), closing=raw.startswith("</")))
        elif raw.startswith("&") and len(raw) > 1:
            char = html.unescape(raw)
            atoms.append(_Atom(raw, units(char), char=char))
        else:
            atoms.append(_Atom(raw, units(raw), char=raw))
    return atoms


def split_html(markup: str, limit: int = MAX_UNITS) -> list[str]:
    """Parts of at most `limit` visible UTF-16 units each, each one balanced HTML; [] for blank text."""
    if limit < 2:
        raise ValueError("limit must be at least 2 (one astral character)")
    atoms = _atoms(markup)
    stacks = _stacks(atoms)  # stacks[i]: the open tags before atom i
    parts: list[str] = []
    start = 0
    while start < len(atoms):
        end = _cut(atoms, start, limit)
        body = "".join(a.raw for a in atoms[start:end])
        part = "".join(a.raw for a in stacks[start]) + body + "".join(_close(a) for a in reversed(stacks[end]))
        if visible(part).strip():
            parts.append(part.strip("\n") if not stacks[start] else part)
        start = end
    return parts


def split_plain(text: str, limit: int = MAX_UNITS) -> list[str]:
    """Plain text in parts of at most `limit` UTF-16 units, cut as split_html cuts."""
    from picobot.channels.telegram.markup import escape

    return [visible(part) for part in split_html(escape(text), limit)]


def _close(open_tag: _Atom) -> str:
    return f"</{open_tag.tag}>"


def _stacks(atoms: list[_Atom]) -> list[tuple[_Atom, ...]]:
    stacks: list[tuple[_Atom, ...]] = []
    stack: tuple[_Atom, ...] = ()
    for atom in atoms:
        stacks.append(stack)
        if atom.tag is not None:
            if atom.closing:
                # close up to the matching tag (our renderer's output is balanced; be lenient)
                for depth in range(len(stack) - 1, -1, -1):
                    if stack[depth].tag == atom.tag:
                        stack = stack[:depth]
                        break
            elif not atom.raw.endswith("/>"):
                stack = stack + (atom,)
    stacks.append(stack)
    return stacks


def _cut(atoms: list[_Atom], start: int, limit: int) -> int:
    """The end (exclusive) of the part starting at `start`: the best place to cut before the limit."""
    used = 0
    best: dict[int, int] = {}  # priority -> the latest index after which to cut
    i = start
    while i < len(atoms):
        atom = atoms[i]
        if used + atom.units > limit:
            break
        used += atom.units
        i += 1
        if atom.char == "\n":
            level = _PARAGRAPH if i - 2 >= start and atoms[i - 2].char == "\n" else _LINE
            best[level] = i
            best[_LINE] = i
        elif atom.char in (" ", "\t"):
            best[_WORD] = i
    else:
        return len(atoms)
    floor = start + (i - start) // 3  # a cut this early would waste most of the part
    for level in (_PARAGRAPH, _LINE, _WORD):
        if best.get(level, start) > floor:
            return _after_tags(atoms, best[level], i)
    return _before_open_tags(atoms, start, i) if i > start else start + 1


def _after_tags(atoms: list[_Atom], cut: int, end: int) -> int:
    """Move a cut over closing tags right after it, so they end this part rather than open the next."""
    while cut < end and atoms[cut].tag is not None and atoms[cut].closing:
        cut += 1
    return cut


def _before_open_tags(atoms: list[_Atom], start: int, cut: int) -> int:
    """Move a hard cut before opening tags right before it (they belong with the text they open)."""
    while cut - 1 > start and atoms[cut - 1].tag is not None and not atoms[cut - 1].closing:
        cut -= 1
    return cut
