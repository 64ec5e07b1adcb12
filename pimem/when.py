"""Dates: RFC 3339 for storage, and the WHEN expressions users type (``2026-10-08``, ``09:30``,
``2026-10-08T09:30+08:00``, ``3d``, ``2h``, ``yesterday``, ``#42``)."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from . import env
from .errors import BadInput

_RELATIVE = re.compile(r"(\d+)\s*(s|m|h|d|w)(?:\s*ago)?")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def rfc3339(moment: datetime) -> str:
    """Format an aware datetime as RFC 3339 with its offset, seconds precision unless it has microseconds."""
    spec = "seconds" if moment.microsecond == 0 else "milliseconds"
    return moment.isoformat(timespec=spec)


def parse_stored(text: str) -> datetime:
    """Parse a date written by pimem (or given with ``--date``/NDJSON): RFC 3339, offset optional
    (a missing offset means local time)."""
    if not isinstance(text, str) or not text:
        raise BadInput(f"bad date {text!r}: expected RFC 3339 like 2026-10-08T09:30:00+08:00")
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise BadInput(f"bad date {text!r}: expected RFC 3339 like 2026-10-08T09:30:00+08:00") from None
    if moment.tzinfo is None:
        moment = moment.astimezone()
    return moment


def normalise(text: str) -> str:
    """A user-supplied message date, checked and written back as RFC 3339 with an offset."""
    moment = parse_stored(text)
    if "T" not in text and " " not in text and len(text) <= 10:
        return rfc3339(moment)
    return text if _has_offset(text) else rfc3339(moment)


def _has_offset(text: str) -> bool:
    return bool(re.search(r"(Z|z|[+-]\d\d:\d\d)$", text))


def parse_when(text: str) -> datetime:
    """A moment the user typed: a date, a time today, a full date-time, ``3d``/``2h`` ago,
    ``today``/``yesterday``/``now``."""
    raw = text.strip()
    low = raw.lower()
    current = env.now()
    if low == "now":
        return current
    if low in ("today", "yesterday"):
        midnight = current.replace(hour=0, minute=0, second=0, microsecond=0)
        return midnight - timedelta(days=1) if low == "yesterday" else midnight
    rel = _RELATIVE.fullmatch(low)
    if rel:
        return current - timedelta(**{_UNITS[rel.group(2)]: int(rel.group(1))})
    if re.fullmatch(r"\d\d?:\d\d(:\d\d)?", raw):
        try:
            parts = [int(p) for p in raw.split(":")] + [0]
            return current.replace(hour=parts[0], minute=parts[1], second=parts[2], microsecond=0)
        except ValueError:
            pass
    try:
        return parse_stored(raw)
    except BadInput:
        raise BadInput(
            f"bad date {text!r}: use 2026-10-08, 2026-10-08T09:30, a time like 09:30, 3d / 2h / 15m ago, "
            "today, yesterday, or #I for a message number"
        ) from None
