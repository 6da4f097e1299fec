"""Names and subjects: what the server accepts, checked before any request."""

from __future__ import annotations

import re
from typing import Any

from airflow_provider_jetstream.core.errors import SpecError

_NAME_BAD = re.compile(r"[\s.*>/\\]|[\x00-\x1f\x7f]")
_BUCKET_OK = re.compile(r"^[a-zA-Z0-9_-]+$")
_KEY_OK = re.compile(r"^[-/_=.a-zA-Z0-9]+$")
MAX_NAME = 255


def is_name(value: Any) -> bool:
    """Whether ``value`` is a stream, consumer or domain name: 1-255 printable characters without
    whitespace, ``.``, ``*``, ``>`` or path separators."""
    return isinstance(value, str) and 0 < len(value) <= MAX_NAME and not _NAME_BAD.search(value)


def domain_of(prefix: str | None) -> str | None:
    """The domain of a ``$JS.<domain>.API`` prefix; None for ``$JS.API`` or an imported prefix."""
    if prefix and prefix.startswith("$JS.") and prefix.endswith(".API") and prefix.count(".") == 2:
        return prefix.split(".")[1]
    return None


def validate_name(value: Any, path: str, what: str = "stream") -> str:
    """A stream, consumer or domain name (see :func:`is_name`)."""
    if not is_name(value):
        raise SpecError(
            path,
            value,
            f"a {what} name is 1-{MAX_NAME} printable characters without whitespace, '.', '*', '>', "
            "'/' or '\\' (e.g. 'orders', 'backup-test-leaf')",
        )
    return value


def validate_bucket(value: Any, path: str) -> str:
    """A KV bucket name: letters, digits, ``_`` and ``-`` (the KV convention of every client)."""
    if not isinstance(value, str) or not _BUCKET_OK.match(value):
        raise SpecError(path, value, "a bucket name uses only letters, digits, '_' and '-' (e.g. 'config')")
    return value


def validate_key(value: Any, path: str) -> str:
    """A KV key: letters, digits and ``-/_=.``; dots separate non-empty tokens (it is a subject:
    ``$KV.<bucket>.<key>``), so no leading, trailing or double ``.``."""
    if not isinstance(value, str) or not _KEY_OK.match(value) or "" in value.split("."):
        raise SpecError(
            path,
            value,
            "a key uses letters, digits and '-/_=.', and '.' only between non-empty parts (no leading, trailing "
            "or double '.'; e.g. 'site.a')",
        )
    return value


def subject_problem(subject: Any, *, wildcards: bool = True) -> str | None:
    """Why ``subject`` is not a valid subject (filter), or None if it is."""
    if not isinstance(subject, str) or not subject:
        return "a subject is a non-empty string"
    if re.search(r"\s", subject):
        return "a subject has no whitespace"
    tokens = subject.split(".")
    for i, token in enumerate(tokens):
        if not token:
            return "a subject has no empty tokens (no leading, trailing or double '.')"
        if ("*" in token and token != "*") or (">" in token and token != ">"):
            return "a wildcard '*' or '>' is a whole token (e.g. 'orders.*', 'orders.>')"
        if token == ">" and i != len(tokens) - 1:
            return "'>' may only be the last token"
        if token in ("*", ">") and not wildcards:
            return "no wildcards here: give a literal subject"
    return None


def validate_subject(value: Any, path: str, *, wildcards: bool = True) -> str:
    problem = subject_problem(value, wildcards=wildcards)
    if problem:
        raise SpecError(path, value, problem)
    return value


def subjects_collide(a: str, b: str) -> bool:
    """True if some literal subject matches both subject filters ``a`` and ``b``."""
    ta, tb = a.split("."), b.split(".")
    for i in range(max(len(ta), len(tb))):
        x = ta[i] if i < len(ta) else None
        y = tb[i] if i < len(tb) else None
        if x == ">" or y == ">":
            return x is not None and y is not None
        if x is None or y is None:
            return False
        if x != y and x != "*" and y != "*":
            return False
    return True
