"""``JetStreamPublishOperator``: publish many messages with bounded in-flight async acks, exactly once.

Each message carries a ``Nats-Msg-Id`` derived from ``msg_id`` (templated; by default
``<dag_id>/<run_id>/<task_id>/<map_index>/<index>``), so a retried task stores nothing twice within
the stream's duplicate window: the retry's acks come back ``duplicate`` and are counted as such.
The work is :meth:`JetStreamPublishHook.publish
<airflow_provider_jetstream.hooks.publish.JetStreamPublishHook.apublish>`: the shared engine
:mod:`airflow_provider_jetstream.core.publish.engine` (the Spark writer's too), which refuses reserved
subjects before sending and checks every ack. Its tuning is :class:`PublishOptions` (``options=``).

Lineage (:mod:`airflow_provider_jetstream.assets.lineage`): the OpenLineage output is the stream that
stored the messages, in the domain its PubAcks name; unless ``outlets`` are given, the operator's
``AssetAlias`` outlet gets an event for that stream's asset (extra: subject, first and last sequence).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from airflow_provider_jetstream.assets.lineage import server_of, stream_location
from airflow_provider_jetstream.core.arguments import Args
from airflow_provider_jetstream.core.arguments.options import options_arg
from airflow_provider_jetstream.core.publish.messages import INDEX
from airflow_provider_jetstream.core.signatures.operations import PUBLISH, SUBJECT_OUTSIDE_API
from airflow_provider_jetstream.core.signatures.operator_only import PUBLISH_FROM_FUNCTION, PUBLISHED_MESSAGES
from airflow_provider_jetstream.core.signatures.options import PublishOptions
from airflow_provider_jetstream.core.signatures.shared import OPERATOR
from airflow_provider_jetstream.hooks.publish import JetStreamPublishHook
from airflow_provider_jetstream.operators.base import JetStreamBaseOperator

__all__ = ["JetStreamPublishOperator", "PublishOptions"]

DEFAULT_MSG_ID = "{{ dag.dag_id }}/{{ run_id }}/{{ task.task_id }}/{{ ti.map_index }}/" + INDEX

#: The publish operation, with the operator's own defaults (a message id per run, no ``messages`` when a
#: function returns them), its tuning in ``options``.
_PUBLISH = Args(
    "publish",
    {
        **PUBLISH.without(*PublishOptions.arguments.args).args,
        "messages": PUBLISH.args["messages"].but(default=None),
        "msg_id": PUBLISH.args["msg_id"].but(default=DEFAULT_MSG_ID),
        "options": options_arg(PublishOptions, "PublishOptions or a dict of its fields; default: every default"),
    },
)


class JetStreamPublishOperator(JetStreamBaseOperator):
    """Publish messages to a subject, each once (``Nats-Msg-Id``), with bounded in-flight acks.

    :param subject: the subject: literal (no whitespace, empty tokens or wildcards) and outside the
        reserved subject spaces (``$JS.``, ``$KV.``, ``$O.``, ``$SYS.``, ``_INBOX.``, the connection's
        and this operator's ``api_prefix``): a message to ``$JS.API.STREAM.DELETE.x`` would delete a
        stream. Checked when the DAG is parsed, and once rendered before anything is sent.
    :param messages: the payloads: bytes, str, or JSON-serializable values (an XComArg works too).
    :param messages_function: instead of ``messages``, a function returning an iterable (a generator
        streams large volumes); called with ``messages_function_kwargs``.
    :param messages_function_kwargs: its keyword arguments (templated).
    :param headers: headers on every message: a mapping of header names to strings.
    :param msg_id: template of each message's ``Nats-Msg-Id``; ``{index}`` is the message's index
        (appended if missing). Default ``<dag_id>/<run_id>/<task_id>/<map_index>/{index}``; ``None``
        sends none (no deduplication); ``""`` (also rendered) is refused.
    :param expected_stream: the stream that must store them (``Nats-Expected-Stream``).
    :param options: :class:`~airflow_provider_jetstream.core.signatures.options.PublishOptions` or a dict of
        its fields: ``max_in_flight`` (most messages published and not yet acked; default 4000), ``ack_timeout``
        (seconds a message may wait for its ack; default 30), ``fast_ingest`` (fast-ingest batches, one ack per
        flow window: None, the default, when the stream storing ``subject`` has ``allow_batched``, nats-server
        2.14+; False never), ``allow_double_store``, ``peer_domains``.
    :param domain: the domain whose stream must store them: every ack is checked, and before
        publishing, the double-store guard refuses a subject that streams in other connected domains
        of this account also store (``options={"allow_double_store": True}`` publishes anyway).

    XCom: ``{"count", "stored", "duplicates", "first_seq", "last_seq", "stream", "domain", "rate", "batches",
    "acks"}`` (``batches``: fast-ingest batches sent; ``acks``: acks received).
    """

    hook_class = JetStreamPublishHook
    arguments: Args = (OPERATOR + _PUBLISH + PUBLISH_FROM_FUNCTION).ruled(PUBLISHED_MESSAGES, SUBJECT_OUTSIDE_API)

    def __init__(
        self,
        *,
        subject: str,
        messages: Any = None,
        messages_function: Callable[..., Iterable[Any]] | None = None,
        messages_function_kwargs: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        msg_id: str | None = DEFAULT_MSG_ID,
        expected_stream: str | None = None,
        options: PublishOptions | dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.subject = subject
        self.messages = messages
        self.messages_function = messages_function
        self.messages_function_kwargs = messages_function_kwargs
        self.headers = headers
        self.msg_id = msg_id
        self.expected_stream = expected_stream
        self.options = options
        self.declare_lineage_outlet()

    def _messages(self, args: dict[str, Any]) -> Iterable[Any]:
        if args["messages_function"] is not None:
            return self._called(args["messages_function"], args["messages_function_kwargs"] or {})
        return args["messages"]

    @staticmethod
    def _called(make: Callable[..., Iterable[Any]], kwargs: dict[str, Any]) -> Iterator[Any]:
        """The function's messages, called only once the hook starts sending (after its checks)."""
        yield from make(**kwargs)

    def execute(self, context: Any) -> dict[str, Any]:
        args = self.checked_arguments()
        result = self.get_hook().publish(
            args["subject"],
            self._messages(args),
            headers=args["headers"],
            msg_id=args["msg_id"],
            expected_stream=args["expected_stream"],
            **args["options"].as_kwargs(),
            request_timeout=args["request_timeout"],
            logger=self.log,
        )
        self._record_publish_lineage(context, result)
        return result

    def _record_publish_lineage(self, context: Any, result: dict[str, Any]) -> None:
        """Output: the stream the PubAcks name, in the domain they name (``_`` when the acks carry none:
        a server without a domain). Stored in several streams of several domains (a double store forced
        with ``options={"allow_double_store": True}``), the acks' stream/domain pairs are not in the summary: not
        recorded."""
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
