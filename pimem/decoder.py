"""JSON text as JavaScript writes it, decoded: orjson first, the standard library only where orjson refuses.

``JSON.stringify`` writes a string cut inside a surrogate pair (Claude Code and pi cut long texts so) with a
lone surrogate escape, ``"\\ud83d"``: valid JSON, which orjson refuses. ``loads`` decodes such a text with the
standard library instead and puts U+FFFD in place of each lone surrogate (half a character has no UTF-8, so it
cannot be stored). Every other text orjson refuses is still refused, with orjson's own error: the standard
library's answer is taken only when it holds a lone surrogate, and it reads numbers as orjson does (no NaN
or Infinity, nothing too large for a double, an integer beyond 64 bits as a float).

Every reader of a file or stream another program may have written decodes through here (``pimem import``,
``append --ndjson``, the Claude Code hook's payload, ``memory.jsonl``). The standard library is imported
only when orjson has refused a text.
"""

from __future__ import annotations

from typing import Any

import orjson

BOM = b"\xef\xbb\xbf"  # a UTF-8 byte order mark, ignored at the very start of a file or stream
JSONDecodeError = orjson.JSONDecodeError
_INT_LOW, _INT_END = -(2**63), 2**64  # the integers orjson reads as integers: -2^63 … 2^64-1
_lone = None  # the pattern of one surrogate code point, compiled when first needed


def refusal(exc: Exception) -> str:
    """Why a JSON text was refused, in a few words: orjson's reason where it names one a person can act on."""
    said = str(exc).lower()
    if "byte order mark" in said:
        return "a byte order mark (BOM) opens it"
    if "infinity" in said:
        return "it holds a number too large for a double (past 1.8e308)"
    return "not valid UTF-8" if "utf-8" in said else "not valid JSON"


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """``data`` decoded as orjson decodes it, lone surrogates replaced by U+FFFD; ``JSONDecodeError`` for
    anything else orjson refuses."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        found = _with_lone_surrogates(data)
        if found is None:
            raise
        return found[0]


def loads_keeping(data: bytes | bytearray | memoryview | str) -> tuple[Any, Any]:
    """``(value, kept)``: ``value`` as ``loads`` gives it, and ``kept`` the same with its lone surrogates as
    written (for a hash over what the writer wrote, see ``canonical``), or None when it holds none."""
    try:
        return orjson.loads(data), None
    except orjson.JSONDecodeError:
        found = _with_lone_surrogates(data)
        if found is None:
            raise
        return found


def canonical(value: Any) -> bytes:
    """Compact JSON with sorted keys, as ``orjson.dumps(value, option=OPT_SORT_KEYS)`` writes it, except that
    a lone surrogate is written as its escape (``\\ud83d``), as ``JSON.stringify`` writes it."""
    kind = type(value)
    if kind is dict:
        return b"{" + b",".join(_string(k) + b":" + canonical(v) for k, v in sorted(value.items())) + b"}"
    if kind is list:
        return b"[" + b",".join(canonical(v) for v in value) + b"]"
    if kind is str:
        return _string(value)
    return orjson.dumps(value)


def holds_wide_integer(data: bytes | bytearray | memoryview | str) -> bool:
    """Whether the JSON text ``data`` holds an integer beyond 64 bits (outside -2^63 … 2^64-1), which orjson
    reads as the nearest float, losing its digits; False for a text that is not JSON."""
    import json

    wide = False

    def integer(token: str) -> int:
        nonlocal wide
        value = int(token)
        wide = wide or not _INT_LOW <= value < _INT_END
        return value

    try:
        text = data if isinstance(data, str) else bytes(data).decode("utf-8")
        json.loads(text.removeprefix("\ufeff"), parse_int=integer)
    except (ValueError, RecursionError):
        return False
    return wide


def _with_lone_surrogates(data) -> tuple[Any, Any] | None:
    """``(replaced, kept)`` when the standard library reads ``data`` as orjson would but for lone surrogates,
    and it holds at least one; None otherwise (orjson's refusal stands)."""
    try:
        text = data if isinstance(data, str) else bytes(data).decode("utf-8")
    except UnicodeDecodeError:
        return None
    if "\\u" not in text:  # (no escape, so no lone surrogate: a torn or damaged line, refused cheaply)
        return None
    import json

    try:
        kept = json.loads(text, parse_int=_integer, parse_float=_float, parse_constant=_constant)
    except (ValueError, RecursionError):
        return None
    replaced, found = _replaced(kept, _surrogate())
    return (replaced, kept) if found else None


def _surrogate():
    global _lone
    if _lone is None:
        import re

        _lone = re.compile("[\ud800-\udfff]")
    return _lone


def _replaced(value: Any, lone) -> tuple[Any, bool]:
    """``value`` with each lone surrogate replaced by U+FFFD, and whether there was one."""
    kind = type(value)
    if kind is str:
        if lone.search(value) is None:
            return value, False
        return lone.sub("\ufffd", value), True
    if kind is dict:
        out, found = {}, False
        for key, item in value.items():
            key, in_key = _replaced(key, lone)
            out[key], in_item = _replaced(item, lone)
            found = found or in_key or in_item
        return out, found
    if kind is list:
        pairs = [_replaced(item, lone) for item in value]
        return [item for item, _ in pairs], any(found for _, found in pairs)
    return value, False


def _string(text: str) -> bytes:
    lone = _surrogate()
    if lone.search(text) is None:
        return orjson.dumps(text)
    parts, surrogates = lone.split(text), lone.findall(text)
    out = [orjson.dumps(parts[0])[:-1]]
    for surrogate, part in zip(surrogates, parts[1:]):
        out.append(b"\\u%04x" % ord(surrogate))
        out.append(orjson.dumps(part)[1:-1])
    return b"".join(out) + b'"'


def _integer(token: str) -> int | float:
    value = int(token)
    return value if _INT_LOW <= value < _INT_END else float(token)


def _float(token: str) -> float:
    value = float(token)
    if value in (float("inf"), float("-inf")):
        raise ValueError("number is infinity when parsed as double")
    return value


def _constant(token: str):
    raise ValueError(f"{token} is not JSON")
