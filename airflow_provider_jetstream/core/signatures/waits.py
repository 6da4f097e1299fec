"""The signatures of the waits: what a sensor and a waiting trigger take besides their check's arguments.

A sensor's check is its hook method's operation (:data:`.operations.CONSUMER_LAG`,
:data:`.operations.REPLICATION`, :data:`.operations.KEY_CHECK`); the sensor adds :data:`SENSOR` (where,
whether to defer, how long the target may go unanswering), the trigger :data:`WAIT` and how often it
checks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_provider_jetstream.core.arguments import DEFAULT, VALUE, Arg, Args
from airflow_provider_jetstream.core.arguments.values import boolean, optional, seconds
from airflow_provider_jetstream.core.errors import SpecError
from airflow_provider_jetstream.core.signatures.operations import (
    CONSUMER_LAG,
    HEADROOM_THRESHOLDS,
    KEY_CHECK,
    LOW_HEADROOM_POLICY,
    REPLICATION,
)
from airflow_provider_jetstream.core.signatures.shared import (
    API_PREFIX,
    CONN_ID,
    DOMAIN,
    ONE_TARGET,
    UNREACHABLE_TIMEOUT,
)

#: What every JetStream sensor takes besides its check's arguments.
SENSOR = Args(
    "sensor",
    {
        "jetstream_conn_id": CONN_ID,
        "domain": DOMAIN.but(doc="JetStream domain to look in; default: the connection's"),
        "api_prefix": API_PREFIX,
        "deferrable": Arg(
            boolean,
            False,
            VALUE,
            "wait in the triggerer instead of a worker slot; default: Airflow's [operators] default_deferrable",
        ),
        "unreachable_timeout": UNREACHABLE_TIMEOUT,
    },
    [ONE_TARGET],
)


def _state(value: Any, field: str) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise SpecError(field, value, "use the dict of what earlier checks left (the sensor's state)")
    return dict(value)


#: What every waiting trigger takes besides its check's arguments.
WAIT = Args(
    "wait",
    {
        "jetstream_conn_id": CONN_ID.but(doc="the Airflow connection (resolved in the triggerer)"),
        "domain": DOMAIN,
        "api_prefix": API_PREFIX,
        "unreachable_timeout": UNREACHABLE_TIMEOUT,
        "state": Arg(optional(_state), None, DEFAULT, "what earlier checks (the sensor's pokes) left; default none"),
    },
    [ONE_TARGET],
)
POLL_INTERVAL = Arg(seconds(), 5.0, VALUE, "seconds between checks; default 5")

CONSUMER_LAG_TRIGGER = CONSUMER_LAG + WAIT + Args("poll", {"poll_interval": POLL_INTERVAL})
REPLICATION_TRIGGER = (
    REPLICATION + HEADROOM_THRESHOLDS + LOW_HEADROOM_POLICY + WAIT + Args("poll", {"poll_interval": POLL_INTERVAL})
)
#: What the retention headroom sensor takes besides the replication sensor's: the thresholds, judged by default.
HEADROOM_SENSOR = (
    Args(
        "retention headroom sensor",
        {
            "min_time_to_loss": HEADROOM_THRESHOLDS.args["min_time_to_loss"].but(
                default="1h",
                doc="least time before a limit discards an origin's first uncopied message (or refuses new ones) at "
                "the current rate: seconds, timedelta or text like '1h'; default 1 hour; None: not judged",
            ),
            "min_headroom": HEADROOM_THRESHOLDS.args["min_headroom"],
        },
    )
    + LOW_HEADROOM_POLICY
)
KEY_TRIGGER = (
    KEY_CHECK
    + WAIT
    + Args(
        "rewatch",
        {"rewatch_interval": Arg(seconds(), 60.0, VALUE, "seconds of silence before the watch is re-armed")},
    )
)

__all__ = [
    "CONSUMER_LAG_TRIGGER",
    "HEADROOM_SENSOR",
    "KEY_TRIGGER",
    "POLL_INTERVAL",
    "REPLICATION_TRIGGER",
    "SENSOR",
    "WAIT",
]
