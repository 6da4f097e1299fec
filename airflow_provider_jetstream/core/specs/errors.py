"""Errors of spec validation: each names the field (as a path), the value, and what is allowed."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

from airflow_provider_jetstream.core.errors import JetStreamConfigError


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class SpecError(JetStreamConfigError):
    """One invalid field of a spec; nothing was sent to a server.

    ``str(err)`` reads ``stream.max_msgs=-5 is not allowed: use an integer >= -1 (-1: unlimited)``.
    """

    def __init__(self, path: str, value: Any = None, allowed: str = "", *, message: str | None = None) -> None:
        self.path = path
        self.value = value
        self.allowed = allowed
        super().__init__(message or f"{path}={_show(value)} is not allowed: {allowed}")


class SpecErrors(JetStreamConfigError):
    """Several invalid fields of one spec, all reported at once (one per line)."""

    def __init__(self, errors: list[SpecError]) -> None:
        self.errors = errors
        lines = [str(e) for e in errors]
        head = f"{len(errors)} invalid fields:\n  " if len(errors) > 1 else ""
        super().__init__(head + "\n  ".join(lines))


def unknown_key(path: str, key: str, known: Iterable[str]) -> SpecError:
    """The error for a key the spec does not know, suggesting the closest known key."""
    known = sorted(set(known))
    match = difflib.get_close_matches(str(key), known, n=1, cutoff=0.6)
    hint = f"did you mean {match[0]!r}? " if match else ""
    return SpecError(
        f"{path}.{key}" if path else str(key),
        message=f"{path + '.' if path else ''}{key}: unknown field; {hint}known fields: {', '.join(known)}",
    )
