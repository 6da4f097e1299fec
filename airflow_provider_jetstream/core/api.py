"""The JetStream JSON API of one domain or imported prefix, as plain JSON requests.

nats-py's manager turns replies into dataclasses that drop fields it does not know (the API
level, newer config fields) and sends every field of its config classes (servers >= 2.12 reject
unknown ones). Management, reconcile and status checks need the exact JSON both ways: this is the
one place that speaks it, on nats-py's public request API.

A stream whose leader died answers nothing, or 503 "JetStream system temporarily unavailable", until a new
leader is elected (a few seconds): reads and consumer creates are asked again across that failover by the
one resend rule (:func:`~airflow_provider_jetstream.core.resend.retry_failover`, within
:attr:`JetStreamApi.failover` seconds). Only a 503 is a failover in another domain than the connection's
(``$JS.<leaf>.API``): nobody answering there is that domain being away, answered at once.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import nats.errors
from nats.aio.client import Client

from airflow_provider_jetstream.core.arguments.names import domain_of
from airflow_provider_jetstream.core.connection.client import clustered, home_domain, refusal_since
from airflow_provider_jetstream.core.errors import (
    JetStreamApiError,
    JetStreamDomainUnavailableError,
    JetStreamError,
    JetStreamImportMissingError,
    JetStreamNoLeaderError,
    JetStreamNotFoundError,
    JetStreamPermissionError,
    JetStreamPublishError,
    JetStreamTimeoutError,
)
from airflow_provider_jetstream.core.protocol import PubAck, parse_pub_ack
from airflow_provider_jetstream.core.resend import (
    FAILOVER_WAIT,
    IDEMPOTENT_REQUESTS,
    # Backoff and during_failover: for the read side only (core/read/exact.py, core/status/kv_key.py and
    # core/consume/durable.py import them from here) until it is rewritten on the resend rule. Remove then.
    retry_failover,
)
from airflow_provider_jetstream.core.tasks import wait_task

STREAM_NOT_FOUND = 10059
NO_MESSAGE_FOUND = 10037
CONSUMER_NOT_FOUND = 10014
WRONG_LAST_SEQUENCE = 10071
#: "replicas > 1 not supported in non-clustered mode": the domain is one server.
NOT_CLUSTERED = 10074
#: "JetStream system temporarily unavailable" (code 503): a clustered JetStream without a leader for the
#: stream, or without a quorum of its meta layer.
CLUSTER_NOT_AVAILABLE = 10008

log = logging.getLogger(__name__)


def is_imported_prefix(prefix: str | None) -> bool:
    """Whether a JetStream API prefix is an account import (``JS.acc@hub.API``) rather than
    ``$JS.API`` or a domain's ``$JS.<domain>.API``: only the subjects the account imports answer there."""
    return bool(prefix) and prefix.rstrip(".") != "$JS.API" and domain_of(prefix.rstrip(".")) is None


#: What a failover is, in words (every message that may be one says it the same way).
FAILOVER_WORDS = "a node is down or an election is under way"


def unavailable_hint(prefix: str, cluster: bool = False, home: str | None = None) -> str:
    """What it may mean that no JetStream answered at ``prefix``, in words. ``cluster``: the connection's
    servers are nodes of a cluster (:func:`~airflow_provider_jetstream.core.connection.client.clustered`),
    where a dead node or an election is the likely cause; ``home``: the domain of the server the connection is
    on (:func:`~airflow_provider_jetstream.core.connection.client.home_domain`): asking it, a
    leaf cannot be the cause. Defaults: False, None."""
    if is_imported_prefix(prefix):
        return "is the API exported and imported into this account (and the exporting JetStream up)?"
    domain = domain_of(prefix)
    if cluster:
        if domain and domain != home:
            return "a leaf that is offline (or its link moving to another node of the cluster), or a wrong domain name?"
        return f"{FAILOVER_WORDS} in the cluster"
    if domain:
        return "a leaf that is offline, or a wrong domain name?"
    return "is JetStream enabled for this account?"


def hint_for(nc: Client, prefix: str) -> str:
    """:func:`unavailable_hint` for a request at ``prefix`` on the connection ``nc``."""
    return unavailable_hint(prefix, clustered(nc), home_domain(nc))


def no_leader_error(target: str, stream: str | None = None, detail: str = "") -> JetStreamNoLeaderError:
    """The error of a clustered JetStream in ``target`` that has no leader for ``stream`` (None: for its
    meta layer) now; ``detail`` adds what could not be done. Default: nothing added."""
    what = f" for stream {stream!r}" if stream else ""
    return JetStreamNoLeaderError(f"JetStream in {target} has no leader{what} ({FAILOVER_WORDS}){detail}")


