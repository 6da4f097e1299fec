"""``JetStreamRetentionHeadroomSensor``: wait for a copy to catch up, failing before an origin's limits lose data."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from airflow_provider_jetstream.core.arguments import Args
from airflow_provider_jetstream.core.signatures.operations import REPLICATION
from airflow_provider_jetstream.core.signatures.waits import HEADROOM_SENSOR, SENSOR
from airflow_provider_jetstream.sensors.replication_lag import JetStreamReplicationLagSensor


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
    check of this task) is projected to now, as if the copy had stopped then and messages went on arriving
    at the rate last measured, and the task fails only when that projection is below a threshold: loss
    is then imminent, and the leaf cannot be asked. An origin never measured by this task has no known
    headroom and is never judged low (``unreachable_origins`` and ``unreachable_timeout`` still apply).

    :param min_time_to_loss: least time before a limit loses data, at the current rate: seconds,
        ``timedelta`` or text like ``"1h"`` (templated). Default ``"1h"``; None: not judged.
    :param min_headroom: least share of every limit that must be left, between 0 and 1 (templated).
        Default None: not judged.
    :param low_headroom: ``"fail"`` (default): a low origin fails the task (skipped with ``soft_fail=True``);
        ``"warn"``: log a warning and keep waiting (templated).

    Also takes every argument of :class:`JetStreamReplicationLagSensor` (``stream``, ``sources``,
    ``verify_origin``, ``unreachable_origins``, ``unreachable_timeout``...) and Airflow's sensor arguments.
    """

    arguments: Args = SENSOR + REPLICATION + HEADROOM_SENSOR
    template_fields: Sequence[str] = arguments.template_fields()

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
