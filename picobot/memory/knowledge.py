"""The knowledge base: `knowledge/<name>/content.md` documents under the home and the workspace.

Documents are files people and the agent edit, so the index is derived, not stored: an in-memory
SQLite FTS5 table per process over jieba-segmented text, brought up to date before each read by
comparing every document's mtime and size with what was indexed (a few stat calls).
"""

from __future__ import annotations

import builtins
import os
import re
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path

from picobot.errors import MemoryRejected
from picobot.storage.segment import index_text, query_terms

CONTENT_FILE = "content.md"
MAX_DOC_CHARS = 200_000  # one document, read or written
MAX_DOCS = 2000  # per root; more are not indexed
MAX_NAME = 64
SNIPPET_CHARS = 240
# A name is one folder: letters, digits (any script), space, dot, dash, underscore; no leading dot.
_NAME = re.compile(r"[^\W_][\w .-]*", re.UNICODE)


@dataclass(frozen=True)
class KnowledgeDoc:
    name: str
    source: str  # "workspace" | "home"
    path: Path
    title: str
    size: int
    updated_at: float

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "source": self.source, "title": self.title, "size": self.size,
                "updated_at": self.updated_at}


@dataclass(frozen=True)
class KnowledgeHit:
    doc: KnowledgeDoc
    snippet: str


def check_name(name: object) -> str:
    """A document name that stays one folder inside its root; refusals say what is wrong."""
    if not isinstance(name, str) or not name.strip():
        raise MemoryRejected("name must be a non-empty string.")
    name = name.strip()
    if "\x00" in name or any(0xD800 <= ord(c) <= 0xDFFF for c in name):
        raise MemoryRejected("name contains a NUL or unpaired surrogate character.")
    if len(name) > MAX_NAME or not _NAME.fullmatch(name) or name.endswith((".", " ")) or ".." in name:
        raise MemoryRejected(f"name {name[:80]!r} is not allowed: use up to {MAX_NAME} letters, digits, "
                             "spaces, '-', '_' or '.', starting with a letter or digit (no paths).")
    return name


