"""Go-compatible time and duration text formats.

* :func:`format_time` / :func:`parse_time` — RFC 3339 timestamps exactly as Go's ``time.Time``
  JSON encoding writes them (``RFC3339Nano`` in UTC, trailing zeros trimmed) and as Go's
  ``time.Parse(time.RFC3339, s)`` reads them (what nats-server accepts in a request), including
  Go's error texts (``parsing time "x" as "2006-01-02T15:04:05Z07:00": cannot parse "x" as
  "2006"``), which the JSON decoder reports verbatim inside ``invalid JSON: ...``.
* :func:`parse_duration` / :func:`format_duration` — ``time.ParseDuration`` / ``Duration.String``.
* :func:`parse_ttl` — the ``Nats-TTL`` header (nats-server ``parseMessageTTL``).

Times are integer nanoseconds since the Unix epoch (UTC). Go's zero time
(``0001-01-01T00:00:00Z``, "unset" in JetStream JSON) maps to ``0``.
"""

from __future__ import annotations

from functools import lru_cache

ZERO_TIME = "0001-01-01T00:00:00Z"
RFC3339_LAYOUT = "2006-01-02T15:04:05Z07:00"

NS_PER_SEC = 1_000_000_000
_SEC_PER_DAY = 86_400
# Seconds from 0001-01-01T00:00:00Z to the Unix epoch (Go's zero time as Unix seconds).
_ZERO_TIME_UNIX = -62_135_596_800
_MAX_INT64 = (1 << 63) - 1


# ---------------------------------------------------------------------------------------------
# Civil calendar helpers (proleptic Gregorian, any year; H. Hinnant's algorithms).


def _days_from_civil(y: int, m: int, d: int) -> int:
    y -= m <= 2
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


@lru_cache(maxsize=4096)
def _civil_date(days: int) -> str:
    """``YYYY-MM-DD`` for a day number relative to 1970-01-01 (cached: timestamps cluster)."""
    z = days + 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    y = yoe + era * 400
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    m = mp + (3 if mp < 10 else -9)
    y += m <= 2
    if y < 0:
        return f"-{-y:04d}-{m:02d}-{d:02d}"
    return f"{y:04d}-{m:02d}-{d:02d}"


def _days_in(month: int, year: int) -> int:
    if month == 2:
        leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
        return 29 if leap else 28
    return 30 if month in (4, 6, 9, 11) else 31


# ---------------------------------------------------------------------------------------------
# Formatting


def format_time(ns: int) -> str:
    """RFC 3339 in UTC with up to 9 fractional digits, trailing zeros trimmed (Go RFC3339Nano).

    ``0`` is Go's zero time ``0001-01-01T00:00:00Z`` (how JetStream shows "never").
    """
    global _last_second
    if ns == 0:
        return ZERO_TIME
    sec, frac = divmod(ns, NS_PER_SEC)
    cached = _last_second  # one read: another thread may replace it meanwhile
    if cached[0] == sec:
        head = cached[1]
    else:
        days, rem = divmod(sec, _SEC_PER_DAY)
        hh, rem = divmod(rem, 3600)
        mm, ss = divmod(rem, 60)
        head = f"{_civil_date(days)}T{hh:02d}:{mm:02d}:{ss:02d}"
        _last_second = (sec, head)
    if frac:
        return f"{head}.{f'{frac:09d}'.rstrip('0')}Z"
    return head + "Z"


_last_second: tuple[int | None, str] = (None, "")
"""The last second :func:`format_time` formatted, and its text up to the seconds: the messages
of one read or one Direct Get batch were mostly stored within the same second, and the date
and time of day were two thirds of the cost of each timestamp."""


# ---------------------------------------------------------------------------------------------
# Parsing (a port of Go's time.Parse for the RFC 3339 layout, including its error texts)


def go_time_quote(s: str) -> str:
    """Go's ``time`` package ``quote``: ASCII printable kept, other bytes as ``\\xNN``."""
    out = ['"']
    for ch in s:
        if ch >= "\x80" or ch < " ":
            out.extend(f"\\x{b:02x}" for b in ch.encode("utf-8", "surrogatepass"))
        else:
            if ch in '"\\':
                out.append("\\")
            out.append(ch)
    out.append('"')
    return "".join(out)


class _TimeParseError(ValueError):
    pass


def _parse_error(value: str, layout_elem: str, value_elem: str, message: str = "") -> _TimeParseError:
    if message:
        return _TimeParseError(f"parsing time {go_time_quote(value)}{message}")
    return _TimeParseError(
        f"parsing time {go_time_quote(value)} as {go_time_quote(RFC3339_LAYOUT)}: cannot parse "
        f"{go_time_quote(value_elem)} as {go_time_quote(layout_elem)}"
    )


