"""Connecting nats-py to the servers of a :class:`JetStreamConnectionConfig`, with clear errors.

Free of Airflow imports: the hook uses it, and so do Spark executors, which import only this
package's Airflow-free modules (``core``: ``connection``, ``errors``...) and nats-py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import ssl
import time
import weakref
from collections import deque
from typing import Any

import nats.errors
from nats.aio.client import Client
from nats.aio.transport import TcpTransport

from airflow_provider_jetstream.core.arguments.names import domain_of
from airflow_provider_jetstream.core.connection.settings import JetStreamConnectionConfig
from airflow_provider_jetstream.core.errors import (
    JetStreamAuthError,
    JetStreamConfigError,
    JetStreamConnectionError,
    TlsNotStartedError,
)
from airflow_provider_jetstream.core.tasks import wait_task

log = logging.getLogger(__name__)

#: ``-ERR 'Permissions Violation for Publish to "<subject>"'`` the server sent each client, newest last,
#: as ``(monotonic time, kind, subject, the server's words)``. The server drops a refused request
#: without a reply, so the requester only sees a timeout; this is the one way a timeout is told from
#: a refusal (fed by :func:`open_connection`'s error callback).
_REFUSALS: weakref.WeakKeyDictionary[Client, deque[tuple[float, str, str, str]]] = weakref.WeakKeyDictionary()
_REFUSAL = re.compile(r"permissions violation for (publish|subscription) to \"?([^\"']+)\"?", re.IGNORECASE)


def note_refusal(nc: Client, err: BaseException) -> None:
    """Remember a ``Permissions Violation`` error the server sent to ``nc`` (no-op for other errors)."""
    text = str(err)
    match = _REFUSAL.search(text)
    if match:
        said = text.removeprefix("nats: ").strip()
        _REFUSALS.setdefault(nc, deque(maxlen=64)).append((time.monotonic(), match[1].lower(), match[2].strip(), said))


def refusal_since(nc: Client, since: float, subject: str | None = None, prefix: str | None = None) -> str | None:
    """The server's refusal of a publish to ``subject`` (or to any subject under ``prefix``, or any
    subject at all if both are None), or of a subscription, received after ``since``
    (``time.monotonic()``), in words (the server's own last); None if there was none."""
    for at, kind, refused, said in reversed(_REFUSALS.get(nc, ())):
        if at < since:
            break
        # nats-py lowercases the server's error text, so subjects compare without case.
        name = refused.lower()
        if (
            kind == "subscription"
            or (subject is not None and name == subject.lower())
            or (subject is None and (prefix is None or name.startswith(prefix.lower().rstrip(".") + ".")))
        ):
            return f"the server refused this user's {kind} to {refused!r} (Permissions Violation: {said})"
    return None


def clustered(nc: Client) -> bool:
    """The connection knows more than one server (listed, or discovered from a cluster's INFO): nodes of
    a cluster, where a node may die and a stream's leader move."""
    with contextlib.suppress(Exception):
        return len(nc.servers) > 1
    return False


def home_domain(nc: Client) -> str | None:
    """The JetStream domain of the server the connection is on (its INFO says), None when unknown."""
    info = getattr(nc, "_server_info", None)
    return info.get("domain") or None if isinstance(info, dict) else None


def in_home_domain(nc: Client, prefix: str | None) -> bool:
    """Whether a request at the JetStream API ``prefix`` goes to the connection's own domain: ``$JS.API`` (or
    no prefix), an imported prefix (``JS.acc@hub.API``: answered by the servers the account is on), or
    ``$JS.<domain>.API`` of the server's own domain (:func:`home_domain`). Another domain is reached through
    a leaf link: nobody answering there is that domain being away, not a failover of the connection's cluster."""
    domain = domain_of(prefix.rstrip(".")) if prefix else None
    return domain is None or domain == home_domain(nc)


class TlsOnlyTransport(TcpTransport):
    """nats-py's TCP transport that refuses to send a single byte before TLS is established.

    nats-py upgrades to TLS only when the server's INFO says ``tls_required``; with a ``tls://``
    URL or a CA file against a plain-text server it would send CONNECT, credentials included, in
    clear text. This transport sits where every byte goes out, so whatever path nats-py takes
    (first connect, reconnect, a server learnt from the cluster), clear text never leaves.
    """

    def __init__(self) -> None:
        super().__init__()
        self._fresh = True
        self._secure = False
        self._server = "?"
        self._tls_available = False

    def __bool__(self) -> bool:
        # nats-py replaces a falsy (unconnected) transport with its own: a fresh one counts as set.
        return self._fresh or super().__bool__()

    async def connect(self, uri: Any, buffer_size: int, connect_timeout: int) -> None:
        self._fresh = False
        self._secure = False
        self._tls_available = False
        self._server = f"{uri.scheme}://{uri.hostname}:{uri.port}"
        await super().connect(uri, buffer_size, connect_timeout)

    async def connect_tls(self, uri: Any, ssl_context: ssl.SSLContext, buffer_size: int, connect_timeout: int) -> None:
        await super().connect_tls(uri, ssl_context, buffer_size, connect_timeout)
        self._secure = True

    async def readline(self) -> bytes:
        line = await super().readline()
        if not self._secure and line.startswith(b"INFO "):
            with contextlib.suppress(ValueError):
                self._tls_available = bool(json.loads(line[5:]).get("tls_available"))
        return line

    def write(self, payload: bytes) -> None:
        self._refuse_clear_text()
        super().write(payload)

    def writelines(self, payload: list[bytes]) -> None:
        self._refuse_clear_text()
        super().writelines(payload)

    def _refuse_clear_text(self) -> None:
        if not self._secure:
            raise TlsNotStartedError(self._server, self._tls_available)


class _Client(Client):
    """nats-py's client, with :class:`TlsOnlyTransport` when the connection requires TLS."""

    def __init__(self, tls_only: bool) -> None:
        super().__init__()
        self._tls_only = tls_only

    async def _connect_to_server(self, s: Any) -> None:
        # nats-py makes its transport here, once per client; websocket URLs use their own (wss is
        # TLS from the first byte, ws with TLS asked for is refused by the connection config).
        if self._tls_only and self._transport is None and s.uri.scheme in ("nats", "tls"):
            self._transport = TlsOnlyTransport()
        await super()._connect_to_server(s)


async def open_connection(config: JetStreamConnectionConfig) -> Client:
    """Connect to NATS, trying every server once within ``connect_timeout``.

    nats-py retries the first connect by the reconnect settings (and forever with
    ``max_reconnect_attempts=0``); here the first connect fails fast with a clear error, and the
    reconnect settings apply once connected.
    """
    if config.websocket:
        try:
            import aiohttp  # noqa: F401 - nats-py's websocket transport needs it
        except ImportError:
            raise JetStreamConfigError(
                f"connection {config.conn_id!r}: ws:// and wss:// servers need aiohttp: install "
                "'airflow-provider-jetstream[websocket]'"
            ) from None
    options = config.connect_options()  # reads the TLS and creds files: a missing one is named here
    nc = _Client(tls_only=config.uses_tls)
    seen: list[BaseException] = []
    conn_id = config.conn_id

    async def on_error(err: Exception) -> None:
        seen.append(err)
        note_refusal(nc, err)
        if isinstance(err, TlsNotStartedError) and nc.is_reconnecting:
            log.warning("NATS connection %r: %s", conn_id, _tls_refusal(config, err))
        else:
            log.debug("NATS connection %r: %s: %s", conn_id, type(err).__name__, err)

    async def on_disconnected() -> None:
        if nc.is_closed or nc.is_draining:
            log.debug("NATS connection %r: closed", conn_id)
        else:
            log.warning("NATS connection %r: disconnected, reconnecting", conn_id)

    async def on_reconnected() -> None:
        log.info("NATS connection %r: reconnected", conn_id)

    after_connect = {
        key: options.pop(key) for key in ("allow_reconnect", "max_reconnect_attempts", "reconnect_time_wait")
    }
    options.update(
        allow_reconnect=False,
        max_reconnect_attempts=1,
        reconnect_time_wait=0.05,
        error_cb=on_error,
        disconnected_cb=on_disconnected,
        reconnected_cb=on_reconnected,
    )
    try:
        await wait_task(nc.connect(**options), timeout=config.connect_timeout)
    except asyncio.CancelledError:
        await asyncio.shield(release(nc, drain=False))
        raise
    except Exception as err:  # nats-py raises many kinds; each becomes one clear error
        await release(nc, drain=False)
        raise _connection_error(config, err, seen) from None
    nc.options.update(after_connect)
    return nc


async def release(nc: Client, drain: bool, timeout: float = 5.0) -> None:
    """Drain (flush pending work) or close a client, bounded: nats-py's close can hang after a
    failed TLS handshake, and its drain ignores its own cancellation."""
    with contextlib.suppress(Exception):
        if nc.is_closed:
            return
        if drain and nc.is_connected:
            await wait_task(nc.drain(), timeout)
        else:
            await wait_task(nc.close(), timeout)


def _connection_error(
    config: JetStreamConnectionConfig, err: BaseException, seen: list[BaseException]
) -> JetStreamConnectionError:
    where = f"connection {config.conn_id!r}"
    tried = ", ".join(config.redacted_servers)
    errors = [*seen, err]
    refused = next((e for e in errors if isinstance(e, TlsNotStartedError)), None)
    if refused is not None:
        return JetStreamConnectionError(f"{where}: {_tls_refusal(config, refused)}")
    text = " ".join(str(e).lower() for e in errors)
    if isinstance(err, nats.errors.AuthorizationError) or "authorization violation" in text:
        return JetStreamAuthError(
            f"{where}: authorization violation: the server at {tried} refused the credentials "
            f"({config.auth_method}); check login/password, token, "
            "NKey seed or creds"
        )
    tls = next((e for e in errors if isinstance(e, ssl.SSLError)), None)
    if tls is not None:
        reason = getattr(tls, "verify_message", None) or getattr(tls, "reason", None) or str(tls)
        return JetStreamConnectionError(
            f"{where}: TLS failure with {tried}: {reason}; check tls_ca_file, tls_hostname, the "
            "client certificate, or whether the server expects TLS (handshake_first)"
        )
    if isinstance(err, (asyncio.TimeoutError, TimeoutError)):
        last = f"; last error: {_short(seen[-1])}" if seen else ""
        return JetStreamConnectionError(
            f"{where}: no NATS server answered within {config.connect_timeout:g}s; tried {tried}{last}"
        )
    last = _short(seen[-1]) if seen else _short(err)
    return JetStreamConnectionError(f"{where}: no NATS server reachable; tried {tried}; last error: {last}")


def _tls_refusal(config: JetStreamConnectionConfig, err: TlsNotStartedError) -> str:
    optional = (
        " It offers TLS only as an option (tls_available), and nats-py upgrades only when the server "
        "requires TLS: set the server's TLS to required (drop allow_non_tls), or use tls_handshake_first "
        "with a server in handshake_first mode."
        if err.tls_available
        else " Enable TLS on the server, or, if clear text is really intended, use a nats:// server and "
        "remove the TLS fields."
    )
    return (
        f"TLS required ({', '.join(config.tls_reasons)}) but the server at {err.server} did not start TLS: "
        "refused to connect in clear text, nothing was sent to it (no credentials)." + optional
    )


def _short(err: BaseException) -> str:
    text = str(err) or type(err).__name__
    if isinstance(err, ConnectionRefusedError) or "connect call failed" in text.lower():
        return "connection refused"
    if isinstance(err, JetStreamConfigError):
        return text
    return f"{type(err).__name__}: {text}"
