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
with the docs' advice unless the caller opts in (``allow_double_store=True``).

It asks each domain (``$JS.<domain>.API``), never a particular server: in a JetStream cluster the
domain's meta leader answers, whichever node the connection uses. A domain that does not answer now
(a node died and a leader is being elected, a leaf link moving to a surviving node: no answer, no
responders, or a 503 answer) is asked again for up to ``settle`` seconds (default
:data:`SETTLE`), so one dead node of a 3-node hub does not
block a write.

Object store buckets (``$O.<bucket>.>``: subjects only streams listen on) are also checked in every
*reachable* domain, known or not: a **store probe** publishes, to a fresh subject of each
(``$O.<bucket>.C.<nuid>``), a message every stream listening there refuses unstored (its
``Nats-Expected-Stream`` names a stream that cannot exist, :data:`~airflow_provider_jetstream.core.protocol.
STORE_PROBE_HEADERS`), and counts the refusals within :data:`PROBE_WINDOW` seconds after the target's own:
more than the target domain's streams means another domain stores the bucket too. Object writes carry no
domain, so this runs before a bucket is created and before each put's first chunk. A leaf that is cut off
cannot answer: the probe covers the domains reachable now. KV subjects (``$KV.>``) do not cross a leaf link
between domains (nats-server 2.15: a put from the hub or another leaf finds no responders), so KV buckets
need no probe; plain streams are not probed: application subscribers on their subjects would get the probe.

It fails closed: a domain that cannot be checked (no answer within ``settle``, an error reply such as
a permissions error, a listing cut short) may store the same messages, so the write is refused too,
naming the domain and the reason, unless ``allow_double_store=True`` (then it is logged). Listings
are read page by page to the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from nats.aio.client import Client
from nats.nuid import NUID

from airflow_provider_jetstream.core.api import JetStreamApi, describe_prefix, parse_reply
from airflow_provider_jetstream.core.arguments.names import domain_of
from airflow_provider_jetstream.core.connection.client import refusal_since
from airflow_provider_jetstream.core.errors import (
    UNAVAILABLE,
    DoubleStoreError,
    DoubleStoreUnreachableError,
    DoubleStoreUnverifiedError,
    JetStreamApiError,
    JetStreamDomainUnavailableError,
    JetStreamNoLeaderError,
    JetStreamPermissionError,
    JetStreamTimeoutError,
)
from airflow_provider_jetstream.core.protocol import STORE_PROBE_HEADERS, probe_refusal
from airflow_provider_jetstream.core.resend import retry_failover
from airflow_provider_jetstream.core.tasks import wait_task

log = logging.getLogger(__name__)

#: Seconds a domain that does not answer is asked again before the write is refused: long enough for a
#: cluster's election (5-7 s measured on a loaded 3-node hub), short of an outage (the guard fails closed).
SETTLE = 12.0

#: The seed's advice, quoted from the NATS docs ("JetStream on leaf nodes").
DOCS_ADVICE = (
    '"if the same subject is subscribed to by different streams in the same account in different domains, '
    "as long as the underlying leaf node was connected at the time, each stream will store the message. "
    "This can be resolved by using the same account but use different subjects in each domain or use "
    'different accounts in each domain or isolate accounts used in leaf nodes." (NATS docs, JetStream on '
    "leaf nodes)"
)
OPT_IN = "allow_double_store=True"
#: How the reasons for an unchecked domain start when nobody answered (maybe transient).
_NO_ANSWER = ("no JetStream answered", "no answer within", "no leader answered")
#: What no answer may mean, in words.
_WHY_NO_ANSWER = "a cluster node down or a JetStream leader being elected, a leaf link down, or no permission to ask?"


#: Seconds the store probe waits for refusals (at least, and at least three times as long as the target
#: domain's own streams took to refuse): a domain farther away than that is not seen.
PROBE_WINDOW = 0.3
#: Subjects that only streams listen on and that cross leaf links (object stores'): the store probe's.
PROBED = ("$O.",)
_NUID = NUID()


@dataclass(frozen=True)
class Overlap:
    domain: str
    stream: str
    subject: str