def leaderless(info: Mapping[str, Any]) -> bool:
    """A ``STREAM.INFO`` answered without a leader: a clustered stream whose replicas lost their quorum
    (the survivor still reports the stream's config, not what runs)."""
    cluster = info.get("cluster")
    return isinstance(cluster, dict) and bool(cluster) and not cluster.get("leader")


def _stream_index(tokens: list[str]) -> int | None:
    if (
        tokens[0] not in ("STREAM", "CONSUMER")
        or len(tokens) < 3
        or tokens[:2] in (["STREAM", "NAMES"], ["STREAM", "LIST"])
    ):
        return None
    index = 3 if tokens[1] in ("MSG", "DURABLE") else 2
    return index if len(tokens) > index else None


def stream_of(suffix: str) -> str | None:
    """The stream a request suffix names (``STREAM.INFO.<s>``, ``STREAM.MSG.GET.<s>``,
    ``CONSUMER.CREATE.<s>.<c>``...), None for an account-wide one."""
    tokens = suffix.split(".")
    index = _stream_index(tokens)
    return None if index is None else tokens[index]


def operation_of(suffix: str) -> str:
    """The operation of a request suffix, without the names it carries: ``STREAM.MSG.GET``, ``INFO``..."""
    tokens = suffix.split(".")
    index = _stream_index(tokens)
    return ".".join(tokens[:index]) if index is not None else suffix


def describe_prefix(prefix: str) -> str:
    """Words for a JetStream target: ``domain 'leaf'``, ``API prefix 'JS.acc@hub.API'``..."""
    if prefix == "$JS.API":
        return "the local JetStream domain"
    domain = domain_of(prefix)
    return f"domain {domain!r}" if domain else f"API prefix {prefix!r}"


def parse_reply(data: bytes, subject: str = "", target: str = "JetStream") -> dict[str, Any]:
    """A JetStream API reply as its JSON object. An error reply raises :class:`JetStreamApiError`;
    a reply that is not a JSON object raises ``ValueError``, saying what came."""
    try:
        reply = json.loads(data) if data else {}
    except ValueError:
        raise ValueError(f"an answer that is not JSON: {data[:80]!r}") from None
    if not isinstance(reply, dict):
        raise ValueError(f"an unexpected answer: {data[:80]!r}")
    if reply.get("error"):
        raise JetStreamApiError(subject, reply["error"], target)
    return reply


