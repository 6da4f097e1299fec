"""The JetStream JSON API of one domain or imported prefix, as plain JSON requests.

nats-py's manager turns replies into dataclasses that drop fields it does not know (the API
level, newer config fields) and sends every field of its config classes (servers >= 2.12 reject
unknown ones). Management, reconcile and status checks need the exact JSON both ways: this is the
one place that speaks it, on nats-py's public request API.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, TypeVar

import nats.errors
from nats.aio.client import Client

from airflow_provider_jetstream.core.arguments.names import domain_of
from airflow_provider_jetstream.core.connection.client import refusal_since
from airflow_provider_jetstream.core.errors import (
    WAIT,
    JetStreamApiError,
    JetStreamDomainUnavailableError,
    JetStreamImportMissingError,
    JetStreamNotFoundError,
    JetStreamPermissionError,
    JetStreamTimeoutError,
    disposition,
)

T = TypeVar("T")

#: Seconds a JetStream cluster may take to answer again after a node dies: the election of a new leader
#: (the meta leader answers the account's API; each stream and bucket has its own), a client or a leaf
#: link moving to a surviving node. Measured at 5-7 s on a loaded 3-node cluster.
ELECTION_WAIT = 12.0
#: Seconds between two questions while nobody answers.
_ASK_AGAIN_AFTER = 0.25

STREAM_NOT_FOUND = 10059
NO_MESSAGE_FOUND = 10037
CONSUMER_NOT_FOUND = 10014
WRONG_LAST_SEQUENCE = 10071
#: "replicas > 1 not supported in non-clustered mode": the domain is one server.
NOT_CLUSTERED = 10074


def is_imported_prefix(prefix: str | None) -> bool:
    """Whether a JetStream API prefix is an account import (``JS.acc@hub.API``) rather than
    ``$JS.API`` or a domain's ``$JS.<domain>.API``: only the subjects the account imports answer there."""
    return bool(prefix) and prefix.rstrip(".") != "$JS.API" and domain_of(prefix.rstrip(".")) is None


def unavailable_hint(prefix: str) -> str:
    """What it may mean that no JetStream answered at ``prefix``, in words."""
    if is_imported_prefix(prefix):
        return "is the API exported and imported into this account (and the exporting JetStream up)?"
    if domain_of(prefix):
        return "a leaf that is offline, or a wrong domain name?"
    return "is JetStream enabled for this account?"


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
    """JSON requests to one JetStream API (a domain or an imported prefix), counted in ``requests``."""

    def __init__(self, nc: Client, prefix: str = "$JS.API", *, timeout: float = 5.0, target: str | None = None):
        self.nc = nc
        self.prefix = prefix.rstrip(".")
        self.timeout = timeout
        self.target = target or describe_prefix(self.prefix)
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
            msg = await self.nc.request(subject, payload, timeout=self.timeout)
        except nats.errors.NoRespondersError:
            if is_imported_prefix(self.prefix):
                raise JetStreamImportMissingError(
                    f"nothing answers {subject!r} in this account: it has no import of "
                    f"{self.prefix}.{suffix.rsplit('.', 1)[0] if '.' in suffix else suffix} (or the exporting "
                    "account's JetStream is down); waiting cannot help"
                ) from None
            raise JetStreamDomainUnavailableError(
                f"no JetStream responded in {self.target} ({self.prefix}): {unavailable_hint(self.prefix)}"
            ) from None
        except nats.errors.TimeoutError:
            refusal = refusal_since(self.nc, started, subject)
            if refusal:
                denied = JetStreamPermissionError(f"JetStream in {self.target}: {refusal}")
                denied.refusal = refusal
                raise denied from None
            raise JetStreamTimeoutError(
                f"JetStream in {self.target} ({self.prefix}) did not answer {suffix.split('.')[0]} within "
                f"{self.timeout:g}s: {unavailable_hint(self.prefix)}"
            ) from None
        return msg.data

    async def request(self, suffix: str, body: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The reply to one request, as JSON; an error reply raises :class:`JetStreamApiError`."""
        return parse_reply(await self.raw_request(suffix, body), f"{self.prefix}.{suffix}", self.target)

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


async def until_answered(ask: Callable[[], Awaitable[T]], within: float = ELECTION_WAIT) -> T:
    """``await ask()``, asked again while nobody answers now (``disposition(err) == WAIT``: a timeout,
    no responders, a 503 answer while a leader is elected) until ``within`` seconds (default
    :data:`ELECTION_WAIT`) have passed; then the last error is raised. Any other error is raised at
    once. For questions only (a write asked again may be stored twice: see its caller)."""
    deadline = time.monotonic() + within
    while True:
        try:
            return await ask()
        except Exception as err:
            if disposition(err) != WAIT or time.monotonic() + _ASK_AGAIN_AFTER >= deadline:
                raise
        await asyncio.sleep(_ASK_AGAIN_AFTER)
