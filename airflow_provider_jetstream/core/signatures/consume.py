"""The signatures of fetching and consuming messages in tasks: the hook's ``fetch`` / ``consume``
(:data:`FETCH`, :data:`CONSUME`) and ``JetStreamConsumeOperator``'s own arguments (:data:`CONSUME_OPERATOR`)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from airflow_provider_jetstream.core.arguments import (
    DEFAULT,
    REFUSE,
    REQUIRED,
    VALUE,
    Arg,
    Args,
    Rule,
    exclusive,
    requires,
)
from airflow_provider_jetstream.core.arguments.durations import parse_instant
from airflow_provider_jetstream.core.arguments.names import (
    consumer_name,
    delivery_subject,
    stream_filter,
    stream_name,
    subject_list,
)
from airflow_provider_jetstream.core.arguments.values import boolean, choice, integer, optional, seconds
from airflow_provider_jetstream.core.errors import SpecError
from airflow_provider_jetstream.core.signatures.shared import STREAM

#: The most messages one pull request may ask for here (the server's ``max_request_batch`` may be lower).
MAX_BATCH = 10_000
#: What the operator does when the function's results exceed ``max_xcom_bytes``.
RESULTS_OVERFLOW = ("fail", "trim")

_DOTTED = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)+$")


def _instant_text(value: Any, field: str) -> str:
    return parse_instant(value, field)


def _no_start_with_a_durable(values: Mapping[str, Any], prefix: str) -> None:
    for name in ("start_seq", "start_time"):
        if values[name] is not None and values["consumer"] is not None:
            raise SpecError(
                f"{prefix}{name}",
                values[name],
                "only without a consumer: a durable consumer resumes where its acks left it (its start is declared)",
            )


_READ = {
    "stream": STREAM,
    "consumer": Arg(
        consumer_name,
        None,
        REFUSE,
        "a durable pull consumer the DAG declared (never created here); default None: an ephemeral read, no acks",
        templated=True,
    ),
    "filter_subjects": Arg(
        subject_list(stream_filter),
        None,
        REFUSE,
        "only these subjects (wildcards allowed; one may be a string); default every subject",
        templated=True,
    ),
    "max_wait": Arg(seconds(), 5.0, VALUE, "seconds a pull waits for its batch to fill; default 5", templated=True),
    "start_seq": Arg(integer(1), None, REFUSE, "an ephemeral read's first sequence; default 1", templated=True),
    "start_time": Arg(_instant_text, None, REFUSE, "an ephemeral read's first time (ISO or datetime)", templated=True),
}
_READ_RULES = [
    exclusive("start_seq", "start_time", "give one start of the read"),
    Rule(("consumer", "start_seq", "start_time"), _no_start_with_a_durable, "a start only without a consumer"),
]

#: ``JetStreamHook.fetch``: one batch of a durable consumer or an ephemeral read.
FETCH = Args(
    "fetch",
    {
        **_READ,
        "batch_size": Arg(integer(1, MAX_BATCH), REQUIRED, VALUE, f"messages at most, 1 to {MAX_BATCH}"),
        "no_wait": Arg(boolean, False, VALUE, "return at once with the messages there are now; default False"),
    },
    _READ_RULES,
)
#: ``JetStreamHook.consume``: batch after batch, one held at a time.
CONSUME = Args(
    "consume",
    {
        **_READ,
        "batch_size": Arg(
            integer(1, MAX_BATCH), 100, VALUE, f"messages per pull, 1 to {MAX_BATCH}; default 100", templated=True
        ),
        "stop_when_empty": Arg(boolean, False, VALUE, "end after a pull that brought nothing; default False"),
    },
    _READ_RULES,
)


def _function(value: Any, field: str) -> Any:
    """A callable, or the dotted path of one (``package.module.function``), imported when the task runs."""
    if callable(value) or (isinstance(value, str) and _DOTTED.match(value)):
        return value
    raise SpecError(field, value, "give a callable or its importable dotted path, e.g. 'my_pkg.tasks.handle'")


def _exception_classes(value: Any, field: str) -> list[Any]:
    if not isinstance(value, (list, tuple)):
        value = [value]
    out = []
    for i, item in enumerate(value):
        is_class = isinstance(item, type) and issubclass(item, BaseException)
        if not is_class and not (isinstance(item, str) and _DOTTED.match(item)):
            raise SpecError(f"{field}[{i}]", item, "give exception classes or their dotted paths, e.g. 'my.BadInput'")
        out.append(item)
    return out


def _positional(value: Any, field: str) -> list[Any]:
    if not isinstance(value, (list, tuple)):
        raise SpecError(field, value, "use a list of positional arguments")
    return list(value)


def _keywords(value: Any, field: str) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise SpecError(field, value, "use a dict of keyword arguments")
    return dict(value)


def _one_function(values: Mapping[str, Any], prefix: str) -> None:
    if (values["apply_function"] is None) == (values["apply_function_batch"] is None):
        raise SpecError(
            f"{prefix}apply_function",
            values["apply_function"],
            "give apply_function (called per message) or apply_function_batch (per batch): exactly one",
        )


def _dead_letter_needs_acks(values: Mapping[str, Any], prefix: str) -> None:
    if values["dead_letter_stream"] is not None and not values["term_on"]:
        raise SpecError(
            f"{prefix}dead_letter_stream",
            values["dead_letter_stream"],
            "messages are dead-lettered when terminated: name the exceptions that terminate them in term_on",
        )


#: ``JetStreamConsumeOperator``'s own arguments (besides :data:`CONSUME`'s stream, consumer and reading ones).
CONSUME_OPERATOR = Args(
    "consume operator",
    {
        "apply_function": Arg(
            optional(_function), None, REFUSE, "called with each message (a callable or a dotted path)"
        ),
        "apply_function_batch": Arg(
            optional(_function), None, REFUSE, "called with each batch (a list of messages) instead"
        ),
        "apply_function_args": Arg(optional(_positional), None, DEFAULT, "more positional arguments", templated=True),
        "apply_function_kwargs": Arg(optional(_keywords), None, DEFAULT, "keyword arguments", templated=True),
        "max_messages": Arg(integer(1), 1000, VALUE, "messages at most per run; default 1000", templated=True),
        "term_on": Arg(
            optional(_exception_classes), None, DEFAULT, "exceptions that terminate a message instead of a nak"
        ),
        "dead_letter_stream": Arg(
            stream_name, None, REFUSE, "stream receiving a copy of each terminated message", templated=True
        ),
        "dead_letter_subject": Arg(
            delivery_subject,
            None,
            REFUSE,
            "their subject; default <dead_letter_stream>.<stream>.<consumer>",
            templated=True,
        ),
        "nak_delay": Arg(seconds(), 1.0, VALUE, "redelivery delay after a first failure; doubles; default 1"),
        "nak_max_delay": Arg(seconds(), 60.0, VALUE, "longest redelivery delay; default 60"),
        "return_results": Arg(boolean, False, VALUE, "put the function's results in the XCom; default False"),
        "max_xcom_bytes": Arg(integer(1), 49152, VALUE, "the results' JSON size at most; default 48 KiB"),
        "results_overflow": Arg(
            choice(RESULTS_OVERFLOW), "fail", VALUE, "fail (default) or trim: keep the first results that fit"
        ),
    },
    [
        Rule(("apply_function", "apply_function_batch"), _one_function, "apply_function or apply_function_batch"),
        Rule(("dead_letter_stream", "term_on"), _dead_letter_needs_acks, "a dead-letter stream needs term_on"),
        requires(
            "dead_letter_subject", "dead_letter_stream", "give dead_letter_stream too (the stream that stores it)"
        ),
    ],
)

__all__ = ["CONSUME", "CONSUME_OPERATOR", "FETCH", "MAX_BATCH", "RESULTS_OVERFLOW"]