#: JetStream's answer "JetStream is not enabled for this account" there: verified, no streams.
NOT_ENABLED_FOR_ACCOUNT = 10039
#: What JetStreamApi raises for a question it got no answer to that can be trusted.
_UNANSWERED = (JetStreamApiError, JetStreamPermissionError, JetStreamDomainUnavailableError, ValueError)


def unanswered(err: BaseException, timeout: float, settle: float = 0.0) -> str:
    """Why a JetStream API question raising ``err`` was not answered, in the guard's words; ``""``
    when it was (only "JetStream not enabled for this account" is an answer: no streams).

    An error reply is not an empty answer: it means the question was not answered (permissions,
    a server problem). ``timeout`` is each request's, ``settle`` how long it was asked again.
    """
    again = f", asked again for {settle:g}s" if settle else ""
    if isinstance(err, JetStreamApiError):
        if err.err_code == NOT_ENABLED_FOR_ACCOUNT:
            return ""
        if err.code == UNAVAILABLE:
            return (
                f"no leader answered: JetStream said {err.description or 'unavailable'!r} (code {err.code}, "
                f"err_code {err.err_code}): its JetStream cluster has no leader (nodes down, or an election "
                f"under way){again}"
            )
        return f"an error: {err.description or 'no description'} (code {err.code}, err_code {err.err_code})"
    if isinstance(err, JetStreamPermissionError):
        return err.refusal or str(err)
    if isinstance(err, JetStreamTimeoutError):
        return f"no answer within {timeout:g}s ({_WHY_NO_ANSWER}){again}"
    if isinstance(err, JetStreamNoLeaderError):
        return f"no leader answered: its JetStream cluster has no leader (nodes down, or an election under way){again}"
    if isinstance(err, JetStreamDomainUnavailableError):
        return f"no JetStream answered (leaf link down, or wrong domain?){again}"
    return str(err)


def reply_problem(data: bytes) -> tuple[dict[str, Any] | None, str]:
    """Classify a JetStream API reply: ``(reply, "")`` if it can be trusted, else ``(None, why)``."""
    try:
        return parse_reply(data), ""
    except (JetStreamApiError, ValueError) as err:
        why = unanswered(err, 0)
        return (None if why else {"streams": [], "total": 0}), why


async def _listing(api: JetStreamApi, suffix: str, body: dict[str, Any], settle: float = 0.0) -> tuple[list[Any], str]:
    """Every item of a paged listing (``STREAM.LIST``, ``STREAM.NAMES``), or why it is incomplete; asked
    again from its first page for up to ``settle`` seconds while nobody answers."""

    async def every_page() -> list[Any]:
        return [item async for page in api.pages(suffix, body) for item in page]

    try:
        return await retry_failover(every_page, api.nc, within=settle, what=suffix, unanswered_too=True), ""
    except _UNANSWERED as err:
        return [], unanswered(err, api.timeout, settle)


async def local_domain(nc: Client, timeout: float, settle: float = 0.0) -> tuple[str | None, str]:
    """The JetStream domain of the server this connection is attached to (None if it has none),
    and why it is unknown when the server gave no usable answer (asked again for up to ``settle``
    seconds while it gives none: in a cluster, the meta leader answers ``$JS.API.INFO``).

    No responders, or "JetStream not enabled for this account", is an answer: no JetStream here.
    """
    api = JetStreamApi(nc, "$JS.API", timeout=timeout)

    async def ask() -> dict[str, Any] | None:
        try:
            return await api.account_info()
        except (JetStreamTimeoutError, JetStreamNoLeaderError):
            raise  # nobody answers now: asked again, then unchecked
        except JetStreamDomainUnavailableError:
            return None  # no responders: no JetStream here (an answer, not asked again)

    try:
        info = await retry_failover(ask, nc, within=settle, what="INFO", unanswered_too=True)
    except _UNANSWERED as err:
        return None, unanswered(err, timeout, settle)
    return (info or {}).get("domain") or None, ""


async def replication_domains(
    nc: Client, prefix: str, timeout: float, settle: float = 0.0
) -> tuple[dict[str, list[str]], str]:
    """Domains that the streams behind ``prefix`` mirror or source from (connected peers, found for
    free in their configs, every page of ``STREAM.LIST``), each with the streams that copy from it; and why
    the list may be incomplete."""
    streams, problem = await _listing(JetStreamApi(nc, prefix, timeout=timeout), "STREAM.LIST", {}, settle)
    found: dict[str, list[str]] = {}
    for info in streams:
        config = info.get("config") or {}
        for origin in [config.get("mirror"), *(config.get("sources") or [])]:
            domain = domain_of(((origin or {}).get("external") or {}).get("api", "").rstrip("."))
            if domain:
                found.setdefault(domain, []).append(config.get("name") or "?")
    return found, problem


