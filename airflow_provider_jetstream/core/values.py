"""Plain values as DAG authors, connection forms and job arguments write them: one parser each for
booleans and numbers (durations are :mod:`airflow_provider_jetstream.core.manage.specs.durations`)."""

from __future__ import annotations

import math
from typing import Any

from airflow_provider_jetstream.core.errors import JetStreamConfigError

#: The texts a boolean may be written as (any case, surrounding spaces ignored).
BOOLEAN_TEXTS = {
    "true": True,
    "yes": True,
    "on": True,
    "1": True,
    "false": False,
    "no": False,
    "off": False,
    "0": False,
}


def bool_or_none(value: Any) -> bool | None:
    """``value`` as a boolean: ``True``/``False``, ``1``/``0``, or a text of :data:`BOOLEAN_TEXTS`
    (a rendered template, a form field); None for anything else."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        return BOOLEAN_TEXTS.get(value.strip().lower())
    return None


def as_bool(name: str, value: Any, problem: str = "is not allowed") -> bool:
    """``value`` as a boolean (see :func:`bool_or_none`); anything else is refused, naming ``name``
    (``<name>=<value> <problem>: use true or false``)."""
    parsed = bool_or_none(value)
    if parsed is None:
        raise JetStreamConfigError(f"{name}={value!r} {problem}: use true or false")
    return parsed


def as_number(name: str, value: Any, *, minimum: float, integer: bool = False) -> float:
    """``value`` as a finite number (an integer if ``integer``) >= ``minimum``, else a clear error."""
    number: float | None
    try:
        if integer and isinstance(value, str) and value.strip().lstrip("+-").isdigit():
            number = int(value)  # exact: a sequence number can exceed a float's 2**53
        else:
            number = float(value) if not isinstance(value, bool) else None
    except (TypeError, ValueError):
        number = None
    if isinstance(number, float) and integer:
        number = int(number) if math.isfinite(number) and number.is_integer() else None
    if number is None or not math.isfinite(number) or number < minimum:
        kind = "an integer" if integer else "a finite number"
        raise JetStreamConfigError(f"{name}={value!r} is not allowed: use {kind} >= {minimum:g}")
    return number


def positive_seconds(name: str, value: Any) -> float:
    """``value`` as a finite number of seconds > 0 (numbers and numeric strings), else a clear error.

    Used for every timeout: ``"abc"``, ``-1``, ``0``, ``"inf"``, ``"nan"`` and booleans are refused,
    naming ``name``, the value and what is allowed.
    """
    try:
        seconds = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        seconds = math.nan
    if not math.isfinite(seconds) or seconds <= 0:
        raise JetStreamConfigError(f"{name}={value!r} is not allowed: use a finite number of seconds > 0, e.g. 5")
    return seconds


def validate_choice(value: Any, field_name: str, allowed: tuple[str, ...]) -> str:
    """Return ``value`` if it is one of ``allowed``, else raise naming the field and the choices."""
    if value not in allowed:
        raise JetStreamConfigError(
            f"{field_name}={value!r} is not allowed: use one of {', '.join(repr(a) for a in allowed)}"
        )
    return value


def validate_count(value: Any, field_name: str, allow_none: bool = False) -> int | None:
    """Return a count threshold (an integer >= 0, or None when allowed), or raise naming the field."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        allowed = "an integer >= 0" + (" or None" if allow_none else "")
        raise JetStreamConfigError(f"{field_name}={value!r} is not allowed: use {allowed}")
    return value