class JetStreamApi:
    """JSON requests to one JetStream API (a domain or an imported prefix), counted in ``requests``.

    :param nc: a connected client.
    :param prefix: the API prefix. Default ``$JS.API``.
    :param timeout: seconds each request waits for its answer. Default 5.
    :param target: the target in words. Default: from the prefix (:func:`describe_prefix`).
    :param failover: seconds the requests of
        :data:`~airflow_provider_jetstream.core.resend.IDEMPOTENT_REQUESTS` (and KV and object writes) go on
        being asked again across a failover (:func:`~airflow_provider_jetstream.core.resend.retry_failover`);
        0: asked once. Default :data:`~airflow_provider_jetstream.core.resend.FAILOVER_WAIT`, at least ``timeout``.
    """

    def __init__(
        self,
        nc: Client,
        prefix: str = "$JS.API",
        *,
        timeout: float = 5.0,
        target: str | None = None,
        failover: float | None = None,
    ):
        self.nc = nc
        self.prefix = prefix.rstrip(".")
        self.timeout = timeout
        self.target = target or describe_prefix(self.prefix)
        self.failover = max(FAILOVER_WAIT, timeout) if failover is None else failover
        self.requests = 0

    async def raw_request(self, suffix: str, body: Mapping[str, Any] | None = None) -> bytes:
        """The reply's bytes to one request. No responders, a timeout and a refused request (the
        server drops it and says why in an asynchronous ``Permissions Violation``, see
        :func:`~airflow_provider_jetstream.core.connection.client.refusal_since`) each raise their own error."""
        subject = f"{self.prefix}.{suffix}"
        payload = json.dumps(body, separators=(",", ":")).encode() if body is not None else b""
        self.requests += 1
        started = time.monotonic()
        try:
            msg = await wait_task(self.nc.request(subject, payload, timeout=self.timeout))
        except nats.errors.NoRespondersError:
            if is_imported_prefix(self.prefix):
                raise JetStreamImportMissingError(
                    f"nothing answers {subject!r} in this account: it has no import of "
                    f"{self.prefix}.{suffix.rsplit('.', 1)[0] if '.' in suffix else suffix} (or the exporting "
                    "account's JetStream is down); waiting cannot help"
                ) from None
            raise JetStreamDomainUnavailableError(
                f"no JetStream responded in {self.target} ({self.prefix}): {hint_for(self.nc, self.prefix)}"
            ) from None
        except nats.errors.TimeoutError:
            refusal = refusal_since(self.nc, started, subject)
            if refusal:
                denied = JetStreamPermissionError(f"JetStream in {self.target}: {refusal}")
                denied.refusal = refusal
                raise denied from None
            raise JetStreamTimeoutError(
                f"JetStream in {self.target} ({self.prefix}) did not answer {operation_of(suffix)} within "
                f"{self.timeout:g}s: {hint_for(self.nc, self.prefix)}"
            ) from None
        except (nats.errors.ConnectionReconnectingError, nats.errors.StaleConnectionError) as err:
            raise JetStreamDomainUnavailableError(
                f"JetStream in {self.target} ({self.prefix}): the connection is being re-established ({err!r})"
            ) from err
        return msg.data

    async def request(self, suffix: str, body: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The reply to one request, as JSON; an error reply raises :class:`JetStreamApiError`, a clustered
        JetStream without a leader :class:`JetStreamNoLeaderError`. Reads and consumer creates are asked again
        across a failover (:func:`~airflow_provider_jetstream.core.resend.retry_failover`, within
        :attr:`failover` seconds)."""
        if self.failover <= 0 or not suffix.startswith(IDEMPOTENT_REQUESTS):
            return await self._request_once(suffix, body)
        return await retry_failover(
            lambda: self._request_once(suffix, body),
            self.nc,
            within=self.failover,
            what=f"{self.target}: {suffix}",
            prefix=self.prefix,
        )

    async def _request_once(self, suffix: str, body: Mapping[str, Any] | None) -> dict[str, Any]:
        try:
            return parse_reply(await self.raw_request(suffix, body), f"{self.prefix}.{suffix}", self.target)
        except JetStreamApiError as err:
            if err.err_code == CLUSTER_NOT_AVAILABLE:
                raise no_leader_error(self.target, stream_of(suffix), f": {err.description}") from None
            raise

    async def store(
        self,
        subject: str,
        payload: bytes,
        headers: Mapping[str, str],
        *,
        stream: str,
        where: str,
        domain: str | None = None,
        misplaced: type[JetStreamError] = JetStreamPublishError,
    ) -> PubAck:
        """One write of a bucket's message (a KV entry, an object's chunk or meta) to ``subject``, asked once:
        its publish ack, which must name ``stream`` in ``domain`` (default: this API's); ``misplaced`` is
        raised otherwise. An error ack raises :class:`JetStreamPublishError` (a clustered stream without a
        leader :class:`JetStreamNoLeaderError`); no responders, a timeout or a reconnecting connection each
        their own error. ``where`` names the write in messages (``bucket 'b' in domain 'leaf'``)."""
        try:
            reply = await wait_task(
                self.nc.request(subject, payload, timeout=self.timeout, headers=dict(headers) or None)
            )
        except nats.errors.NoRespondersError:
            raise JetStreamDomainUnavailableError(
                f"no stream took the write to {subject!r} for {where}: {hint_for(self.nc, self.prefix)}"
            ) from None
        except nats.errors.TimeoutError:
            raise JetStreamTimeoutError(f"{where}: the write was not confirmed within {self.timeout:g}s") from None
        except (nats.errors.ConnectionReconnectingError, nats.errors.StaleConnectionError) as err:
            raise JetStreamDomainUnavailableError(f"{where}: the connection is being re-established ({err!r})") from err
        try:
            ack = parse_pub_ack(reply.data)
        except JetStreamPublishError as err:
            if err.err_code == CLUSTER_NOT_AVAILABLE:
                raise no_leader_error(self.target, stream, f": {where} was not written") from None
            raise
        domain = domain_of(self.prefix) if domain is None else domain
        if ack.stream != stream or (domain and ack.domain and ack.domain != domain):
            raise misplaced(
                f"a write for {where} was stored by stream {ack.stream!r} in domain {ack.domain!r}, not "
                f"{stream!r} in {describe_prefix(self.prefix)}"
            )
        return ack

    async def pages(
        self, suffix: str, body: Mapping[str, Any] | None = None, key: str = "streams"
    ) -> AsyncIterator[list[Any]]:
        """Every page of a paged listing (``STREAM.NAMES``, ``STREAM.LIST``...), the items under ``key``."""
        body = dict(body or {})
        seen = 0
        while True:
            response = await self.request(suffix, {**body, "offset": seen} if seen else body)
            page = list(response.get(key) or [])
            seen += len(page)
            yield page
            total = response.get("total")
            if not page or not isinstance(total, int) or seen >= total:
                return

    async def account_info(self) -> dict[str, Any]:
        return await self.request("INFO")

    async def api_level(self) -> tuple[int, str | None]:
        """``(API level, domain)`` the target reports; level 0 means nats-server < 2.11."""
        info = await self.account_info()
        return int((info.get("api") or {}).get("level") or 0), info.get("domain")

    async def stream_info(self, name: str) -> dict[str, Any] | None:
        try:
            return await self.request(f"STREAM.INFO.{name}")
        except JetStreamApiError as err:
            if err.err_code == STREAM_NOT_FOUND:
                return None
            raise

    async def consumer_info(self, stream: str, name: str) -> dict[str, Any] | None:
        try:
            return await self.request(f"CONSUMER.INFO.{stream}.{name}")
        except JetStreamApiError as err:
            if err.err_code == CONSUMER_NOT_FOUND:
                return None
            if err.err_code == STREAM_NOT_FOUND:
                raise JetStreamNotFoundError(
                    f"stream {stream!r} does not exist in {self.target}: create it first"
                ) from None
            raise

    async def last_msg(self, stream: str, subject: str = ">") -> dict[str, Any] | None:
        """The stream's last message on ``subject`` (wildcards allowed): ``{"seq", "subject", "hdrs"...}``
        (``hdrs`` base64), or None when no message matches. Raises :class:`JetStreamNotFoundError`
        when the stream does not exist."""
        return await self._msg_get(stream, {"last_by_subj": subject})

    async def msg(self, stream: str, seq: int) -> dict[str, Any] | None:
        """The stream's message at ``seq``, or None when there is none (deleted, or out of range)."""
        return await self._msg_get(stream, {"seq": seq})

    async def next_msg(self, stream: str, seq: int = 1, subject: str = ">") -> dict[str, Any] | None:
        """The stream's first message at or after sequence ``seq`` on ``subject`` (wildcards allowed), or None
        when there is none: one message per request, for walks of bounded memory (object chunks, listings,
        the first uncopied message). Raises :class:`JetStreamNotFoundError` when the stream does not exist."""
        return await self._msg_get(stream, {"seq": max(int(seq), 1), "next_by_subj": subject})

    async def _msg_get(self, stream: str, body: Mapping[str, Any]) -> dict[str, Any] | None:
        try:
            response = await self.request(f"STREAM.MSG.GET.{stream}", body)
        except JetStreamApiError as err:
            if err.err_code == NO_MESSAGE_FOUND:
                return None
            if err.err_code == STREAM_NOT_FOUND:
                raise JetStreamNotFoundError(f"stream {stream!r} does not exist in {self.target}") from None
            raise
        return response.get("message") or None

    async def stream_names(self, subject: str | None = None) -> list[str]:
        """Every stream name (listening on ``subject`` if given), all pages of ``STREAM.NAMES``."""
        return [
            name async for page in self.pages("STREAM.NAMES", {"subject": subject} if subject else {}) for name in page
        ]

    async def delete_stream(self, name: str, *, missing_ok: bool = False) -> bool:
        """Delete stream ``name`` and its data; with ``missing_ok``, False when it did not exist (else
        the server's refusal, :class:`JetStreamApiError`)."""
        try:
            await self.request(f"STREAM.DELETE.{name}")
        except JetStreamApiError as err:
            if missing_ok and err.err_code == STREAM_NOT_FOUND:
                return False
            raise
        return True

    async def purge_stream(self, name: str, body: Mapping[str, Any] | None = None) -> int:
        """Purge stream ``name`` (``body``: ``filter``, ``keep`` or ``seq``; None: everything); how many
        messages were purged. :class:`JetStreamNotFoundError` when the stream does not exist."""
        try:
            reply = await self.request(f"STREAM.PURGE.{name}", body or None)
        except JetStreamApiError as err:
            if err.err_code == STREAM_NOT_FOUND:
                raise JetStreamNotFoundError(f"stream {name!r} does not exist in {self.target}") from None
            raise
        return int(reply.get("purged") or 0)

    async def delete_consumer(self, stream: str, name: str, *, missing_ok: bool = False) -> bool:
        """Delete consumer ``name`` of ``stream``; with ``missing_ok``, False when the consumer (or the
        stream) did not exist (else the server's refusal, :class:`JetStreamApiError`)."""
        try:
            await self.request(f"CONSUMER.DELETE.{stream}.{name}")
        except JetStreamApiError as err:
            if missing_ok and err.err_code in (CONSUMER_NOT_FOUND, STREAM_NOT_FOUND):
                return False
            raise
        return True
