"""Durable consumer specs: plain dicts in, validated JetStream API consumer config out.

Consumers are pull consumers, but for one push consumer: the flow-control consumer of durable sourcing
(nats-server 2.14+, the NATS ADR-60), ``ack_policy: "flow_control"`` with a ``deliver_subject``, which a
stream in another domain reads as a source (``sources[].consumer``). Its acknowledgements are the copying
server's flow-control replies, sent once it stored the messages; the server sets its flow control and
1 s heartbeat itself. What such a consumer cannot have (an ack wait, backoff, a delivery limit, pull
options) is refused here, before anything is sent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_provider_jetstream.core.arguments import durations as D
from airflow_provider_jetstream.core.arguments import names as N
from airflow_provider_jetstream.core.arguments import values as V
from airflow_provider_jetstream.core.errors import SpecError
from airflow_provider_jetstream.core.manage.specs import fields as F
from airflow_provider_jetstream.core.manage.specs.fields import Field, Spec, Struct

#: The ack policy of durable sourcing's consumer (nats-server 2.14+, JetStream API level 4).
FLOW_CONTROL = "flow_control"
_ACK = {"explicit": "explicit", "all": "all", "none": "none", FLOW_CONTROL: FLOW_CONTROL}
#: API level of the flow-control ack policy (nats-server 2.14).
FLOW_CONTROL_LEVEL = 4
_DELIVER = {
    "all": "all",
    "last": "last",
    "new": "new",
    "by_start_sequence": "by_start_sequence",
    "start_sequence": "by_start_sequence",
    "by_start_time": "by_start_time",
    "start_time": "by_start_time",
    "last_per_subject": "last_per_subject",
}
_REPLAY = {"instant": "instant", "original": "original"}
_PRIORITY = {"none": "none", "overflow": "overflow", "pinned_client": "pinned_client", "prioritized": "prioritized"}

#: Push-consumer fields: refused with a pointer to pull consumers (``deliver_subject`` is taken by the
#: flow-control consumer of durable sourcing, and refused on any other).
PUSH_FIELDS = ("deliver_group", "flow_control", "idle_heartbeat", "rate_limit_bps", "rate_limit")
#: Pull-only fields, refused on the flow-control (push) consumer of durable sourcing.
PULL_FIELDS = (
    "max_waiting",
    "max_batch",
    "max_expires",
    "max_bytes",
    "priority_groups",
    "priority_policy",
    "pinned_ttl",
)


def _pending(value: Any, path: str) -> int:
    number = V.integer(-1)(value, path)
    if number == 0:
        raise SpecError(path, value, "use -1 (unlimited) or a positive number (0 would mean the server default)")
    return number


def _backoff(value: Any, path: str) -> list[int]:
    return V.list_of(D.nanoseconds(allow_zero=False), min_items=1)(value, path)


CONSUMER = Struct(
    "consumer",
    (
        Field(
            "name",
            "durable_name",
            N.consumer_name,
            "durable name",
            aliases=("durable",),
            editable=F.IMMUTABLE,
        ),
        Field("description", "description", V.text, "free text", normalize=F.norm_text),
        F.choice_field(
            "ack_policy",
            "ack_policy",
            _ACK,
            "explicit | all | none | flow_control (2.14: durable sourcing)",
            "explicit",
            editable=F.IMMUTABLE,
            since="2.14",
            level=FLOW_CONTROL_LEVEL,
            active=lambda v: v == FLOW_CONTROL,
        ),
        Field(
            "deliver_subject",
            "deliver_subject",
            N.delivery_subject,
            "where the flow-control consumer of durable sourcing pushes (ack_policy flow_control only)",
            normalize=F.norm_text,
            editable=F.IMMUTABLE,  # the server refuses to move it ("consumer name already in use")
        ),
        Field(
            "ack_wait",
            "ack_wait",
            D.nanoseconds(allow_zero=False),
            "redelivery delay (default 30s)",
            show=F.show_duration,
        ),
        F.limit_field("max_deliver", "max_deliver", "deliveries per message, -1: unlimited"),
        Field(
            "backoff",
            "backoff",
            _backoff,
            "redelivery delays, one per attempt",
            since="2.7.1",
            show=lambda v: "[" + ", ".join(F.show_duration(x) for x in v or []) + "]",
            normalize=lambda v: list(v) if v else None,
        ),
        Field(
            "filter_subject", "filter_subject", N.stream_filter, "deliver only these subjects", normalize=F.norm_text
        ),
        Field(
            "filter_subjects",
            "filter_subjects",
            N.subject_list(N.stream_filter),
            "several filters",
            since="2.10",
            normalize=F.norm_sorted,
        ),
        F.choice_field(
            "deliver_policy",
            "deliver_policy",
            _DELIVER,
            "all | last | new | by_start_sequence | by_start_time | last_per_subject",
            "all",
            editable=F.IMMUTABLE,
        ),
        Field(
            "start_seq",
            "opt_start_seq",
            V.integer(1),
            "first stream sequence (deliver by_start_sequence)",
            editable=F.IMMUTABLE,
        ),
        Field(
            "start_time",
            "opt_start_time",
            D.parse_instant,
            "first instant (deliver by_start_time)",
            editable=F.IMMUTABLE,
            normalize=F.norm_instant,
        ),
        Field("max_ack_pending", "max_ack_pending", _pending, "unacked messages in flight, -1: unlimited"),
        Field("max_waiting", "max_waiting", V.integer(1), "pull requests waiting (default 512)", editable=F.IMMUTABLE),
        Field("max_batch", "max_request_batch", V.integer(0), "largest pull batch", normalize=F.norm_zero_none),
        F.duration_field("max_expires", "max_request_expires", "longest pull expiry"),
        Field("max_bytes", "max_request_max_bytes", V.integer(0), "largest pull in bytes", normalize=F.norm_zero_none),
        F.duration_field("inactive_threshold", "inactive_threshold", "delete after this long unused"),
        Field("replicas", "num_replicas", V.integer(0, 5), "0: as the stream", normalize=F.norm_zero_none),
        F.flag("mem_storage", "mem_storage", "keep state in memory", editable=F.IMMUTABLE),
        F.flag("headers_only", "headers_only", "deliver headers only"),
        F.choice_field(
            "replay_policy", "replay_policy", _REPLAY, "instant | original", "instant", editable=F.IMMUTABLE
        ),
        Field("sample_freq", "sample_freq", V.text, "ack sampling, e.g. '100%'", normalize=F.norm_text),
        Field("metadata", "metadata", V.string_map, "string -> string", since="2.10", normalize=F.norm_metadata),
        Field(
            "pause_until",
            "pause_until",
            D.parse_instant,
            "paused until this instant",
            since="2.11",
            level=1,
            normalize=F.norm_instant,
        ),
        Field(
            "priority_groups",
            "priority_groups",
            V.list_of(V.text, min_items=1),
            "pull priority groups",
            since="2.11",
            level=1,
            normalize=F.norm_sorted,
        ),
        F.choice_field(
            "priority_policy",
            "priority_policy",
            _PRIORITY,
            "none | overflow | pinned_client",
            "none",
            since="2.11",
            level=1,
            active=lambda v: v not in (None, "none"),
        ),
        F.duration_field("pinned_ttl", "priority_timeout", "pinned client TTL", since="2.11", level=1),
    ),
)


def consumer_server_view(config: Mapping[str, Any]) -> dict[str, Any]:
    """The server's consumer config with one filter form filled from the other, for comparison."""
    view = dict(config)
    subjects = view.get("filter_subjects") or []
    if not view.get("filter_subject") and len(subjects) == 1:
        view["filter_subject"] = subjects[0]
    if view.get("filter_subject") and not subjects:
        view["filter_subjects"] = [view["filter_subject"]]
    return view


