"""Word segmentation for full-text search: jieba for Chinese runs, plain word runs for the rest.

Index and query go through the same functions, so a word indexed is a word that can be asked
for. jieba costs about a second to initialise: it is loaded on the first text that holds Chinese
characters, never for text without any.
"""

from __future__ import annotations

import logging
import re
import threading
from typing import Any, Iterable

# CJK ideographs (basic block, extension A, compatibility) are what jieba segments.
_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
# A word as the FTS5 unicode61 tokenizer and PostgreSQL's parser see it: letters and digits.
_WORD = re.compile(r"[^\W_]+")
MAX_QUERY_TERMS = 16
# Words that match nearly everything and say nothing about what is asked for.
STOPWORDS = frozenset(
    "a an and are as at be but by do does did for from has have how i in is it its me my of on or our "
    "so that the their them they this to was we were what when where which who why will with you your "
    "的 了 是 我 你 他 她 它 们 吗 呢 吧 啊 在 和 与 也 就 都 而 及 或 一个 这 那 有 没有 什么 怎么".split()
)

_jieba: Any = None
_jieba_lock = threading.Lock()


def _load_jieba() -> Any:
    global _jieba
    with _jieba_lock:
        if _jieba is None:
            import jieba

            jieba.setLogLevel(logging.WARNING)  # its "Building prefix dict" chatter goes to stderr
            jieba.initialize()
            _jieba = jieba
    return _jieba


def jieba_loaded() -> bool:
    return _jieba is not None


def words(text: str) -> list[str]:
    """Lower-cased words of text in order: Chinese runs cut for search, other runs by letters/digits."""
    out: list[str] = []
    pos = 0
    for m in _CJK.finditer(text):
        out += _plain_words(text[pos:m.start()])
        out += _chinese_words(m.group())
        pos = m.end()
    out += _plain_words(text[pos:])
    return out


def _plain_words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)] if text else []


def _chinese_words(run: str) -> Iterable[str]:
    # cut_for_search also yields the shorter words inside long ones (北京大学 -> 北京, 大学, 北京大学)
    return [w for w in _load_jieba().cut_for_search(run, HMM=True) if w.strip()]


def index_text(*parts: str) -> str:
    """The space-joined words that the FTS index stores for these parts."""
    return " ".join(w for part in parts for w in words(part))


def query_terms(text: str) -> list[str]:
    """Distinct search words of a query, stopwords dropped, at most MAX_QUERY_TERMS."""
    seen: dict[str, None] = {}
    for w in words(text):
        if w not in STOPWORDS and w not in seen:
            seen[w] = None
            if len(seen) >= MAX_QUERY_TERMS:
                break
    return list(seen)
