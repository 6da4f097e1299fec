"""``JetStreamReplicationLagTrigger`` and the replication check it shares with the sensor's poke.

The check is ``nats server check stream --lag-critical --seen-critical`` for every origin of a
stream, across domains: see :mod:`airflow_provider_jetstream.replication` for what "caught up" means.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import nats.errors
from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider_jetstream.api import JetStreamApi
from airflow_provider_jetstream.exceptions import JetStreamConfigError, JetStreamError, JetStreamNotFoundError
from airflow_provider_jetstream.hooks.jetstream import JetStreamHook
from airflow_provider_jetstream.replication import ReplicationCheck, ReplicationWatch, duration_seconds
from airflow_provider_jetstream.triggers.consumer_lag import TRANSIENT_ERRORS, PollClock, transient_reason


async def check_replication(hook: JetStreamHook, watch: ReplicationWatch) -> ReplicationCheck:
    """Read the stream's info in the hook's domain and judge every watched origin.

    Raises :class:`JetStreamNotFoundError` when the stream does not exist,
    :class:`JetStreamConfigError` when it has no mirror/sources or lacks a named one, and
    :class:`JetStreamDomainUnavailableError` when no JetStream answers for the domain.
    """
    async with hook.aconnect() as nc:
        config = await hook.aget_conn_config()
        watch.target = hook.describe_target()
        api = JetStreamApi(nc, hook.resolve_api_prefix(), timeout=config.connect_timeout, target=watch.target)
        # The raw info: nats-py's parsed one drops each origin's external API prefix.
        info = await api.stream_info(watch.stream)
    if info is None:
        raise JetStreamNotFoundError(f"stream {watch.stream!r} does not exist in {watch.target}")
    return watch.judge(info)


class JetStreamReplicationLagTrigger(BaseTrigger):
    """Fires when a stream's mirror, or every (named) source, is caught up with its origin.

    Polls the stream's info every ``poll_interval`` seconds over the triggerer's one shared NATS
    connection for ``jetstream_conn_id``, logging a replication table at each check. Fires
    ``{"status": "success", "replication": {...}}``, or ``{"status": "error", "message": ...}`` when
    the stream does not exist, has no such origin, or an origin's replication error outlasts
    ``error_grace``. An origin silent for longer than ``max_inactive`` keeps it waiting.

    :param jetstream_conn_id: Airflow connection id (the connection is resolved in the triggerer).
    :param stream: the stream that mirrors or sources.
    :param domain: JetStream domain of that stream. Default: the connection's.
    :param api_prefix: JetStream API prefix instead of a domain. Default: the connection's.
    :param max_lag: most messages an origin may be behind. Default 0.
    :param max_inactive: most time since the last contact with an origin, in seconds or text
        like ``"10s"``. Default 10 seconds.
    :param error_grace: how long a replication error may last before failing (seconds or text).
        Default 30 seconds.
    :param sources: names of the origin streams to watch; None (default) watches all.
    :param poll_interval: seconds between checks. Default 5.

    What it opens (its use of the shared connection) is held by ``run()``'s context manager and
    released when ``run()`` returns, is cancelled or is closed: ``cleanup()`` has nothing left to do.
    """

    def __init__(
        self,
        jetstream_conn_id: str,
        stream: str,
        domain: str | None = None,
        api_prefix: str | None = None,
        max_lag: int = 0,
        max_inactive: float | str = 10.0,
        error_grace: float | str = 30.0,
        sources: list[str] | None = None,
        poll_interval: float = 5.0,
    ) -> None:
        super().__init__()
        self.jetstream_conn_id = jetstream_conn_id
        self.stream = stream
        self.domain = domain
        self.api_prefix = api_prefix
        self.max_lag = max_lag
        self.max_inactive = duration_seconds(max_inactive, "max_inactive")
        self.error_grace = duration_seconds(error_grace, "error_grace")
        self.sources = list(sources) if sources else None
        self.poll_interval = float(poll_interval)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "jetstream_conn_id": self.jetstream_conn_id,
                "stream": self.stream,
                "domain": self.domain,
                "api_prefix": self.api_prefix,
                "max_lag": self.max_lag,
                "max_inactive": self.max_inactive,
                "error_grace": self.error_grace,
                "sources": self.sources,
                "poll_interval": self.poll_interval,
            },
        )

    def new_watch(self) -> ReplicationWatch:
        return ReplicationWatch(self.stream, self.max_lag, self.max_inactive, self.error_grace, self.sources)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        hook = JetStreamHook(self.jetstream_conn_id, domain=self.domain, api_prefix=self.api_prefix)
        watch = self.new_watch()
        try:
            # Held for the trigger's life: every check reuses the triggerer's shared connection.
            async with hook.aconnect():
                clock = PollClock(self.poll_interval)
                while True:
                    try:
                        check = await check_replication(hook, watch)
                    except TRANSIENT_ERRORS as err:
                        self.log.info(
                            "Stream %r: cannot check replication yet: %s", self.stream, transient_reason(hook, err)
                        )
                    else:
                        self.log.info("Replication of stream %r in %s:\n%s", self.stream, check.target, check.table())
                        if check.failed:
                            message = f"stream {self.stream!r} in {check.target}: {check.failed}"
                            yield TriggerEvent({"status": "error", "reason": "replication_error", "message": message})
                            return
                        if check.caught_up:
                            yield TriggerEvent({"status": "success", "replication": check.to_xcom()})
                            return
                        self.log.info("Stream %r: waiting: %s", self.stream, check.waiting_for())
                    await clock.wait()
        except JetStreamNotFoundError as err:
            yield TriggerEvent({"status": "error", "reason": "not_found", "message": str(err)})
        except JetStreamConfigError as err:
            yield TriggerEvent({"status": "error", "reason": "invalid", "message": str(err)})
        except JetStreamError as err:
            yield TriggerEvent({"status": "error", "reason": "error", "message": str(err)})
        except nats.errors.ConnectionClosedError:
            message = f"connection {self.jetstream_conn_id!r}: the NATS connection closed (reconnects exhausted)"
            yield TriggerEvent({"status": "error", "reason": "connection_closed", "message": message})
