"""Reconcile a spec with the server: create, update, skip, fail, recreate, or plan (dry run).

Shared by every "create" operator (streams, mirrors, sourced streams, KV buckets, consumers):

1. One request reads the object (``STREAM.INFO`` / ``CONSUMER.INFO``). An unchanged spec stops
   here: one round trip, nothing sent.
2. Missing: check the target's JetStream API level against the fields the spec uses, run the
   caller's checks (the origin domains of its mirror and sources answer or are known, see
   :mod:`~airflow_provider_jetstream.core.manage.origin_check`; the double-store topology check), then create
   with exactly the fields given. An update that adds sources runs the origin check too.
3. Present: diff (see :mod:`airflow_provider_jetstream.core.manage.specs.diff`). Changes the server applies in
   place are sent as the server's own config with the spec's fields laid over it, so nothing the
   spec does not name is reset, and sources the spec does not name are kept. A change that would
   need a new object (storage, retention, ...) fails listing every such field ``old -> new``,
   unless ``if_exists="recreate"``, the only path that deletes the object. A change the server
   applies in place by discarding stored data (a limit on what is stored lowered, or set where there
   was none: ``max_msgs``, ``max_bytes``, ``max_age``, ``max_msgs_per_subject``; a bucket's
   ``history``, ``max_bytes``, ``ttl``) fails the same way unless ``allow_data_loss=True``; and so
   does lowering the data's durability in place (``replicas`` / ``num_replicas`` of a stream or a
   bucket lowered: fewer node losses survived).

Requests go straight to the JetStream API as JSON (``JetStreamApi``), so only the fields the user
set are sent: servers >= 2.12 reject unknown fields (strict API), and older servers silently drop
fields they do not know, which is why the API level is checked first.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_jetstream.core.api import JetStreamApi
from airflow_provider_jetstream.core.arguments.names import check_stream_filter, consumer_filters, domain_of
from airflow_provider_jetstream.core.arguments.values import choice
from airflow_provider_jetstream.core.errors import (
    ReconcileError,
)
from airflow_provider_jetstream.core.manage.cluster import cluster_health
from airflow_provider_jetstream.core.manage.specs import (
    CONSUMER,
    STREAM,
    ConsumerSpec,
    Diff,
    Requirement,
    StreamSpec,
    consumer_server_view,
    describe_source,
    diff_config,
)
from airflow_provider_jetstream.core.manage.specs.fields import API_LEVEL_VERSIONS

log = logging.getLogger(__name__)

IF_EXISTS = ("update", "skip", "fail", "recreate")


@dataclass
class ReconcileResult:
    """What a reconcile did; :meth:`as_xcom` is the operators' return value."""

    kind: str
    name: str
    action: str
    domain: str | None = None
    api_prefix: str | None = None
    changes: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)
    requests: int = 0
    plan: str | None = None
    drift: dict[str, Any] | None = None

    def as_xcom(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "action": self.action,
            "kind": self.kind,
            "name": self.name,
            "domain": self.domain,
            "changes": self.changes,
            "state": self.state,
            "requests": self.requests,
        }
        if self.api_prefix:
            out["api_prefix"] = self.api_prefix
        if self.notes:
            out["notes"] = self.notes
        if self.plan:
            out["plan"] = self.plan
        if self.drift is not None:
            out["skipped"] = True
            out["drift"] = self.drift
        return out


Guard = Callable[[], Awaitable[None]]
#: A check of the origin domains a declaration copies from: the warnings to add to the result's notes.
OriginCheck = Callable[[], Awaitable[list[str]]]


#: The parser of ``if_exists``: every layer's (``core.signatures.shared.IF_EXISTS_ARG``), and this module's own.
parse_if_exists = choice(IF_EXISTS, f"use one of {', '.join(IF_EXISTS)}")


def check_if_exists(if_exists: str) -> str:
    """``if_exists`` parsed as every layer parses it (the reconcile functions are called directly too)."""
    return parse_if_exists(if_exists, "if_exists")


