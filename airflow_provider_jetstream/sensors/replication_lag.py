"""``JetStreamReplicationLagSensor``: wait until a stream's mirror or sources have caught up, across domains."""

from __future__ import annotations

from typing import Any

from airflow_provider_jetstream.core.arguments import Args
from airflow_provider_jetstream.core.signatures.options import ReplicationOptions
from airflow_provider_jetstream.core.signatures.waits import REPLICATION_WATCHED, SENSOR
from airflow_provider_jetstream.core.status.replication import ReplicationWatch
from airflow_provider_jetstream.hooks.status import JetStreamStatusHook
from airflow_provider_jetstream.sensors.base import BaseJetStreamSensor
from airflow_provider_jetstream.triggers.replication_lag import JetStreamReplicationLagTrigger
from airflow_provider_jetstream.utils.notes import leave_note

__all__ = ["JetStreamReplicationLagSensor", "ReplicationOptions"]


class JetStreamReplicationLagSensor(BaseJetStreamSensor):
    """Wait until a stream's mirror, or every (named) source, has caught up with its origin.

    The hub's own report cannot tell "caught up" from "cut off": right after a leaf is cut off it
    keeps reporting ``lag=0``, no error and a fresh ``active`` while the leaf holds messages the hub
    never got. So each check first asks every origin, in its own domain (the connection reaches them
    all), for its last sequence among the subjects the copy takes, then reads the stream: a mirror
    is caught up when it holds that sequence, a source when its newest copy from that origin carries
    it (exact). An origin whose domain does not answer is never caught up (``unreachable_origins``
    says whether it holds the sensor back). Where this account cannot call an origin's API by design
    (an imported prefix such as ``JS.acc@hub.API`` exporting only the consumer API), ``options.verify_origin``
    says what to do: ``"auto"`` falls back to the lag/active rule (``lag <= max_lag``, heard from
    within ``max_inactive``, no error: ``nats server check stream --lag-critical --seen-critical``),
    saying so in the table. Logs news only: the table when what it says changed (rows compared by origin,
    in any order) and every 5 minutes, between them a one-line summary once a minute (not at every poke).
    An origin no JetStream answers for shows its lag as ``unknown`` (the hub's own figure is the last it
    knew, 0 for a cut-off leaf), with what the copy holds of it against the origin's last known sequence.
    An origin that reports a replication error for longer than ``error_grace`` fails the task with
    the error; so do a refused request and an origin unreachable for longer than
    ``unreachable_timeout``. Returns (XCom) the stream's message count, last sequence, ``caught_up``
    (every origin), each origin's status (``origins``) and the unreachable ones (``unreachable``:
    ``origin``, ``kind``, ``domain``, ``api_prefix``, ``reason``, ``since``, ``held_seq``,
    ``origin_last_known_seq``); on a cluster also the stream's leader and each replica current, lagging or
    offline (``cluster``), a line under the table. ``since`` is the outage's start: the stream's last
    contact with the origin as its server reports it (else when a check first found it unreachable), so
    every task of a run that reads the same outage gives the same instant. Succeeding without some
    origins (``unreachable_origins="proceed"``) logs a WARNING and adds ``note``, one line naming them
    (Airflow 3.3 lets no running task set its task instance note: the XCom and the log carry it).

    :param stream: the stream that mirrors or sources, in ``domain`` (templated).
    :param origins: names of the origin streams to watch (templated); None (default) watches the
        mirror or every source.
    :param unreachable_origins: ``"wait"`` (default, safe): an origin whose domain does not answer is
        never caught up, so the sensor waits for it; ``"proceed"``: succeed once every *reachable*
        origin is exactly caught up, listing the others in the XCom's ``"unreachable"`` (the data of
        an offline leaf is then not in the copy yet: the next run must pick it up).
    :param unreachable_timeout: how long an origin's domain (or the stream's own) may go without
        answering before the task fails (with ``"wait"``); None (default): until ``timeout``.
    :param options: :class:`~airflow_provider_jetstream.core.signatures.options.ReplicationOptions` or a dict of
        its fields (templated): ``max_lag`` (most messages an origin may be behind, lag/active rule; default 0),
        ``max_inactive`` (most time since the last contact with an origin, lag/active rule: seconds, timedelta
        or text like ``"2m"``; default 10 s), ``error_grace`` (how long a replication error may last before the
        task fails: a source created before its origin reports "stream not found" until the origin exists;
        default 30 s), ``verify_origin`` (``"auto"``, the default: probe every origin in its own domain, and
        where this account cannot call the origin's API by design use the lag/active rule for it;
        ``"required"``: such an origin fails the task; ``"off"``: the lag/active rule only).

    Also takes :class:`BaseJetStreamSensor`'s ``jetstream_conn_id``, ``domain``, ``api_prefix``,
    ``deferrable`` and Airflow's sensor arguments (``poke_interval``, ``timeout``, ``mode``,
    ``soft_fail``...).
    """

    hook_class = JetStreamStatusHook
    arguments: Args = SENSOR + REPLICATION_WATCHED
    event_key = "replication"

    def __init__(
        self,
        *,
        stream: str,
        origins: list[str] | None = None,
        unreachable_origins: str = "wait",
        options: ReplicationOptions | dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.stream = stream
        self.origins = origins
        self.unreachable_origins = unreachable_origins
        self.options = options

    @property
    def max_inactive_seconds(self) -> float:
        """The checked ``options.max_inactive``, in seconds."""
        return self.checked_arguments()["options"].max_inactive

    @property
    def error_grace_seconds(self) -> float:
        """The checked ``options.error_grace``, in seconds."""
        return self.checked_arguments()["options"].error_grace

    def new_watch(self) -> ReplicationWatch:
        """The watch the next poke's check uses: the rendered arguments and what earlier pokes left."""
        return self.trigger().new_watch()

    def trigger(self) -> JetStreamReplicationLagTrigger:
        trigger = JetStreamReplicationLagTrigger(
            **self.trigger_arguments(JetStreamReplicationLagTrigger),
            poll_interval=self.poke_interval,
            state=dict(self._state),
        )
        # Without a state store a rescheduled sensor forgets between pokes: it confirms an error within one poke.
        trigger.confirm_errors = self.reschedule and not self._state_persisted
        return trigger

    def execute(self, context: Any) -> Any:
        return self._noted(context, super().execute(context))

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
        """The trigger's reading; succeeding without some origins is said at WARNING in the task's own log."""
        result = super().execute_complete(context, event)
        if isinstance(result, dict) and result.get("note"):
            self.log.warning("%s", result["note"])
        return self._noted(context, result)

    @staticmethod
    def _noted(context: Any, result: Any) -> Any:
        """Succeeding without some origins is also the task's note in the grid (set when the run ends)."""
        if isinstance(result, dict) and result.get("note"):
            leave_note(context, result["note"])
        return result
