"""Values written to a KV bucket: exactly the types whose stored bytes are unambiguous.

``bytes`` are stored as they are, ``str`` as UTF-8, and a dict, list, tuple, number or bool as
compact JSON. Anything else (a set, a ``datetime``, a ``Decimal``, an object) is refused, naming the
path inside the value: turning it into text (``str({1, 2})`` is ``"{1, 2}"``) would store
something no reader can parse back. JSON's own limits are enforced too: dict keys are strings,
numbers are finite.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from airflow_provider_jetstream.core.errors import SpecError

ALLOWED_VALUES = (
    "bytes, str, or JSON made of dicts with string keys, lists, finite numbers, bools and None "
    "(e.g. {'rate': 5}); convert other types yourself (a set to a sorted list, a datetime to ISO text)"
)


def _check_json(value: Any, path: str) -> None:
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


def encode_kv_value(value: Any, path: str = "value") -> bytes:
    """The bytes stored for a KV ``value``; :class:`SpecError` naming the path of anything else."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode()
    if value is None:
        raise SpecError(
            path, value, f"give a value to store: {ALLOWED_VALUES} (to delete a key, use the delete operator)"
        )
    _check_json(value, path)
    return json.dumps(value, separators=(",", ":"), allow_nan=False).encode()