def _isdigit(s: str, i: int) -> bool:
    return i < len(s) and "0" <= s[i] <= "9"


def _getnum(s: str, fixed: bool) -> tuple[int, str] | None:
    if not _isdigit(s, 0):
        return None
    if not _isdigit(s, 1):
        if fixed:
            return None
        return ord(s[0]) - 48, s[1:]
    return (ord(s[0]) - 48) * 10 + ord(s[1]) - 48, s[2:]


# The RFC 3339 layout as Go's parser walks it: (literal prefix, element).
_CHUNKS = (("", "2006"), ("-", "01"), ("-", "02"), ("T", "15"), (":", "04"), (":", "05"), ("", "Z07:00"))


def parse_time(s: str) -> int:
    """Parse what Go's ``time.Time`` JSON decoding accepts (``time.Parse(time.RFC3339, s)``).

    Accepts ``Z`` or ``±hh:mm`` offsets and any number of fractional digits (``.`` or ``,``;
    digits beyond 9 are truncated), 1-digit hours/minutes like Go does. Returns Unix
    nanoseconds; the zero-time instant returns ``0``. Raises :class:`ValueError` whose message
    is Go's exact error text.
    """
    value = s
    year = month = day = hour = minute = sec = nsec = 0
    offset = 0
    for prefix, elem in _CHUNKS:
        for p in prefix:
            if not value or value[0] != p:
                raise _parse_error(s, prefix, value)
            value = value[1:]
        hold = value
        range_err = ""
        ok = True
        if elem == "2006":
            if len(value) < 4 or not _isdigit(value, 0):
                ok = False
            else:
                p4, value = value[:4], value[4:]
                if not p4.isascii() or not p4.isdigit():
                    ok = False
                else:
                    year = int(p4)
        elif elem == "Z07:00":
            if value[:1] == "Z":
                value = value[1:]
            elif len(value) < 6 or value[3] != ":":
                ok = False
            else:
                sign, hh, mm, value = value[0], value[1:3], value[4:6], value[6:]
                h = _getnum(hh, True)
                m = _getnum(mm, True) if h is not None else None
                if h is None or m is None:
                    ok = False
                else:
                    if h[0] > 24:
                        range_err = "time zone offset hour"
                    if m[0] > 60:
                        range_err = "time zone offset minute"
                    offset = (h[0] * 60 + m[0]) * 60
                    if sign == "-":
                        offset = -offset
                    elif sign != "+":
                        ok = False
        else:
            got = _getnum(value, elem in ("01", "02", "04", "05"))
            if got is None:
                ok = False
            else:
                n, value = got
                if elem == "01":
                    month = n
                    if month <= 0 or month > 12:
                        range_err = "month"
                elif elem == "02":
                    day = n
                elif elem == "15":
                    hour = n
                    if hour >= 24:
                        range_err = "hour"
                elif elem == "04":
                    minute = n
                    if minute >= 60:
                        range_err = "minute"
                else:
                    sec = n
                    if sec >= 60:
                        range_err = "second"
                    elif len(value) >= 2 and value[0] in ".," and _isdigit(value, 1):
                        # Fractional seconds the layout does not mention: Go takes them anyway.
                        n_end = 2
                        while _isdigit(value, n_end):
                            n_end += 1
                        digits = value[1 : min(n_end, 10)]
                        nsec = int(digits) * 10 ** (9 - len(digits))
                        value = value[n_end:]
        if range_err:
            raise _parse_error(s, elem, value, f": {range_err} out of range")
        if not ok:
            raise _parse_error(s, elem, hold)
    if value:
        raise _parse_error(s, "", value, f": extra text: {go_time_quote(value)}")
    if day < 1 or day > _days_in(month, year):
        raise _parse_error(s, "", value, ": day out of range")
    secs = _days_from_civil(year, month, day) * _SEC_PER_DAY + hour * 3600 + minute * 60 + sec - offset
    if secs == _ZERO_TIME_UNIX and nsec == 0:
        return 0
    return secs * NS_PER_SEC + nsec


# ---------------------------------------------------------------------------------------------
# Durations

_UNITS = {
    "ns": 1,
    "us": 1_000,
    "\u00b5s": 1_000,  # micro sign
    "\u03bcs": 1_000,  # Greek mu
    "ms": 1_000_000,
    "s": NS_PER_SEC,
    "m": 60 * NS_PER_SEC,
    "h": 3600 * NS_PER_SEC,
}


