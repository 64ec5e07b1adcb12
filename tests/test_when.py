"""Dates: the day shortcut that lets `since` skip parsing most stored dates must agree with parsing them."""

import os
from datetime import datetime, timedelta, timezone

from hypothesis import given, strategies as st

import pytest

from pimem import when

offsets = st.integers(-(23 * 60 + 59), 23 * 60 + 59).map(lambda m: timezone(timedelta(minutes=m)))
moments = st.builds(
    lambda minutes, tz: (datetime(2026, 10, 8, tzinfo=timezone.utc) + timedelta(minutes=minutes)).astimezone(tz),
    st.integers(-6 * 24 * 60, 6 * 24 * 60),
    offsets,
)


@given(moments, moments)
def test_threshold_agrees_with_parsing(moment, stored):
    threshold = when.Threshold(moment)
    text = when.rfc3339(stored)
    assert threshold.reached_by(text) == (stored >= moment)
    if stored >= moment:  # the files `since` starts from include every file that can hold it
        assert text[:10] >= threshold.first_day()


def test_stored_dates_are_kept_as_given_when_already_rfc3339():
    assert when.normalise("2026-10-08T09:30:00.250+08:00") == "2026-10-08T09:30:00.250+08:00"
    assert when.normalise("2026-10-08T01:30:00Z") == "2026-10-08T01:30:00Z"
    assert when.normalise("2026-10-08T09:30:00+0800") == "2026-10-08T09:30:00+08:00"  # written back as RFC 3339


@pytest.mark.parametrize("given,stored", [
    ("20261008T093000Z", "2026-10-08T09:30:00+00:00"),  # ISO 8601's basic form: the file is named by the day
    ("2026-W41-1T10:00Z", "2026-10-05T10:00:00+00:00"),
    ("2026-10-08T0930+05:30", "2026-10-08T09:30:00+05:30"),
    ("2026-10-08T09:30:00,5Z", "2026-10-08T09:30:00.500+00:00"),
    ("2026-10-08 09:30:00+05:00", "2026-10-08T09:30:00+05:00"),
    ("2026-10-08T09:30:00.123456-01:00", "2026-10-08T09:30:00.123456-01:00"),
    ("2026-10-08T09:30:00.123456789Z", "2026-10-08T09:30:00.123456+00:00"),  # to the microsecond (README)
    ("9999-12-31T23:59:59+05:00", "9999-12-31T23:59:59+05:00"),
])
def test_any_iso_date_is_stored_as_rfc3339(given, stored):
    assert when.normalise(given) == stored and stored[:10] == when.parse_stored(stored).date().isoformat()


@pytest.mark.parametrize("given,why", [
    ("2026-10-08T09:30:00+00:30:15", "whole minutes"),  # RFC 3339 has no seconds in an offset
    ("9999-12-31T23:59:59-05:00", "out of the range"),  # in UTC it is the year 10000
    ("0001-01-01T00:00:00+01:00", "out of the range"),
])
def test_a_date_rfc3339_cannot_hold_is_refused(given, why):
    with pytest.raises(when.BadInput, match=why):
        when.normalise(given)


def test_whens_at_the_ends_of_the_range_are_answered_or_refused_in_one_line(run, home):
    run("append", "m", "a message")
    for argv, code in ((["since", "m", "9999-12-31T23:59:59"], 0), (["date", "m", "--at", "9999-12-31"], 1),
                       (["since", "m", "0001-01-02"], 0), (["search", "message", "m", "--since", "0001-01-02"], 0),
                       (["since", "m", "0001-01-01T00:00:00+01:00"], 2)):
        out = run(*argv)
        assert out.exit_code == code and "Traceback" not in out.stderr and out.stderr.count("\n") <= 1, (argv, out.stderr)


