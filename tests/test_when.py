"""Dates: the day shortcut that lets `since` skip parsing most stored dates must agree with parsing them."""

from datetime import datetime, timedelta, timezone

from hypothesis import given, strategies as st

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


# ---- one WHEN grammar for every option that takes a time --------------------------------------------------

import pytest  # noqa: E402

from pimem import Memory, api  # noqa: E402

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
