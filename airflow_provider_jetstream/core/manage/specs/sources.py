"""Sources and mirrors of a stream: where the origin lives (``domain``, or ``api_prefix`` and
``deliver_prefix`` for a cross-account import), validated, described and compared.

``{"name": "test", "domain": "leaf"}`` means the external API ``$JS.leaf.API``; an imported API is
``{"name": "test", "api_prefix": "JS.acc@hub.API", "deliver_prefix": ...}``.

**Durable sourcing** (nats-server 2.14+, JetStream API level 4; the NATS ADR-60): ``consumer`` names a
durable consumer the user created on the origin stream (``ack_policy: flow_control``, pushing to
``deliver_subject``), which the copying server resets and reads instead of creating an ephemeral one.
The origin acknowledges a message once the copy stored it, so a work-queue or interest origin deletes
only what the copy holds. The consumer then filters and positions: ``filter_subject``, ``start_seq``
and ``start_time`` are refused beside it (the server refuses them too).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from airflow_provider_jetstream.core.arguments import durations as D
from airflow_provider_jetstream.core.arguments import names as N
from airflow_provider_jetstream.core.arguments import values as V
from airflow_provider_jetstream.core.arguments.names import domain_of
from airflow_provider_jetstream.core.errors import SpecError
from airflow_provider_jetstream.core.manage.specs import fields as F
from airflow_provider_jetstream.core.manage.specs.fields import Field, Struct

TRANSFORM = Struct(
    "subject transform",
    (
        Field("src", "src", N.stream_filter, "subjects to transform", aliases=("source",)),
        Field("dest", "dest", N.stored_subject, "destination subject (mapping)", aliases=("destination",)),
    ),
)


def check_transform(values: dict[str, Any], path: str) -> None:
    if "dest" not in values:
        raise SpecError(f"{path}.dest", None, "a subject transform needs 'dest' (and usually 'src')")


transform = F.nested(TRANSFORM, check_transform)

#: API level (nats-server 2.14) of durable sourcing: a source's ``consumer``, the ``flow_control`` ack policy.
DURABLE_SOURCING_LEVEL = 4

SOURCE_CONSUMER = Struct(
    "source consumer",
    (
        Field("name", "name", N.consumer_name, "the durable consumer on the origin stream (ack_policy flow_control)"),
        Field(
            "deliver_subject",
            "deliver_subject",
            N.delivery_subject,
            "the subject that consumer pushes to (its deliver_subject), where the copying server listens",
        ),
    ),
)


def check_source_consumer(values: dict[str, Any], path: str) -> None:
    errors = [
        SpecError(f"{path}.{key}", None, f"durable sourcing needs the consumer's {key} ({what})")
        for key, what in (("name", "its durable name"), ("deliver_subject", "where it pushes"))
        if key not in values
    ]
    F.raise_all(errors)


SOURCE = Struct(
    "source",
    (
        Field("name", "name", N.stream_name, "name of the origin stream"),
        Field("domain", "domain", N.domain_name, "JetStream domain of the origin: external API $JS.<domain>.API"),
        Field("api_prefix", "api_prefix", N.api_prefix, "external API prefix, e.g. the imported JS.acc@hub.API"),
        Field("deliver_prefix", "deliver_prefix", N.delivery_subject, "delivery subject prefix (imports)"),
        Field("filter_subject", "filter_subject", N.stream_filter, "copy only messages on these subjects"),
        Field(
            "subject_transforms",
            "subject_transforms",
            V.list_of(transform, min_items=1),
            "filter and transform subjects while copying",
            since="2.10",
        ),
        Field("start_seq", "opt_start_seq", V.integer(1), "first origin sequence to copy"),
        Field("start_time", "opt_start_time", D.parse_instant, "copy from this instant"),
        Field(
            "consumer",
            "consumer",
            F.nested(SOURCE_CONSUMER, check_source_consumer),
            "durable sourcing: the origin's flow-control consumer to read ({name, deliver_subject})",
            since="2.14",
            level=DURABLE_SOURCING_LEVEL,
        ),
    ),
)


def parse_source(value: Any, path: str) -> dict[str, Any]:
    """A source/mirror spec in API form: ``{"name", ..., "external": {"api", "deliver"}}``."""
    values = SOURCE.parse(value, path)
    errors: list[SpecError] = []
    if "name" not in values:
        errors.append(SpecError(f"{path}.name", None, "a source or mirror names its origin stream"))
    if "domain" in values and "api_prefix" in values:
        errors.append(
            SpecError(
                f"{path}.domain",
                values["domain"],
                f"give domain or api_prefix, not both: domain {values['domain']!r} means the API prefix "
                f"'$JS.{values['domain']}.API'",
            )
        )
    if "deliver_prefix" in values and not ("domain" in values or "api_prefix" in values):
        errors.append(
            SpecError(
                f"{path}.deliver_prefix",
                values["deliver_prefix"],
                "a delivery prefix goes with an external origin: give api_prefix (or domain) too",
            )
        )
    if "filter_subject" in values and "subject_transforms" in values:
        errors.append(
            SpecError(
                f"{path}.filter_subject",
                values["filter_subject"],
                "give filter_subject or subject_transforms, not both (each transform's 'src' is its filter)",
            )
        )
    if "start_seq" in values and "start_time" in values:
        errors.append(SpecError(f"{path}.start_seq", values["start_seq"], "give start_seq or start_time, not both"))
    if "consumer" in values:
        for key in ("filter_subject", "start_seq", "start_time"):
            if key in values:
                errors.append(
                    SpecError(
                        f"{path}.{key}",
                        values[key],
                        f"with a durable consumer ({path}.consumer) the consumer decides what is copied from "
                        f"where: set {key} on that consumer, not on the source",
                    )
                )
    F.raise_all(errors)
    wire: dict[str, Any] = {"name": values["name"]}
    for key, wire_key in (
        ("start_seq", "opt_start_seq"),
        ("start_time", "opt_start_time"),
        ("filter_subject", "filter_subject"),
        ("subject_transforms", "subject_transforms"),
        ("consumer", "consumer"),
    ):
        if key in values:
            wire[wire_key] = values[key]
    api = f"$JS.{values['domain']}.API" if "domain" in values else values.get("api_prefix")
    if api:
        wire["external"] = {"api": api}
        if values.get("deliver_prefix"):
            wire["external"]["deliver"] = values["deliver_prefix"]
    return wire


def bucket_origin(
    kind: str, example: str, check_name: Callable[[Any, str], Any]
) -> Callable[[Any, str], dict[str, Any]]:
    """The parser of a bucket's mirror/source (``kind``: "KV", "object store"): the origin ``bucket`` (or
    ``name``, checked with ``check_name``) and where it lives; whole buckets only (no filter, no transform)."""

    def parse(value: Any, path: str) -> dict[str, Any]:
        if not isinstance(value, Mapping):
            raise SpecError(path, value, f"a {kind} mirror or source is a dict like {example}")
        data = dict(value)
        if "bucket" in data:
            if "name" in data:
                raise SpecError(f"{path}.bucket", data["bucket"], "give bucket or name, not both")
            data["name"] = data.pop("bucket")
        if "name" in data:
            check_name(data["name"], f"{path}.bucket")
        if "filter_subject" in data or "subject_transforms" in data:
            raise SpecError(f"{path}.filter_subject", "...", f"{kind} mirrors and sources copy whole buckets")
        return parse_source(data, path)

    return parse


def source_key(source: Mapping[str, Any]) -> tuple[str, str]:
    """What identifies a source: its origin stream and the API it is reached through."""
    external = source.get("external") or {}
    return source.get("name", ""), (external.get("api") or "").rstrip(".")


def describe_source(source: Mapping[str, Any]) -> str:
    name, api = source_key(source)
    if not api:
        return repr(name)
    domain = domain_of(api)
    if domain:
        return f"{name!r} in domain {domain!r}"
    return f"{name!r} via {api!r}"


def norm_source(source: Any) -> Any:
    """A source/mirror without server-filled defaults, comparable with a desired one."""
    if not source:
        return None
    out: dict[str, Any] = {"name": source.get("name")}
    if source.get("opt_start_seq"):
        out["opt_start_seq"] = source["opt_start_seq"]
    moment = F.norm_instant(source.get("opt_start_time"))
    if moment is not None:
        out["opt_start_time"] = moment
    if source.get("filter_subject") and source.get("filter_subject") != ">":
        out["filter_subject"] = source["filter_subject"]
    transforms = [
        {"src": t.get("src") or ">", "dest": t.get("dest") or ""} for t in source.get("subject_transforms") or []
    ]
    if transforms:
        out["subject_transforms"] = transforms
    external = source.get("external") or {}
    if external.get("api"):
        out["api"] = external["api"].rstrip(".")
    if external.get("deliver"):
        out["deliver"] = external["deliver"]
    consumer = source_consumer(source)
    if consumer:
        out["consumer"] = consumer
    return out


def source_consumer(source: Mapping[str, Any] | None) -> dict[str, str] | None:
    """A source's durable consumer ``{"name", "deliver_subject"}`` (durable sourcing); None: the copying
    server reads the origin through a consumer of its own."""
    consumer = (source or {}).get("consumer") or {}
    if not consumer.get("name"):
        return None
    return {"name": consumer["name"], "deliver_subject": consumer.get("deliver_subject") or ""}


def requirements_of_sources(values: Mapping[str, Any], path: str) -> list[F.Requirement]:
    """The API level the stream's mirror or sources need (durable sourcing: their ``consumer``)."""
    found = []
    if source_consumer(values.get("mirror")):
        found.append(F.Requirement(f"{path}.mirror.consumer", DURABLE_SOURCING_LEVEL, "2.14"))
    for i, source in enumerate(values.get("sources") or []):
        if source_consumer(source):
            found.append(F.Requirement(f"{path}.sources[{i}].consumer", DURABLE_SOURCING_LEVEL, "2.14"))
    return found


def norm_sources(sources: Any) -> Any:
    if not sources:
        return None
    return sorted((norm_source(s) for s in sources), key=lambda s: (s["name"], s.get("api", ""), repr(s)))


def show_source(source: Any) -> str:
    if not source:
        return "none"
    parts = [describe_source(source)]
    for key in ("filter_subject", "opt_start_seq", "opt_start_time"):
        if source.get(key):
            parts.append(f"{key}={source[key]!r}")
    if source.get("subject_transforms"):
        parts.append("transforms=" + ",".join(f"{t.get('src')}->{t.get('dest')}" for t in source["subject_transforms"]))
    deliver = (source.get("external") or {}).get("deliver")
    if deliver:
        parts.append(f"deliver={deliver!r}")
    consumer = source_consumer(source)
    if consumer:
        parts.append(f"consumer={consumer['name']!r} (deliver_subject {consumer['deliver_subject']!r})")
    return " ".join(parts)