def test_local_midnight_of_year_one_is_a_date_where_the_zone_keeps_it_in_range(monkeypatch):
    import time

    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    try:  # (the platform's local time cannot be asked about year 1: today's offset, UTC here)
        assert when.parse_stored("0001-01-01") == datetime(1, 1, 1, tzinfo=timezone.utc)
        assert when.parse_stored("0001-01-01T00:00") == datetime(1, 1, 1, tzinfo=timezone.utc)
    finally:
        monkeypatch.undo()
        time.tzset()


@pytest.mark.skipif(not os.path.exists("/usr/share/zoneinfo/America/Santiago"), reason="no time zone database")
def test_a_day_ends_at_the_first_moment_of_the_next_in_the_zone_of_the_moment_given(monkeypatch):
    """``day_end`` (when a capped watcher's day ends): the next midnight in the system's time zone, as its
    clock's date changes, where the clocks change at midnight too (Santiago puts them forward at 24:00 into
    01:00, and back at 24:00 to 23:00; Havana back at 01:00, through midnight twice); in a moment's own offset
    when the moment is in another zone (``$PIMEM_NOW``)."""
    import time

    monkeypatch.setenv("TZ", "America/Santiago")
    time.tzset()
    try:
        here = datetime(2026, 9, 5, 12).astimezone()
        assert when.day_end("2026-09-05", here).isoformat() == "2026-09-06T01:00:00-03:00"  # (00:00 is skipped)
        assert when.day_end("2026-04-04", here).isoformat() == "2026-04-05T00:00:00-04:00"  # (a day of 25 hours)
        assert when.day_end("2026-10-08", here).isoformat() == "2026-10-09T00:00:00-03:00"
        elsewhere = datetime.fromisoformat("2026-10-08T20:00:00+09:00")
        assert when.day_end("2026-10-08", elsewhere).isoformat() == "2026-10-09T00:00:00+09:00"
        monkeypatch.setenv("TZ", "America/Havana")
        time.tzset()
        there = datetime(2026, 10, 31, 12).astimezone()
        assert when.day_end("2026-10-31", there).isoformat() == "2026-11-01T00:00:00-04:00"  # (the first of two)
    finally:
        monkeypatch.undo()
        time.tzset()


# ---- one WHEN grammar for every option that takes a time --------------------------------------------------

from pimem import Memory, api  # noqa: E402
from conftest import snapshot  # noqa: E402

# PIMEM_NOW is Thursday 2026-10-08T09:30:00+08:00 (the home fixture)
SPOKEN = {
    "2 hours ago": "2026-10-08T07:30:00+08:00",
    "90 min ago": "2026-10-08T08:00:00+08:00",
    "yesterday 9:30": "2026-10-07T09:30:00+08:00",
    "yesterday at 9pm": "2026-10-07T21:00:00+08:00",
    "last monday": "2026-10-05T00:00:00+08:00",
    "last thursday": "2026-10-01T00:00:00+08:00",
    "monday 14:00": "2026-10-05T14:00:00+08:00",
    "today 08:00": "2026-10-08T08:00:00+08:00",
    "1 week": "2026-10-01T09:30:00+08:00",
}


# (the common abbreviations of day names, as the full names and the three-letter ones; "weds" is no prefix)
DAY_WORDS = {"tue": "2026-10-06", "tues": "2026-10-06", "Tuesday": "2026-10-06", "wed": "2026-10-07",
             "weds": "2026-10-07", "thu": "2026-10-08", "thur": "2026-10-08", "thurs": "2026-10-08",
             "last thurs": "2026-10-01", "Weds 9pm": "2026-10-07T21:00"}


@pytest.mark.parametrize("word", sorted(DAY_WORDS))
def test_a_day_name_is_read_whole_or_abbreviated(run, home, word):
    moment = when.parse_when(word)
    assert moment.isoformat().startswith(DAY_WORDS[word]) and moment.tzinfo is not None
    assert run("append", "main", "msg").exit_code == 0
    out = run("since", word)  # (read as a WHEN, not a memory's name: the default memory's messages since then)
    assert out.exit_code == 0 and "no memory named" not in out.stderr, out.stderr


