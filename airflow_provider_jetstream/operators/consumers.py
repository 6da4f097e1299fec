"""Operators that manage durable pull consumers declaratively (same reconcile rules as streams)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow_provider_jetstream.core.manage.reconcile import check_if_exists
from airflow_provider_jetstream.core.manage.specs import ConsumerSpec
from airflow_provider_jetstream.core.names import validate_name
from airflow_provider_jetstream.operators.base import JetStreamBaseOperator, as_bool, check_bool_args, one_spec_error
from airflow_provider_jetstream.utils.templates import is_resolved_at_run_time


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

    template_fields: Sequence[str] = (
        *JetStreamBaseOperator.template_fields,
        "stream",
        "consumer",
        "if_exists",
        "dry_run",
    )
    template_fields_renderers = {"consumer": "json"}

    def __init__(
        self, *, stream: str, consumer: dict[str, Any], if_exists: str = "update", dry_run: bool = False, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.stream = stream
        self.consumer = consumer
        self.if_exists = if_exists
        self.dry_run = dry_run
        if not is_resolved_at_run_time(stream):
            one_spec_error(validate_name, stream, "stream")
        if not is_resolved_at_run_time(consumer):
            ConsumerSpec.from_dict(consumer)
        if not is_resolved_at_run_time(if_exists):
            check_if_exists(if_exists)
        check_bool_args(dry_run=dry_run)

    def execute(self, context: Any) -> dict[str, Any]:
        return self.get_hook().ensure_consumer(
            self.stream,
            self.consumer,
            if_exists=self.if_exists,
            dry_run=as_bool("dry_run", self.dry_run),
            timeout=self.request_timeout,
            logger=self.log,
        )


class JetStreamDeleteConsumerOperator(JetStreamBaseOperator):
    """Delete a consumer. XCom: ``{"deleted": bool, "stream", "name", "domain"}``.

    :param ignore_missing: a missing consumer (or stream) is success. Default True.
    """

    template_fields: Sequence[str] = (*JetStreamBaseOperator.template_fields, "stream", "name")

    def __init__(self, *, stream: str, name: str, ignore_missing: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.stream = stream
        self.name = name
        self.ignore_missing = as_bool("ignore_missing", ignore_missing)
        if not is_resolved_at_run_time([stream, name]):
            one_spec_error(validate_name, stream, "stream")
            one_spec_error(validate_name, name, "name")

    def execute(self, context: Any) -> dict[str, Any]:
        return self.get_hook().delete_consumer(
            self.stream, self.name, ignore_missing=self.ignore_missing, timeout=self.request_timeout, logger=self.log
        )