def describe_copy(stream: str) -> str:
    """A copying stream in words: a KV bucket's (``KV_<b>``) and an object store's (``OBJ_<b>``) by its bucket."""
    for prefix, kind in (("KV_", "KV bucket"), ("OBJ_", "object store")):
        if stream.startswith(prefix) and len(stream) > len(prefix):
            return f"{kind} {stream[len(prefix) :]!r} (stream {stream!r})"
    return f"stream {stream!r}"


def copies_named(domain: str, copies: dict[str, list[str]], target: str | None) -> str:
    """What to fix when ``domain`` does not answer and ``copies`` (of :func:`replication_domains`) name it."""
    names = ", ".join(describe_copy(stream) for stream in dict.fromkeys(copies.get(domain) or []))
    if not names:
        return ""
    return (
        f"; domain {domain!r} is the origin of {names} in domain {target!r} (its mirror or sources): if that "
        f"domain name is wrong, fix or delete that copy; if the leaf is only away, this write can go once it is linked"
    )


async def find_overlaps(
    nc: Client, domains: Iterable[str], subjects: Iterable[str], *, timeout: float = 2.0, settle: float = 0.0
) -> tuple[list[Overlap], dict[str, str]]:
    """Streams in ``domains`` listening on subjects that overlap ``subjects``; and the domains that
    could not be checked, with why (no answer within ``settle`` seconds, an error reply)."""
    found: list[Overlap] = []
    unchecked: dict[str, str] = {}
    for domain in domains:
        for subject in subjects:
            api = JetStreamApi(nc, f"$JS.{domain}.API", timeout=timeout)
            names, problem = await _listing(api, "STREAM.NAMES", {"subject": subject}, settle)
            found.extend(Overlap(domain, name, subject) for name in names)
            if problem:
                unchecked[domain] = f"STREAM.NAMES: {problem}"
                break
    return found, unchecked


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
    settle: float = SETTLE,
) -> list[Overlap]:
    """Raise :class:`DoubleStoreError` if another known domain stores ``subjects`` too.

    ``what`` names the write in the message (``"stream 'test'"``, ``"publish to 'test'"``). A target
    reached through an imported API prefix (another account) is not checked: the advice's "different
    accounts" already holds. ``timeout`` is each request's; a domain that does not answer now is
    asked again for up to ``settle`` seconds in all (default :data:`SETTLE`), then counts as
    unchecked (:class:`DoubleStoreUnreachableError`, naming why).
    """
    if not subjects:
        return []
    target = domain_of(target_prefix)
    if target is None and target_prefix != "$JS.API":
        logger.debug("double-store guard: %s is another account's API; not checked", describe_prefix(target_prefix))
        return []
    deadline = time.monotonic() + settle

    def left() -> float:
        return max(0.0, deadline - time.monotonic())

    own, own_problem = await local_domain(nc, timeout, left())
    if target is None:
        target = own
    known = [*((own and [own]) or []), *peer_domains]
    unchecked: dict[str, str] = {}
    if own_problem:
        unchecked["the connection's own server"] = f"INFO: {own_problem}"
    copies: dict[str, list[str]] = {}
    if target:
        copies, problem = await replication_domains(nc, f"$JS.{target}.API", timeout, left())
        known.extend(copies)
        if problem:
            unchecked[f"domain {target!r}"] = f"STREAM.LIST (which domains its streams copy from): {problem}"
    peers = [d for d in dict.fromkeys(known) if d and d != target]
    overlaps, problems = await find_overlaps(nc, peers, subjects, timeout=timeout, settle=left())
    unchecked.update(
        {f"domain {domain!r}": why + copies_named(domain, copies, target) for domain, why in problems.items()}
    )
    if not overlaps:
        if unchecked:
            _unverified(what, target, unchecked, allow, logger)
        if not allow:
            await refuse_unknown_stores(
                JetStreamApi(nc, target_prefix, timeout=timeout),
                target=target,
                subjects=subjects,
                what=what,
                known=known,
                logger=logger,
            )
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
    return _refuse(problem, overlaps, allow, logger)