async def check_api_level(api: JetStreamApi, requirements: list[Requirement]) -> None:
    """Refuse fields the target's server is too old for, judged from the API level it reports."""
    if not requirements:
        return
    level, domain = await api.api_level()
    target = f"domain {domain!r}" if domain else api.target
    too_new = [r for r in requirements if r.level > level]
    if too_new:
        raise ReconcileError(
            "; ".join(r.message(target, level) for r in too_new)
            + f" (API level {max(r.level for r in too_new)} = nats-server "
            f"{API_LEVEL_VERSIONS.get(max(r.level for r in too_new), '?')}); nothing was sent"
        )


def stream_state(info: Mapping[str, Any]) -> dict[str, Any]:
    """A short state summary: messages, sequences, consumers, replication health (``mirror`` / ``sources``)
    and, on a cluster, the stream's leader and replicas (``cluster``: see :func:`.cluster.cluster_health`;
    absent on a single server)."""
    state = info.get("state") or {}
    out: dict[str, Any] = {
        key: state.get(key, 0) for key in ("messages", "bytes", "first_seq", "last_seq", "consumer_count")
    }

    def replication(entry: Mapping[str, Any], config: Mapping[str, Any] | None) -> dict[str, Any]:
        active = entry.get("active", -1)
        return {
            "source": describe_source(config or entry),
            "lag": entry.get("lag", 0),
            "active_s": round(active / 1e9, 3) if isinstance(active, int) and active >= 0 else None,
            "error": (entry.get("error") or {}).get("description") if entry.get("error") else None,
        }

    config = info.get("config") or {}
    if info.get("mirror"):
        out["mirror"] = replication(info["mirror"], config.get("mirror"))
    if info.get("sources"):
        configs = {(s.get("name"), (s.get("external") or {}).get("api")): s for s in config.get("sources") or []}
        out["sources"] = [
            replication(s, configs.get((s.get("name"), (s.get("external") or {}).get("api")))) for s in info["sources"]
        ]
    health = cluster_health(info.get("cluster"))
    if health is not None:
        out["cluster"] = health
    return out


def consumer_state(info: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "num_pending": info.get("num_pending", 0),
        "num_ack_pending": info.get("num_ack_pending", 0),
        "num_redelivered": info.get("num_redelivered", 0),
        "num_waiting": info.get("num_waiting", 0),
        "delivered_stream_seq": (info.get("delivered") or {}).get("stream_seq", 0),
        "ack_floor_stream_seq": (info.get("ack_floor") or {}).get("stream_seq", 0),
        "paused": bool(info.get("paused")),
    }


def _replace_error(
    kind: str, name: str, target: str, diff: Diff, dry_run: bool, advice: str | None, names: Mapping[str, str]
) -> ReconcileError:
    fields = "\n  ".join(c.line(names) for c in diff.replace_forcing)
    in_place = [c.field for c in diff.changes if c.in_place]
    also = f"\n(also changing in place: {', '.join(in_place)})" if in_place else ""
    recreate = advice or (
        f"if_exists='recreate' would delete the {kind} and create it again, deleting its data"
        + (" and consumers" if kind in ("stream", "bucket", "object store") else " and its delivery state")
    )
    return ReconcileError(
        f"{'dry run: ' if dry_run else ''}{kind} {name!r} in {target} cannot be changed in place; the server "
        f"would need a new {kind} for:\n  {fields}{also}\n{recreate}; nothing was changed"
    )


def _data_loss_error(
    kind: str, name: str, target: str, diff: Diff, dry_run: bool, names: Mapping[str, str]
) -> ReconcileError:
    fields = "\n  ".join(c.line(names) for c in diff.discarding)
    return ReconcileError(
        f"{'dry run: ' if dry_run else ''}{kind} {name!r} in {target}: this change would discard stored data or "
        f"lower its durability in place (a limit on what is stored lowered, or set where there was none; fewer "
        f"replicas):\n  {fields}\n"
        f"allow_data_loss=True accepts the loss (with dry_run=True the plan is shown and nothing changes); "
        f"nothing was changed"
    )


