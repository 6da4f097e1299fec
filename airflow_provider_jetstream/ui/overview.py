"""What the JetStream page shows of one connection, read once: its domains, their streams, replication, consumers.

Thin over the hook and ``core/status``: the domains are the connection's own and every domain a stream
there (or in a domain found so far) mirrors or sources from; each is probed (:meth:`aprobe_domains`); the
streams of each reachable domain are listed (``STREAM.LIST``); a stream that copies is judged by the one
exact replication check (:meth:`acheck_replication`, which measures retention headroom and reads the
cluster block too), its watch restored from the page's history so "since when" survives page loads; its
consumers are read (``CONSUMER.LIST``) and judged as the consumer-lag check does. Nothing a connection
holds beyond its id, domain, API prefix and server addresses (without user or password) is returned.
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Mapping
from typing import Any

from airflow_provider_jetstream.assets.lineage import server_of, stream_location
from airflow_provider_jetstream.core.api import JetStreamApi
from airflow_provider_jetstream.core.arguments.names import domain_of
from airflow_provider_jetstream.core.connection.fields import api_prefix_for
from airflow_provider_jetstream.core.errors import JetStreamError
from airflow_provider_jetstream.core.manage.cluster import cluster_health
from airflow_provider_jetstream.core.status.consumer_lag import ConsumerLagCheck, judge_consumer
from airflow_provider_jetstream.core.status.replication import ReplicationWatch
from airflow_provider_jetstream.core.status.report import OriginVerdict, ReplicationCheck, iso_utc
from airflow_provider_jetstream.hooks.status import JetStreamStatusHook

#: Most domains the page follows from one connection (each found through a stream's mirror or source).
MAX_DOMAINS = 32


def stream_key(domain: str, stream: str) -> str:
    """The page's name of a stream: ``<domain>/<stream>`` (the history and the watches are kept by it)."""
    return f"{domain}/{stream}"


def origin_state(verdict: OriginVerdict, check: ReplicationCheck) -> dict[str, Any]:
    """One origin as the page shows it: ``state`` (``caught up``, ``behind``, ``unreachable``, ``missing``),
    ``behind`` (messages the copy lacks, exact: the headroom's uncopied count, else the origin's last sequence
    less the one held; None when not known) and ``summary``. An unreachable origin's lag is unknown, never 0."""
    status = verdict.status
    found = (check.headroom or {}).get(status.key)
    headroom = found.to_dict() if found is not None else None
    behind: int | None = None
    if verdict.unreachable:
        state = "unreachable"
        known = f" ({found.uncopied_msgs} behind when last measured, {iso_utc(found.measured_at)})" if found else ""
        summary = f"unreachable since {iso_utc(verdict.unreachable_since) or '?'}: lag unknown{known}"
    elif verdict.check == "missing":
        state, summary = "missing", verdict.reason
    else:
        if found is not None and not found.last_known:
            behind = found.uncopied_msgs
        elif verdict.origin_last_seq is not None and verdict.held_seq is not None:
            behind = max(0, verdict.origin_last_seq - verdict.held_seq)
        if verdict.caught_up:
            state, summary = "caught up", "caught up"
        else:
            state = "behind"
            summary = f"behind by {behind}" if behind is not None else f"behind: {verdict.reason}"
    if verdict.check == "lag/active" and not verdict.unreachable:
        summary += f" (the copy's view: lag {status.lag}, not verified at the origin)"
    return {
        "origin": status.origin,
        "kind": status.kind,
        "key": status.key,
        "domain": status.domain,
        "where": status.where,
        "state": state,
        "behind": behind,
        "summary": summary,
        "check": verdict.check,
        "reason": verdict.reason,
        "origin_last_seq": verdict.origin_last_seq,
        "held_seq": verdict.held_seq,
        "unreachable_since": iso_utc(verdict.unreachable_since),
        "error": status.error,
        "headroom": headroom,
    }


def origin_domains(info: Mapping[str, Any]) -> list[str]:
    """The domains a stream's mirror and sources copy from (``external.api`` of ``$JS.<domain>.API``)."""
    config = info.get("config") or {}
    origins = [config.get("mirror")] if config.get("mirror") else list(config.get("sources") or [])
    found = [domain_of(((o or {}).get("external") or {}).get("api")) for o in origins]
    return [d for d in found if d]


def copies(info: Mapping[str, Any]) -> bool:
    config = info.get("config") or {}
    return bool(config.get("mirror") or config.get("sources"))


def public_servers(servers: list[str]) -> list[str]:
    """``scheme://host:port`` of each server: never a user, password or token."""
    shown = []
    for server in servers:
        parts = urllib.parse.urlsplit(server if "://" in server else f"nats://{server}")
        host = f"[{parts.hostname}]" if parts.hostname and ":" in parts.hostname else parts.hostname or "?"
        shown.append(f"{parts.scheme}://{host}" + (f":{parts.port}" if parts.port else ""))
    return shown