@dataclass(frozen=True)
class ConsumerSpec(Spec):
    """A validated durable consumer spec (fields given only, in API form): a pull consumer, or durable
    sourcing's flow-control push consumer (``ack_policy`` ``flow_control`` with a ``deliver_subject``)."""

    path: str = "consumer"

    struct = CONSUMER

    unnamed = "a durable consumer needs a name"

    @classmethod
    def prepare(cls, data: Any, path: str, errors: list[SpecError]) -> Any:
        """``data`` without push-consumer fields, the first one refused."""
        push = [k for k in data if k in PUSH_FIELDS] if isinstance(data, Mapping) else []
        if not push:
            return data
        errors.append(
            SpecError(
                f"{path}.{push[0]}",
                data[push[0]],
                "push consumers are not managed here: a durable pull consumer works across domains "
                "and accounts (the NATS docs: cross-account, only pull consumers are supported); the one "
                "push consumer, durable sourcing's, takes ack_policy 'flow_control' and deliver_subject "
                "(the server sets its flow control and heartbeat)",
            )
        )
        return {k: v for k, v in data.items() if k not in PUSH_FIELDS}

    @classmethod
    def check(cls, values: dict[str, Any], path: str) -> list[SpecError]:
        errors: list[SpecError] = []
        _check_consumer(values, path, errors)
        return errors

    @property
    def name(self) -> str:
        return self.values["name"]


