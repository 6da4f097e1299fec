"""``JetStreamRetentionHeadroomSensor``: wait for a copy to catch up, failing before an origin's limits lose data."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_provider_jetstream.core.arguments import Args
from airflow_provider_jetstream.core.signatures.waits import HEADROOM_SENSOR, REPLICATION_WATCHED, SENSOR
from airflow_provider_jetstream.sensors.replication_lag import JetStreamReplicationLagSensor
from airflow_provider_jetstream.triggers.replication_lag import JetStreamReplicationLagTrigger

if TYPE_CHECKING:
    from airflow.sdk import Context, PokeReturnValue

#: XCom key of each origin's last measured headroom (and its rate's start), kept for the sensor's next runs.
MEMORY_XCOM = "headroom_memory"


class JetStreamRetentionHeadroomSensor(JetStreamReplicationLagSensor):
    """Wait, as :class:`JetStreamReplicationLagSensor` does, until a stream's mirror or sources have caught up,
    and fail (or warn) as soon as an origin's **retention headroom** is low: its stream's limits would discard
    the first message the copy has not taken yet (or refuse new messages) in less than ``min_time_to_loss``,
    or less than ``min_headroom`` of a limit is left.

    At every check each origin is asked, in its own domain, for what the copy has not taken (messages, bytes,
    the oldest uncopied message's age) against its ``max_age``, ``max_msgs``, ``max_bytes``,
    ``max_msgs_per_subject`` and its account's storage limit, and the time until the first limit is reached
    at the rate measured between checks (:mod:`airflow_provider_jetstream.core.status.headroom`). The table
    logged shows it (``Uncopied``, ``Oldest uncopied``, ``Time to loss``); the XCom gives each origin's
    ``headroom`` and the ``low_headroom`` clauses.

    **A leaf that is away** does not fail the task for being away: its last known headroom (from an earlier
    check of this task, or of this task in an earlier DAG run) is projected to now, as if the copy had
    stopped then and messages went on arriving at the rate last measured, and the task fails only when that
    projection is below a threshold: loss is then imminent, and the leaf cannot be asked; the table and the
    reason say when it was last measured and since when it does not answer. What the checks measured is
    kept in the XCom ``headroom_memory`` at every check, pass or fail, and the next run's first check starts
    from the newest one of an earlier run (``xcom_pull(..., include_prior_dates=True)``): a leaf cut between
    runs is judged by the last run's figures. An origin never measured by this task (in any run) has no known
    headroom and is never judged low (``unreachable_origins`` and ``unreachable_timeout`` still apply).

    :param min_time_to_loss: least time before a limit loses data, at the current rate: seconds,
        ``timedelta`` or text like ``"1h"`` (templated). Default ``"1h"``; None: not judged.
    :param min_headroom: least share of every limit that must be left, between 0 and 1 (templated).
        Default None: not judged.
    :param low_headroom: ``"fail"`` (default): a low origin fails the task (skipped with ``soft_fail=True``);
        ``"warn"``: log a warning and keep waiting (templated).

    Also takes every argument of :class:`JetStreamReplicationLagSensor` (``stream``, ``origins``,
    ``unreachable_origins``, ``unreachable_timeout``, ``options``...) and Airflow's sensor arguments.
    """

    arguments: Args = SENSOR + REPLICATION_WATCHED + HEADROOM_SENSOR

    def __init__(
        self,
        *,
        min_time_to_loss: float | str | timedelta | None = "1h",
        min_headroom: float | None = None,
        low_headroom: str = "fail",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.min_time_to_loss = min_time_to_loss
        self.min_headroom = min_headroom
        self.low_headroom = low_headroom
        self._prior: dict[str, Any] | None = None

    def poke(self, context: Context) -> bool | PokeReturnValue:
        if self._prior is None:
            self._prior = self._recall(context)
        try:
            return super().poke(context)
        finally:
            self._keep(context, self._state)

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        if isinstance(event.get("state"), Mapping):
            self._keep(context, event["state"])
        return super().execute_complete(context, event)

    def trigger(self) -> JetStreamReplicationLagTrigger:
        """The trigger, its watch starting from what an earlier run measured of origins this run has not."""
        trigger = super().trigger()
        prior = self._prior or {}
        watch = trigger.state.setdefault("watch", {})
        memory = watch.setdefault("headroom", {})
        for part in ("rate_from", "last"):
            memory[part] = {**(prior.get(part) or {}), **(memory.get(part) or {})}
        return trigger

    def _recall(self, context: Context) -> dict[str, Any]:
        """The headroom memory the newest earlier run of this task kept (``{}``: none, or no task instance)."""
        ti = context.get("ti") if isinstance(context, Mapping) else None
        if ti is None:
            return {}
        kept = ti.xcom_pull(task_ids=self.task_id, key=MEMORY_XCOM, include_prior_dates=True)
        if isinstance(kept, Mapping):
            self.log.info(
                "Retention headroom: starting from what an earlier run measured (%s)",
                ", ".join(kept.get("last") or {}) or "nothing",
            )
            return dict(kept)
        return {}

    def _keep(self, context: Context, state: Mapping[str, Any]) -> None:
        """Keep the watch's headroom memory in this run's XCom, for the next runs."""
        ti = context.get("ti") if isinstance(context, Mapping) else None
        memory = (state.get("watch") or {}).get("headroom")
        if ti is not None and memory:
            ti.xcom_push(key=MEMORY_XCOM, value=memory)
