"""``JetStreamPublishOperator``: publish many messages with bounded in-flight async acks, exactly once.

Each message carries a ``Nats-Msg-Id`` derived from ``msg_id`` (templated; by default
``<dag_id>/<run_id>/<task_id>/<map_index>/<index>``), so a retried task stores nothing twice within
the stream's duplicate window: the retry's acks come back ``duplicate`` and are counted as such.
Messages go through the shared engine :mod:`airflow_provider_jetstream.core.publisher` (the Spark
writer's too), which refuses reserved subjects before sending and checks every ack.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from nats.aio.client import Client

from airflow_provider_jetstream.core.errors import JetStreamConfigError, JetStreamPublishError
from airflow_provider_jetstream.core.jetstream_api import JetStreamApi
from airflow_provider_jetstream.core.keyvalue import encode_value
from airflow_provider_jetstream.core.publisher import Outgoing, PublishSummary, ack_problems, publish_messages
from airflow_provider_jetstream.core.specs.names import domain_of
from airflow_provider_jetstream.core.subjects import check_publish_subject
from airflow_provider_jetstream.core.topology_guard import guard_double_store
from airflow_provider_jetstream.core.values import as_bool, positive_seconds
from airflow_provider_jetstream.hooks.jetstream import JetStreamHook
from airflow_provider_jetstream.operators.base import JetStreamBaseOperator
from airflow_provider_jetstream.utils.templates import is_resolved_at_run_time

__all__ = ["JetStreamPublishOperator", "check_headers", "msg_id_parts"]

MSG_ID_HEADER = "Nats-Msg-Id"
INDEX = "{index}"
DEFAULT_MSG_ID = "{{ dag.dag_id }}/{{ run_id }}/{{ task.task_id }}/{{ ti.map_index }}/" + INDEX


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


def _outgoing(
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


class JetStreamPublishOperator(JetStreamBaseOperator):
    """Publish messages to a subject, each once (``Nats-Msg-Id``), with bounded in-flight acks.

    :param subject: the subject: literal (no whitespace, empty tokens or wildcards) and outside the
        reserved subject spaces (``$JS.``, ``$KV.``, ``$O.``, ``$SYS.``, ``_INBOX.``, the connection's
        and this operator's ``api_prefix``): a message to ``$JS.API.STREAM.DELETE.x`` would delete a
        stream. Checked when the DAG is parsed, and once rendered before anything is sent.
    :param messages: the payloads: bytes, str, or JSON-serializable values (an XComArg works too).
    :param messages_callable: instead of ``messages``, a callable returning an iterable (a generator
        streams large volumes); called with ``op_kwargs``.
    :param headers: headers on every message: a mapping of header names to strings.
    :param msg_id: template of each message's ``Nats-Msg-Id``; ``{index}`` is the message's index
        (appended if missing). Default ``<dag_id>/<run_id>/<task_id>/<map_index>/{index}``; ``None``
        or ``""`` sends none (no deduplication).
    :param max_in_flight: most messages published but not yet acked. Default 4000.
    :param expected_stream: the stream that must store them (``Nats-Expected-Stream``).
    :param domain: the domain whose stream must store them: every ack is checked, and before
        publishing, the double-store guard refuses a subject that streams in other connected domains
        of this account also store (``allow_double_store=True`` publishes anyway).
    XCom: ``{"count", "stored", "duplicates", "first_seq", "last_seq", "stream", "domain", "rate"}``.
    """

    template_fields: Sequence[str] = (
        *JetStreamBaseOperator.template_fields,
        "subject",
        "messages",
        "headers",
        "msg_id",
        "expected_stream",
        "op_kwargs",
        "peer_domains",
    )

    def __init__(
        self,
        *,
        subject: str,
        messages: Any = None,
        messages_callable: Callable[..., Iterable[Any]] | None = None,
        op_kwargs: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        msg_id: str | None = DEFAULT_MSG_ID,
        max_in_flight: int = 4000,
        ack_timeout: float = 30.0,
        expected_stream: str | None = None,
        allow_double_store: bool = False,
        peer_domains: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if (messages is None) == (messages_callable is None):
            raise JetStreamConfigError("give messages or messages_callable (exactly one)")
        if messages_callable is not None and not callable(messages_callable):
            raise JetStreamConfigError(f"messages_callable={messages_callable!r} is not callable")
        ack_timeout = positive_seconds("ack_timeout", ack_timeout)
        if not isinstance(max_in_flight, int) or max_in_flight < 1:
            raise JetStreamConfigError(f"max_in_flight={max_in_flight!r} is not allowed: use an integer >= 1")
        if not is_resolved_at_run_time(subject):
            check_publish_subject(
                subject, "subject", [] if is_resolved_at_run_time(self.api_prefix) else [self.api_prefix]
            )
        if not is_resolved_at_run_time(headers):
            check_headers(headers)
        self.subject = subject
        self.messages = messages
        self.messages_callable = messages_callable
        self.op_kwargs = op_kwargs or {}
        self.headers = headers
        self.msg_id = msg_id
        self.max_in_flight = max_in_flight
        self.ack_timeout = ack_timeout
        self.expected_stream = expected_stream
        self.allow_double_store = allow_double_store
        self.peer_domains = peer_domains

    def _messages(self) -> Iterable[Any]:
        if self.messages_callable is not None:
            return self.messages_callable(**self.op_kwargs)
        if isinstance(self.messages, (str, bytes)):
            return [self.messages]
        return self.messages

    def _account_api_prefixes(self, hook: JetStreamHook) -> list[str]:
        """The JetStream API prefixes publishing must stay out of: the operator's, the connection's."""
        config = hook.get_conn_config()
        prefixes = [self.api_prefix, config.api_prefix, hook.resolve_api_prefix()]
        return [p for p in dict.fromkeys(prefixes) if p]

    def execute(self, context: Any) -> dict[str, Any]:
        hook = self.get_hook()
        prefixes = self._account_api_prefixes(hook)
        # Refused before anything is sent, once rendered: a templated subject can be anything.
        check_publish_subject(self.subject, "subject", prefixes)
        headers = check_headers(self.headers)
        messages = self._messages()

        async def work(nc: Client, api: JetStreamApi, hook: JetStreamHook) -> PublishSummary:
            await guard_double_store(
                nc,
                target_prefix=api.prefix,
                subjects=[self.subject],
                what=f"publish to {self.subject!r}",
                peer_domains=self.peer_domains_for(hook),
                allow=as_bool("allow_double_store", self.allow_double_store),
                timeout=self.request_timeout,
                logger=self.log,
            )
            base = dict(headers or {})
            if self.expected_stream:
                base["Nats-Expected-Stream"] = self.expected_stream
            return await publish_messages(
                nc,
                _outgoing(self.subject, messages, base or None, self.msg_id or ""),
                max_in_flight=self.max_in_flight,
                ack_timeout=self.ack_timeout,
                api_prefixes=prefixes,
                what=f"publish to {self.subject!r}",
            )

        summary = self.run_api(work)
        return self._report(summary, hook)

    def _report(self, summary: PublishSummary, hook: JetStreamHook) -> dict[str, Any]:
        target_domain = domain_of(hook.resolve_api_prefix())
        problems = ack_problems(summary, target_domain=target_domain, expected_stream=self.expected_stream or None)
        if problems:
            raise JetStreamPublishError(f"publish to {self.subject!r}: " + "; ".join(problems))
        where = summary.streams
        rate = summary.count / summary.seconds if summary.seconds else None
        streams = sorted({s for s, _ in where if s})
        domains = sorted({d for _, d in where if d})
        self.log.info(
            "published %d messages to %r: %d stored, %d duplicates, seq %s..%s, %.0f msg/s",
            summary.count,
            self.subject,
            summary.stored,
            summary.duplicates,
            summary.first_seq,
            summary.last_seq,
            rate or 0,
        )
        return {
            "count": summary.count,
            "stored": summary.stored,
            "duplicates": summary.duplicates,
            "first_seq": summary.first_seq,
            "last_seq": summary.last_seq,
            "subject": self.subject,
            "stream": streams[0] if len(streams) == 1 else streams,
            "domain": domains[0] if len(domains) == 1 else (domains or target_domain),
            "rate": round(rate, 1) if rate else None,
        }