def _check_consumer(values: dict[str, Any], path: str, errors: list[SpecError]) -> None:
    if "filter_subject" in values and "filter_subjects" in values:
        errors.append(
            SpecError(f"{path}.filter_subject", values["filter_subject"], "give filter_subject or filter_subjects")
        )
    policy = values.get("deliver_policy")
    for key, wanted in (("opt_start_seq", "by_start_sequence"), ("opt_start_time", "by_start_time")):
        name = "start_seq" if key == "opt_start_seq" else "start_time"
        if name in values:
            if policy is None:
                values["deliver_policy"] = policy = wanted
            elif policy != wanted:
                errors.append(
                    SpecError(f"{path}.{name}", values[name], f"it goes with deliver_policy {wanted!r}, not {policy!r}")
                )
    for name, wanted in (("start_seq", "by_start_sequence"), ("start_time", "by_start_time")):
        if policy == wanted and name not in values:
            errors.append(SpecError(f"{path}.deliver_policy", policy, f"deliver_policy {wanted!r} needs {name}"))
    backoff = values.get("backoff")
    max_deliver = values.get("max_deliver")
    if backoff and max_deliver not in (None, -1) and max_deliver <= len(backoff):
        errors.append(
            SpecError(
                f"{path}.max_deliver",
                max_deliver,
                f"with {len(backoff)} backoff delays, max_deliver must be > {len(backoff)} (or -1)",
            )
        )
    if backoff and "ack_wait" in values:
        errors.append(SpecError(f"{path}.ack_wait", "...", "with backoff, the first backoff delay is the ack wait"))
    if values.get("priority_policy", "none") != "none" and not values.get("priority_groups"):
        errors.append(SpecError(f"{path}.priority_policy", values["priority_policy"], "it needs priority_groups"))
    if values.get("ack_policy") == FLOW_CONTROL:
        _check_flow_control(values, path, errors)
    elif "deliver_subject" in values:
        errors.append(
            SpecError(
                f"{path}.deliver_subject",
                values["deliver_subject"],
                "push consumers are not managed here, but for the flow-control consumer of durable sourcing "
                "(ack_policy 'flow_control'); others are pull consumers, which work across domains and accounts",
            )
        )


def _check_flow_control(values: dict[str, Any], path: str, errors: list[SpecError]) -> None:
    """What the server requires of a flow-control consumer (nats-server's ``checkConsumerCfg``), said first."""
    why = "a flow-control consumer (durable sourcing) is acknowledged by the copying server's flow control"
    if "deliver_subject" not in values:
        errors.append(
            SpecError(
                f"{path}.deliver_subject",
                None,
                f"{why}: it pushes to a deliver_subject, the one the source's consumer names",
            )
        )
    for key in ("ack_wait", "backoff"):
        if key in values:
            errors.append(SpecError(f"{path}.{key}", "...", f"{why}: it has no {key} (leave it out)"))
    if values.get("max_deliver") not in (None, -1):
        errors.append(
            SpecError(
                f"{path}.max_deliver",
                values["max_deliver"],
                f"{why}: use -1 (or leave it out): a message lost in transit is delivered again until stored",
            )
        )
    if values.get("max_ack_pending") == -1:
        errors.append(
            SpecError(
                f"{path}.max_ack_pending",
                -1,
                f"{why}: use a positive number (messages in flight before it waits for an acknowledgement; "
                "default 1000)",
            )
        )
    for key in PULL_FIELDS:
        if key in values:
            errors.append(SpecError(f"{path}.{key}", values[key], f"{why}: it is a push consumer, {key} is for pulls"))