def _log_plan(logger: logging.Logger | logging.LoggerAdapter, what: str, diff: Diff | None) -> None:
    if diff is None:
        logger.info("%s", what)
        return
    lines = diff.lines() + [f"note: {n}" for n in diff.notes]
    logger.info("%s%s", what, ("\n  " + "\n  ".join(lines)) if lines else "")


@dataclass
class _Object:
    """What the reconcile ladder needs to know of one kind of object (a stream, a consumer)."""

    kind: str
    label: str
    summary: str
    spec: StreamSpec | ConsumerSpec
    diff: Callable[[Mapping[str, Any]], Diff]
    create: Callable[[], Awaitable[Mapping[str, Any]]]
    update: Callable[[Mapping[str, Any]], Awaitable[Mapping[str, Any]]]
    delete: Callable[[], Awaitable[Any]]
    state: Callable[[Mapping[str, Any]], dict[str, Any]]
    #: What recreating deletes, in words.
    loses: str
    guard: Guard | None = None
    #: The check of the origin domains it copies from, run before creating it or adding sources.
    origin_check: OriginCheck | None = None
    #: Whether an in-place update needs the guard, given what changes.
    guard_update: Callable[[Diff], bool] = lambda diff: False
    replace_advice: Callable[[Mapping[str, Any]], str | None] | None = None
    #: The spec's own name of a field whose name differs (a bucket's ``history``), shown in refusals.
    names: Mapping[str, str] = field(default_factory=dict)


def _result(kind: str, name: str, api: JetStreamApi) -> ReconcileResult:
    domain = domain_of(api.prefix)
    return ReconcileResult(
        kind=kind,
        name=name,
        action="unchanged",
        domain=domain,
        api_prefix=None if domain or api.prefix == "$JS.API" else api.prefix,
    )


async def _reconcile(
    api: JetStreamApi,
    obj: _Object,
    info: Mapping[str, Any] | None,
    result: ReconcileResult,
    *,
    if_exists: str,
    dry_run: bool,
    allow_data_loss: bool,
    logger: logging.Logger | logging.LoggerAdapter,
) -> ReconcileResult:
    """The one ladder: create what is missing; else fail, skip, leave, recreate or update (or plan
    it, on a dry run), by ``if_exists``, by what the diff says the server can change in place, and by
    whether an in-place change discarding stored data, or lowering its durability, is allowed (``allow_data_loss``)."""
    kind, label, where = obj.kind, obj.label, api.target
    requirements = obj.spec.requirements()

    async def checks(fields: list[Requirement], guarded: bool, copies: bool) -> None:
        await check_api_level(api, fields)
        if obj.origin_check and copies:
            result.notes = [*result.notes, *await obj.origin_check()]
        if obj.guard and guarded:
            await obj.guard()

    if info is None:
        result.changes = {"created": {"old": "absent", "new": obj.summary}}
        await checks(requirements, True, True)
        if dry_run:
            result.action, result.plan = "planned", "create"
            _log_plan(logger, f"dry run: would create {kind} {label!r} in {where}: {obj.spec.wire()}", None)
            return _done(result, api)
        result.state = obj.state(await obj.create())
        result.action = "created"
        logger.info("created %s %r in %s", kind, label, where)
        return _done(result, api)

    config = info.get("config") or {}
    diff = obj.diff(config)
    result.notes = diff.notes
    result.state = obj.state(info)
    if if_exists == "fail":
        drift = "; it differs: " + "; ".join(diff.lines()) if diff.changes else " (same config)"
        raise ReconcileError(f"{kind} {label!r} already exists in {where} and if_exists='fail'{drift}")
    if if_exists == "skip":
        result.drift = diff.as_dict()
        if diff.changes:
            logger.warning("%s %r exists in %s; skipped, drift: %s", kind, label, where, "; ".join(diff.lines()))
        return _done(result, api)
    if diff.unchanged:
        _log_plan(logger, f"{kind} {label!r} in {where} is unchanged", diff)
        return _done(result, api)
    result.changes = diff.as_dict()
    if diff.replace_forcing:
        advice = obj.replace_advice(config) if obj.replace_advice else None
        if if_exists != "recreate":
            raise _replace_error(kind, label, where, diff, dry_run, advice, obj.names)
        if advice:
            result.notes = [*result.notes, advice]
        await checks(requirements, True, True)
        if dry_run:
            result.action, result.plan = "planned", "recreate"
            _log_plan(logger, f"dry run: would delete and recreate {kind} {label!r} in {where}:", diff)
            return _done(result, api)
        _log_plan(logger, f"recreating {kind} {label!r} in {where} ({obj.loses}):", diff)
        await obj.delete()
        result.state = obj.state(await obj.create())
        result.action = "recreated"
        return _done(result, api)
    if diff.discarding and not allow_data_loss:
        raise _data_loss_error(kind, label, where, diff, dry_run, obj.names)
    changed = diff.as_dict()
    await checks(
        [r for r in requirements if r.top_field(obj.spec.path) in changed], obj.guard_update(diff), "sources" in changed
    )
    if dry_run:
        result.action, result.plan = "planned", "update"
        _log_plan(logger, f"dry run: would update {kind} {label!r} in {where}:", diff)
        return _done(result, api)
    result.state = obj.state(await obj.update(diff.update_config))
    result.action = "updated"
    _log_plan(logger, f"updated {kind} {label!r} in {where}:", diff)
    return _done(result, api)


