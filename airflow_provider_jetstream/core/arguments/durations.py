"""The parsers of durations and instants as DAG authors write them, turned into what the JetStream API takes.

Durations: seconds (``30``, ``0.5``, ``"30"``), Go-style strings (``"5m"``, ``"1h30m"``,
``"250ms"``, ``"2d"``), ISO-8601 (``"PT5M"``, ``"P1DT2H"``) or a ``datetime.timedelta``; the API
takes integer nanoseconds. Instants: ISO-8601 / RFC 3339 strings or ``datetime`` objects; the API
takes RFC 3339 in UTC. Arguments that are durations (a sensor's ``max_inactive``) take seconds:
:func:`duration_seconds`.
"""

from __future__ import annotations

import datetime as dt
import functools
import math
import re
from collections.abc import Callable
from typing import Any

from airflow_provider_jetstream.core.arguments.values import INT64_MAX
from airflow_provider_jetstream.core.errors import SpecError

NANOS = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60 * 1_000_000_000,
    "h": 3600 * 1_000_000_000,
    "d": 86400 * 1_000_000_000,
    "w": 7 * 86400 * 1_000_000_000,
}
_GO = re.compile(r"(\d+(?:\.\d+)?|\.\d+)(ns|us|µs|ms|s|m|h|d|w)")
_ISO = re.compile(
    r"^P(?:(?P<w>\d+(?:\.\d+)?)W)?(?:(?P<d>\d+(?:\.\d+)?)D)?"
    r"(?:T(?:(?P<h>\d+(?:\.\d+)?)H)?(?:(?P<m>\d+(?:\.\d+)?)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?$"
)
DURATION_HELP = "seconds (30), a duration string ('5m', '1h30m', '250ms', '2d') or ISO-8601 ('PT5M')"


#: The longest duration the JetStream API takes: a signed 64-bit count of nanoseconds (about 292 years).
MAX_NANOS = INT64_MAX


def parse_duration(value: Any, path: str, *, allow_zero: bool = True) -> int:
    """Nanoseconds for a duration written in any of the accepted forms; ``SpecError`` otherwise
    (NaN, infinity and durations beyond :data:`MAX_NANOS` included)."""
    nanos = _duration_nanos(value)
    if nanos is None:
        raise SpecError(path, value, f"use {DURATION_HELP}")
    if nanos < 0 or (nanos == 0 and not allow_zero):
        raise SpecError(path, value, f"use a {'positive' if not allow_zero else 'non-negative'} duration")
    if nanos > MAX_NANOS:
        raise SpecError(path, value, f"use a duration of at most {MAX_NANOS // NANOS['d'] // 365} years")
    return nanos


def _nanos_of_seconds(seconds: float) -> int | None:
    return round(seconds * 1e9) if math.isfinite(seconds) else None


def _duration_nanos(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, dt.timedelta):
        return round(value.total_seconds() * 1e9)
    if isinstance(value, (int, float)):
        return _nanos_of_seconds(value)
    if not isinstance(value, str):
        return None
    text = value.strip()
    if not text:
        return None
    try:
        return _nanos_of_seconds(float(text))
    except ValueError:
        pass
    negative = text.startswith("-")
    body = text[1:] if negative else text
    iso = _ISO.match(body.upper())
    if iso and body.upper() not in ("P", "PT") and any(iso.groupdict().values()):
        parts = iso.groupdict()
        seconds = sum(float(parts[k] or 0) * NANOS[k] / 1e9 for k in ("w", "d", "h", "m", "s"))
        nanos = _nanos_of_seconds(seconds)
        return None if nanos is None else -nanos if negative else nanos
    pos, total = 0, 0.0
    for match in _GO.finditer(body):
        if match.start() != pos:
            return None
        total += float(match.group(1)) * NANOS[match.group(2)]
        pos = match.end()
    if pos != len(body) or pos == 0 or not math.isfinite(total):
        return None
    return -round(total) if negative else round(total)


def format_duration(nanos: int | None) -> str:
    """A short human form of a nanosecond duration: ``0``, ``250ms``, ``5m``, ``1h30m``, ``2d``."""
    if nanos is None:
        return "-"
    if nanos == 0:
        return "0"
    if nanos < 0:
        return "-" + format_duration(-nanos)
    if nanos % NANOS["s"]:
        for unit in ("ms", "us", "ns"):
            if nanos % NANOS[unit] == 0:
                return f"{nanos // NANOS[unit]}{unit}"
    seconds = nanos // NANOS["s"]
    out = ""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size:
            out += f"{seconds // size}{unit}"
            seconds %= size
    return out


INSTANT_HELP = "an ISO-8601 date-time with a time zone, e.g. '2026-01-01T00:00:00Z', or a timezone-aware datetime"


def parse_instant(value: Any, path: str) -> str:
    """RFC 3339 UTC text (``2026-01-01T00:00:00Z``) for an ISO-8601 string or a datetime.

    The time zone is required: a naive ``2026-01-01T00:00:00`` could mean any zone, and guessing
    UTC would copy or skip hours of messages without a word.
    """
    moment = instant(value, naive_is_utc=False)
    if moment is None:
        raise SpecError(path, value, f"use {INSTANT_HELP}")
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise SpecError(path, value, f"a time zone is required (add 'Z' or '+00:00'): use {INSTANT_HELP}")
    text = moment.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f").rstrip("0").rstrip(".")
    return text + "Z"


def instant(value: Any, *, naive_is_utc: bool = True) -> dt.datetime | None:
    """A datetime for an instant, or None if it is not one. A naive one is taken as UTC when
    ``naive_is_utc`` (the server's own values), else returned naive for the caller to refuse."""
    if isinstance(value, dt.datetime):
        moment = value
    elif isinstance(value, str) and value.strip():
        text = value.strip()
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"
        # The server writes nanoseconds; Python parses at most microseconds.
        text = re.sub(r"(\.\d{6})\d+", r"\1", text)
        try:
            moment = dt.datetime.fromisoformat(text)
        except ValueError:
            return None
    else:
        return None
    if moment.tzinfo is None and naive_is_utc:
        moment = moment.replace(tzinfo=dt.timezone.utc)
    return moment


def duration_seconds(value: Any, field_name: str, *, positive: bool = False) -> float:
    """Seconds in a duration written as DAG authors write them (``10``, ``"500ms"``, ``"5m"``,
    ``"PT1M"``, a ``timedelta``); raises :class:`JetStreamConfigError` naming the field. With
    ``positive``, zero is refused too."""
    return parse_duration(value, field_name, allow_zero=not positive) / 1e9


def nanoseconds(*, allow_zero: bool = True) -> Callable[[Any, str], int]:
    """The parser of a duration in nanoseconds (a spec field: what the JetStream API takes)."""
    return functools.partial(parse_duration, allow_zero=allow_zero)


def seconds_of(*, positive: bool = False) -> Callable[[Any, str], float]:
    """The parser of a duration argument in seconds (:func:`duration_seconds`); ``positive``: not zero."""
    return functools.partial(duration_seconds, positive=positive)
