"""``JetStreamStatusHook``: the status role: replication, retention headroom, consumer lag and event drift (sync
and async).

The checks the sensors and triggers make, as hook methods: one check each, in any domain (see
:mod:`airflow_provider_jetstream.core.status` for every rule). Usable alone, or as part of
:class:`~airflow_provider_jetstream.hooks.jetstream.JetStreamHook`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_provider_jetstream.core.signatures.operations import (
    CHECK_REPLICATION,
    CONSUMER_LAG,
    EVENT_DRIFT,
    REPLICATION,
    RETENTION_HEADROOM,
    replication_watch,
)
from airflow_provider_jetstream.core.signatures.shared import REQUEST
from airflow_provider_jetstream.core.status.consumer_lag import ConsumerLagCheck, check_consumer_lag
from airflow_provider_jetstream.core.status.event_drift import MAX_LOOKUPS, EventDrift, check_event_drift
from airflow_provider_jetstream.core.status.replication import ReplicationCheck, ReplicationWatch, check_replication
from airflow_provider_jetstream.hooks.base import JetStreamBaseHook
from airflow_provider_jetstream.hooks.methods import Request, blocking, checked, request_of

if TYPE_CHECKING:
    from typing_extensions import Unpack


class ConsumerLagLimits(Request, total=False):
    """The limits of the consumer-lag check (:meth:`JetStreamStatusHook.aconsumer_lag`), and where it reads."""

    max_unprocessed: int
    max_outstanding_acks: int
    max_redelivered: int | None


class JetStreamStatusHook(JetStreamBaseHook):
    """Whether copies caught up with their origins, how close an origin is to losing what a copy has not taken,
    whether a consumer keeps up (see :class:`~airflow_provider_jetstream.hooks.base.JetStreamBaseHook` for the
    connection arguments)."""

    @checked(CONSUMER_LAG + REQUEST)
    async def aconsumer_lag(
        self,
        stream: str,
        consumer: str,
        **limits: Unpack[ConsumerLagLimits],
    ) -> ConsumerLagCheck:
        """The consumer-lag check of ``JetStreamConsumerLagSensor``: ``.done`` when the consumer's
        messages not delivered yet (``num_pending``) are at most ``max_unprocessed`` (default 0), its messages
        delivered and not acknowledged (``num_ack_pending``) at most ``max_outstanding_acks`` (default 0) and,
        if given, its redeliveries at most
        ``max_redelivered`` (default None: not checked); ``.reason`` says which count is over;
        ``.to_xcom()`` gives the counts and sequences as a dict. :class:`JetStreamNotFoundError` when the
        stream or consumer does not exist."""
        async with self.aapi(**request_of(limits)) as api:
            return await check_consumer_lag(api, stream, consumer, **limits)

    consumer_lag = blocking(aconsumer_lag)

    @checked(EVENT_DRIFT + REQUEST)
    async def aevent_drift(
        self,
        stream: str,
        consumer: str,
        stored_sequences: list[int],
        *,
        start_seq: int | None = None,
        subjects: list[str] | None = None,
        position: dict[str, Any] | None = None,
        max_lookups: int = MAX_LOOKUPS,
        **request: Unpack[Request],
    ) -> EventDrift:
        """Whether an event trigger's consumer and Airflow agree: every message the consumer acked (up to its ack
        floor) has a stored asset event. Returns an :class:`EventDrift`: ``.drifted``, ``.lost`` (sequences acked
        without a stored event), ``.pending_stored`` (stored, not acked yet: may fire again), ``.duplicates``,
        ``.reason`` and ``.to_xcom()``. :class:`JetStreamNotFoundError` when the stream or consumer does not exist.

        :param stored_sequences: the stream sequences of the asset events Airflow stored, e.g.
            ``event_sequences(inlet_events[asset])`` (see
            :func:`~airflow_provider_jetstream.core.status.event_drift.event_sequences`).
        :param start_seq: first sequence compared. Default None: the lowest stored one (else the stream's first).
        :param subjects: only messages on these subjects need an event (a watcher's ``event_subjects``). Default
            None: every message the consumer delivers.
        :param position: the position the trigger recorded in the Asset State Store (key
            ``position_key(stream, consumer)``); a position above the ack floor, or on another incarnation of the
            stream, is drift. Default None: not compared.
        :param max_lookups: most sequences without a stored event looked up in the stream. Default 1000.
        """
        async with self.aapi(**request) as api:
            return await check_event_drift(
                api,
                stream,
                consumer,
                stored_sequences,
                start_seq=start_seq,
                subjects=subjects,
                position=position,
                max_lookups=max_lookups,
            )

    event_drift = blocking(aevent_drift)

    @checked(CHECK_REPLICATION + REQUEST)
    async def acheck_replication(
        self,
        watch: ReplicationWatch,
        **request: Unpack[Request],
    ) -> ReplicationCheck:
        """One exact replication check of ``watch.stream`` with a :class:`ReplicationWatch` kept across
        checks (it remembers since when errors and outages last): what the replication sensor and
        trigger call at every check. For a single check, use :meth:`areplication_status`."""
        async with self.aapi(**request) as api:
            return await check_replication(api.nc, api, watch)

    check_replication = blocking(acheck_replication)

    @checked(REPLICATION + REQUEST)
    async def areplication_status(
        self,
        stream: str,
        *,
        origins: list[str] | None = None,
        max_lag: int = 0,
        max_inactive: float | str = 10.0,
        error_grace: float | str = 30.0,
        verify_origin: str = "auto",
        unreachable_origins: str = "wait",
        **request: Unpack[Request],
    ) -> ReplicationCheck:
        """Whether a stream's mirror, or every (named) source, has caught up with its origin: the exact
        check of ``JetStreamReplicationLagSensor`` (each origin asked for its last sequence in its own
        domain, then the stream read), made once.

        Returns a :class:`ReplicationCheck`: ``.caught_up`` (every origin), ``.done`` (what the sensor
        would succeed on), ``.failed`` (why waiting cannot help, or None), ``.verdicts`` (per origin:
        ``caught_up``, ``reason``, the rule applied), ``.waiting_for()``, ``.table()`` and
        ``.to_xcom()`` (the sensor's XCom dict). :class:`JetStreamNotFoundError` if the stream does
        not exist; :class:`JetStreamConfigError` if it has no mirror/sources or lacks a named one;
        :class:`JetStreamNoLeaderError` (a wait) while a clustered stream has no leader (a node down, an
        election, a lost quorum: its replication is configured but not running).

        :param origins: origin stream names to judge; None (default): the mirror or every source.
        :param max_lag: most messages an origin may be behind (lag/active rule). Default 0.
        :param max_inactive: most time since the last contact with an origin (lag/active rule):
            seconds or text like ``"10s"``. Default 10 seconds.
        :param error_grace: how long a replication error may last before ``.failed`` is set. Default 30 s.
        :param verify_origin: ``"auto"`` (default), ``"required"`` or ``"off"`` (lag/active rule only).
        :param unreachable_origins: ``"wait"`` (default): an unreachable origin is never caught up;
            ``"proceed"``: ``.done`` once every reachable origin is.
        """
        watch = replication_watch(
            {
                "stream": stream,
                "origins": origins,
                "max_lag": max_lag,
                "max_inactive": max_inactive,
                "error_grace": error_grace,
                "verify_origin": verify_origin,
                "unreachable_origins": unreachable_origins,
            }
        )
        return await self.acheck_replication(watch, **request)

    replication_status = blocking(areplication_status)

    @checked(RETENTION_HEADROOM + REQUEST)
    async def aretention_headroom(
        self,
        stream: str,
        *,
        origins: list[str] | None = None,
        min_time_to_loss: float | str | None = None,
        min_headroom: float | None = None,
        **request: Unpack[Request],
    ) -> ReplicationCheck:
        """For each origin of a mirror or sourced stream: what the copy has not taken yet (messages, bytes, the
        oldest uncopied message's age) against the origin's limits (``max_age``, ``max_msgs``, ``max_bytes``,
        ``max_msgs_per_subject``, the account's storage), and the time until the first uncopied message would
        be discarded (or new messages refused) at the current rate: one exact replication check, read once
        (the rate is each origin's average over what it holds; the sensor measures it between its checks).
        See :mod:`airflow_provider_jetstream.core.status.headroom` for every rule.

        Returns the :class:`ReplicationCheck`: ``.headroom`` (per origin key: ``.uncopied_msgs``,
        ``.uncopied_bytes``, ``.oldest_age``, ``.seconds_left``, ``.binding``, ``.fraction``, ``.limits``,
        ``.to_dict()``), ``.low_headroom`` (why origins are below the thresholds, one clause each), ``.table()``
        (with the headroom columns) and ``.to_xcom()`` (each origin's ``headroom``). An origin that does not
        answer has no headroom in a single reading. Raises as :meth:`areplication_status`.

        :param origins: origin stream names; None (default): the mirror or every source.
        :param min_time_to_loss: seconds or text like ``"1h"``: origins that would lose data sooner are listed
            in ``.low_headroom``. Default None: not judged.
        :param min_headroom: a share between 0 and 1 of every limit that must be left. Default None: not judged.
        """
        watch = ReplicationWatch(
            stream, sources=origins, min_time_to_loss=min_time_to_loss, min_headroom=min_headroom, low_headroom="warn"
        )
        return await self.acheck_replication(watch, **request)

    retention_headroom = blocking(aretention_headroom)