def _refuse(
    problem: str, overlaps: list[Overlap], allow: bool, logger: logging.Logger | logging.LoggerAdapter
) -> list[Overlap]:
    """Raise :class:`DoubleStoreError` with the docs' advice, or with ``allow`` log it and return ``overlaps``."""
    if allow:
        logger.warning("double-store guard (allowed by %s): %s", OPT_IN, problem)
        return overlaps
    raise DoubleStoreError(f"{problem}. The docs' advice: {DOCS_ADVICE}. Pass {OPT_IN} to do it anyway.")


def _unverified(
    what: str,
    target: str | None,
    unchecked: dict[str, str],
    allow: bool,
    logger: logging.Logger | logging.LoggerAdapter,
) -> None:
    """Fail closed: a domain that could not be checked may store the same messages."""
    reasons = "; ".join(f"{where}: {why}" for where, why in unchecked.items())
    problem = (
        f"cannot verify that {what} in domain {target!r} is not also stored by another connected domain ({reasons})"
    )
    if allow:
        logger.warning("double-store guard (not checked, allowed by %s): %s", OPT_IN, problem)
        return
    message = (
        f"{problem}; refused, since an unchecked domain may store every message too. Fix the link, the "
        f"cluster or the permissions and retry, or pass {OPT_IN} to go ahead without the check."
    )
    logger.error("double-store guard: %s", message)
    if all(why.split(": ", 1)[-1].startswith(_NO_ANSWER) for why in unchecked.values()):
        raise DoubleStoreUnreachableError(message)
    raise DoubleStoreUnverifiedError(message)


def probe_subject(subject: str, token: str) -> str:
    """A concrete subject that ``subject`` matches: each wildcard token replaced by ``token``."""
    return ".".join(token if part in ("*", ">") else part for part in subject.split("."))


async def probe_stores(
    nc: Client, subjects: list[str], expected: int, *, timeout: float, window: float = PROBE_WINDOW
) -> tuple[list[list[str]], str]:
    """The streams that store each of ``subjects`` (concrete subjects) in every domain reachable now, one name per
    stream (a name twice: two domains): each refused a store probe, so nothing is stored. Waits for ``expected``
    refusals (the target domain's own) for up to ``timeout`` seconds, then until ``window`` seconds (or three
    times as long as those took) have passed since the probe. Also returns why the answers may be incomplete
    (the server refused this user's publish), else ``""``."""
    found: list[list[str]] = [[] for _ in subjects]
    enough = asyncio.Event()
    inbox = nc.new_inbox()

    async def answered(msg: Any) -> None:
        stream = probe_refusal(msg.data)
        index = msg.subject.rsplit(".", 1)[-1]
        if stream is not None and index.isdigit() and int(index) < len(found):
            found[int(index)].append(stream)
            if sum(map(len, found)) >= expected:
                enough.set()

    started = time.monotonic()
    subscription = await nc.subscribe(f"{inbox}.*", cb=answered)
    try:
        for index, subject in enumerate(subjects):
            await nc.publish(subject, b"", reply=f"{inbox}.{index}", headers=STORE_PROBE_HEADERS)
        await nc.flush(timeout=max(1, int(timeout)))
        if expected:
            with contextlib.suppress(asyncio.TimeoutError):
                await wait_task(enough.wait(), timeout)
        took = time.monotonic() - started
        await asyncio.sleep(max(0.0, min(timeout, max(window, 3 * took)) - took))
    finally:
        await subscription.unsubscribe()
    for subject in subjects:
        refused = refusal_since(nc, started, subject)
        if refused:
            return found, refused
    return found, ""


