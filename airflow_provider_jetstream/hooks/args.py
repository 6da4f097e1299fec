"""Argument checks JetStreamHook's methods make before anything is sent (operators and sensors reuse them).

Each raises a :class:`~airflow_provider_jetstream.core.errors.JetStreamConfigError` (a refusal)
naming the argument, the value and what is allowed. Also the message layout of a publish: headers,
``Nats-Msg-Id`` from a template, and the summary of the acks.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from airflow_provider_jetstream.core.errors import JetStreamConfigError, SpecError, SpecErrors
from airflow_provider_jetstream.core.manage.buckets import encode_value
from airflow_provider_jetstream.core.manage.specs.durations import duration_seconds
from airflow_provider_jetstream.core.names import validate_name, validate_subject
from airflow_provider_jetstream.core.publish.engine import Outgoing
from airflow_provider_jetstream.core.status.replication import UNREACHABLE_ORIGINS, VERIFY_ORIGIN, ReplicationWatch
from airflow_provider_jetstream.core.values import validate_choice, validate_count

MSG_ID_HEADER = "Nats-Msg-Id"
INDEX = "{index}"


def one_spec_error(check: Callable[..., Any], value: Any, path: str) -> Any:
    """``check(value, path)``, its :class:`SpecError` raised as :class:`SpecErrors` (what operators raise)."""
    try:
        return check(value, path)
    except SpecError as err:
        raise SpecErrors([err]) from None


def flag(name: str, value: Any) -> bool:
    """A boolean argument: ``True`` or ``False``, nothing else."""
    if not isinstance(value, bool):
        raise JetStreamConfigError(f"{name}={value!r} is not allowed: use True or False")
    return value


def peer_domains_arg(value: Any) -> list[str]:
    """``peer_domains``: None or a list of domain names."""
    if value in (None, ""):
        return []
    if not isinstance(value, (list, tuple)):
        raise SpecErrors([SpecError("peer_domains", value, "use a list of domain names, e.g. ['leaf']")])
    return [
        one_spec_error(lambda v, p: validate_name(v, p, what="domain"), d, f"peer_domains[{i}]")
        for i, d in enumerate(value)
    ]


def purge_request(name: Any, subject: Any, keep: Any, up_to_sequence: Any) -> dict[str, Any]:
    """The ``STREAM.PURGE`` request of a purge's arguments (see :meth:`JetStreamHook.apurge_stream`)."""
    one_spec_error(validate_name, name, "name")
    body: dict[str, Any] = {}
    if subject:
        body["filter"] = one_spec_error(validate_subject, subject, "subject")
    if keep not in (None, "") and up_to_sequence not in (None, ""):
        raise SpecErrors([SpecError("keep", keep, "give keep or up_to_sequence, not both")])
    for key, field, value, minimum in (("keep", "keep", keep, 0), ("seq", "up_to_sequence", up_to_sequence, 1)):
        if value in (None, ""):
            continue
        try:
            number = int(value)
        except (TypeError, ValueError):
            number = -1
        if number < minimum:
            raise SpecErrors([SpecError(field, value, f"use an integer >= {minimum}")])
        body[key] = number
    return body


def expected_revision_arg(value: Any) -> int | None:
    """A compare-and-set revision: None (no condition), or an integer >= 0 (0: the key must not exist)."""
    if value in (None, ""):
        return None
    try:
        number = int(value)
    except (TypeError, ValueError):
        number = -1
    if number < 0:
        raise SpecErrors(
            [SpecError("expected_revision", value, "use an integer >= 0 (0: only if the key does not exist)")]
        )
    return number


def replication_watch(
    stream: Any,
    *,
    sources: Any = None,
    max_lag: Any = 0,
    max_inactive: Any = 10.0,
    error_grace: Any = 30.0,
    verify_origin: Any = "auto",
    unreachable_origins: Any = "wait",
    unreachable_timeout: float | None = None,
) -> ReplicationWatch:
    """A :class:`ReplicationWatch` from checked arguments (durations: seconds, ``timedelta`` or text
    like ``"10s"``; ``sources``: None or a non-empty list of stream names)."""
    validate_choice(verify_origin, "verify_origin", VERIFY_ORIGIN)
    validate_choice(unreachable_origins, "unreachable_origins", UNREACHABLE_ORIGINS)
    inactive = duration_seconds(max_inactive, "max_inactive", positive=True)
    grace = duration_seconds(error_grace, "error_grace")
    validate_name(stream, "stream")
    if sources is not None:
        if isinstance(sources, str) or not sources:
            raise JetStreamConfigError(f"sources={sources!r} is not allowed: use a non-empty list of stream names")
        for name in sources:
            validate_name(name, "sources")
    lag = validate_count(max_lag, "max_lag")
    return ReplicationWatch(
        stream,
        lag or 0,
        inactive,
        grace,
        list(sources) if sources else None,
        verify_origin=verify_origin,
        unreachable_origins=unreachable_origins,
        unreachable_timeout=unreachable_timeout,
    )


# -- publishing -----------------------------------------------------------------------------------


def msg_id_parts(template: str) -> tuple[str, str]:
    """``(before, after)`` the ``{index}`` placeholder; one is appended when the template has none."""
    if INDEX not in template:
        template = f"{template}/{INDEX}"
    before, _, after = template.partition(INDEX)
    return before, after


def check_headers(headers: Any, field: str = "headers") -> dict[str, str] | None:
    """``headers`` if it is None or a mapping of header names to string values, else raise.

    A name is a non-empty string without whitespace or ``:``; a value a string without line breaks.
    """
    if headers is None:
        return None
    if not isinstance(headers, Mapping):
        raise JetStreamConfigError(
            f"{field}={headers!r} is not allowed: give a mapping of header names to string values, "
            "e.g. {'source': 'airflow'}"
        )
    for name, value in headers.items():
        if not isinstance(name, str) or not name or re.search(r"[\s:]", name):
            raise JetStreamConfigError(
                f"{field} name {name!r} is not allowed: a header name is a non-empty string without whitespace or ':'"
            )
        if not isinstance(value, str) or "\r" in value or "\n" in value:
            raise JetStreamConfigError(
                f"{field}[{name!r}]={value!r} is not allowed: a header value is a string without line breaks "
                "(convert numbers with str())"
            )
    return dict(headers)


def outgoing(
    subject: str, messages: Iterable[Any], headers: dict[str, str] | None, msg_id: str | None
) -> Iterator[Outgoing]:
    """The ``(subject, payload, headers)`` of each message, with its ``Nats-Msg-Id``."""
    base = dict(headers or {})
    before, after = msg_id_parts(msg_id) if msg_id else ("", "")
    for index, message in enumerate(messages):
        payload = message if isinstance(message, bytes) else encode_value(message)
        if msg_id:
            hdrs: dict[str, str] | None = base.copy()
            hdrs[MSG_ID_HEADER] = f"{before}{index}{after}"  # type: ignore[index]
        else:
            hdrs = base.copy() if base else None
        yield subject, payload, hdrs
