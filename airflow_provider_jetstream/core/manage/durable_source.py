"""Durable sourcing as one declaration: a work-queue (or interest) stream in the origin's domain, its
flow-control consumer, and the source of it in the copy's stream (nats-server 2.14+, the NATS ADR-60).

With an ordinary source the copying server reads the origin through an ephemeral consumer of its own,
and the origin (a limits stream at the edge) discards by its limits whether or not the copy has the
messages. With durable sourcing the origin is a work-queue or interest stream, and the copy reads it
through a durable consumer created on the origin with ``ack_policy: "flow_control"``: the copying
server acknowledges what it stored, in its flow-control replies, and only then does the origin delete
it. While the link is down the messages wait at the origin; nothing is dropped for want of a copy.

:class:`DurableSource` builds and checks the three specs from the arguments (pure logic);
:func:`check_origin_answers` refuses, before anything is sent to either domain, an origin domain that does
not answer (a domain never seen: a wrong name?); :func:`check_durable_levels` a domain whose server is older
than 2.14 (JetStream API level 4).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from airflow_provider_jetstream.core.api import JetStreamApi
from airflow_provider_jetstream.core.arguments.names import (
    check_stream_filter,
    consumer_filters,
    delivery_subject,
    domain_of,
    subjects_collide,
)
from airflow_provider_jetstream.core.errors import (
    JetStreamDomainUnavailableError,
    JetStreamNotFoundError,
    ReconcileError,
    SpecError,
    SpecErrors,
)
from airflow_provider_jetstream.core.manage.double_store import find_overlaps
from airflow_provider_jetstream.core.manage.origin_check import check_origin_domains, unanswered_domains
from airflow_provider_jetstream.core.manage.reconcile import check_api_level
from airflow_provider_jetstream.core.manage.specs import ConsumerSpec, StreamSpec
from airflow_provider_jetstream.core.manage.specs.consumer import FLOW_CONTROL
from airflow_provider_jetstream.core.manage.specs.diff import MOVED_CONSUMER
from airflow_provider_jetstream.core.manage.specs.sources import DURABLE_SOURCING_LEVEL, source_consumer, source_key

#: Retention policies an origin of durable sourcing may have: what the consumer acknowledges is deleted.
DURABLE_RETENTIONS = ("workqueue", "interest")
#: The origin's retention when its spec gives none.
DEFAULT_RETENTION = "workqueue"
#: Consumer fields the declaration sets itself.
_CONSUMER_OWN = ("ack_policy", "deliver_subject")


def default_consumer_name(stream: str) -> str:
    """The flow-control consumer's name when none is given: ``sourcing-<copy stream>``."""
    return f"sourcing-{stream}"


def default_deliver_subject(stream: str, origin_domain: str, origin: str) -> str:
    """The subject the consumer pushes to when none is given: ``_sourcing.<copy>.<origin domain>.<origin>``
    (no stream should listen there: it would store the copies a second time)."""
    return f"_sourcing.{stream}.{origin_domain}.{origin}"