def places(run):
    """Every option that takes a time, as (argv for WHEN) -> what a run says."""
    return {
        "since": lambda w: run("since", "m", w, "--until", "now"),
        "since --until": lambda w: run("since", "m", "#0", "--until", w),
        "search --since": lambda w: run("search", "msg", "m", "--since", w),
        "search --until": lambda w: run("search", "msg", "m", "--until", w),
        "date --at": lambda w: run("date", "m", "--at", w),
        "append --date": lambda w: run("append", "scratch", "--date", w, "msg"),
    }


@pytest.mark.parametrize("spoken", sorted(SPOKEN))
def test_every_time_option_takes_the_same_grammar(run, home, spoken):
    Memory.at("m").append([{"kind": "user", "text": f"msg {d}", "date": d} for d in sorted(SPOKEN.values())])
    for where, call in places(run).items():
        out = call(spoken)
        assert out.exit_code in (0, 1), (where, out.stderr)  # 1: nothing at or after it, for date --at
    assert when.parse_when(spoken).isoformat() == SPOKEN[spoken]
    assert run("date", "m", "--at", spoken).stdout.strip() == str(sorted(SPOKEN.values()).index(SPOKEN[spoken]))
    logged = Memory.open("scratch").message(Memory.open("scratch").count() - 1)["date"]
    assert logged == SPOKEN[spoken]
    assert api.since("m", when=spoken)["messages"][0]["date"] == SPOKEN[spoken]


@pytest.mark.parametrize("bad", ["next week", "10000000000d", "25:00", "monday 25:00", "1 fortnight ago"])
def test_every_time_option_refuses_the_same_way(run, home, bad):
    Memory.at("m").append([{"kind": "user", "text": "msg"}])
    for where, call in places(run).items():
        out = call(bad)
        assert out.exit_code == 2, (where, out.stderr)
        assert out.stderr.count("\n") == 1 and out.stderr.endswith(when.HINT + "\n"), (where, out.stderr)
    assert not (home / "scratch").exists()


@pytest.mark.parametrize("bad", ["2026-10-08T01:30:00+05:30:15", "2026-10-08T01:30:00+05:30:15.5", "2026-10-08 01:30-00:00:01"])
def test_an_offset_with_seconds_is_refused_by_every_time_option(run, home, bad):
    """An offset with seconds, which Python reads but neither RFC 3339 nor ISO 8601 writes, is refused wherever
    a time is taken, as ``append --date`` refused it (``since``, ``date --at`` and ``search --since`` took it)."""
    Memory.at("m").append([{"kind": "user", "text": "msg"}])
    for where, call in places(run).items():
        out = call(bad)
        assert (out.exit_code, out.stderr) == (2, f"pimem: error: bad date {bad!r}: a UTC offset is whole minutes, like "
                                                  "+05:30 (RFC 3339)\n"), where
    assert not (home / "scratch").exists()


def test_a_when_gone_wrong_still_looks_like_one():
    """What ``since``'s lone word is taken as when no memory has that name: a WHEN, said as a bad date."""
    for shape in ("2026-13-01", "25:99", "#x", "13pm", "999999d", "1000000w", "25:00", "yesterday 25:00", "monday 25:00", "10000 years ago", "1 fortnight ago", "3d"):
        assert when.looks_like(shape), shape
    for name in ("main", "3things", "notes-2026", "ago", "d3"):
        assert not when.looks_like(name), name


