"""Dates: RFC 3339 for storage, and the one WHEN grammar every option that takes a time accepts
(``2026-10-08``, ``09:30``, ``2026-10-08T09:30+08:00``, ``3d``, ``2 hours ago``, ``yesterday 9:30``,
``last monday``; ``since``, ``--until`` and ``search --since`` add ``#42``: ``bound``)."""

from __future__ import annotations

import functools
import re
from datetime import date, datetime, time, timedelta, timezone

from . import env
from .errors import BadInput

_RFC3339 = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,6})?(?:Z|[+-][0-9]{2}:[0-9]{2})")


def rfc3339(moment: datetime) -> str:
    """Format an aware datetime as RFC 3339 with its offset, seconds precision unless it has microseconds."""
    spec = "seconds" if moment.microsecond == 0 else "milliseconds"
    return moment.isoformat(timespec=spec)


def in_zone(text: str, zone: datetime) -> str:
    """The date-time ``text`` (RFC 3339, with its offset) in the time zone of the moment ``zone``, the reader's (a
    date is shown as the reader's clock tells it, not the writer's): the system's when ``zone`` is in it (with the
    offset of the date's season), else ``zone``'s offset (a clock given by ``$PIMEM_NOW``); else ``text`` as it is."""
    try:
        moment = datetime.fromisoformat(text)
        if moment.tzinfo is None:
            return text
        there = local(moment, zone)
        return text if there.utcoffset() == moment.utcoffset() else rfc3339(there)
    except (OverflowError, ValueError):  # (not a date, or at the ends of the range of dates)
        return text


def local(moment: datetime, zone: datetime) -> datetime:
    """``moment`` (aware) in the reader's time zone, that of the moment ``zone``: the system's when ``zone`` is in it
    (with the offset of ``moment``'s season), else ``zone``'s offset (a clock given by ``$PIMEM_NOW``)."""
    return moment.astimezone() if zone.astimezone().utcoffset() == zone.utcoffset() else moment.astimezone(zone.tzinfo)


def day_end(day: str, zone: datetime) -> datetime:
    """When local ``day`` (YYYY-MM-DD) ends, at the next midnight, in the time zone of the moment ``zone``: the
    system's when ``zone`` is in it (an offset that changes that night is followed), else ``zone``'s offset (a
    clock given by ``$PIMEM_NOW``). ValueError for no such day, OverflowError past the range of dates."""
    midnight = datetime.combine(date.fromisoformat(day) + timedelta(days=1), time(0))
    if zone.astimezone().utcoffset() != zone.utcoffset():
        return midnight.replace(tzinfo=zone.tzinfo)
    # the first moment of the next day: a midnight the clocks skip (put forward at 00:00) is read as the hour
    # after it, one they go through twice (put back at 01:00) as the first
    starts = [midnight.replace(fold=fold).astimezone() for fold in (0, 1)]
    return min(start for start in starts if start.date() >= midnight.date())


def parse_stored(text: str) -> datetime:
    """Parse a date written by pimem (or given with ``--date``/NDJSON): RFC 3339, offset optional
    (a missing offset means local time)."""
    if not isinstance(text, str) or not text:
        raise BadInput(f"bad date {text!r}: expected RFC 3339 like 2026-10-08T09:30:00+08:00")
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
        if moment.tzinfo is None:
            try:
                moment = _localise(moment)
            except (ValueError, OverflowError):  # (year 1 or 9999: local time cannot be asked; today's offset)
                moment = moment.replace(tzinfo=datetime.now().astimezone().tzinfo)
        moment.astimezone(timezone.utc)  # (year 1 or 9999 in a zone that moves it out of range)
    except ValueError:
        raise BadInput(f"bad date {text!r}: expected RFC 3339 like 2026-10-08T09:30:00+08:00") from None
    except OverflowError:
        raise OutOfRange(f"bad date {text!r}: out of the range of dates (years 1 to 9999, in UTC too)") from None
    return moment


def _localise(naive: datetime) -> datetime:
    """A local date-time written without an offset, in the system's time zone: one the clocks go through twice
    (put back) is the first; one they skip (put forward) is the time they read as much later, as the first moment
    of a day is in ``day_end`` (02:30 on a night they go from 02:00 to 03:00 is 03:30; a midnight they skip,
    01:00), not the hour before the change (Python's reading: a date whose midnight is skipped was then a moment of
    the day before, its message logged in that day's file)."""
    readings = [naive.replace(fold=fold).astimezone() for fold in (0, 1)]  # (which fold reads a skipped time as
    # which moment changed in Python 3.13: neither is relied on)
    held = [moment for moment in readings if moment.replace(tzinfo=None) == naive]
    return min(held) if held else max(readings)


class OutOfRange(BadInput):
    """A well-formed date at the ends of the range that a conversion to UTC moves out of it."""


