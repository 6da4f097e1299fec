"""The one parser of numbers: exact integers, finite numbers, clear refusals."""

from __future__ import annotations

import pytest

from airflow_provider_jetstream.core.arguments.values import integer as integer_parser
from airflow_provider_jetstream.core.arguments.values import number
from airflow_provider_jetstream.core.errors import JetStreamConfigError


def as_number(name: str, value: object, *, minimum: float, integer: bool = False) -> float:
    """The numbers' parsers, given text as a command line or Spark option gives it."""
    parse = integer_parser(int(minimum)) if integer else number(minimum)
    return parse(value, name, text=True)


def test_integers_in_text_are_exact_beyond_a_floats_precision() -> None:
    assert as_number("endSeq", "9007199254740993", minimum=1, integer=True) == 9007199254740993
    assert as_number("endSeq", " 18446744073709551615 ", minimum=1, integer=True) == 2**64 - 1
    assert as_number("n", "1e3", minimum=1, integer=True) == 1000


@pytest.mark.parametrize(
    ("value", "integer", "message"),
    [
        ("1.5", True, "n='1.5' is not allowed: use an integer >= 1"),
        ("0", True, "n='0' is not allowed: use an integer >= 1"),
        ("nan", False, "n='nan' is not allowed: use a finite number >= 1"),
        ("inf", False, "n='inf' is not allowed: use a finite number >= 1"),
        (True, True, "n=True is not allowed: use an integer >= 1"),
    ],
)
def test_refusals_name_the_field_the_value_and_what_is_allowed(value: object, integer: bool, message: str) -> None:
    with pytest.raises(JetStreamConfigError) as err:
        as_number("n", value, minimum=1, integer=integer)
    assert str(err.value) == message