async def refuse_unknown_stores(
    api: JetStreamApi,
    *,
    subjects: list[str],
    what: str,
    target: str | None = None,
    known: Iterable[str] = (),
    allow: bool = False,
    logger: logging.Logger | logging.LoggerAdapter = log,
) -> list[Overlap]:
    """Raise :class:`DoubleStoreError` if a stream outside the target domain (``api``'s, asked with its client and
    request timeout), in any domain reachable now, stores
    the bucket subjects ``subjects`` (``$O.<bucket>.>``), found by a store probe before
    anything is written; the error names the target and each other domain found (among ``known`` and those the
    connection's own domain copies from). Other subjects are not probed (``[]``); nor is another account's
    prefix. A probe the server refused, or the target's own stream not answering, fails closed
    (:class:`DoubleStoreUnverifiedError`, :class:`DoubleStoreUnreachableError`) unless ``allow`` (then logged).
    """
    if not subjects or not all(subject.startswith(PROBED) for subject in subjects):
        return []
    nc, target_prefix, timeout = api.nc, api.prefix, api.timeout
    if domain_of(target_prefix) is None and target_prefix != "$JS.API":
        return []
    target = target or domain_of(target_prefix) or (await local_domain(nc, timeout))[0]
    where = f"$JS.{target}.API" if target else target_prefix
    token = _NUID.next().decode()
    concrete = [probe_subject(subject, token) for subject in subjects]
    api = JetStreamApi(nc, where, timeout=timeout)
    own: list[list[str]] = []
    for subject in concrete:
        names, problem = await _listing(api, "STREAM.NAMES", {"subject": subject})
        if problem:
            return _probe_unverified(what, target, f"STREAM.NAMES: {problem}", allow, logger)
        own.append(names)
    answers, problem = await probe_stores(nc, concrete, sum(map(len, own)), timeout=timeout)
    if problem:
        return _probe_unverified(what, target, f"the store probe: {problem}", allow, logger)
    silent = [
        name for names, got in zip(own, answers, strict=True) for name in (Counter(names) - Counter(got)).elements()
    ]
    if silent:
        why = f"no answer within {timeout:g}s from its own stream(s) {sorted(set(silent))} ({_WHY_NO_ANSWER})"
        return _probe_unverified(what, target, f"the store probe: {why}", allow, logger)
    extra = [
        (stream, subject)
        for names, got, subject in zip(own, answers, concrete, strict=True)
        for stream in (Counter(got) - Counter(names)).elements()
    ]
    if not extra:
        return []
    overlaps = await _name_domains(nc, extra, target, known, timeout)
    listing = "; ".join(
        f"stream {o.stream!r} in {f'domain {o.domain!r}' if o.domain else 'a connected domain not named to this check'}"
        f" stores {o.subject.rsplit('.', 1)[0]}.*"
        for o in overlaps
    )
    problem = (
        f"{what} in domain {target!r}: {listing} (it refused a store probe, nothing was stored); bucket writes "
        f"({', '.join(subjects)}) carry no domain, so while the leaf link is up every write would be stored in each of "
        f"these domains. Give the bucket a name of its own in each domain, or delete the other one"
    )
    return _refuse(problem, overlaps, allow, logger)


async def _name_domains(
    nc: Client, extra: list[tuple[str, str]], target: str | None, known: Iterable[str], timeout: float
) -> list[Overlap]:
    """The probe's unexpected streams, each with the domain it is in where one the guard knows holds it: the
    ``known`` ones and those the streams of the connection's own domain copy from (a hub's mirrors and
    sources name its leaves); ``""`` where none does."""
    own, _ = await local_domain(nc, timeout)
    candidates = [*known, *([own] if own else [])]
    if own:
        copied, _ = await replication_domains(nc, f"$JS.{own}.API", timeout)
        candidates.extend(copied)
    left = Counter(extra)
    overlaps: list[Overlap] = []
    for domain in dict.fromkeys(d for d in candidates if d and d != target):
        for stream, subject in list(left.elements()):
            if left[(stream, subject)] <= 0:
                continue
            names, _ = await _listing(
                JetStreamApi(nc, f"$JS.{domain}.API", timeout=timeout), "STREAM.NAMES", {"subject": subject}
            )
            if stream in names:
                left[(stream, subject)] -= 1
                overlaps.append(Overlap(domain, stream, subject))
    overlaps.extend(Overlap("", stream, subject) for stream, subject in left.elements())
    return overlaps


def _probe_unverified(
    what: str, target: str | None, why: str, allow: bool, logger: logging.Logger | logging.LoggerAdapter
) -> list[Overlap]:
    _unverified(what, target, {f"domain {target!r}": why}, allow, logger)
    return []
