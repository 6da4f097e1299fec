"""Refuse writes that connected domains would store twice, or in the wrong domain.

The NATS docs (JetStream on leaf nodes): "if the same subject is subscribed to by different
streams in the same account in different domains, as long as the underlying leaf node was
connected at the time, each stream will store the message." KV buckets are the same kind of
trap: a bucket of one name in two connected domains of one account takes puts in whichever domain
the writer's server belongs to (nats-py's KV writes ``$KV.<bucket>.<key>`` whatever its domain).

Before a stream or bucket is created (or its subjects change), and before a publish, the guard
asks the other domains it knows (the connection's own, the domains named by the spec's mirrors and
sources, the domains the target's existing streams mirror or source from, and ``peer_domains``)
which streams of this account listen on overlapping subjects, and refuses
with the docs' advice unless the caller opts in (``allow_double_store=True``). Domains that do not
answer (leaf link down) cannot be checked; that is logged, not refused.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass

import nats.errors
from nats.aio.client import Client

from airflow_provider_jetstream.api import describe_prefix, domain_of
from airflow_provider_jetstream.exceptions import JetStreamConfigError

log = logging.getLogger(__name__)

#: The seed's advice, quoted from the NATS docs ("JetStream on leaf nodes").
DOCS_ADVICE = (
    '"if the same subject is subscribed to by different streams in the same account in different domains, '
    "as long as the underlying leaf node was connected at the time, each stream will store the message. "
    "This can be resolved by using the same account but use different subjects in each domain or use "
    'different accounts in each domain or isolate accounts used in leaf nodes." (NATS docs, JetStream on '
    "leaf nodes)"
)
OPT_IN = "allow_double_store=True"


class DoubleStoreError(JetStreamConfigError):
    """Streams of one account in two connected domains would both store the same writes."""


@dataclass(frozen=True)
class Overlap:
    domain: str
    stream: str
    subject: str


async def local_domain(nc: Client, timeout: float) -> str | None:
    """The JetStream domain of the server this connection is attached to (None if it has none)."""
    try:
        reply = await nc.request("$JS.API.INFO", b"", timeout=timeout)
    except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
        return None
    info = json.loads(reply.data)
    return info.get("domain") or None


async def replication_domains(nc: Client, prefix: str, timeout: float) -> list[str]:
    """Domains that the streams behind ``prefix`` mirror or source from: connected peers, found for
    free in their configs (first page of ``STREAM.LIST``)."""
    try:
        reply = await nc.request(f"{prefix}.STREAM.LIST", b"{}", timeout=timeout)
    except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
        return []
    found: list[str] = []
    for info in json.loads(reply.data).get("streams") or []:
        config = info.get("config") or {}
        for origin in [config.get("mirror"), *(config.get("sources") or [])]:
            domain = domain_of(((origin or {}).get("external") or {}).get("api", "").rstrip("."))
            if domain:
                found.append(domain)
    return found


async def find_overlaps(
    nc: Client, domains: Iterable[str], subjects: Iterable[str], *, timeout: float = 2.0
) -> tuple[list[Overlap], list[str]]:
    """Streams in ``domains`` listening on subjects that overlap ``subjects``; and unreachable domains."""
    found: list[Overlap] = []
    unreachable: list[str] = []
    for domain in domains:
        for subject in subjects:
            try:
                reply = await nc.request(
                    f"$JS.{domain}.API.STREAM.NAMES", json.dumps({"subject": subject}).encode(), timeout=timeout
                )
            except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
                unreachable.append(domain)
                break
            names = json.loads(reply.data).get("streams") or []
            found.extend(Overlap(domain, name, subject) for name in names)
    return found, unreachable


async def guard_double_store(
    nc: Client,
    *,
    target_prefix: str,
    subjects: list[str],
    what: str,
    peer_domains: Iterable[str] = (),
    allow: bool = False,
    bucket: str | None = None,
    timeout: float = 2.0,
    logger: logging.Logger | logging.LoggerAdapter = log,
) -> list[Overlap]:
    """Raise :class:`DoubleStoreError` if another known domain stores ``subjects`` too.

    ``what`` names the write in the message (``"stream 'test'"``, ``"publish to 'test'"``). A target
    reached through an imported API prefix (another account) is not checked: the advice's "different
    accounts" already holds.
    """
    if not subjects:
        return []
    target = domain_of(target_prefix)
    if target is None and target_prefix != "$JS.API":
        logger.debug("double-store guard: %s is another account's API; not checked", describe_prefix(target_prefix))
        return []
    own = await local_domain(nc, timeout)
    if target is None:
        target = own
    known = [*((own and [own]) or []), *peer_domains]
    if target:
        known.extend(await replication_domains(nc, f"$JS.{target}.API", timeout))
    peers = [d for d in dict.fromkeys(known) if d and d != target]
    if not peers:
        return []
    overlaps, unreachable = await find_overlaps(nc, peers, subjects, timeout=timeout)
    for domain in unreachable:
        logger.warning(
            "double-store guard: domain %r did not answer (leaf link down?); could not check it for %s", domain, what
        )
    if not overlaps:
        return []
    listing = "; ".join(f"stream {o.stream!r} in domain {o.domain!r} listens on {o.subject!r}" for o in overlaps)
    if bucket is not None:
        problem = (
            f"bucket {bucket!r} also exists in {', '.join(repr(o.domain) for o in overlaps)} ({listing}): with the "
            f"same bucket in two connected domains of one account, a put that does not name its domain "
            f"(nats-py's KV always writes $KV.{bucket}.<key>) lands in whichever domain the writer's server "
            "belongs to, so writes meant for one domain are stored in the other"
        )
    else:
        problem = (
            f"{what} in domain {target!r}: {listing}; while the leaf link is up, every message on these subjects is "
            f"stored in both domains (or only there, when no stream in domain {target!r} listens)"
        )
    if allow:
        logger.warning("double-store guard (allowed by %s): %s", OPT_IN, problem)
        return overlaps
    raise DoubleStoreError(f"{problem}. The docs' advice: {DOCS_ADVICE}. Pass {OPT_IN} to do it anyway.")
