"""The message schema (DESIGN.md §1): kinds and their aliases, ``size``, dates, the echo trim and the cap.

``normalise`` checks one input record completely and returns the line to store, or raises ``BadInput``
naming what is wrong; nothing is written until a whole batch has passed.
"""

from __future__ import annotations

from typing import Any

from . import env, when
from .errors import BadInput


class OverCap(BadInput):
    """A text longer than the memory's cap (``max_text_bytes``): refused, never cut."""


KINDS = ("user", "pi", "tool", "echo", "work", "note")
ALIASES = {"assistant": "pi", "tool_call": "tool", "tool_result": "echo", "bash": "echo", "custom": "work"}
TOOL_KINDS = frozenset({"tool", "echo"})
_KIND_SET = frozenset(KINDS)
ECHO_KEEP = 30_000  # characters of tool output kept (head + tail)
DEFAULT_CAP = 8 * 1024 * 1024  # bytes; longer text is refused, never cut
INPUT_KEYS = {"kind", "text", "date", "meta", "i", "size"}  # i and size are assigned by the log


def kind_of(name: str) -> str:
    """The stored kind for a kind or alias; ``BadInput`` for anything else."""
    kind = ALIASES.get(name, name)
    if kind not in KINDS:
        raise BadInput(f"unknown kind {name!r}: use one of {', '.join(KINDS)} (or {', '.join(ALIASES)})")
    return kind


def size_of(kind: str, text: str) -> int:
    """UTF-8 bytes of ``"<kind>: <text>"``."""
    return len(kind) + 2 + len(text.encode("utf-8"))


_CUT_OPEN, _CUT_CLOSE = "\n[… ", " characters of tool output cut by pimem …]\n"


def trim_echo(text: str) -> str:
    """Tool output over 30,000 characters keeps its head and tail and says how much was cut. Output trimmed
    so already (a memory's export logged again) is kept as it is: trimming it again would cut its marker."""
    if len(text) <= ECHO_KEEP:
        return text
    half = ECHO_KEEP // 2
    marker = text[half:-half]
    if marker.startswith(_CUT_OPEN) and marker.endswith(_CUT_CLOSE):
        cut = marker[len(_CUT_OPEN):-len(_CUT_CLOSE)]
        if cut.isascii() and cut.isdigit():
            return text
    cut = len(text) - 2 * half
    return f"{text[:half]}{_CUT_OPEN}{cut}{_CUT_CLOSE}{text[-half:]}"


def _json_type(value: Any) -> str:
    """What a value is, in JSON's words (``a number``), or a Python caller's type (``bytes``)."""
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, (int, float)):
        return "a number"
    return {dict: "an object", list: "a list"}.get(type(value), type(value).__name__)


def normalise(record: Any, cap: int = DEFAULT_CAP, default_date: str | None = None, source: bytes | None = None) -> dict:
    """Validate one input record ``{kind, text, date?, meta?}`` and return the stored message without ``i``.
    ``source`` is the JSON text the record was decoded from, if it was (see ``check_numbers``).

    Bulk imports run this once per message, so the common case takes the short road: a known kind, ASCII
    text (its length is its size in bytes) and a date already in RFC 3339."""
    if not isinstance(record, dict):
        raise BadInput("a message must be a JSON object with kind and text")
    if not record.keys() <= INPUT_KEYS:
        unknown = sorted(set(record) - INPUT_KEYS)[0]
        raise BadInput(f"unknown field {unknown!r}: a message has kind, text, date and meta")
    kind = record.get("kind")
    if type(kind) is not str or kind not in _KIND_SET:
        if not isinstance(kind, str):
            raise BadInput("missing kind: every message needs a kind such as user or pi" if kind is None else
                           f"kind must be a string such as user or pi, not {_json_type(kind)}")
        kind = kind_of(kind)
    text = record.get("text")
    if not isinstance(text, str):
        raise BadInput("missing text: every message needs a text string" if text is None else
                       f"text must be a string, not {_json_type(text)}")
    if not text:  # (a text of whitespace alone is what was written, and is logged as it is)
        raise BadInput("empty text: there is nothing to log")
    if "\x00" in text:
        raise BadInput("text contains a NUL byte")
    if kind == "echo":
        text = trim_echo(text)
    if text.isascii():
        length = len(text)
    else:
        try:
            length = len(text.encode("utf-8"))
        except UnicodeEncodeError:
            raise BadInput("text is not valid UTF-8 (it contains a lone surrogate)") from None
    if length > cap and kind != "echo":
        raise OverCap(f"text of {length} bytes is over the cap of {cap} bytes; split it into several messages")
    date = record.get("date")
    if date is None:
        date = default_date or when.rfc3339(env.now())
    else:
        date = when.normalise(date)
    out = {"kind": kind, "text": text, "size": len(kind) + 2 + length, "date": date}
    meta = record.get("meta")
    if meta is not None:
        if not isinstance(meta, dict):
            raise BadInput("meta must be a JSON object")
        if not all(type(v) is str for v in meta.values()):  # (most metas: strings only, nothing to look at)
            if _check_meta(meta, 0) and source is not None:
                _check_source(source)
        out["meta"] = meta
    return out


META_DEPTH = 250  # objects and lists within meta (the JSON encoder stops at 254)
_INT_LOW, _INT_END = -(2**63), 2**64  # the integers a 64-bit parser keeps; beyond them it makes floats
_WIDE = "meta holds an integer beyond 64 bits, which cannot be kept exactly; write it as a string"


