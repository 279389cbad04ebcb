"""Go time/duration formats: RFC 3339 (RFC3339Nano UTC), time.Parse errors, durations, Nats-TTL."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jetlog.wire.timefmt import (
    ZERO_TIME,
    format_duration,
    format_time,
    parse_duration,
    parse_time,
    parse_ttl,
)

CAPTURES = Path("/work/shared/spec/captures/jetstream-captures.jsonl")


# --------------------------------------------------------------------------------------------
# format_time


@pytest.mark.parametrize(
    ("ns", "text"),
    [
        (0, "0001-01-01T00:00:00Z"),
        (1, "1970-01-01T00:00:00.000000001Z"),
        (1_795_287_912_533_990_000, "2026-11-21T19:05:12.53399Z"),
        (1_795_287_912_000_000_000, "2026-11-21T19:05:12Z"),
        (1_795_287_912_100_000_000, "2026-11-21T19:05:12.1Z"),
        (946_684_800 * 10**9, "2000-01-01T00:00:00Z"),
        (951_782_400 * 10**9, "2000-02-29T00:00:00Z"),
        (-1, "1969-12-31T23:59:59.999999999Z"),
        (-86_400 * 10**9, "1969-12-31T00:00:00Z"),
        (253_402_300_799 * 10**9 + 999_999_999, "9999-12-31T23:59:59.999999999Z"),
    ],
)
def test_format_time(ns: int, text: str) -> None:
    assert format_time(ns) == text


@given(st.integers(min_value=-(10**18), max_value=4 * 10**18))
def test_format_time_matches_datetime(ns: int) -> None:
    if ns == 0:
        return
    sec, frac = divmod(ns, 10**9)
    d = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=sec)
    expect = d.strftime("%Y-%m-%dT%H:%M:%S")
    if frac:
        expect += "." + f"{frac:09d}".rstrip("0")
    assert format_time(ns) == expect + "Z"


def _via_datetime(ns: int) -> str:
    sec, frac = divmod(ns, 10**9)
    d = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=sec)
    return d.strftime("%Y-%m-%dT%H:%M:%S") + ("." + f"{frac:09d}".rstrip("0") if frac else "") + "Z"


@given(
    st.integers(min_value=-(10**18), max_value=4 * 10**18),
    st.lists(st.tuples(st.integers(-3, 3), st.integers(0, 10**9 - 1)), max_size=30),
)
def test_format_time_in_runs_of_nearby_seconds(base: int, steps: list[tuple[int, int]]) -> None:
    # ``format_time`` keeps the last second's text: a run of timestamps within and across
    # neighbouring seconds (and back) formats exactly as each one alone.
    sec = base // 10**9
    for ds, frac in steps:
        ns = (sec + ds) * 10**9 + frac
        if ns:
            assert format_time(ns) == _via_datetime(ns)


@given(st.integers(min_value=-(10**18), max_value=4 * 10**18))
def test_parse_format_roundtrip(ns: int) -> None:
    assert parse_time(format_time(ns)) == ns


def test_capture_times_roundtrip() -> None:
    """Every time nats-server wrote in the captures parses and formats back identically."""
    seen = 0
    for line in CAPTURES.read_text().splitlines():
        rec = json.loads(line)
        data = rec.get("data") or ""
        if not data.startswith("{"):
            continue
        try:
            obj = json.loads(data)
        except ValueError:
            continue
        stack = [obj]
        while stack:
            o = stack.pop()
            if isinstance(o, dict):
                for k, v in o.items():
                    if k in ("created", "ts", "first_ts", "last_ts", "time", "leader_since") and isinstance(
                        v, str
                    ):
                        assert format_time(parse_time(v)) == v
                        seen += 1
                    else:
                        stack.append(v)
            elif isinstance(o, list):
                stack.extend(o)
    assert seen > 100


# --------------------------------------------------------------------------------------------
# parse_time


@pytest.mark.parametrize(
    ("text", "ns"),
    [
        ("0001-01-01T00:00:00Z", 0),
        ("0001-01-01T01:00:00+01:00", 0),
        ("1970-01-01T00:00:00Z", 0),
        ("1970-01-01T00:00:01Z", 10**9),
        ("1969-12-31T23:59:59Z", -(10**9)),
        ("2000-01-01T00:00:00Z", 946_684_800 * 10**9),
        ("2000-01-01T01:30:00+01:30", 946_684_800 * 10**9),
        ("2000-01-01T00:00:00-00:30", 946_686_600 * 10**9),
        ("2026-11-21T19:05:12.53399Z", 1_795_287_912_533_990_000),
        ("2026-11-21T19:05:12,5Z", 1_795_287_912_500_000_000),
        ("2026-11-21T19:05:12.1234567891Z", 1_795_287_912_123_456_789),
        ("2020-01-01T0:00:00Z", 1_577_836_800 * 10**9),
        ("2020-01-01T00:00:00+24:00", 1_577_750_400 * 10**9),
    ],
)
def test_parse_time(text: str, ns: int) -> None:
    assert parse_time(text) == ns


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("bogus", 'parsing time "bogus" as "2006-01-02T15:04:05Z07:00": cannot parse "bogus" as "2006"'),
        ("", 'parsing time "" as "2006-01-02T15:04:05Z07:00": cannot parse "" as "2006"'),
        (
            "2020-01-01T00:00:00",
            'parsing time "2020-01-01T00:00:00" as "2006-01-02T15:04:05Z07:00": cannot parse "" as "Z07:00"',
        ),
        ("2020-13-01T00:00:00Z", 'parsing time "2020-13-01T00:00:00Z": month out of range'),
        (
            "2020-01-01 00:00:00Z",
            'parsing time "2020-01-01 00:00:00Z" as "2006-01-02T15:04:05Z07:00": cannot parse " 00:00:00Z" as "T"',
        ),
        ("2020-01-01T00:00:00Zx", 'parsing time "2020-01-01T00:00:00Zx": extra text: "x"'),
        (
            "2020-01-01T00:00:00+25:00",
            'parsing time "2020-01-01T00:00:00+25:00": time zone offset hour out of range',
        ),
        ("2020-01-32T00:00:00Z", 'parsing time "2020-01-32T00:00:00Z": day out of range'),
        ("2020-02-30T00:00:00Z", 'parsing time "2020-02-30T00:00:00Z": day out of range'),
        ("2020-01-01T24:00:00Z", 'parsing time "2020-01-01T24:00:00Z": hour out of range'),
        (
            "2020-01-01T00:00:00.Z",
            'parsing time "2020-01-01T00:00:00.Z" as "2006-01-02T15:04:05Z07:00": cannot parse ".Z" as "Z07:00"',
        ),
        (
            "20201-01-01T00:00:00Z",
            'parsing time "20201-01-01T00:00:00Z" as "2006-01-02T15:04:05Z07:00": cannot parse "1-01-01T00:00:00Z" as "-"',
        ),
        ("2020-01-01T00:60:00Z", 'parsing time "2020-01-01T00:60:00Z": minute out of range'),
        ("2020-01-01T00:00:60Z", 'parsing time "2020-01-01T00:00:60Z": second out of range'),
        (
            "2020-1-01T00:00:00Z",
            'parsing time "2020-1-01T00:00:00Z" as "2006-01-02T15:04:05Z07:00": cannot parse "1-01T00:00:00Z" as "01"',
        ),
        (
            "é",
            'parsing time "\\xc3\\xa9" as "2006-01-02T15:04:05Z07:00": cannot parse "\\xc3\\xa9" as "2006"',
        ),
    ],
)
def test_parse_time_errors(text: str, message: str) -> None:
    """Go's time.ParseError texts (measured through nats-server's opt_start_time / start_time)."""
    with pytest.raises(ValueError) as ei:
        parse_time(text)
    assert str(ei.value) == message


def test_zero_time_constant() -> None:
    assert format_time(0) == ZERO_TIME and parse_time(ZERO_TIME) == 0


# --------------------------------------------------------------------------------------------
# durations


@pytest.mark.parametrize(
    ("text", "ns"),
    [
        ("0", 0),
        ("+0", 0),
        ("-0", 0),
        ("0s", 0),
        ("300ms", 300_000_000),
        ("1h2m3.5s", 3_723_500_000_000),
        ("1.5h", 5_400_000_000_000),
        ("-1.5h", -5_400_000_000_000),
        ("1us", 1_000),
        ("1µs", 1_000),
        ("1μs", 1_000),
        ("7ns", 7),
        (".5s", 500_000_000),
        ("5.s", 5_000_000_000),
        ("1m30s", 90_000_000_000),
        ("9223372036854775807ns", 9_223_372_036_854_775_807),
        ("-9223372036854775808ns", -9_223_372_036_854_775_808),
        ("2562047h47m16.854775807s", 9_223_372_036_854_775_807),
    ],
)
def test_parse_duration(text: str, ns: int) -> None:
    assert parse_duration(text) == ns


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", 'time: invalid duration ""'),
        ("x", 'time: invalid duration "x"'),
        ("1", 'time: missing unit in duration "1"'),
        ("1d", 'time: unknown unit "d" in duration "1d"'),
        (".s", 'time: invalid duration ".s"'),
        ("-", 'time: invalid duration "-"'),
        ("9223372036854775808ns", 'time: invalid duration "9223372036854775808ns"'),
        ("1s2", 'time: missing unit in duration "1s2"'),
    ],
)
def test_parse_duration_errors(text: str, message: str) -> None:
    with pytest.raises(ValueError) as ei:
        parse_duration(text)
    assert str(ei.value) == message


@pytest.mark.parametrize(
    ("ns", "text"),
    [
        (0, "0s"),
        (1, "1ns"),
        (999, "999ns"),
        (1_000, "1µs"),
        (1_500, "1.5µs"),
        (1_500_000, "1.5ms"),
        (300_000_000, "300ms"),
        (1_000_000_000, "1s"),
        (1_500_000_000, "1.5s"),
        (3_000_000_000, "3s"),
        (90_000_000_000, "1m30s"),
        (120_000_000_000, "2m0s"),
        (3_600_000_000_000, "1h0m0s"),
        (3_723_500_000_000, "1h2m3.5s"),
        (-1_500_000_000, "-1.5s"),
        (9_223_372_036_854_775_807, "2562047h47m16.854775807s"),
    ],
)
def test_format_duration(ns: int, text: str) -> None:
    assert format_duration(ns) == text


@given(st.integers(min_value=-(1 << 63) + 1, max_value=(1 << 63) - 1))
def test_duration_roundtrip(ns: int) -> None:
    assert parse_duration(format_duration(ns)) == ns


# --------------------------------------------------------------------------------------------
# Nats-TTL


@pytest.mark.parametrize(
    ("value", "ns"),
    [
        ("2s", 2 * 10**9),
        ("60", 60 * 10**9),
        ("never", -1),
        ("NEVER", -1),
        ("1h", 3600 * 10**9),
        ("1.5s", 10**9),  # whole seconds, like nats-server
        ("0", None),  # ParseDuration("0") = 0 < 1s
        ("00", 0),  # not a duration; integer 0 = no TTL
        ("500ms", None),
        ("0s", None),
        ("abc", None),
        ("-1", None),
        ("-5s", None),
        ("", None),
        (" 5", None),
        ("9223372036854775808", None),  # int64 wrap-around (no overflow check) ⇒ negative
        ("99999999999999999999", 7_766_279_631_452_241_919 * 10**9),  # wraps positive
    ],
)
def test_parse_ttl(value: str, ns: int | None) -> None:
    assert parse_ttl(value) == ns
