"""The durable source signature (nats-server 2.14+): a leaf's work-queue (or interest) stream, its flow-control
consumer and the hub stream's source of it, declared by one call (hook method and operator share it)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_provider_jetstream.core.arguments import DEFAULT, REFUSE, REQUIRED, Arg, Args, Rule
from airflow_provider_jetstream.core.arguments.names import delivery_subject, domain_name
from airflow_provider_jetstream.core.errors import SpecError
from airflow_provider_jetstream.core.manage.durable_source import DurableSource
from airflow_provider_jetstream.core.signatures.operations import _RECONCILE, _STORED, STREAM_SPEC
from airflow_provider_jetstream.core.signatures.shared import (
    ALLOW_DOUBLE_STORE,
    ALLOW_UNREACHABLE_ORIGINS,
    PEER_DOMAINS,
    STREAM,
)


def _fields(what: str) -> Any:
    """The parser of a dict of spec fields (checked in the spec they go into, by the rule below)."""

    def parse(value: Any, field: str) -> dict[str, Any]:
        if not isinstance(value, Mapping):
            raise SpecError(field, value, f"use a dict of {what}")
        return dict(value)

    return parse


def _transforms(value: Any, field: str) -> list[Any]:
    if not isinstance(value, (list, tuple)) or not value:
        raise SpecError(field, value, "use a non-empty list of {'src': ..., 'dest': ...} subject transforms")
    return list(value)


_DURABLE_PARTS = (
    "origin",
    "origin_domain",
    "stream",
    "consumer",
    "deliver_subject",
    "subject_transforms",
    "stream_overrides",
)


def _durable_source(values: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    parts = {key: values[key] for key in _DURABLE_PARTS}
    return {"durable_source": DurableSource.build(name=parts.pop("stream"), **parts)}


#: What the durable source operator takes in its options (:class:`~.options.DurableSourceOptions`).
DURABLE_TUNING = {
    "deliver_subject": Arg(
        delivery_subject,
        None,
        REFUSE,
        "where the origin's flow-control consumer pushes (a delivery subject: literal, outside the reserved "
        "spaces and the API prefixes); not given: '_sourcing.<stream>.<origin_domain>.<origin>'",
        templated=True,
    ),
    "subject_transforms": Arg(
        _transforms, None, DEFAULT, "the source's subject transforms ([{src, dest}]), applied in the copy"
    ),
}


#: One durable source (nats-server 2.14+): the origin's stream and flow-control consumer, the copy's source.
ENSURE_DURABLE_SOURCE = Args(
    "ensure durable source",
    {
        "origin": STREAM_SPEC.but(
            doc="the origin stream (in origin_domain): retention 'workqueue' (default) or 'interest', e.g. "
            "{'name': 'readings', 'subjects': ['sensors.a.>']}"
        ),
        "origin_domain": Arg(domain_name, REQUIRED, REFUSE, "the origin's JetStream domain (a leaf)", templated=True),
        "stream": STREAM.but(doc="the copying stream, in domain (the hub)"),
        "consumer": Arg(
            _fields("consumer fields"),
            None,
            DEFAULT,
            "the origin's flow-control consumer: its fields (name: default 'sourcing-<stream>'; filter_subject, "
            "start_seq, max_ack_pending, description...)",
            templated=True,
        ),
        **DURABLE_TUNING,
        "stream_overrides": Arg(
            _fields("stream fields"), None, DEFAULT, "other fields of the copying stream", templated=True
        ),
        **_RECONCILE,
        "allow_double_store": ALLOW_DOUBLE_STORE,
        "peer_domains": PEER_DOMAINS,
        "allow_unreachable_origins": ALLOW_UNREACHABLE_ORIGINS,
        **_STORED,
    },
    [Rule(_DURABLE_PARTS, _durable_source, "the three objects these arguments declare")],
)


def create_durable_source(declare: Args) -> Args:
    """``JetStreamCreateDurableSourceOperator``'s own arguments: the durable source's parts, and ``declare``
    (``if_exists``, and ``options`` holding the deliver subject, the subject transforms and the declare
    options); the derived value ``durable_source`` is what they declare."""
    parts = ENSURE_DURABLE_SOURCE.without(
        *DURABLE_TUNING, *_RECONCILE, *_STORED, "allow_double_store", "peer_domains", "allow_unreachable_origins"
    )
    signature = parts + declare

    def build(values: Mapping[str, Any], prefix: str) -> dict[str, Any]:
        options = values["options"]
        tuned = {"deliver_subject": options.deliver_subject, "subject_transforms": options.subject_transforms}
        return _durable_source({**values, **tuned}, prefix)

    return signature.ruled(Rule((*parts.args, "options"), build, "the three objects these arguments declare"))