class KnowledgeBase:
    """Documents of several roots (first wins for a repeated name); `write_root` takes new ones."""

    def __init__(self, roots: list[tuple[str, Path]], write_root: Path):
        self.roots = roots
        self.write_root = write_root
        self._lock = threading.Lock()
        self._db = sqlite3.connect(":memory:", check_same_thread=False)
        self._db.execute("CREATE VIRTUAL TABLE kb USING fts5(name, body, tokenize='unicode61 remove_diacritics 2')")
        self._docs: dict[int, KnowledgeDoc] = {}
        self._by_path: dict[Path, tuple[int, int, int]] = {}  # path -> (rowid, mtime_ns, size)
        self._next_id = 1

    def list(self) -> list[KnowledgeDoc]:
        with self._lock:
            self._refresh()
            return sorted(self._visible().values(), key=lambda d: d.name)

    def read(self, name: str) -> tuple[KnowledgeDoc, str] | None:
        """The document and its text; None when there is none of that name (a bad name is refused)."""
        name = check_name(name)
        with self._lock:
            self._refresh()
            doc = self._visible().get(name)
        return None if doc is None else (doc, _read(doc.path))

    def search(self, query: str, limit: int = 5) -> builtins.list[KnowledgeHit]:
        terms = query_terms(query if isinstance(query, str) else "")
        if not terms:
            return []
        match = " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)
        with self._lock:
            self._refresh()
            visible = set(id(d) for d in self._visible().values())
            rows = self._db.execute("SELECT rowid FROM kb WHERE kb MATCH ? ORDER BY bm25(kb, 2.0, 1.0) LIMIT ?",
                                    (match, max(1, min(50, limit)) * 2)).fetchall()
            docs = [self._docs[r[0]] for r in rows if r[0] in self._docs and id(self._docs[r[0]]) in visible]
        return [KnowledgeHit(d, snippet(_read(d.path), terms)) for d in docs[:limit]]

    def create(self, name: str, content: str) -> tuple[KnowledgeDoc, bool]:
        """Write `<write_root>/<name>/content.md`; returns the document and whether it replaced one."""
        name = check_name(name)
        if not isinstance(content, str) or not content.strip():
            raise MemoryRejected("content is empty; give the document some text.")
        if len(content) > MAX_DOC_CHARS:
            raise MemoryRejected(f"content is {len(content)} characters; the limit is {MAX_DOC_CHARS}.")
        try:
            data = content.encode("utf-8")
        except UnicodeEncodeError:
            raise MemoryRejected("content contains an unpaired surrogate (not valid Unicode text).") from None
        if b"\x00" in data:
            raise MemoryRejected("content contains a NUL character; remove it.")
        folder = self.write_root / name
        path = folder / CONTENT_FILE
        existed = path.exists()
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{CONTENT_FILE}.{os.getpid()}.{threading.get_ident()}.tmp"
        tmp.write_bytes(data)
        os.replace(tmp, path)  # readers see the old or the new document, never half of one
        with self._lock:
            self._refresh()
            doc = next(d for d in self._docs.values() if d.path == path)
        return doc, existed

    # --- index upkeep ------------------------------------------------------------------------

    def _visible(self) -> dict[str, KnowledgeDoc]:
        order = {source: i for i, (source, _root) in enumerate(self.roots)}
        out: dict[str, KnowledgeDoc] = {}
        for doc in sorted(self._docs.values(), key=lambda d: order.get(d.source, 0), reverse=True):
            out[doc.name] = doc  # earlier roots overwrite later ones
        return out

    def _refresh(self) -> None:
        seen: set[Path] = set()
        for source, root in self.roots:
            for name, path, st in _scan(root):
                seen.add(path)
                known = self._by_path.get(path)
                if known is None or known[1:] != (st.st_mtime_ns, st.st_size):
                    self._index(source, name, path, st, known[0] if known else None)
        for path in [p for p in self._by_path if p not in seen]:
            rowid = self._by_path.pop(path)[0]
            self._db.execute("DELETE FROM kb WHERE rowid = ?", (rowid,))
            self._docs.pop(rowid, None)

    def _index(self, source: str, name: str, path: Path, st: os.stat_result, rowid: int | None) -> None:
        body = _read(path)
        if rowid is None:
            rowid, self._next_id = self._next_id, self._next_id + 1
        else:
            self._db.execute("DELETE FROM kb WHERE rowid = ?", (rowid,))
        self._db.execute("INSERT INTO kb (rowid, name, body) VALUES (?, ?, ?)",
                         (rowid, index_text(name), index_text(body)))
        self._docs[rowid] = KnowledgeDoc(name, source, path, _title(name, body), st.st_size, st.st_mtime)
        self._by_path[path] = (rowid, st.st_mtime_ns, st.st_size)


def _scan(root: Path) -> list[tuple[str, Path, os.stat_result]]:
    out: list[tuple[str, Path, os.stat_result]] = []
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)
    except OSError:
        return out
    for entry in entries[:MAX_DOCS]:
        if entry.name.startswith(".") or not _NAME.fullmatch(entry.name):
            continue
        path = Path(entry.path) / CONTENT_FILE
        try:
            # a link could point the index at any file on the host: documents are real files only
            if not entry.is_dir(follow_symlinks=False) or path.is_symlink():
                continue
            st = path.stat()
        except OSError:
            continue
        out.append((entry.name, path, st))
    return out


def _read(path: Path) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read(MAX_DOC_CHARS)
    except OSError:
        return ""


def _title(name: str, body: str) -> str:
    for line in body.splitlines():
        line = line.strip()
        if line:
            return line.lstrip("#").strip()[:120] or name
    return name


def snippet(body: str, terms: list[str]) -> str:
    """About SNIPPET_CHARS of body around the first term found in it (the start if none is)."""
    low = body.lower()
    at = min((i for i in (low.find(t) for t in terms) if i >= 0), default=0)
    start = max(0, at - SNIPPET_CHARS // 3)
    text = " ".join(body[start:start + SNIPPET_CHARS].split())
    return ("…" if start else "") + text + ("…" if start + SNIPPET_CHARS < len(body) else "")

