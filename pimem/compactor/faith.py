"""The faithfulness guard: a summary's numbers, paths and identifiers must occur in its span's messages.

A model may write a port, a version or a file name its input never held. ``unfounded(summary, texts)`` lists
the facts of a summary found in none of ``texts`` (whole: ``9999`` is not one of ``19999``, nor ``200`` of
``1,200``, nor ``2.3`` of ``1.2.3``); the builder asks for a model summary that names one again, once, and keeps
the second reply with its unfounded facts as ``suspect`` in the node's metadata, which ``status``, ``fsck`` and
``view --stats`` report.
A fact is found however the messages write it: a number grouped or not (``1,200``, ``1200``, ``1.2k``; in a
bracketed list ``[100,200]`` two numbers), with
leading or trailing zeros (``05``, ``3.0``), glued to a word or a unit (``v1.2.3``, ``50ms``, ``端口8080``), in
full-width digits, an ISO date as words (``Oct 8, 2026``); a path with or without ``./``, a trailing slash,
backslashes or ``~`` for a home directory, or a shorter tail of a longer relative path; a path, a file name or an
identifier in another case (``readme.md`` for ``README.md`` names the file the span does: a slip, not an invented
fact, though Linux tells the two apart); a hex id as a prefix of a longer one (a short commit hash); in a tool
call's JSON (``\\nPG_USER``) or between an output's colour codes.
A merge's facts are looked up in its two child lines first (they come from the span), and only those missing
there in the span's messages; a fact a child line was itself marked for is no evidence, so a merge repeating it
is marked too (without asking again, however it writes it: it said what it was given).
The offline compactor copies facts from the messages, so it is not checked.
"""

from __future__ import annotations

import re
import unicodedata
from decimal import Decimal
from typing import Callable, Iterable

from ..privacy import readings

_EXT = r"(?:py|js|mjs|ts|tsx|jsx|go|rs|c|h|cc|cpp|hpp|java|kt|rb|php|sh|md|json|jsonl|toml|yaml|yml|txt|sql|html|css|lock|cfg|ini|xml|csv|log)"
_SEG = r"[\w.@+-]+"
# numbers of two characters or more (ports, versions, sizes, dates, also inside a word), paths and file names,
# hex ids, identifiers; ASCII word boundaries, so a number or a name glued to Chinese text is one too
_FACT = re.compile(
    rf"""(?xa)
    (?P<path>(?<![\w.@+~-])(?:~|\.{{1,2}})?/{_SEG}(?:/{_SEG})+
      | (?<![\w.@+~/-])(?=[\w.@+/-]*[A-Za-z])[\w@+-][\w.@+-]*(?:(?:/{_SEG}){{2,}}|(?:/{_SEG})*/[\w-]+\.{_EXT}(?![\w@+-])))
    | (?P<file>(?<![\w.-])[\w-]+\.{_EXT}(?![\w-]))
    | (?P<hex>\b0[xX][0-9a-fA-F]{{2,}}\b | \b(?=[0-9a-fA-F]*\d)(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{{7,}}\b)
    | (?P<ident>\b[a-z]+(?:[A-Z][a-z0-9]*)+\b | \b[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+\b | \b[A-Za-z][A-Za-z0-9]*_\w+\b)
    | (?P<number>(?<!\d)(?<!\d\.)(?!(?<=\d,)\d{{3}}(?!\d))\d+(?:(?:[.:/-]|,(?=\d{{3}}(?!\d)))\d+)*)
    """
)
MAX_LISTED = 8  # facts kept in a node's ``suspect`` mark
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_MONTH_NAMES = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
                "november", "december")
_SCALES = (("[kK]", 1000), ("M", 10**6))  # 1.2k, 3M (not 5m: minutes; not 5kB: a unit)
_LIST = re.compile(r"\[-?\d+(?:,\s*-?\d+)+\]", re.ASCII)


def _plain(text: str) -> str:
    """``text`` as facts are read from it: full-width digits and letters as ASCII (NFKC), a Windows path's
    backslashes (escaped or not) as slashes, a bracketed list of whole numbers spaced (``[100,200]`` is 100 and
    200, not the grouped 100200 that ``100,200`` is in prose)."""
    text = re.sub(r"(?<=[\w.~:])\\+(?=[\w.~])", "/", unicodedata.normalize("NFKC", text))
    return _LIST.sub(lambda m: m.group().replace(",", ", "), text) if "[" in text else text


def _found(text: str) -> Iterable[tuple[str, str, str]]:
    """Each fact of ``text`` as (its kind, the fact, the three characters after it: a ``k`` scales a number)."""
    for m in _FACT.finditer(_plain(text)):
        fact = m.group().rstrip(".,:")
        if m.lastgroup == "path":
            fact = fact.removeprefix("./")
        if m.lastgroup != "number" or len(fact) >= 2:
            yield m.lastgroup, fact, m.string[m.end():m.end() + 3]


def facts(text: str) -> list[str]:
    """The numbers, paths and identifiers of ``text``, in order, once each."""
    return list(dict.fromkeys(fact for _, fact, _ in _found(text)))


def unfounded(summary: str, texts: Iterable[str], more: Callable[[], Iterable[str]] | None = None,
              distrust: Iterable[str] = ()) -> list[str]:
    """The facts of ``summary`` that occur in none of ``texts`` nor (looked up only if some are missing)
    in the texts ``more()`` yields; a fact of ``distrust`` (a child line's own unfounded ones, as written there)
    is looked up in ``more()`` alone."""
    distrust = [_plain(d) for d in distrust]
    found: dict[str, re.Pattern] = {}
    for kind, fact, after in _found(summary):
        found.setdefault(fact, _pattern(kind, fact, after))
    texts = _read(texts)
    missing = [f for f, holds in found.items()
               if any(holds.search(d) for d in distrust) or not any(holds.search(t) for t in texts)]
    if missing and more is not None:
        rest = _read(more())
        missing = [f for f in missing if not any(found[f].search(t) for t in rest)]
    return missing