@pytest.mark.skipif(not os.path.exists("/usr/share/zoneinfo/America/New_York"), reason="no time zone database")
@pytest.mark.parametrize("now,spoken,first", [
    ("2026-03-08T10:00:00-04:00", "today", 1),  # the day clocks went forward: its midnight was at -05:00
    ("2026-03-08T10:00:00-04:00", "00:15", 1),
    ("2026-03-09T10:00:00-04:00", "yesterday", 1),
    ("2026-03-09T10:00:00-04:00", "sunday", 1),
    ("2026-11-01T10:00:00-05:00", "today", 3),  # the day clocks went back: its midnight was at -04:00
    ("2026-11-01T10:00:00-05:00", "today 00:15", 3),
    ("2026-11-02T10:00:00-05:00", "yesterday", 3),
])
def test_a_day_word_or_a_clock_time_is_read_in_the_offset_of_that_day_not_of_now(sh, now, spoken, first):
    """``today``, ``yesterday``, a weekday and a time of day name a local time of their own day, whose offset
    is not now's across a change of the clocks: at 10:00 EDT on 8 March, ``today`` began at 00:00 EST, not at
    23:00 EST the day before (one hour of Saturday read as Sunday's); at 10:00 EST on 1 November it began at
    00:00 EDT, not at 01:00 EDT (Sunday's first hour left out). Real processes, the zone in ``TZ``; ``$PIMEM_NOW``
    in that zone stands for the system clock."""
    dates = ["2026-03-07T23:30:00-05:00", "2026-03-08T00:30:00-05:00",  # Saturday, Sunday 8 March
             "2026-10-31T23:30:00-04:00", "2026-11-01T00:30:00-04:00"]  # Saturday, Sunday 1 November
    for date in dates:
        assert sh("append", "m", "--date", date, f"said {date}").returncode == 0
    out = sh("date", "m", "--at", spoken, TZ="America/New_York", PIMEM_NOW=now)
    assert (out.returncode, out.stdout.decode().strip()) == (0, str(first)), (spoken, out.stderr)
    out = sh("since", "m", spoken, TZ="America/New_York", PIMEM_NOW=now)
    assert out.stdout.startswith(b'{"i":%d,' % first), (spoken, out.stdout)
    logged = sh("append", "m", "--date", spoken, "dated", TZ="America/New_York", PIMEM_NOW=now)
    stored = sh("date", "m", logged.stdout.decode().strip()).stdout.decode().strip()
    assert stored[19:] == dates[first][19:], (spoken, stored)  # (the offset of that local time on that day)


@pytest.mark.skipif(not os.path.exists("/usr/share/zoneinfo/America/Santiago"), reason="no time zone database")
@pytest.mark.parametrize("zone,now,given,stored", [
    ("America/Santiago", "2026-09-06T12:00:00-03:00", "2026-09-06", "2026-09-06T01:00:00-03:00"),  # (00:00 is skipped)
    ("America/Santiago", "2026-09-06T12:00:00-03:00", "today", "2026-09-06T01:00:00-03:00"),
    ("America/Santiago", "2026-09-06T12:00:00-03:00", "2026-09-06T00:30", "2026-09-06T01:30:00-03:00"),
    ("America/New_York", "2026-03-08T12:00:00-04:00", "2026-03-08 02:30", "2026-03-08T03:30:00-04:00"),
    ("America/New_York", "2026-03-08T12:00:00-04:00", "2:30", "2026-03-08T03:30:00-04:00"),
    ("America/New_York", "2026-11-01T12:00:00-05:00", "2026-11-01 01:30", "2026-11-01T01:30:00-04:00"),  # (the first)
])
def test_a_local_time_the_clocks_skip_is_read_as_the_time_after_the_change(sh, zone, now, given, stored):
    """A local date or time without an offset that the clocks skip (Santiago puts them forward at 00:00, New York
    at 02:00) is the moment the clocks read that time plus the gap: 6 September in Santiago began at 01:00, and
    was read as 23:00 on the 5th, its message logged in the day file of the 5th and ``since 2026-09-06`` taking in
    the last hour of the 5th; ``02:30`` in New York on 8 March was read as 01:30, before the change. A time the
    clocks go through twice is the first (as ``day_end`` reads a midnight)."""
    before = when.rfc3339(datetime.fromisoformat(stored) - timedelta(minutes=30))  # (the 5th, late, in Santiago)
    assert sh("append", "m", "--date", before, "half an hour before").returncode == 0
    out = sh("append", "m", "--date", given, "given", TZ=zone, PIMEM_NOW=now)
    assert out.returncode == 0, out.stderr
    assert sh("date", "m", "1").stdout.decode().strip() == stored
    out = sh("date", "m", "--at", given, TZ=zone, PIMEM_NOW=now)
    assert out.stdout.decode().strip() == "1", (given, out.stdout, out.stderr)


