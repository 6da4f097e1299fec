"""The parsers of plain values: booleans, integers, numbers, seconds, choices, text and lists.

A parser is ``parse(value, field) -> the value to use``; it raises :class:`SpecError` naming the field,
the value and what is allowed (``max_unprocessed=-1 is not allowed: use an integer >= 0``). Booleans and
numbers also have text forms (``"true"``, ``"5"``): those are what a rendered template, a command
line, a Spark option or a connection form gives, so they are accepted where the value may be text
(``parse(value, field, text=True)``, see :func:`parse_value`) and refused where a Python caller
passes a Python value (a hook method's ``dry_run="yes"`` is a mistake, not a boolean).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from airflow_provider_jetstream.core.errors import SpecError, SpecErrors

Parser = Callable[..., Any]
F = TypeVar("F", bound=Callable[..., Any])

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


def reads_text(parse: F) -> F:
    """Mark a parser that takes ``text=True`` (it then also accepts the value's text forms)."""
    parse.reads_text = True  # type: ignore[attr-defined]
    return parse


def parse_value(parse: Parser, value: Any, field: str, *, text: bool = False) -> Any:
    """``parse(value, field)``; with ``text``, the text forms too where the parser has them."""
    if text and getattr(parse, "reads_text", False):
        return parse(value, field, text=True)
    return parse(value, field)


# -- booleans --------------------------------------------------------------------------------------


@reads_text
def boolean(value: Any, field: str, *, text: bool = False) -> bool:
    """``True`` or ``False``; with ``text`` also ``1``/``0`` and the spellings of :data:`BOOLEAN_TEXTS`."""
    if isinstance(value, bool):
        return value
    if text and isinstance(value, int) and value in (0, 1):
        return bool(value)
    if text and isinstance(value, str) and value.strip().lower() in BOOLEAN_TEXTS:
        return BOOLEAN_TEXTS[value.strip().lower()]
    raise SpecError(field, value, "use true or false")


# -- numbers ---------------------------------------------------------------------------------------


def _number_from_text(value: str, integer: bool) -> float | int | None:
    text = value.strip()
    if integer and text.lstrip("+-").isdigit():
        return int(text)  # exact: a sequence number can exceed a float's 2**53
    try:
        return float(text)
    except ValueError:
        return None


#: The widest number the JetStream API takes (a sequence is an unsigned 64-bit integer).
UINT64_MAX = 2**64 - 1
#: The widest limit or count the JetStream API takes (``max_msgs``, ``max_bytes``: signed 64-bit).
INT64_MAX = 2**63 - 1


def integer(minimum: int, maximum: int | None = None, hint: str = "") -> Parser:
    """An integer from ``minimum`` to ``maximum`` (default :data:`UINT64_MAX`); ``hint`` follows the
    bounds in the message.

    A Python ``int`` (not a bool), or an integral float; with ``text``, also its text (``"5"``,
    ``" 18446744073709551615 "`` exactly, ``"1e3"``).
    """
    top = UINT64_MAX if maximum is None else maximum
    bounds = f">= {minimum}" if top >= INT64_MAX else f"from {minimum} to {top}"

    @reads_text
    def parse(value: Any, field: str, *, text: bool = False) -> int:
        number: Any = value
        if text and isinstance(value, str):
            number = _number_from_text(value, integer=True)
        if isinstance(number, float) and math.isfinite(number) and number.is_integer():
            number = int(number)
        if isinstance(number, bool) or not isinstance(number, int):
            number = None
        if number is None or number < minimum:
            raise SpecError(field, value, f"use an integer {bounds}{hint}")
        if number > top:
            raise SpecError(field, value, f"use an integer from {minimum} to {top}{hint}")
        return number

    return parse


#: A count threshold: an integer >= 0.
count = integer(0)
#: A positive count (batch sizes, partitions, messages in flight): an integer >= 1.
positive_count = integer(1)


def number(minimum: float) -> Parser:
    """A finite number >= ``minimum`` (an int or float, not a bool; with ``text``, its text too)."""

    @reads_text
    def parse(value: Any, field: str, *, text: bool = False) -> float:
        number_: Any = value
        if text and isinstance(value, str):
            number_ = _number_from_text(value, integer=False)
        if isinstance(number_, bool) or not isinstance(number_, (int, float)):
            number_ = None
        if number_ is None or not math.isfinite(number_) or number_ < minimum:
            raise SpecError(field, value, f"use a finite number >= {minimum:g}")
        return float(number_)

    return parse


@reads_text
def fraction(value: Any, field: str, *, text: bool = False) -> float:
    """A share strictly between 0 and 1 (``0.2``: 20 %); with ``text``, its text too."""
    share: Any = value
    if text and isinstance(value, str):
        share = _number_from_text(value, integer=False)
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share < 1:
        raise SpecError(field, value, "use a number between 0 and 1, e.g. 0.2 for 20%")
    return float(share)


#: The longest wait or duration in seconds: what the JetStream API holds in signed 64-bit nanoseconds
#: (a consumer's ``ack_wait``...), and far less than what an event loop's timer overflows at.
MAX_SECONDS = INT64_MAX // 1_000_000_000


def seconds(*, allow_zero: bool = False) -> Parser:
    """A finite number of seconds > 0 (>= 0 with ``allow_zero``): every timeout and wait.

    Numbers and numeric strings (``"5"``); ``"abc"``, ``-1``, ``"inf"``, ``"nan"`` and booleans are
    refused (``inf`` or ``nan`` would let a request wait forever).
    """
    bound = ">= 0" if allow_zero else "> 0"

    def parse(value: Any, field: str) -> float:
        try:
            amount = float(value) if not isinstance(value, bool) else math.nan
        except (TypeError, ValueError):
            amount = math.nan
        if not math.isfinite(amount) or amount < 0 or (amount == 0 and not allow_zero):
            raise SpecError(field, value, f"use a finite number of seconds {bound}, e.g. 5")
        if amount > MAX_SECONDS:
            raise SpecError(field, value, f"use at most {MAX_SECONDS:.0f} seconds (292 years)")
        return amount

    return parse


# -- choices and text ------------------------------------------------------------------------------


def choice(options: Mapping[str, str] | Sequence[str], words: str | None = None) -> Parser:
    """One of ``options``: a sequence of the allowed values, or a mapping of spellings to values.

    Case and surrounding spaces do not matter; the value returned is the allowed value. The message
    lists them (``use one of 'auto', 'required', 'off'``), or says ``words`` instead.
    """
    by_spelling = dict(options) if isinstance(options, Mapping) else {o: o for o in options}
    lookup = {spelling.lower(): value for spelling, value in by_spelling.items()}
    values = list(dict.fromkeys(by_spelling.values()))
    if isinstance(options, Mapping):
        values.sort()
    allowed = words or f"use one of {', '.join(repr(v) for v in values)}"

    def parse(value: Any, field: str) -> str:
        if isinstance(value, str) and value.strip().lower() in lookup:
            return lookup[value.strip().lower()]
        raise SpecError(field, value, allowed)

    return parse


def text(value: Any, field: str) -> str:
    """Any string."""
    if not isinstance(value, str):
        raise SpecError(field, value, "use a string")
    return value


def non_empty_text(value: Any, field: str) -> str:
    """A string with something in it besides spaces."""
    if not isinstance(value, str) or not value.strip():
        raise SpecError(field, value, "use a non-empty string")
    return value


#: What a message id may be, said by every refusal of one (an argument or a row of a data column).
MESSAGE_ID_ALLOWED = (
    "a message id (Nats-Msg-Id) is non-empty text without line breaks: an empty one would turn deduplication "
    "off and store a retried message twice (e.g. 'run-1/7')"
)


def message_id(value: Any, field: str) -> str:
    """A message id (``Nats-Msg-Id``), or a template of them: never empty, blank or holding a line break, in an
    argument and in a data column alike (the stream deduplicates by it; an empty one turns that off)."""
    if not isinstance(value, str) or not value.strip() or "\n" in value or "\r" in value:
        raise SpecError(field, value, MESSAGE_ID_ALLOWED)
    return value


def anything(value: Any, field: str) -> Any:
    """Any value (an argument whose meaning a later step checks, such as a payload to encode)."""
    return value


def optional(parse: Parser) -> Parser:
    """``parse``, or None for None (an argument where None means "none", not "not given")."""

    def parse_optional(value: Any, field: str, *, text: bool = False) -> Any:
        return None if value is None else parse_value(parse, value, field, text=text)

    parse_optional.reads_text = getattr(parse, "reads_text", False)  # type: ignore[attr-defined]
    parse_optional.parses = parse  # type: ignore[attr-defined]  # the type of the value, when one is given
    return parse_optional


def list_of(parse_item: Parser, *, min_items: int = 0, words: str | None = None) -> Parser:
    """A list (or tuple) of items, each parsed (errors name ``field[i]``; all reported at once)."""

    @reads_text
    def parse(value: Any, field: str, *, text: bool = False) -> list[Any]:
        if not isinstance(value, (list, tuple)) or len(value) < min_items:
            raise SpecError(field, value, words or f"use a list{f' of at least {min_items}' if min_items else ''}")
        errors: list[SpecError] = []
        out = []
        for i, item in enumerate(value):
            try:
                out.append(parse_value(parse_item, item, f"{field}[{i}]", text=text))
            except (SpecError, SpecErrors) as refused:
                errors.extend(refused.errors)
        if errors:
            raise SpecErrors(errors)
        return out

    return parse


def string_map(value: Any, field: str) -> dict[str, str]:
    """A dict of non-empty string keys to string values (metadata); ``_nats.`` keys are the server's."""
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and k for k in value):
        raise SpecError(field, value, "use a dict of string keys to string values")
    bad = [k for k, v in value.items() if not isinstance(v, str)]
    if bad:
        raise SpecError(f"{field}.{bad[0]}", value[bad[0]], "metadata values are strings")
    reserved = [k for k in value if k.startswith("_nats.")]
    if reserved:
        raise SpecError(
            f"{field}.{reserved[0]}", value[reserved[0]], "keys starting with '_nats.' belong to the server"
        )
    return dict(value)


