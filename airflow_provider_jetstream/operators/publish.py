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
from airflow_provider_jetstream.core.arguments import Args
from airflow_provider_jetstream.core.publish.messages import INDEX
from airflow_provider_jetstream.core.signatures.operations import PUBLISH, SUBJECT_OUTSIDE_API
from airflow_provider_jetstream.core.signatures.operator_only import PUBLISH_FROM_CALLABLE, PUBLISHED_MESSAGES
from airflow_provider_jetstream.core.signatures.shared import OPERATOR
from airflow_provider_jetstream.operators.base import JetStreamBaseOperator

__all__ = ["JetStreamPublishOperator"]

DEFAULT_MSG_ID = "{{ dag.dag_id }}/{{ run_id }}/{{ task.task_id }}/{{ ti.map_index }}/" + INDEX

#: The publish operation, with the operator's own defaults (a message id per run, no ``messages`` when a
#: callable makes them) and its message callable.
_PUBLISH = Args(
    "publish",
    {
        **PUBLISH.args,
        "messages": PUBLISH.args["messages"].but(default=None),
        "msg_id": PUBLISH.args["msg_id"].but(default=DEFAULT_MSG_ID),
    },
)


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
        sends none (no deduplication); ``""`` (also rendered) is refused.
    :param max_in_flight: most messages published but not yet acked. Default 4000.
    :param expected_stream: the stream that must store them (``Nats-Expected-Stream``).
    :param fast_ingest: publish in fast-ingest batches, one ack per flow window: None (default) when the
        stream storing ``subject`` has ``allow_batched`` (nats-server 2.14+), False never.
    :param domain: the domain whose stream must store them: every ack is checked, and before
        publishing, the double-store guard refuses a subject that streams in other connected domains
        of this account also store (``allow_double_store=True`` publishes anyway).

    XCom: ``{"count", "stored", "duplicates", "first_seq", "last_seq", "stream", "domain", "rate", "batches",
    "acks"}`` (``batches``: fast-ingest batches sent; ``acks``: acks received).
    """

    arguments: Args = (OPERATOR + _PUBLISH + PUBLISH_FROM_CALLABLE).ruled(PUBLISHED_MESSAGES, SUBJECT_OUTSIDE_API)
    template_fields: Sequence[str] = arguments.template_fields()

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
        fast_ingest: bool | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.subject = subject
        self.messages = messages
        self.messages_callable = messages_callable
        self.op_kwargs = op_kwargs
        self.headers = headers
        self.msg_id = msg_id
        self.max_in_flight = max_in_flight
        self.ack_timeout = ack_timeout
        self.expected_stream = expected_stream
        self.allow_double_store = allow_double_store
        self.peer_domains = peer_domains
        self.fast_ingest = fast_ingest
        self.declare_lineage_outlet()

    def _messages(self, args: dict[str, Any]) -> Iterable[Any]:
        if args["messages_callable"] is not None:
            return self._called(args["messages_callable"], args["op_kwargs"] or {})
        return args["messages"]

    @staticmethod
    def _called(make: Callable[..., Iterable[Any]], kwargs: dict[str, Any]) -> Iterator[Any]:
        """The callable's messages, called only once the hook starts sending (after its checks)."""
        yield from make(**kwargs)

    def execute(self, context: Any) -> dict[str, Any]:
        args = self.checked_arguments()
        result = self.get_hook().publish(
            args["subject"],
            self._messages(args),
            headers=args["headers"],
            msg_id=args["msg_id"],
            expected_stream=args["expected_stream"],
            max_in_flight=args["max_in_flight"],
            ack_timeout=args["ack_timeout"],
            allow_double_store=args["allow_double_store"],
            peer_domains=args["peer_domains"],
            fast_ingest=args["fast_ingest"],
            timeout=args["request_timeout"],
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
