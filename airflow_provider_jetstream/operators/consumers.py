"""Operators that manage durable pull consumers declaratively (same reconcile rules as streams)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow_provider_jetstream.core.arguments import Args
from airflow_provider_jetstream.core.signatures.operations import DELETE_CONSUMER, ENSURE_CONSUMER
from airflow_provider_jetstream.core.signatures.shared import OPERATOR
from airflow_provider_jetstream.operators.base import JetStreamBaseOperator


class JetStreamCreateConsumerOperator(JetStreamBaseOperator):
    """Create or update a durable pull consumer on a stream.

    :param stream: the stream's name.
    :param consumer: the spec, e.g. ``{"name": "dur", "ack_wait": "30s", "max_deliver": 5,
        "backoff": ["1s", "10s"], "filter_subject": "orders.>", "deliver_policy": "all",
        "max_ack_pending": 1000, "inactive_threshold": "1h", "metadata": {...}, "pause_until": ...}``.
    :param if_exists: ``update`` | ``skip`` | ``fail`` | ``recreate`` (only this deletes the
        consumer's delivery state).
    :param dry_run: log the plan, change nothing.
    """

    arguments: Args = OPERATOR + ENSURE_CONSUMER.renamed(spec="consumer")
    template_fields: Sequence[str] = arguments.template_fields()
    template_fields_renderers = {"consumer": "json"}

    def __init__(
        self, *, stream: str, consumer: dict[str, Any], if_exists: str = "update", dry_run: bool = False, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.stream = stream
        self.consumer = consumer
        self.if_exists = if_exists
        self.dry_run = dry_run

    def execute(self, context: Any) -> dict[str, Any]:
        args = self.checked_arguments()
        return self.get_hook().ensure_consumer(
            args["stream"],
            args["consumer"],
            if_exists=args["if_exists"],
            dry_run=args["dry_run"],
            timeout=args["request_timeout"],
            logger=self.log,
        )


class JetStreamDeleteConsumerOperator(JetStreamBaseOperator):
    """Delete a consumer. XCom: ``{"deleted": bool, "stream", "name", "domain"}``.

    :param ignore_missing: a missing consumer (or stream) is success. Default True.
    """

    arguments: Args = OPERATOR + DELETE_CONSUMER
    template_fields: Sequence[str] = arguments.template_fields()

    def __init__(self, *, stream: str, name: str, ignore_missing: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.stream = stream
        self.name = name
        self.ignore_missing = ignore_missing

    def execute(self, context: Any) -> dict[str, Any]:
        args = self.checked_arguments()
        return self.get_hook().delete_consumer(
            args["stream"],
            args["name"],
            ignore_missing=args["ignore_missing"],
            timeout=args["request_timeout"],
            logger=self.log,
        )
