"""Operators that manage durable pull consumers declaratively (same reconcile rules as streams); the work is
:class:`~airflow_provider_jetstream.hooks.consumers.JetStreamConsumersHook`'s."""

from __future__ import annotations

from typing import Any

from airflow_provider_jetstream.core.arguments import Args
from airflow_provider_jetstream.core.signatures.operations import DELETE_CONSUMER, ENSURE_CONSUMER
from airflow_provider_jetstream.core.signatures.shared import OPERATOR
from airflow_provider_jetstream.hooks.consumers import JetStreamConsumersHook
from airflow_provider_jetstream.operators.base import JetStreamBaseOperator, ReconcileOperator, declare_arguments

#: A consumer has no sources, limits or subjects of its own: of the declare options, only the dry run applies.
_NOT_FOR_CONSUMERS = (
    "prune_sources",
    "allow_data_loss",
    "allow_double_store",
    "peer_domains",
    "allow_unreachable_origins",
)


class JetStreamCreateConsumerOperator(ReconcileOperator):
    """Create or update a durable pull consumer on a stream.

    :param stream: the stream's name.
    :param consumer: the consumer to declare, its spec, e.g. ``{"name": "dur", "ack_wait": "30s", "max_deliver":
        5, "backoff": ["1s", "10s"], "filter_subject": "orders.>", "deliver_policy": "all", "max_ack_pending": 1000,
        "inactive_threshold": "1h", "metadata": {...}, "pause_until": ...}``.
    :param if_exists: ``update`` | ``skip`` | ``fail`` | ``recreate`` (only this deletes the
        consumer's delivery state).
    :param options: :class:`~airflow_provider_jetstream.core.signatures.options.DeclareOptions` or a dict: only
        ``dry_run`` (log the plan, change nothing) applies to a consumer.
    """

    hook_class = JetStreamConsumersHook
    arguments: Args = (
        OPERATOR + ENSURE_CONSUMER.without("if_exists", "dry_run") + declare_arguments(without=_NOT_FOR_CONSUMERS)
    )
    template_fields_renderers = {"consumer": "json"}
    declare_fields = ("dry_run",)

    def __init__(self, *, stream: str, consumer: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.stream = stream
        self.consumer = consumer

    def execute(self, context: Any) -> dict[str, Any]:
        args = self.checked_arguments()
        return self.get_hook().ensure_consumer(args["stream"], args["consumer"], **self.reconcile_kwargs())


class JetStreamDeleteConsumerOperator(JetStreamBaseOperator):
    """Delete a consumer. XCom: ``{"deleted": bool, "stream", "consumer", "domain"}``.

    :param stream: the stream's name.
    :param consumer: the consumer's name.
    :param ignore_missing: a missing consumer (or stream) is success. Default True.
    """

    hook_class = JetStreamConsumersHook
    arguments: Args = OPERATOR + DELETE_CONSUMER

    def __init__(self, *, stream: str, consumer: str, ignore_missing: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.stream = stream
        self.consumer = consumer
        self.ignore_missing = ignore_missing

    def execute(self, context: Any) -> dict[str, Any]:
        args = self.checked_arguments()
        return self.get_hook().delete_consumer(
            args["stream"],
            args["consumer"],
            ignore_missing=args["ignore_missing"],
            request_timeout=args["request_timeout"],
            logger=self.log,
        )