@dataclass(frozen=True)
class DurableSource:
    """The three objects of one durable source, as checked specs.

    :param origin: the origin stream (in ``origin_domain``), work-queue or interest retention.
    :param origin_domain: the origin's JetStream domain.
    :param consumer: its flow-control consumer (``ack_policy`` ``flow_control``, a ``deliver_subject``).
    :param copy: the copying stream (in the caller's domain), its one source being this origin; other
        sources it has on the server are kept.
    """

    origin: StreamSpec
    origin_domain: str
    consumer: ConsumerSpec
    copy: StreamSpec

    @classmethod
    def build(
        cls,
        *,
        origin: StreamSpec | Mapping[str, Any],
        origin_domain: str,
        name: str,
        consumer: Mapping[str, Any] | None = None,
        deliver_subject: str | None = None,
        subject_transforms: list[Mapping[str, Any]] | None = None,
        stream_overrides: Mapping[str, Any] | None = None,
    ) -> DurableSource:
        """The specs of a durable source of ``origin`` (in ``origin_domain``) into stream ``name``.

        :param origin: the origin stream's spec; its ``retention`` defaults to ``workqueue`` (or give
            ``interest``); ``limits`` is refused: such a stream is sourced the ordinary way.
        :param consumer: more fields of the flow-control consumer (``name``, default
            ``sourcing-<name>``; ``filter_subject``, ``start_seq``, ``max_ack_pending``, ``description``...).
        :param deliver_subject: where the consumer pushes; default ``_sourcing.<name>.<origin domain>.<origin>``.
        :param subject_transforms: the source's subject transforms (``[{src, dest}]``), applied in the copy.
        :param stream_overrides: other fields of the copying stream (``max_age``, ``storage``, ``subjects``...).
        """
        errors: list[SpecError] = []
        origin_values = dict(origin.values) if isinstance(origin, StreamSpec) else dict(origin or {})
        retention = origin_values.setdefault("retention", DEFAULT_RETENTION)
        if str(retention).replace("_", "") not in DURABLE_RETENTIONS:
            errors.append(
                SpecError(
                    "origin.retention",
                    retention,
                    "durable sourcing deletes at the origin what the copy stored: use 'workqueue' (default) or "
                    "'interest'; a limits stream is sourced the ordinary way (JetStreamCreateSourcedStreamOperator)",
                )
            )
        if origin_values.get("mirror") or origin_values.get("sources"):
            errors.append(
                SpecError(
                    "origin.sources" if origin_values.get("sources") else "origin.mirror",
                    "...",
                    "the origin of durable sourcing is where data is written: a stream with subjects",
                )
            )
        extra = dict(consumer or {})
        for key in _CONSUMER_OWN:
            if key in extra:
                errors.append(
                    SpecError(
                        f"consumer.{key}",
                        extra[key],
                        "set by durable sourcing (ack_policy 'flow_control'; deliver_subject is its own argument)",
                    )
                )
        overrides = dict(stream_overrides or {})
        for key in ("name", "mirror", "sources"):
            if key in overrides:
                errors.append(SpecError(f"stream_overrides.{key}", overrides[key], "set by durable sourcing itself"))
        if errors:
            raise SpecErrors(errors)
        origin_spec = StreamSpec.from_dict(origin_values, "origin")
        consumer_name = extra.pop("name", None) or extra.pop("durable_name", None) or default_consumer_name(name)
        subject = (
            default_deliver_subject(name, origin_domain, origin_spec.name)
            if deliver_subject is None
            else deliver_subject
        )
        consumer_spec = ConsumerSpec.from_dict(
            {**extra, "name": consumer_name, "ack_policy": FLOW_CONTROL, "deliver_subject": subject}, "consumer"
        )
        origin_filters = consumer_filters(consumer_spec.values)
        where = f"the origin stream {origin_spec.name!r}"
        check_stream_filter(origin_filters, origin_spec.values, "consumer.filter_subject", where)
        source: dict[str, Any] = {
            "name": origin_spec.name,
            "domain": origin_domain,
            "consumer": {"name": consumer_spec.name, "deliver_subject": subject},
        }
        if subject_transforms:
            source["subject_transforms"] = list(subject_transforms)
        copy_spec = StreamSpec.from_dict({**overrides, "name": name, "sources": [source]}, "stream")
        stored = [(f"origin.subjects ({origin_spec.name!r})", s) for s in origin_spec.listen_subjects()] + [
            (f"stream_overrides.subjects ({name!r})", s) for s in copy_spec.listen_subjects()
        ]
        clash = [(where, s) for where, s in stored if subjects_collide(s, subject)]
        if clash:
            listing = ", ".join(f"{where}: {s!r}" for where, s in clash)
            raise SpecErrors([SpecError("deliver_subject", subject, deliver_subject_clash(listing))])
        return cls(origin=origin_spec, origin_domain=origin_domain, consumer=consumer_spec, copy=copy_spec)

    @property
    def deliver_subject(self) -> str:
        return self.consumer.values["deliver_subject"]


def deliver_subject_clash(listing: str) -> str:
    """Why a deliver subject some stream listens on is refused."""
    return (
        f"a stream listens there ({listing}): it would store every message the consumer pushes to the hub, a "
        "second copy; give a deliver_subject no stream listens on"
    )


async def check_deliver_subject(copy_api: JetStreamApi, source: DurableSource) -> None:
    """Refuse a deliver subject that a stream of the origin's or the copy's domain listens on (asked of both,
    ``STREAM.NAMES`` by subject), or one under the copy's API prefix (a request there is obeyed), before anything
    is sent: that stream would store every pushed message."""
    delivery_subject(source.deliver_subject, "deliver_subject", [copy_api.prefix])
    domains = [source.origin_domain, domain_of(copy_api.prefix)]
    overlaps, _ = await find_overlaps(
        copy_api.nc, [d for d in dict.fromkeys(domains) if d], [source.deliver_subject], timeout=copy_api.timeout
    )
    if overlaps:
        listing = ", ".join(f"stream {o.stream!r} in domain {o.domain!r}" for o in overlaps)
        raise SpecErrors([SpecError("deliver_subject", source.deliver_subject, deliver_subject_clash(listing))])