class Threshold:
    """A moment that stored date strings are compared with, parsing a date only when its day leaves the
    answer in doubt: a stored date's first ten characters name its local day, and no UTC offset moves a
    moment by more than a day, so most days are wholly before or wholly at-or-after the moment."""

    def __init__(self, moment: datetime):
        self.moment = moment
        utc = moment.astimezone(timezone.utc)
        try:
            after = utc + timedelta(days=1)  # local day D starts no earlier than D 00:00 UTC - 24 h
            first_sure = after.date() + timedelta(days=0 if after.time() == time(0) else 1)
            self._reached_from = first_sure.isoformat()  # days from here on are wholly at or after the moment
        except OverflowError:
            self._reached_from = "~"  # (past every day: at the end of the range each is parsed)
        try:
            self._before_until = (utc - timedelta(days=2)).date().isoformat()  # days up to here are wholly before
        except OverflowError:
            self._before_until = ""

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

    def reached_day(self) -> str:
        """A file day from which on every file holds only dates at or after the moment."""
        return self._reached_from


def normalise(text: str) -> str:
    """A user-supplied message date, checked and written back as RFC 3339 with an offset."""
    if isinstance(text, str) and _RFC3339.fullmatch(text) and text[:4] not in ("0001", "9999"):
        try:
            datetime.fromisoformat(text)  # the shape is right; is the date real (no month 13)?
            return text
        except ValueError:
            pass
    moment = _whole_minutes(parse_stored(text), text)  # any other ISO 8601 form Python reads (20261008T093000Z, a space, no offset)
    micro = moment.microsecond
    return moment.isoformat(timespec="seconds" if not micro else "milliseconds" if micro % 1000 == 0 else "microseconds")


def _whole_minutes(moment: datetime, text: str) -> datetime:
    """``moment``, unless its UTC offset has seconds (``+05:30:15``, which Python reads): neither RFC 3339 nor ISO
    8601 writes one, and the log could not store it."""
    offset = moment.utcoffset()
    if offset.seconds % 60 or offset.microseconds:
        raise BadInput(f"bad date {text!r}: a UTC offset is whole minutes, like +05:30 (RFC 3339)")
    return moment


HINT = ("use a date (2026-10-08), a date and time (2026-10-08T09:30, 2026-10-08 09:30+08:00), a time today "
        "(09:30, 9pm), a day and time (yesterday 9:30, last monday, friday 14:00), an age (15m, 2h, 3d, 1w, "
        "2 hours ago), now, today or yesterday")
_UNIT_WORDS = {
    "seconds": ("s", "sec", "secs", "second", "seconds"),
    "minutes": ("m", "min", "mins", "minute", "minutes"),
    "hours": ("h", "hr", "hrs", "hour", "hours"),
    "days": ("d", "day", "days"),
    "weeks": ("w", "wk", "wks", "week", "weeks"),
}
_UNIT_OF = {word: unit for unit, words in _UNIT_WORDS.items() for word in words}
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
# each day's name, its first three letters and its other common abbreviations, as the day's number (monday 0)
_DAY_OF = {**{name: n for n, name in enumerate(_WEEKDAYS)}, **{name[:3]: n for n, name in enumerate(_WEEKDAYS)},
           "tues": 1, "weds": 2, "thur": 3, "thurs": 3}


@functools.cache
def _spoken_forms() -> tuple[re.Pattern, re.Pattern, re.Pattern]:
    """An age, a day word with an optional time, a clock: compiled when a WHEN is first read (append, view and
    most commands read none, and they are ~0.5 ms a start-up)."""
    age = re.compile(r"([0-9]{1,12})\s*([a-z]+)(?:\s+ago)?")
    day = re.compile(r"(today|yesterday|(?:last\s+)?(?:%s))(?:\s+(?:at\s+)?(.+))?"
                     % "|".join(_DAY_OF))
    return age, day, re.compile(r"([0-9]{1,2})(?::([0-9]{2}))?(?::([0-9]{2}))?\s*(am|pm)?")


def _clock(text: str) -> time | None:
    """``09:30``, ``9:30:15``, ``9pm``, ``9:30am`` as a time of day, or None."""
    m = _spoken_forms()[2].fullmatch(text)
    if not m or (m[2] is None and m[4] is None):
        return None
    hour, minute, second = int(m[1]), int(m[2] or 0), int(m[3] or 0)
    if m[4]:
        if not 1 <= hour <= 12:
            return None
        hour = hour % 12 + (12 if m[4] == "pm" else 0)
    if hour > 23 or minute > 59 or second > 59:
        return None
    return time(hour, minute, second)


def _local(day: date, clock: time, current: datetime) -> datetime:
    """The local time ``clock`` on ``day``, in the time zone of the moment ``current`` (now): the system's when
    ``current`` is in it, with the offset of that day and time (not now's: ``today`` at 10:00 on the day the clocks
    went forward began an hour earlier than 00:00 in the offset of 10:00), read as a date-time written without an
    offset is (a time the clocks go through twice is the first); else ``current``'s offset (``$PIMEM_NOW``)."""
    naive = datetime.combine(day, clock)
    try:
        if current.astimezone().utcoffset() == current.utcoffset():
            return _localise(naive)
    except (OverflowError, ValueError):  # (at the ends of the range of dates local time cannot be asked)
        pass
    return naive.replace(tzinfo=current.tzinfo)


