"""``JetStreamReplicationLagTrigger``: polls :meth:`JetStreamStatusHook.acheck_replication` until a stream caught up.

The check (shared with the sensor's poke and the hook) is
:func:`airflow_provider_jetstream.core.status.replication.check_replication`: it asks each origin, in its own
domain, for its last sequence, then reads the stream and judges every origin (see
:mod:`airflow_provider_jetstream.core.status.replication` for what "caught up" means).
"""

from __future__ import annotations

from typing import Any

from airflow_provider_jetstream.core.signatures.operations import replication_watch
from airflow_provider_jetstream.core.signatures.options import ReplicationOptions
from airflow_provider_jetstream.core.signatures.waits import REPLICATION_TRIGGER
from airflow_provider_jetstream.core.status.replication import ReplicationWatch
from airflow_provider_jetstream.core.status.report import ReplicationCheck
from airflow_provider_jetstream.core.status.waiting import PollClock
from airflow_provider_jetstream.hooks.status import JetStreamStatusHook
from airflow_provider_jetstream.triggers.base import JetStreamWaitTrigger, keeps_arguments


class JetStreamReplicationLagTrigger(JetStreamWaitTrigger):
    """Fires when a stream's mirror, or every (named) source, is caught up with its origin.

    Polls every ``poll_interval`` seconds over the triggerer's one shared NATS connection for
    ``jetstream_conn_id``: asks each origin for its last sequence in the origin's own domain, then
    reads the stream (see :mod:`airflow_provider_jetstream.core.status.replication`). Logs news only: the
    replication table when what it says changed (its rows compared by origin, in any order) and every
    5 minutes (``LOG_HEARTBEAT``), between them a one-line summary once a minute (``LOG_SUMMARY_EVERY``), not
    at every check; an unreachable origin's lag is
    ``unknown``, with what the copy holds of it against the origin's last known sequence. Firing without
    some origins (``unreachable_origins="proceed"``) is logged at WARNING. Fires ``{"status": "success",
    "replication": {...}}``, or ``{"status": "error", "reason": ..., "message": ...}`` when the stream
    does not exist, has no such origin, a request is refused, an origin's replication error outlasts
    ``error_grace``, an origin (or the stream's own domain) stays unreachable for longer than
    ``unreachable_timeout``, or (with ``low_headroom="fail"``) an origin's retention headroom falls below
    ``min_time_to_loss`` or ``min_headroom`` (reason ``"low_headroom"``: see
    :mod:`airflow_provider_jetstream.core.status.headroom`; an unreachable origin is judged by its last known
    headroom, projected to now, and never for being away).

    :param jetstream_conn_id: Airflow connection id (the connection is resolved in the triggerer).
    :param stream: the stream that mirrors or sources.
    :param domain: JetStream domain of that stream. Default: the connection's.
    :param api_prefix: JetStream API prefix instead of a domain. Default: the connection's.
    :param origins: names of the origin streams to watch; None (default) watches all.
    :param poll_interval: seconds between checks. Default 5.
    :param options: :class:`~airflow_provider_jetstream.core.signatures.options.ReplicationOptions` or a dict of
        its fields: how an origin is judged (``max_lag``, ``max_inactive``, ``error_grace``, ``verify_origin``).
    :param unreachable_origins: ``"wait"`` (default): an origin whose domain does not answer is never
        caught up; ``"proceed"``: fire once every reachable origin is caught up, listing the others
        under ``"unreachable"``.
    :param unreachable_timeout: seconds (or text) an origin, or the stream's domain, may stay
        unreachable before the trigger fails; None (default): no bound (the sensor's timeout).
    :param min_time_to_loss: seconds (or text like ``"1h"``): an origin whose first uncopied message a limit
        would discard (or whose stream would refuse new messages) sooner, at the current rate, is low.
        Default None: not judged.
    :param min_headroom: a share between 0 and 1: an origin with less of a limit left is low. Default None.
    :param low_headroom: ``"fail"`` (default): a low origin fails the trigger; ``"warn"``: logs a warning
        and goes on waiting.
    :param state: what the sensor's checks so far left (:meth:`ReplicationWatch.state` and since when
        the domain has not answered), so the trigger goes on where the sensor was. Default: none.
    """

    arguments = REPLICATION_TRIGGER
    hook_class = JetStreamStatusHook
    event_key = "replication"
    what_format = "stream {stream!r}"
    #: The final event carries the watch's state: the headroom sensor keeps its memory for the next run.
    event_state = True
    #: Confirm an error within one check (set by a rescheduled sensor without a state store; not serialized).
    confirm_errors = False

    @keeps_arguments
    def __init__(
        self,
        jetstream_conn_id: str,
        stream: str,
        domain: str | None = None,
        api_prefix: str | None = None,
        origins: list[str] | None = None,
        options: ReplicationOptions | dict[str, Any] | None = None,
        poll_interval: float = 5.0,
        unreachable_origins: str = "wait",
        unreachable_timeout: float | str | None = None,
        min_time_to_loss: float | str | None = None,
        min_headroom: float | None = None,
        low_headroom: str = "fail",
        state: dict[str, Any] | None = None,
    ) -> None: ...

    def new_watch(self) -> ReplicationWatch:
        """The watch the trigger's arguments and options ask for, going on from what earlier checks remembered."""
        options: ReplicationOptions = self.options
        values = {**{name: getattr(self, name) for name in self.fields}, **options.as_kwargs()}
        return replication_watch(values, self.unreachable_timeout).restore(self.state.get("watch"))

    async def check(self, hook: JetStreamStatusHook) -> ReplicationCheck:
        """One exact check; the watch's memory (errors, silences, what was logged) goes on in :attr:`state`.

        With :attr:`confirm_errors` (a rescheduled sensor that cannot keep state between pokes), an
        error still within its grace period is checked again within this call until it clears or fails.
        """
        watch = self.new_watch()
        try:
            check = await hook.acheck_replication(watch)
            clock = PollClock(min(self.poll_interval, 5.0))
            while self.confirm_errors and watch.errors_pending and not check.failed:
                self.log.info("Replication of %r:\n%s", self.stream, check.table())
                await clock.wait()
                check = await hook.acheck_replication(watch)
            if watch.should_log(check) or check.failed or check.done:
                self.log.info("Replication of stream %r in %s:\n%s", self.stream, check.target, check.table())
                if not check.done:
                    self.log.info("Stream %r: waiting: %s", self.stream, check.waiting_for())
                if check.low_headroom and not check.failed:
                    self.log.warning("Stream %r: %s", self.stream, "; ".join(check.low_headroom))
            elif watch.should_summarize():  # nothing new since the table last logged: one line a minute
                self.log.info("%s", check.summary())
            if check.note():
                self.log.warning("%s", check.note())
            return check
        finally:
            self.state["watch"] = watch.state()
