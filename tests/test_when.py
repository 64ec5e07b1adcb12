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
