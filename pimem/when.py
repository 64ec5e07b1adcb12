"""Dates: RFC 3339 for storage, and the WHEN expressions users type (``2026-10-08``, ``09:30``,
``2026-10-08T09:30+08:00``, ``3d``, ``2h``, ``yesterday``, ``#42``)."""

from __future__ import annotations

import re
from datetime import datetime, time, timedelta, timezone

from . import env
from .errors import BadInput

_RELATIVE = re.compile(r"(\d+)\s*(s|m|h|d|w)(?:\s*ago)?")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
_RFC3339 = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,6})?(?:Z|[+-][0-9]{2}:[0-9]{2})")
_OFFSET = re.compile(r"(Z|z|[+-]\d\d:\d\d)$")


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


class Threshold:
    """A moment that stored date strings are compared with, parsing a date only when its day leaves the
    answer in doubt: a stored date's first ten characters name its local day, and no UTC offset moves a
    moment by more than a day, so most days are wholly before or wholly at-or-after the moment."""

    def __init__(self, moment: datetime):
        self.moment = moment
        utc = moment.astimezone(timezone.utc)
        after = utc + timedelta(days=1)  # local day D starts no earlier than D 00:00 UTC - 24 h
        first_sure = after.date() + timedelta(days=0 if after.time() == time(0) else 1)
        self._reached_from = first_sure.isoformat()  # days from here on are wholly at or after the moment
        self._before_until = (utc - timedelta(days=2)).date().isoformat()  # days up to here are wholly before

    def reached_by(self, date: str) -> bool:
        """Whether the stored ``date`` is at or after the moment."""
        day = date[:10]
        if day >= self._reached_from:
            return True
        if day <= self._before_until:
            return False
        return parse_stored(date) >= self.moment

    def first_day(self) -> str:
        """A file day before which no file holds a date at or after the moment."""
        return self._before_until


def normalise(text: str) -> str:
    """A user-supplied message date, checked and written back as RFC 3339 with an offset."""
    if isinstance(text, str) and _RFC3339.fullmatch(text):
        try:
            datetime.fromisoformat(text)  # the shape is right; is the date real (no month 13)?
            return text
        except ValueError:
            pass
    moment = parse_stored(text)
    if "T" not in text and " " not in text and len(text) <= 10:
        return rfc3339(moment)
    return text if _has_offset(text) else rfc3339(moment)


def _has_offset(text: str) -> bool:
    return bool(_OFFSET.search(text))


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