async def reconcile_stream(
    api: JetStreamApi,
    spec: StreamSpec,
    *,
    if_exists: str = "update",
    dry_run: bool = False,
    prune_sources: bool = False,
    allow_data_loss: bool = False,
    guard: Guard | None = None,
    origin_check: OriginCheck | None = None,
    kind: str = "stream",
    label: str | None = None,
    logger: logging.Logger | logging.LoggerAdapter = log,
    replace_advice: Callable[[Mapping[str, Any]], str | None] | None = None,
    spec_names: Mapping[str, str] | None = None,
) -> ReconcileResult:
    """Bring the stream ``spec`` describes into being in ``api``'s domain (see the module doc).

    Only the fields ``spec`` names (:meth:`StreamSpec.named_values`) are compared and changed.
    ``allow_data_loss`` (default False) lets an in-place change discard stored data (a lowered limit)
    or lower its durability (fewer replicas).

    ``replace_advice`` is given the server's config when a change needs a new stream; what it
    returns (the caller's migration recipe) replaces the generic ``if_exists='recreate'`` line of
    the error, and is logged when recreating. ``spec_names`` gives the spec's own name of a stream
    field whose name differs (a bucket's ``history`` for ``max_msgs_per_subject``), shown beside it in
    refusals. ``origin_check`` (default None: none) is run before the stream is created or sources are added:
    its warnings join the result's ``notes``.
    """
    if_exists = check_if_exists(if_exists)
    name = spec.name
    label = label or name

    async def create() -> Mapping[str, Any]:
        body = spec.wire()
        sealed = body.pop("sealed", False)
        created = await api.request(f"STREAM.CREATE.{name}", body)
        if sealed:  # the server seals only through an update
            created = await api.request(f"STREAM.UPDATE.{name}", dict(created["config"], sealed=True))
        return created

    stream = _Object(
        kind=kind,
        label=label,
        summary=_summary(spec),
        spec=spec,
        diff=lambda config: diff_config(STREAM, spec.named_values(), config, prune_sources=prune_sources),
        create=create,
        update=lambda config: api.request(f"STREAM.UPDATE.{name}", config),
        delete=lambda: api.delete_stream(name),
        state=stream_state,
        loses="its data is deleted",
        guard=guard,
        origin_check=origin_check,
        guard_update=lambda diff: "subjects" in diff.as_dict(),
        replace_advice=replace_advice,
        names=spec_names or {},
    )
    info = await api.stream_info(name)
    return await _reconcile(
        api,
        stream,
        info,
        _result(kind, label, api),
        if_exists=if_exists,
        dry_run=dry_run,
        allow_data_loss=allow_data_loss,
        logger=logger,
    )