async def check_delivery_kept(origin_api: JetStreamApi, copy_api: JetStreamApi, source: DurableSource) -> None:
    """Refuse, before anything is sent, moving an existing durable source to another deliver subject or consumer
    name: the server refuses to move the origin's consumer, and takes the copy's new source, which then stops
    acknowledging (the origin would never drain). :class:`ReconcileError` naming what it has and what was asked."""
    wanted = source.copy.wire()["sources"][0]
    asked = f"consumer {source.consumer.name!r} at {source.deliver_subject!r}"
    moved = []
    try:
        info = await origin_api.consumer_info(source.origin.name, source.consumer.name)
    except JetStreamNotFoundError:  # no origin stream yet: nothing to move
        info = None
    pushes = ((info or {}).get("config") or {}).get("deliver_subject")
    if pushes and pushes != source.deliver_subject:
        moved.append(f"the origin's consumer {source.consumer.name!r} pushes to {pushes!r}")
    copy = await copy_api.stream_info(source.copy.name)
    for existing in ((copy or {}).get("config") or {}).get("sources") or []:
        had = source_consumer(existing)
        if source_key(existing) == source_key(wanted) and had and had != source_consumer(wanted):
            moved.append(
                f"stream {source.copy.name!r} reads it through consumer {had['name']!r} at {had['deliver_subject']!r}"
            )
    if moved:
        raise ReconcileError(
            f"durable source of {source.origin.name!r} in domain {source.origin_domain!r} into {source.copy.name!r} in "
            f"{copy_api.target}: {'; '.join(moved)}; it cannot move to {asked} in place: {MOVED_CONSUMER}; nothing was "
            "changed. Keep the deliver_subject and consumer it has; to move them, let the copy catch up (the "
            "replication check says caught up, the origin is drained), delete the consumer and the copy's source "
            "of it, and declare the durable source again"
        )


async def check_origin_answers(
    copy_api: JetStreamApi, source: DurableSource, *, peer_domains: Iterable[str] = (), allow: bool = False
) -> None:
    """Refuse, before anything is sent, a durable source whose origin domain does not answer now: its stream and
    flow-control consumer are declared there. A domain never seen (no copy of it in the copy's domain, not in
    ``peer_domains``) raises :class:`~airflow_provider_jetstream.core.errors.UnknownOriginDomainError` (a wrong
    domain name?) unless ``allow``; a known one (or allowed) :class:`JetStreamDomainUnavailableError`: waited
    for, a retry succeeds once the leaf is linked."""
    away = await unanswered_domains(copy_api.nc, [source.origin_domain], copy_api.timeout)
    if not away:
        return
    what = f"durable source of {source.origin.name!r} into {source.copy.name!r}"
    await check_origin_domains(
        copy_api.nc,
        target_prefix=copy_api.prefix,
        domains=[source.origin_domain],
        what=what,
        peer_domains=peer_domains,
        allow=allow,
        timeout=copy_api.timeout,
    )
    raise JetStreamDomainUnavailableError(
        f"{what}: origin domain {source.origin_domain!r} does not answer now ({away[source.origin_domain]}); its "
        "stream and flow-control consumer are declared there, so nothing can be declared before it is linked; "
        "nothing was changed"
    )


async def check_durable_levels(origin_api: JetStreamApi, copy_api: JetStreamApi, source: DurableSource) -> None:
    """Refuse, before anything is sent, a domain too old for durable sourcing: the origin's runs the
    flow-control consumer, the copy's reads it (both need JetStream API level 4, nats-server 2.14).
    A 2.10 server would silently drop the source's ``consumer`` and copy the work queue through an
    ordinary consumer, which deletes what it delivers whether or not it was stored."""
    await check_api_level(origin_api, source.consumer.requirements() + source.origin.requirements())
    await check_api_level(copy_api, source.copy.requirements())


__all__ = [
    "DEFAULT_RETENTION",
    "DURABLE_RETENTIONS",
    "DURABLE_SOURCING_LEVEL",
    "DurableSource",
    "check_deliver_subject",
    "check_delivery_kept",
    "check_durable_levels",
    "check_origin_answers",
    "default_consumer_name",
    "default_deliver_subject",
]