def _spoken(low: str, current: datetime) -> datetime | None:
    """``now``, an age, a time today or a day word with an optional time (``low``, lowercase) as the moment it
    names at ``current``; None for any other text."""
    if low == "now":
        return current
    age = _spoken_forms()[0].fullmatch(low)
    if age and age[2] in _UNIT_OF:
        return current - timedelta(**{_UNIT_OF[age[2]]: int(age[1])})
    clock = _clock(low)
    if clock is not None:
        return _local(current.date(), clock, current)
    day = _spoken_forms()[1].fullmatch(low)
    if day:
        word, at = day[1].split()[-1], day[2]
        if word == "today":
            back = 0
        elif word == "yesterday":
            back = 1
        else:
            weekday = _DAY_OF[word]
            back = (current.weekday() - weekday) % 7 or (7 if day[1].startswith("last") else 0)
        clock = _clock(at) if at is not None else time(0)
        if clock is not None:
            return _local(current.date() - timedelta(days=back), clock, current)
    return None


def parse_when(text: str) -> datetime:
    """A moment the user typed, in the one grammar every option that takes a time shares (``HINT``):
    a date or date-time, a time today, a day word with an optional time, an age, or ``now``."""
    raw = " ".join(text.split())
    low = raw.lower()
    try:
        moment = _spoken(low, env.now())
        if moment is not None:
            moment.astimezone(timezone.utc)  # (00:00 of year 1 at +14:00 is out of range in UTC)
            return moment
    except (OverflowError, ValueError):
        raise BadInput(f"date {text!r} is out of range: {HINT}") from None
    try:
        moment = parse_stored(raw)
    except OutOfRange:
        raise
    except BadInput:
        raise BadInput(f"bad date {text!r}: {HINT}") from None
    return _whole_minutes(moment, text)


@functools.cache
def _shapes() -> tuple[re.Pattern, re.Pattern]:
    """What ``looks_like`` takes for a WHEN: how one starts (a ``#I`` bound, a date or a clock, whatever follows:
    2026-13-01), and the shape of an age or a clock (compiled when first asked, as ``_spoken_forms``)."""
    start = re.compile(r"#|\d{4}-\d|\d{1,2}:\d")
    return start, re.compile(
        r"[0-9]+\s*(?:%s)(?:\s+ago)?|[0-9]{1,2}(?::[0-9]{2}){1,2}|[0-9]{1,2}(?::[0-9]{2}){0,2}\s*(?:am|pm)"
        r"|.+\s+ago" % "|".join(sorted(_UNIT_OF, key=len, reverse=True)))


def looks_like(text: str) -> bool:
    """Whether ``text`` has the shape of a WHEN in this grammar or of a ``#I`` bound, one gone wrong too
    (``2026-13-01``, ``25:99``, ``#x``, ``13pm``, ``999999d``, ``yesterday 25:00``, ``10 years ago``): ``bound``
    then says what is wrong with it."""
    low = " ".join(text.split()).lower()
    start, shape = _shapes()
    return bool(start.match(text) or shape.fullmatch(low) or _spoken_forms()[1].fullmatch(low))


def unquoted(args, said: str) -> str:
    """What an error ``said`` of a command given ``args`` adds when a date of several words was given unquoted,
    one argument a word (``since 2 hours ago``: a memory named '2', an extra argument 'ago'): how to quote it
    (``; to give a date of several words, quote it: '2 hours ago'``); "" when no run of 2–4 words ``said`` names
    (one quoted, or the extra ones in parentheses) is a WHEN."""
    words = [str(arg) for arg in args]
    for start in range(len(words)):
        for end in range(min(len(words), start + 4), start + 1, -1):
            run = words[start:end]
            if any(not word.strip() or word.startswith("-") or " " in word for word in run):
                continue
            if not any(f"'{word}'" in said for word in run) \
                    and not any(f"({' '.join(run[n:])})" in said for n in range(1, len(run))):
                continue
            try:
                parse_when(" ".join(run))
            except BadInput:
                continue
            return f"; to give a date of several words, quote it: '{' '.join(run)}'"
    return ""


def bound(value: str | None) -> tuple[int | None, datetime | None]:
    """A bound as ``since`` and ``--until`` take it: ``#I`` as ``(I, None)``, any other WHEN as ``(None, moment)``
    (None: ``(None, None)``)."""
    if value is None:
        return None, None
    if value.startswith("#"):
        from .numbers import index

        return index(value[1:]), None
    return None, parse_when(value)


def refuse_reversed(start, until, start_said: str, until_said: str) -> None:
    """Refuse (exit 2) a range whose end ``until`` comes before its ``start`` (two moments, or two message
    numbers; either None: no range): no message can lie between, and an empty answer would read as none there.
    ``start_said`` and ``until_said`` name them as the caller took them (``the start 2026-10-08``, ``--until 3d``)."""
    if start is not None and until is not None and until < start:
        raise BadInput(f"{until_said} is before {start_said}")


def message_date(text: str) -> str:
    """A message's date given as an option (``append --date``): RFC 3339 kept as written, anything else in the
    WHEN grammar written as RFC 3339 with the local offset."""
    try:
        return normalise(text)
    except BadInput:
        return rfc3339(parse_when(text))