async def reconcile_consumer(
    api: JetStreamApi,
    stream: str,
    spec: ConsumerSpec,
    *,
    if_exists: str = "update",
    dry_run: bool = False,
    logger: logging.Logger | logging.LoggerAdapter = log,
) -> ReconcileResult:
    """Create or update the durable pull consumer ``spec`` on ``stream`` (same rules as streams)."""
    if_exists = check_if_exists(if_exists)
    name = spec.name

    def send(config: Mapping[str, Any], action: str) -> Awaitable[dict[str, Any]]:
        body = {"stream_name": stream, "config": config, "action": action}
        return api.request(f"CONSUMER.CREATE.{stream}.{name}", body)

    consumer = _Object(
        kind="consumer",
        label=f"{stream} > {name}",
        summary=f"consumer {name!r} on {stream!r}",
        spec=spec,
        diff=lambda config: diff_config(CONSUMER, dict(spec.values), config, server_view=consumer_server_view),
        create=lambda: send(spec.wire(), "create"),
        update=lambda config: send(config, "update"),
        delete=lambda: api.delete_consumer(stream, name),
        state=consumer_state,
        loses="its delivery state is lost",
    )
    info = await api.consumer_info(stream, name)
    await _check_new_filter(api, stream, spec, info)
    return await _reconcile(
        api,
        consumer,
        info,
        _result("consumer", name, api),
        if_exists=if_exists,
        dry_run=dry_run,
        allow_data_loss=False,  # no consumer field discards stored data
        logger=logger,
    )


async def _check_new_filter(api: JetStreamApi, stream: str, spec: ConsumerSpec, info: Mapping[str, Any] | None) -> None:
    """Refuse a new or changed filter of ``spec`` that overlaps none of the stream's subjects (the server accepts
    it; the consumer would deliver nothing, for ever). An unchanged one is left alone."""
    filters = consumer_filters(spec.values)
    if not filters or (info is not None and consumer_filters(info.get("config") or {}) == filters):
        return
    stream_info = await api.stream_info(stream)
    if stream_info is not None:  # a missing stream is the create's own refusal
        where = f"stream {stream!r} in {api.target}"
        field = "consumer.filter_subject" if "filter_subject" in spec.values else "consumer.filter_subjects"
        check_stream_filter(filters, stream_info.get("config") or {}, field, where)


def plan_new_consumer(
    api: JetStreamApi,
    stream: str,
    spec: ConsumerSpec,
    *,
    logger: logging.Logger | logging.LoggerAdapter = log,
) -> ReconcileResult:
    """The dry run's plan of consumer ``spec`` on ``stream``, a stream the same dry run plans to create (or
    recreate): the consumer would be created; nothing is asked (the stream is not there to ask)."""
    result = _result("consumer", spec.name, api)
    result.changes = {"created": {"old": "absent", "new": f"consumer {spec.name!r} on {stream!r}"}}
    result.action, result.plan = "planned", "create"
    _log_plan(
        logger, f"dry run: would create consumer {stream + ' > ' + spec.name!r} in {api.target}: {spec.wire()}", None
    )
    return _done(result, api)


def _done(result: ReconcileResult, api: JetStreamApi) -> ReconcileResult:
    result.requests = api.requests
    return result


def _summary(spec: StreamSpec) -> str:
    values = spec.values
    if "mirror" in values:
        return f"mirror of {describe_source(values['mirror'])}"
    parts = []
    if values.get("subjects"):
        parts.append("subjects " + ", ".join(values["subjects"]))
    if values.get("sources"):
        parts.append("sources " + ", ".join(describe_source(s) for s in values["sources"]))
    return "; ".join(parts) or f"subject {spec.name}"