def check_numbers(record: Any, source: bytes | str) -> None:
    """``BadInput`` when ``record`` (decoded from the JSON text ``source``) has a meta holding a number that
    an integer beyond 64 bits became: orjson reads 18446744073709551617 as 1.8446744073709552e+19. Such a
    float (whole, and -2^63 or less, or 2^64 or more) is looked up in the text only when there is one; a
    float written as one (1e300) is kept."""
    meta = record.get("meta") if type(record) is dict else None
    if type(meta) is dict and not all(type(v) is str for v in meta.values()) and _check_meta(meta, 0):
        _check_source(source)


def check_meta(meta: dict) -> None:
    """``BadInput`` unless ``meta``, a library caller's object (a node's, say), can be stored as JSON as given:
    as a message's meta is checked (``_check_meta``), its keys strings and its text UTF-8."""
    import orjson

    _check_meta(meta, 0)
    try:
        orjson.dumps(meta)
    except TypeError as exc:  # (a key that is no string, a lone surrogate)
        raise BadInput(f"meta cannot be stored as JSON: {exc}") from None


def _check_source(source: bytes | str) -> None:
    from .decoder import holds_wide_integer

    if holds_wide_integer(source):
        raise BadInput(_WIDE)


def _check_meta(value: Any, depth: int) -> bool:
    """Refuse a meta that could not be stored as given: nested too deeply, or holding an integer beyond 64
    bits (given as a Python ``int``). True when it holds a float that such an integer may have become in a
    parser (whole, at or beyond -2^63 or 2^64), which only the JSON text it came from can tell."""
    kind = type(value)
    if kind is dict or kind is list:
        if depth > META_DEPTH:  # (containers count: meta's objects and lists, within meta itself)
            raise BadInput(f"meta is nested deeper than {META_DEPTH} levels")
        wide = False
        for item in value.values() if kind is dict else value:
            if type(item) is not str:
                wide = _check_meta(item, depth + 1) or wide
        return wide
    if kind is int:
        if not _INT_LOW <= value < _INT_END:
            raise BadInput(_WIDE)
        return False
    if kind is float:
        if value - value != 0:  # NaN or an infinity (a library caller's): JSON has neither
            raise BadInput(f"meta holds {value}, which JSON cannot hold")
        return value.is_integer() and not _INT_LOW < value < _INT_END
    if kind is bool or value is None:
        return False
    return _check_other(value, depth)


def _check_other(value: Any, depth: int) -> bool:
    """``_check_meta`` for what a library caller hands in besides JSON's own types: a tuple (a prepared batch's
    arrays), a subclass of dict, list, str or int are looked at as JSON writes them (an array, an object, a
    string, a number); anything else (a datetime, a UUID, a dataclass, a set) JSON has no type for, and the
    encoder would store it as a string or an object that reads back as something else: refused."""
    if isinstance(value, dict):
        return _check_meta(dict(value), depth)
    if isinstance(value, (list, tuple)):
        return _check_meta(list(value), depth)
    if isinstance(value, int) and not isinstance(value, bool):
        return _check_meta(int(value), depth)
    if isinstance(value, (str, bool)):
        return False
    raise BadInput(f"meta holds a {type(value).__name__}, which JSON has no type for; write it as a string, a "
                   "number, an array or an object")


def day_of(date: str) -> str:
    """The log file a message goes to is named by the date part of its date string."""
    return date[:10]


def is_tool(message: dict) -> bool:
    return message["kind"] in TOOL_KINDS


SPEAKER = 40  # characters of a speaker's name a line shows


def speaker(message: dict) -> tuple[str, int]:
    """Who said ``message`` as a line says it, and the group its speaker is in: its ``meta.speaker`` (its first
    ``SPEAKER`` characters, without bidirectional controls, which would reorder the line), else its kind, with
    0 for the user, 1 for anyone else; ``("", 2)`` for tool work."""
    meta = message.get("meta") or {}
    who = meta.get("speaker") if isinstance(meta.get("speaker"), str) and meta.get("speaker").strip() else None
    who = who[:SPEAKER].strip() if who and len(who) > SPEAKER else who  # (a name, not what the line is for)
    if who and not who.isascii():
        from .toolwork import BIDI

        if BIDI.search(who):
            who = BIDI.sub("", who).strip() or None
    kind = message.get("kind", "")
    if kind in TOOL_KINDS:
        return "", 2
    return (who or kind), 0 if kind == "user" else 1


def said_by(kind: str, who: str) -> str:
    """What a line says a message of ``kind`` spoken by ``who`` (``speaker``) is: its kind, and its speaker when
    it names one (``user Bob``)."""
    return kind if who in ("", kind) else f"{kind} {who}"


def leaf_label(message: dict) -> str:
    """What a line showing ``message`` alone opens with, before ``: ``: ``said_by`` its ``speaker``."""
    return said_by(message.get("kind", ""), speaker(message)[0])


def name_bytes(message: dict) -> int:
    """The bytes a line showing ``message`` alone says more for its speaker (``leaf_label`` less its kind):
    what readers may add to its verbatim leaf, which the view counts (``View.extras``)."""
    meta = message.get("meta")
    if not meta or not isinstance(meta.get("speaker"), str):  # (most messages: no name, nothing more to read)
        return 0
    kind = message.get("kind", "")
    said = leaf_label(message)
    return 0 if said == kind else len(said.encode("utf-8")) - len(kind.encode("utf-8"))
