"""The offline compactor as it was before issue 15 (a baseline for bench/view_quality.py; not shipped).

It cannot understand a message, so it keeps what a reader is most likely to search for and what a model is
worst at reconstructing: the opening clause (usually the ask or the verdict), then the clauses richest in
numbers, names, paths, errors and quoted strings, in their original order, joined by ``; `` and cut to one
line by the same harness that cuts model replies. Chinese text is split at its own punctuation.
"""

from __future__ import annotations

import functools
import re

from pimem.compactor.cut import LINE_BYTES, cut_line

_SCAN_HEAD = 6_000  # characters of a long input considered: its head and its tail (errors come last)
_SCAN_TAIL = 3_000
_PIECE = 160  # characters: longer clauses are split into pieces about this long

_CLAUSE = re.compile(r"(?<=[.!?;])\s+|(?<=[。！？；])|\n+|\s+\|\s+")
_FEATURES = re.compile(
    r"""(?ix)
    (?:~|\.{1,2})?/[\w.@-]+(?:/[\w.@-]+)+           # paths
    | \b[\w-]+\.(?:py|js|ts|tsx|go|rs|c|h|cpp|java|rb|sh|md|json|jsonl|toml|yaml|yml|txt|sql|html|css|lock)\b
    | \b(?:error|errors|exception|failed|failure|fail|fatal|panic|traceback|denied|refused|timeout|timed\ out|
         not\ found|exit(?:\ code)?|warning|cannot|can't|unable|invalid|missing|broken)\b
    | 错误|失败|异常|报错|超时|无法|找不到|警告|崩溃
    | \b\d[\d,._:/-]*\b                              # numbers, versions, dates, ports
    | \b[a-z]+[A-Z]\w*\b | \b[A-Z][a-z]+[A-Z]\w*\b | \b\w+_\w+\b | \b[A-Z]{2,}\b   # identifiers
    | `[^`\n]{1,80}` | "[^"\n]{2,80}" | '[^'\n]{2,60}'
    """
)
_SPACES = re.compile(r"[ \t\r\f\v]+")
_EDGES = " -*#>;,，、"


def _pieces(text: str) -> list[str]:
    """Clauses of ``text`` (long ones split near whitespace), stripped, without repeats."""
    if len(text) > _SCAN_HEAD + _SCAN_TAIL:
        text = text[:_SCAN_HEAD] + "\n" + text[-_SCAN_TAIL:]
    seen = set()
    out = []
    for clause in _CLAUSE.split(text):
        clause = _SPACES.sub(" ", clause).strip(_EDGES)
        while clause:
            if len(clause) <= _PIECE:
                piece, clause = clause, ""
            else:  # at the last comma, else the last space, else anywhere
                split = max(clause.rfind("，", _PIECE // 2, _PIECE), clause.rfind(", ", _PIECE // 2, _PIECE)) + 1
                if split <= 0:
                    split = clause.rfind(" ", _PIECE // 2, _PIECE)
                split = split if split > 0 else _PIECE
                piece, clause = clause[:split].strip(_EDGES), clause[split:].strip(_EDGES)
            if piece and piece not in seen:
                seen.add(piece)
                out.append(piece)
    return out


def condense(text: str, budget: int) -> str:
    """The most informative clauses of ``text`` that fit in about ``budget`` bytes, in their original order.

    The first clause always comes first; then what the user said; the rest are chosen by how many numbers,
    names, paths, errors and quotes they hold per byte, ties to the earlier clause."""
    pieces = _pieces(text)
    if not pieces:
        return ""
    sizes = [len(p.encode("utf-8")) + 2 for p in pieces]
    chosen = {0}
    used = sizes[0]
    ranked = sorted(range(1, len(pieces)), key=lambda n: (not pieces[n].startswith("user:"), -_density(pieces[n]), n))
    for n in ranked:
        if used >= budget:
            break
        if used + sizes[n] <= budget:
            chosen.add(n)
            used += sizes[n]
    return _join(pieces[n] for n in sorted(chosen))


@functools.lru_cache(maxsize=1 << 16)
def _density(piece: str) -> float:
    """Features per byte (cached: a clause climbs the tree, so it is scored again at every level)."""
    return len(_FEATURES.findall(piece)) / (len(piece.encode("utf-8")) + 42)


def _join(pieces) -> str:
    """Clauses joined by ``; ``, or by a space (none after CJK) where a clause already ends a sentence."""
    out = ""
    for piece in pieces:
        if out:
            out += "" if out[-1] in "。！？；" else " " if out[-1] in ".!?" else "; "
        out += piece
    return out


def leaf(kind: str, text: str, limit: int = LINE_BYTES) -> str:
    """One line summarising message ``kind: text``."""
    head = f"{kind}: "
    return cut_line(head + condense(text, limit - len(head)), limit)


def merge(left: str, right: str, limit: int = LINE_BYTES) -> str:
    """One line merging two adjacent lines, giving each half what the other does not need."""
    half = (limit - 2) // 2
    a_size, b_size = len(left.encode("utf-8")), len(right.encode("utf-8"))
    a_budget = max(half, limit - 2 - b_size) if a_size > half else a_size
    a = condense(left, a_budget) if a_size > a_budget else left
    b = condense(right, limit - 2 - len(a.encode("utf-8")))
    return cut_line(_join(p for p in (a, b) if p), limit)
