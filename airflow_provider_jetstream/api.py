"""The JetStream JSON API of one domain or imported prefix, as plain JSON requests.

nats-py's manager turns replies into dataclasses that drop fields it does not know (the API
level, newer config fields) and sends every field of its config classes (servers >= 2.12 reject
unknown ones). Management, reconcile and status checks need the exact JSON both ways: this is the
one place that speaks it, on nats-py's public request API.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import nats.errors
from nats.aio.client import Client

from airflow_provider_jetstream.exceptions import (
    JetStreamDomainUnavailableError,
    JetStreamError,
    JetStreamNotFoundError,
)

STREAM_NOT_FOUND = 10059
CONSUMER_NOT_FOUND = 10014
WRONG_LAST_SEQUENCE = 10071


def domain_of(prefix: str | None) -> str | None:
    """The domain of a ``$JS.<domain>.API`` prefix; None for ``$JS.API`` or an imported prefix."""
    if prefix and prefix.startswith("$JS.") and prefix.endswith(".API") and prefix.count(".") == 2:
        return prefix.split(".")[1]
    return None


def describe_prefix(prefix: str) -> str:
    """Words for a JetStream target: ``domain 'leaf'``, ``API prefix 'JS.acc@hub.API'``..."""
    if prefix == "$JS.API":
        return "the local JetStream domain"
    domain = domain_of(prefix)
    return f"domain {domain!r}" if domain else f"API prefix {prefix!r}"


class JetStreamApiError(JetStreamError):
    """The JetStream API answered with an error."""

    def __init__(self, subject: str, error: Mapping[str, Any], target: str) -> None:
        self.code = error.get("code")
        self.err_code = error.get("err_code")
        self.description = error.get("description", "")
        self.subject = subject
        super().__init__(
            f"JetStream in {target} refused {subject.rsplit('.API.', 1)[-1]}: {self.description} "
            f"(code {self.code}, err_code {self.err_code})"
        )


class JetStreamApi:
    """JSON requests to one JetStream API (a domain or an imported prefix), counted in ``requests``."""

    def __init__(self, nc: Client, prefix: str = "$JS.API", *, timeout: float = 5.0, target: str | None = None):
        self.nc = nc
        self.prefix = prefix.rstrip(".")
        self.timeout = timeout
        self.target = target or describe_prefix(self.prefix)
        self.requests = 0

    async def request(self, suffix: str, body: Mapping[str, Any] | None = None) -> dict[str, Any]:
        subject = f"{self.prefix}.{suffix}"
        payload = json.dumps(body, separators=(",", ":")).encode() if body is not None else b""
        self.requests += 1
        try:
            msg = await self.nc.request(subject, payload, timeout=self.timeout)
        except nats.errors.NoRespondersError:
            raise JetStreamDomainUnavailableError(
                f"no JetStream responded in {self.target} ({self.prefix}): is the leaf connected, the domain "
                "name right, or the API exported and imported?"
            ) from None
        except nats.errors.TimeoutError:
            raise JetStreamDomainUnavailableError(
                f"JetStream in {self.target} ({self.prefix}) did not answer {suffix.split('.')[0]} within "
                f"{self.timeout:g}s"
            ) from None
        response = json.loads(msg.data) if msg.data else {}
        if "error" in response:
            raise JetStreamApiError(subject, response["error"], self.target)
        return response

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

    async def stream_names(self, subject: str | None = None) -> list[str]:
        """Every stream name (listening on ``subject`` if given), all pages of ``STREAM.NAMES``."""
        body: dict[str, Any] = {"subject": subject} if subject else {}
        names: list[str] = []
        while True:
            response = await self.request("STREAM.NAMES", {**body, "offset": len(names)} if names else body)
            page = list(response.get("streams") or [])
            names.extend(page)
            total = response.get("total")
            if not page or not isinstance(total, int) or len(names) >= total:
                return names