@pytest.mark.parametrize("now,argv", [
    ("9999-12-31T23:59:59-14:00", ["append", "m", "hi"]),  # (in UTC, the year 10000: a date the log refuses)
    ("0001-01-01T10:00:00+14:00", ["since", "m", "now"]),
    ("0001-01-01T20:00:00+14:00", ["date", "m", "--at", "today"]),  # (00:00 at +14:00: the year 0 in UTC)
    ("0001-01-01T20:00:00+14:00", ["since", "m", "12h"]),
    ("0001-01-01T20:00:00+14:00", ["search", "msg", "m", "--until", "09:00"]),
])
def test_a_clock_or_a_when_that_utc_moves_out_of_the_range_of_dates_is_refused_in_one_line(sh, home, now, argv):
    """``$PIMEM_NOW`` at the ends of the range, or a WHEN read from it, that UTC moves out of years 1-9999 is refused
    (exit 2, one line), as such a date given outright is: it was a traceback, and ``append`` logged the clock's date
    as the message's, one ``fsck`` then calls a problem."""
    assert sh("append", "m", "msg").returncode == 0
    before = snapshot(home)
    out = sh(*argv, PIMEM_NOW=now)
    assert out.returncode == 2 and out.stderr.count(b"\n") == 1 and b"Traceback" not in out.stderr, out.stderr
    assert b"range" in out.stderr, out.stderr
    assert snapshot(home) == before


@pytest.mark.parametrize("args, said, quoted", [
    (["since", "2", "hours", "ago"], "got unexpected extra argument(s) (ago)", "2 hours ago"),
    (["since", "yesterday", "9:30"], "no memory named 'yesterday'", "yesterday 9:30"),
    (["since", "main", "2026-10-08", "09:30"], "got unexpected extra argument(s) (09:30)", "2026-10-08 09:30"),
    (["search", "staging", "main", "--since", "3", "days", "ago"], "bad date '3'", "3 days ago"),
    (["date", "main", "--at", "last", "monday", "9:30"], "got unexpected extra argument(s) (9:30)", "last monday 9:30"),
])
def test_a_date_of_several_words_given_unquoted_is_said_how_to_quote(home, sh, args, said, quoted):
    """``pimem since 2 hours ago`` said 'got unexpected extra argument(s) (ago)', ``since yesterday 9:30`` 'no
    memory named yesterday', ``search --since 3 days ago`` 'bad date 3': nothing said the date was to be quoted."""
    Memory.at("main").append([{"kind": "user", "text": "the staging db listens on 5433"}])
    out = sh(*args)
    err = out.stderr.decode()
    assert out.returncode in (2, 3) and out.stdout == b"" and said in err, err
    assert f"; to give a date of several words, quote it: '{quoted}'" in err and err.count("\n") == 1, err


def test_an_error_naming_no_date_of_several_words_adds_nothing(home, sh):
    Memory.at("main").append([{"kind": "user", "text": "hi"}])
    for args in (["since", "nosuch"], ["since", "main", "'3 days ago'", "extra"], ["since", "main", "soon", "ago", "x"],
                 ["search", "hi", "main", "--since", "3 days ago", "extra"]):
        err = sh(*args).stderr.decode()
        assert err.startswith("pimem: error: ") and "quote it" not in err, (args, err)
