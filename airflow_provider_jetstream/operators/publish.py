"""``JetStreamPublishOperator``: publish many messages with bounded in-flight async acks, exactly once.

Each message carries a ``Nats-Msg-Id`` derived from ``msg_id`` (templated; by default
``<dag_id>/<run_id>/<task_id>/<map_index>/<index>``), so a retried task stores nothing twice within
the stream's duplicate window: the retry's acks come back ``duplicate`` and are counted as such.
The work is :meth:`JetStreamHook.publish <airflow_provider_jetstream.hooks.jetstream.JetStreamHook.apublish>`:
the shared engine :mod:`airflow_provider_jetstream.core.publish.engine` (the Spark writer's too), which
refuses reserved subjects before sending and checks every ack.

Lineage (:mod:`airflow_provider_jetstream.assets.lineage`): the OpenLineage output is the stream that
stored the messages, in the domain its PubAcks name; unless ``outlets`` are given, the operator's
``AssetAlias`` outlet gets an event for that stream's asset (extra: subject, first and last sequence).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from airflow_provider_jetstream.assets.lineage import server_of, stream_location
from airflow_provider_jetstream.core.errors import JetStreamConfigError
from airflow_provider_jetstream.core.publish.subjects import check_publish_subject
from airflow_provider_jetstream.core.values import positive_seconds
from airflow_provider_jetstream.hooks.args import INDEX, check_headers, msg_id_parts
from airflow_provider_jetstream.operators.base import JetStreamBaseOperator, as_bool
from airflow_provider_jetstream.utils.templates import is_resolved_at_run_time

__all__ = ["JetStreamPublishOperator", "check_headers", "msg_id_parts"]

DEFAULT_MSG_ID = "{{ dag.dag_id }}/{{ run_id }}/{{ task.task_id }}/{{ ti.map_index }}/" + INDEX


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
        self.declare_lineage_outlet()

    def _messages(self) -> Iterable[Any]:
        if self.messages_callable is not None:
            return self._called()
        return self.messages

    def _called(self) -> Iterator[Any]:
        """The callable's messages, called only once the hook starts sending (after its checks)."""
        yield from self.messages_callable(**self.op_kwargs)  # type: ignore[misc]

    def execute(self, context: Any) -> dict[str, Any]:
        result = self.get_hook().publish(
            self.subject,
            self._messages(),
            headers=self.headers,
            msg_id=self.msg_id or None,
            expected_stream=self.expected_stream or None,
            max_in_flight=self.max_in_flight,
            ack_timeout=self.ack_timeout,
            allow_double_store=as_bool("allow_double_store", self.allow_double_store),
            peer_domains=self.peer_domains,
            timeout=self.request_timeout,
            logger=self.log,
        )
        self._record_publish_lineage(context, result)
        return result

    def _record_publish_lineage(self, context: Any, result: dict[str, Any]) -> None:
        """Output: the stream the PubAcks name, in the domain they name (``_`` when the acks carry none:
        a server without a domain). Stored in several streams of several domains (a double store forced
        with ``allow_double_store``), the acks' stream/domain pairs are not in the summary: not recorded."""
        streams, domain = result.get("stream"), result.get("domain")
        streams = [streams] if isinstance(streams, str) else list(streams or [])
        if not streams or isinstance(domain, list):
            self.log.info("lineage not recorded: stored by %s in domains %s", streams or "no stream", domain)
            return
        try:
            server = server_of(self.get_hook().get_conn_config())
            outputs = [stream_location(server, domain, name) for name in streams]
            extra = {key: result.get(key) for key in ("subject", "first_seq", "last_seq")}
            self.record_lineage(context, [], outputs, extra=extra)
        except Exception as err:
            self.log.warning("lineage not recorded: %s: %s", type(err).__name__, err)
