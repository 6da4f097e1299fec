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
from airflow_provider_jetstream.core.signatures.operations import CONSUMER_LAG, KEY_CHECK, REPLICATION
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
REPLICATION_TRIGGER = REPLICATION + WAIT + Args("poll", {"poll_interval": POLL_INTERVAL})
KEY_TRIGGER = (
    KEY_CHECK
    + WAIT
    + Args(
        "rewatch",
        {"rewatch_interval": Arg(seconds(), 60.0, VALUE, "seconds of silence before the watch is re-armed")},
    )
)

__all__ = ["CONSUMER_LAG_TRIGGER", "KEY_TRIGGER", "POLL_INTERVAL", "REPLICATION_TRIGGER", "SENSOR", "WAIT"]