async def _consumers(api: JetStreamApi, stream: str) -> list[dict[str, Any]]:
    found = []
    async for page in api.pages(f"CONSUMER.LIST.{stream}", key="consumers"):
        for info in page:
            name = info.get("name") or (info.get("config") or {}).get("durable_name") or "?"
            done, reason = judge_consumer(info, 0, 0, None)
            found.append({**ConsumerLagCheck(stream, name, api.target, info, done, reason).to_xcom(), "idle": done})
    return sorted(found, key=lambda c: c["consumer"])


async def _stream(
    hook: JetStreamStatusHook, api: JetStreamApi, domain: str, target: dict[str, str | None], info: dict[str, Any],
    server: str, watches: dict[str, Any],
) -> dict[str, Any]:  # fmt: skip
    config, state = info.get("config") or {}, info.get("state") or {}
    name = config.get("name") or "?"
    key = stream_key(domain, name)
    entry: dict[str, Any] = {
        "name": name,
        "key": key,
        "messages": state.get("messages", 0),
        "bytes": state.get("bytes", 0),
        "first_seq": state.get("first_seq", 0),
        "last_seq": state.get("last_seq", 0),
        "subjects": config.get("subjects") or [],
        "cluster": cluster_health(info.get("cluster")),
        "asset_uri": stream_location(server, None if domain == "_" else domain, name).uri,
        "replication": None,
        "consumers": [],
    }
    if copies(info):
        watch = ReplicationWatch(name, low_headroom="warn").restore(watches.get(key))
        try:
            check = await hook.acheck_replication(watch, **target)
        except JetStreamError as err:
            entry["replication"] = {"caught_up": False, "error": str(err), "origins": []}
        else:
            watches[key] = watch.state()
            entry["replication"] = {
                "caught_up": check.caught_up,
                "error": check.failed,
                "origins": [origin_state(v, check) for v in check.verdicts],
            }
    try:
        entry["consumers"] = await _consumers(api, name)
    except JetStreamError as err:
        entry["consumers_error"] = str(err)
    return entry


async def gather_overview(
    hook: JetStreamStatusHook, watches: dict[str, Any], *, timeout: float | None = None
) -> dict[str, Any]:
    """Everything the page shows of ``hook``'s connection, read now. ``watches`` (stream key: the state of its
    :class:`ReplicationWatch`) is read and updated in place. Raises the hook's errors when the connection's
    own servers or JetStream cannot be reached (the page says so); any other domain unreachable is a result."""
    config = await hook.aget_conn_config()
    server = server_of(config)
    home_prefix = hook.resolve_api_prefix()
    async with hook.aconnect(), hook.aapi(request_timeout=timeout) as home_api:
        account = await home_api.account_info()
        home = account.get("domain") or domain_of(home_prefix) or "_"
        targets: dict[str, dict[str, str | None]] = {home: {"api_prefix": home_prefix}}
        reasons: dict[str, str | None] = {home: None}
        infos: dict[str, list[dict[str, Any]]] = {}
        errors: dict[str, str] = {}
        pending = [home]
        while pending and len(targets) <= MAX_DOMAINS:
            domain = pending.pop(0)
            if reasons.get(domain) is not None:
                continue
            try:
                async with hook.aapi(**targets[domain], request_timeout=timeout) as api:
                    listed = [i async for page in api.pages("STREAM.LIST") for i in page]
            except JetStreamError as err:  # it answered the probe, but not this (a refusal, a timeout)
                errors[domain] = f"listing its streams failed: {err}"
                continue
            infos[domain] = sorted(listed, key=lambda i: (i.get("config") or {}).get("name") or "")
            new = sorted({d for info in listed for d in origin_domains(info)} - set(targets))
            for d in new:
                targets[d] = {"api_prefix": api_prefix_for(d)}
            reasons.update(await hook.aprobe_domains(new, request_timeout=timeout) if new else {})
            pending += new
        domains = []
        for domain, target in targets.items():
            streams = []
            if reasons.get(domain) is None:
                async with hook.aapi(**target, request_timeout=timeout) as api:
                    for info in infos.get(domain, []):
                        streams.append(await _stream(hook, api, domain, target, info, server, watches))
            domains.append(
                {
                    "domain": domain,
                    "api_prefix": target["api_prefix"],
                    "role": "connection" if domain == home else "origin",
                    "reachable": reasons.get(domain) is None,
                    "reason": reasons.get(domain),
                    "error": errors.get(domain),
                    "streams": streams,
                }
            )
    return {
        "connection": {
            "conn_id": config.conn_id,
            "servers": public_servers(list(config.servers)),
            "domain": config.domain,
            "api_prefix": config.api_prefix,
        },
        "checked_at": iso_utc(time.time()),
        "domains": domains,
    }
