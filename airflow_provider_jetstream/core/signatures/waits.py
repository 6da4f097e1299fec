"""The signatures of the waits: what a sensor and a waiting trigger take besides their check's arguments.

A sensor's check is its hook method's operation (:data:`.operations.CONSUMER_LAG`,
:data:`.operations.REPLICATION`, :data:`.operations.KEY_CHECK`); the sensor adds :data:`SENSOR` (where,
whether to defer, how long the target may go unanswering), the trigger :data:`WAIT` and how often it
checks.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from airflow_provider_jetstream.core.arguments import DEFAULT, REFUSE, REQUIRED, VALUE, Arg, Args, Rule, exclusive
from airflow_provider_jetstream.core.arguments.names import consumer_name, stream_filter, subject_list
from airflow_provider_jetstream.core.arguments.options import options_arg
from airflow_provider_jetstream.core.arguments.values import boolean, choice, integer, json_map, optional, seconds
from airflow_provider_jetstream.core.consume.matching import ACK_MODES
from airflow_provider_jetstream.core.errors import SpecError
from airflow_provider_jetstream.core.signatures.operations import (
    CONSUMER_LAG,
    HEADROOM_THRESHOLDS,
    KEY_CHECK,
    LOW_HEADROOM_POLICY,
    REPLICATION,
)
from airflow_provider_jetstream.core.signatures.options import ReplicationOptions
from airflow_provider_jetstream.core.signatures.shared import (
    API_PREFIX,
    CONN_ID,
    DOMAIN,
    ONE_TARGET,
    STREAM,
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
#: What a replication check takes, its judging rules grouped in :class:`~.options.ReplicationOptions`.
REPLICATION_WATCHED = REPLICATION.without(*ReplicationOptions.arguments.args) + Args(
    "replication options",
    {"options": options_arg(ReplicationOptions, "how an origin is judged: ReplicationOptions or a dict of its fields")},
)
REPLICATION_TRIGGER = (
    REPLICATION_WATCHED
    + HEADROOM_THRESHOLDS
    + LOW_HEADROOM_POLICY
    + WAIT
    + Args("poll", {"poll_interval": POLL_INTERVAL})
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
        {
            "poll_interval": POLL_INTERVAL.but(
                default=60.0, doc="seconds of silence before the watch is re-armed (it watches: no polling); default 60"
            )
        },
    )
)

# -- the await-message sensor and trigger -----------------------------------------------------------

_DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+")


def dotted_path(value: Any, field: str) -> str:
    """The dotted path of a function (``package.module.function``): the triggerer imports it by name."""
    if not isinstance(value, str) or not _DOTTED.fullmatch(value):
        raise SpecError(field, value, "use the importable dotted path of a function, e.g. 'my_dags.checks.is_ready'")
    return value


def _none_reads_alone(values: Mapping[str, Any], prefix: str) -> None:
    if values.get("ack_mode") == "none" and values.get("consumer"):
        raise SpecError(
            f"{prefix}consumer",
            values["consumer"],
            "with ack_mode='none' the sensor reads with a consumer of its own from where it started (a durable "
            "consumer would deliver every unacknowledged message again): leave consumer unset, or use "
            "ack_mode='on_match'",
        )


#: What the await-message sensor and its trigger look for, and how they acknowledge it.
AWAIT_MESSAGE = Args(
    "await message",
    {
        "stream": STREAM,
        "apply_function": Arg(
            dotted_path, REQUIRED, REFUSE, "dotted path of the function that examines each message", templated=True
        ),
        "apply_function_kwargs": Arg(
            optional(json_map),
            None,
            DEFAULT,
            "keyword arguments of apply_function (JSON); default none",
            templated=True,
        ),
        "consumer": Arg(
            optional(consumer_name),
            None,
            REFUSE,
            "the user's durable pull consumer (ack_policy explicit); default: the task's own, created",
            templated=True,
        ),
        "filter_subjects": Arg(
            optional(subject_list(stream_filter)),
            None,
            REFUSE,
            "subjects the task's own consumer delivers; default all",
            templated=True,
        ),
        "ack_mode": Arg(choice(ACK_MODES), "all_seen", VALUE, "all_seen (default), on_match or none", templated=True),
        "deliver_policy": Arg(
            choice(("new", "all", "last", "last_per_subject")),
            "new",
            VALUE,
            "where the task's own consumer starts when it is created; default new",
        ),
        "ack_wait": Arg(seconds(), 60.0, VALUE, "the task's own consumer's ack wait in seconds; default 60"),
        "max_wait": Arg(seconds(), 5.0, VALUE, "seconds one look (a poke) waits for messages; default 5"),
    },
    [
        Rule(("ack_mode", "consumer"), _none_reads_alone, "ack_mode='none' reads with a consumer of its own"),
        exclusive(
            "consumer",
            "filter_subjects",
            "the user's consumer delivers what its own filter says: give filter_subjects only without consumer",
        ),
    ],
)


def _state_with_positions(value: Any, field: str) -> dict[str, Any]:
    state = _state(value, field)
    if state.get("start_sequence") is not None:
        integer(1)(state["start_sequence"], f"{field}['start_sequence']")
    return state


#: ``JetStreamAwaitMessageTrigger``'s kwargs: the look, where, and the sensor's state (its pokes' positions).
AWAIT_MESSAGE_TRIGGER = (
    AWAIT_MESSAGE
    + WAIT.without("state")
    + Args(
        "await trigger",
        {
            "task_consumer": Arg(
                optional(consumer_name), None, DEFAULT, "the task's own consumer, created if missing; default none"
            ),
            "state": WAIT.args["state"].but(parse=optional(_state_with_positions)),
        },
    )
).ruled(exclusive("consumer", "task_consumer", "the sensor passes one consumer: the user's or the task's own"))

__all__ = [
    "AWAIT_MESSAGE",
    "AWAIT_MESSAGE_TRIGGER",
    "CONSUMER_LAG_TRIGGER",
    "HEADROOM_SENSOR",
    "KEY_TRIGGER",
    "POLL_INTERVAL",
    "REPLICATION_TRIGGER",
    "REPLICATION_WATCHED",
    "SENSOR",
    "WAIT",
]
