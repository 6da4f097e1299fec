"""``JetStreamReplicationLagSensor``: wait until a stream's mirror or sources have caught up, across domains."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from airflow_provider_jetstream.exceptions import JetStreamConfigError
from airflow_provider_jetstream.hooks.jetstream import JetStreamHook
from airflow_provider_jetstream.replication import (
    JetStreamReplicationError,
    ReplicationWatch,
    duration_seconds,
    validate_count,
)
from airflow_provider_jetstream.sensors.base import BaseJetStreamSensor, templated
from airflow_provider_jetstream.specs.names import validate_name
from airflow_provider_jetstream.triggers.replication_lag import JetStreamReplicationLagTrigger, check_replication


class JetStreamReplicationLagSensor(BaseJetStreamSensor):
    """Wait until a stream's mirror, or every (named) source, has caught up with its origin.

    An origin is caught up when its lag is at most ``max_lag``, the hub heard from it within
    ``max_inactive`` and it reports no replication error: the nats CLI's ``nats server check
    stream --lag-critical --seen-critical`` for each row of ``nats stream report``'s replication
    table. The lag alone is not enough across leaf nodes: while a leaf is cut off the hub keeps
    reporting the last lag it knew (often 0) with no error, so an origin silent for longer than
    ``max_inactive`` is never caught up. Each check logs the replication table. An origin that
    reports a replication error for longer than ``error_grace`` fails the task with the error.
    Returns (XCom) the stream's message count, last sequence and each origin's status.

    :param stream: the stream that mirrors or sources, in ``domain`` (templated).
    :param max_lag: most messages an origin may be behind. Default 0.
    :param max_inactive: most time since the last contact with an origin: seconds, ``timedelta``
        or text like ``"10s"``, ``"2m"`` (templated). Default ``"10s"``.
    :param sources: names of the origin streams to watch (templated); None (default) watches the
        mirror or every source.
    :param error_grace: how long a replication error may last before the task fails (a source
        created before its origin reports "stream not found" until the origin exists). Default ``"30s"``
        (templated).

    Also takes :class:`BaseJetStreamSensor`'s ``jetstream_conn_id``, ``domain``, ``api_prefix``,
    ``deferrable`` and Airflow's sensor arguments (``poke_interval``, ``timeout``, ``mode``,
    ``soft_fail``...).
    """

    template_fields: Sequence[str] = (
        *BaseJetStreamSensor.template_fields,
        "stream",
        "sources",
        "max_inactive",
        "error_grace",
    )
    event_key = "replication"

    def __init__(
        self,
        *,
        stream: str,
        max_lag: int = 0,
        max_inactive: float | str | timedelta = "10s",
        sources: list[str] | None = None,
        error_grace: float | str | timedelta = "30s",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.stream = stream
        self.sources = sources
        self.max_lag = validate_count(max_lag, "max_lag")
        self.max_inactive = max_inactive
        self.error_grace = error_grace
        self._watch: ReplicationWatch | None = None
        if not any(templated(v) for v in (stream, sources, max_inactive, error_grace)):
            self.validate()

    def validate(self) -> None:
        self.max_inactive_seconds = duration_seconds(self.max_inactive, "max_inactive")
        self.error_grace_seconds = duration_seconds(self.error_grace, "error_grace")
        validate_name(self.stream, "stream")
        if self.sources is not None:
            if isinstance(self.sources, str) or not self.sources:
                raise JetStreamConfigError(
                    f"sources={self.sources!r} is not allowed: use a non-empty list of stream names"
                )
            for name in self.sources:
                validate_name(name, "sources")

    def new_watch(self) -> ReplicationWatch:
        return ReplicationWatch(
            self.stream,
            self.max_lag,
            self.max_inactive_seconds,
            self.error_grace_seconds,
            list(self.sources or []) or None,
        )

    async def acheck(self, hook: JetStreamHook) -> tuple[bool, dict[str, Any] | None]:
        # In poke mode the sensor object lives across pokes and so does the watch (it times errors).
        if self._watch is None or self.reschedule:
            self._watch = self.new_watch()
        check = await check_replication(hook, self._watch)
        # A rescheduled sensor is a new object at each poke: it confirms an error within this poke.
        while self.reschedule and self._watch.errors_pending and not check.failed:
            self.log.info("Replication of %r:\n%s", self.stream, check.table())
            await asyncio.sleep(min(self.poke_interval, 5.0))
            check = await check_replication(hook, self._watch)
        self.log.info("Replication of stream %r in %s:\n%s", self.stream, check.target, check.table())
        if check.failed:
            raise JetStreamReplicationError(f"stream {self.stream!r} in {check.target}: {check.failed}")
        if not check.caught_up:
            self.log.info("Stream %r: waiting: %s", self.stream, check.waiting_for())
        return check.caught_up, check.to_xcom()

    def trigger(self) -> JetStreamReplicationLagTrigger:
        return JetStreamReplicationLagTrigger(
            jetstream_conn_id=self.jetstream_conn_id,
            stream=self.stream,
            domain=self.domain,
            api_prefix=self.api_prefix,
            max_lag=self.max_lag,
            max_inactive=self.max_inactive_seconds,
            error_grace=self.error_grace_seconds,
            sources=list(self.sources) if self.sources else None,
            poll_interval=self.poke_interval,
        )