def parse_duration(s: str) -> int:
    """Go ``time.ParseDuration``: ``"1h2m3.5s"``, ``"300ms"``, ``"-1.5h"``, ``"0"`` → ns.

    Raises :class:`ValueError` with Go's message (``time: invalid duration "x"``,
    ``time: missing unit in duration "1"``, ``time: unknown unit "d" in duration "1d"``).
    """
    orig = s
    invalid = ValueError(f"time: invalid duration {go_time_quote(orig)}")
    neg = False
    if s and s[0] in "+-":
        neg = s[0] == "-"
        s = s[1:]
    if s == "0":
        return 0
    if not s:
        raise invalid
    total = 0
    limit = 1 << 63
    while s:
        if not (s[0] == "." or "0" <= s[0] <= "9"):
            raise invalid
        i = 0
        v = 0
        while i < len(s) and "0" <= s[i] <= "9":
            if v > limit // 10:
                raise invalid
            v = v * 10 + ord(s[i]) - 48
            if v > limit:
                raise invalid
            i += 1
        pre = i > 0
        s = s[i:]
        f, scale, post = 0, 1.0, False
        if s and s[0] == ".":
            s = s[1:]
            i = 0
            overflow = False
            while i < len(s) and "0" <= s[i] <= "9":
                if not overflow:
                    if f > (limit - 1) // 10:
                        overflow = True
                    else:
                        y = f * 10 + ord(s[i]) - 48
                        if y > limit:
                            overflow = True
                        else:
                            f = y
                            scale *= 10
                i += 1
            post = i > 0
            s = s[i:]
        if not pre and not post:
            raise invalid
        i = 0
        while i < len(s) and not (s[i] == "." or "0" <= s[i] <= "9"):
            i += 1
        if i == 0:
            raise ValueError(f"time: missing unit in duration {go_time_quote(orig)}")
        u, s = s[:i], s[i:]
        unit = _UNITS.get(u)
        if unit is None:
            raise ValueError(f"time: unknown unit {go_time_quote(u)} in duration {go_time_quote(orig)}")
        if v > limit // unit:
            raise invalid
        v *= unit
        if f > 0:
            v += int(float(f) * (float(unit) / scale))
            if v > limit:
                raise invalid
        total += v
        if total > limit:
            raise invalid
    if neg:
        return -total
    if total > _MAX_INT64:
        raise invalid
    return total


def _fmt_frac(v: int, prec: int) -> tuple[str, int]:
    digits = []
    printed = False
    for _ in range(prec):
        digit = v % 10
        printed = printed or digit != 0
        if printed:
            digits.append(chr(48 + digit))
        v //= 10
    if printed:
        return "." + "".join(reversed(digits)), v
    return "", v


def format_duration(ns: int) -> str:
    """Go ``Duration.String()``: ``"3s"``, ``"1m30s"``, ``"1h0m0s"``, ``"1.5ms"``, ``"0s"``."""
    u = -ns if ns < 0 else ns
    sign = "-" if ns < 0 else ""
    if u < NS_PER_SEC:
        if u == 0:
            return "0s"
        if u < 1_000:
            return f"{sign}{u}ns"
        if u < 1_000_000:
            frac, whole = _fmt_frac(u, 3)
            return f"{sign}{whole}{frac}\u00b5s"
        frac, whole = _fmt_frac(u, 6)
        return f"{sign}{whole}{frac}ms"
    frac, u = _fmt_frac(u, 9)
    out = f"{u % 60}{frac}s"
    u //= 60
    if u > 0:
        out = f"{u % 60}m{out}"
        u //= 60
        if u > 0:
            out = f"{u}h{out}"
    return sign + out


# ---------------------------------------------------------------------------------------------
# Nats-TTL


def parse_ttl(value: str) -> int | None:
    """The ``Nats-TTL`` header as nats-server reads it (``parseMessageTTL``).

    * ``"never"`` (any case) → ``-1`` (never expires);
    * a Go duration (``"30s"``, ``"1h"``, ``"1.5s"``) → whole seconds of it, in ns; under 1 s
      (``"500ms"``, ``"0s"``, ``"-5s"``) is invalid;
    * otherwise a plain decimal integer of seconds (``"60"``) → ns (``"00"`` → ``0``, no TTL;
      ``"0"`` itself parses as a zero duration and is invalid);
    * anything else (``"abc"``, ``"-1"``, ``""``) → ``None`` (invalid, ``10165``).
    """
    if value.lower() == "never":
        return -1
    try:
        dur = parse_duration(value)
    except ValueError:
        pass
    else:
        if dur < NS_PER_SEC:
            return None
        return (dur // NS_PER_SEC) * NS_PER_SEC
    if not value or not value.isascii() or not value.isdigit():
        return None
    n = int(value)
    # nats-server accumulates in an int64 without overflow checks; a wrapped negative is invalid.
    n &= (1 << 64) - 1
    if n > _MAX_INT64:
        return None
    return n * NS_PER_SEC