def inherited(summary: str, missing: Iterable[str], distrust: Iterable[str]) -> bool:
    """Whether every fact of ``summary`` in ``missing`` is one of ``distrust`` (its child lines' own unfounded
    ones), however either writes it (``65432`` of a child's ``65,432``): such a line said what it was given."""
    distrust, missing = [_plain(d) for d in distrust], set(missing)
    return all(any(_pattern(kind, fact, after).search(d) for d in distrust)
               for kind, fact, after in _found(summary) if fact in missing)


def _read(texts: Iterable[str]) -> list[str]:
    """``texts`` as a fact is looked up in them: each as logged and as a reader sees it (``privacy.readings``:
    a tool call's JSON escapes read, an output's colour codes left out), ``_plain``."""
    return [_plain(form) for text in texts for form in readings(text)]


def _pattern(kind: str, fact: str, after: str) -> re.Pattern:
    """What finds ``fact`` (of ``kind``; ``after``: what follows it in the summary) in a text, whole."""
    if kind == "number":
        return re.compile(_number(fact, after), re.ASCII)
    if kind == "path":  # a relative path may be the tail of a longer one (src/a.py of /repo/src/a.py)
        home = re.match(r"~(?=/)|/(?:home|Users)/[^/]+(?=/)|/root(?=/)", fact)
        rest = re.escape(fact[home.end():].rstrip("/")) if home else re.escape(fact.rstrip("/"))
        if home:  # ~/x is /home/me/x
            rest = r"(?:~|\$HOME|\$\{HOME\}|/home/[^/\s]+|/Users/[^/\s]+|/root)" + rest
        return re.compile(rf"(?<![\w.@+~-]){rest}(?![\w@+-])", re.IGNORECASE | re.ASCII)
    if kind == "file":
        return re.compile(rf"(?<![\w.-]){re.escape(fact)}(?![\w-])", re.IGNORECASE | re.ASCII)
    if kind == "hex":  # a short commit hash is a prefix of the long one
        longer = "" if fact[1:2] in "xX" else "[0-9a-f]*"
        return re.compile(rf"(?<![0-9A-Za-z_]){re.escape(fact)}{longer}(?![0-9A-Za-z_])", re.IGNORECASE | re.ASCII)
    return re.compile(rf"(?<![0-9A-Za-z_]){re.escape(fact)}(?![0-9A-Za-z_])", re.IGNORECASE | re.ASCII)  # identifiers


def _number(fact: str, after: str) -> str:
    """The pattern of a number fact: its digits however grouped, padded or scaled, not part of a longer number."""
    plain = fact.replace(",", "")
    ways = [_digits(plain), re.escape(fact)]
    scale = next((factor for unit, factor in _SCALES if re.match(rf"\s?{unit}(?![A-Za-z])", after, re.ASCII)), None)
    if scale and re.fullmatch(r"\d+(?:\.\d+)?", plain):  # 1.2k: 1200
        value = Decimal(plain) * scale
        if value == value.to_integral_value():
            ways.append(_digits(str(int(value))))
    if plain.isdigit():  # 1200: 1.2k
        for unit, factor in _SCALES:
            if int(plain) >= factor:
                short = format(Decimal(plain) / factor, "f")
                short = short.rstrip("0").rstrip(".") if "." in short else short
                ways.append(re.escape(short) + rf"\s?{unit}(?![A-Za-z])")
    date = re.fullmatch(r"(\d{4})-(\d\d)-(\d\d)", plain)
    if date and 1 <= int(date[2]) <= 12:  # 2026-10-08: Oct 8, 2026, 8 October 2026, 2026/10/08, 10/8/2026, 8.10.2026
        year, month, day = date[1], _MONTHS[int(date[2]) - 1], rf"0*{int(date[3])}(?:st|nd|rd|th)?"
        name = rf"(?i:{month}(?:{_MONTH_NAMES[int(date[2]) - 1][3:]})?\.?)"
        ways.append(rf"{name}\s+{day},?\s+{year}|{day}\s+(?:of\s+)?{name},?\s+{year}")
        m, d = f"0*{int(date[2])}", f"0*{int(date[3])}"
        ways.append(rf"{year}[/.]{m}[/.]{d}|{m}[/.]{d}[/.]{year}|{d}[/.]{m}[/.]{year}")
    first = re.match(r"\d+", plain)[0]
    before = r"(?<!\d)(?<!\d\.)" + (r"(?<!\d,)" if len(first) == 3 else "")
    return rf"{before}(?:{'|'.join(ways)})(?!\d)(?!\.\d)(?!,\d{{3}}(?!\d))"


def _digits(number: str) -> str:
    """A number's digits with leading zeros optional (``05`` is ``5``, ``9:05`` is ``09:05``; not in a fraction:
    ``1.05`` is no ``1.5``), thousands commas optional, a trailing ``.0`` optional (``3.0`` is ``3``)."""
    parts = re.split(r"([.:/-])", number)
    while len(parts) >= 3 and parts[-2] == "." and not parts[-1].strip("0"):
        del parts[-2:]
    out = []
    for k, part in enumerate(parts):
        if k % 2:
            out.append(re.escape(part))
        elif k and parts[k - 1] == ".":
            out.append(part)
        else:
            digits = part.lstrip("0") or "0"
            groups = [digits[max(0, e - 3):e] for e in range(len(digits), 0, -3)][::-1]
            out.append("0*" + ",?".join(groups))
    return "".join(out) + r"(?:\.0+)*"