def instance_of(cls: type, words: str) -> Parser:
    """An instance of ``cls`` (an object a Python caller passes, such as a kept-up watch)."""

    def parse(value: Any, field: str) -> Any:
        if not isinstance(value, cls):
            raise SpecError(field, value, words)
        return value

    return parse


# -- values as bytes (a KV value, a message's payload) -------------------------------------------------
# Exactly the types whose stored bytes are unambiguous: bytes as they are, str as UTF-8, and a dict, list,
# tuple, number, bool or None as compact JSON. Anything else is refused, naming the path inside the value:
# turning it into text (``str({1, 2})`` is ``"{1, 2}"``) would store something no reader can parse back.

ALLOWED_VALUES = (
    "bytes, str, or JSON made of dicts with string keys, lists, finite numbers, bools and None "
    "(e.g. {'rate': 5}); convert other types yourself (a set to a sorted list, a datetime to ISO text)"
)


def _check_json(value: Any, path: str) -> None:
    """Raise :class:`SpecError` naming the path of the first part of ``value`` that has no JSON form."""
    if value is None or isinstance(value, (str, bool, int)):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise SpecError(path, value, "JSON has no NaN or infinity: use a finite number")
        return
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise SpecError(path, value, f"JSON object keys are strings; key {key!r} is not")
            _check_json(item, f"{path}[{key!r}]")
        return
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _check_json(item, f"{path}[{i}]")
        return
    raise SpecError(path, value, f"a {type(value).__name__} has no JSON form; use {ALLOWED_VALUES}")


def json_map(value: Any, field: str) -> dict[str, Any]:
    """A dict with string keys whose values have a JSON form (kwargs that travel to the triggerer)."""
    if not isinstance(value, Mapping):
        raise SpecError(field, value, "use a dict of keyword arguments with string keys, e.g. {'site': 'lyon'}")
    _check_json(value, field)
    return dict(value)


check_json = _check_json


def value_bytes(value: Any, field: str) -> bytes:
    """The bytes of a value (see above); :class:`SpecError` naming the path inside it of anything else."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode()
    _check_json(value, field)
    return json.dumps(value, separators=(",", ":"), allow_nan=False).encode()
