"""The ``jetstream`` Airflow connection as one checked config, and its nats-py connect options and TLS context.

Pure logic, no network: :class:`JetStreamConnectionConfig` is built from an Airflow ``Connection``
(UI form, ``AIRFLOW_CONN_*`` URI or JSON), checks every field (see
:mod:`~airflow_provider_jetstream.core.connection.fields`) before anything connects, and turns into
keyword arguments for ``nats.aio.client.Client.connect``.
"""

from __future__ import annotations

import difflib
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from airflow_provider_jetstream.core.arguments.names import api_prefix, domain_name
from airflow_provider_jetstream.core.arguments.values import boolean, integer, number
from airflow_provider_jetstream.core.connection.fields import (
    EXTRA_FIELDS,
    WEBSOCKET_SCHEMES,
    api_prefix_for,
    check_user_seed,
    parse_servers,
    redact_url,
    validate_asset_server,
)
from airflow_provider_jetstream.core.errors import JetStreamConfigError, SpecError

if TYPE_CHECKING:
    from airflow.sdk import Connection


def _closest(key: str, known: list[str]) -> str:
    match = difflib.get_close_matches(key, known, n=1)
    return f" (did you mean {match[0]!r}?)" if match else ""


def _flag(value: Any, name: str) -> bool:
    try:
        return boolean(value, name, text=True)
    except SpecError as err:
        raise SpecError(name, value, err.allowed, problem="is not a boolean") from None


def _check_readable(field_name: str, what: str, path: str) -> None:
    """Raise naming the field and the path unless ``path`` is a readable file on this machine."""
    if not os.path.exists(path):
        raise JetStreamConfigError(
            f"{field_name}: {what} not found: {path} (the path is read on the machine that connects)"
        )
    if not os.path.isfile(path):
        raise JetStreamConfigError(f"{field_name}: {what} {path} is not a file")
    if not os.access(path, os.R_OK):
        raise JetStreamConfigError(f"{field_name}: {what} {path} is not readable by this process")


#: Files a connection reads when it connects: field name and what the file is, in words.
FILE_FIELDS = {
    "creds_file": "creds file",
    "tls_ca_file": "TLS CA file",
    "tls_cert_file": "TLS client certificate file",
    "tls_key_file": "TLS client key file",
}


@dataclass(frozen=True)
class JetStreamConnectionConfig:
    """Everything needed to connect to NATS and address JetStream, validated.

    Built by :meth:`from_connection`; the secrets are kept out of ``repr``.
    """

    conn_id: str
    servers: list[str]
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    nkey_seed: str | None = field(default=None, repr=False)
    creds_file: str | None = None
    creds: str | None = field(default=None, repr=False)
    tls_ca_file: str | None = None
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    tls_verify: bool = True
    tls_hostname: str | None = None
    tls_handshake_first: bool = False
    tls_required: bool = False
    domain: str | None = None
    api_prefix: str | None = None
    asset_server: str | None = None
    client_name: str | None = None
    connect_timeout: float = 5.0
    allow_reconnect: bool = True
    max_reconnect_attempts: int = 60
    reconnect_time_wait: float = 2.0

    @classmethod
    def from_connection(cls, conn: Connection) -> JetStreamConnectionConfig:
        """Validate an Airflow connection of type ``jetstream``; raise naming the bad field."""
        conn_id = conn.conn_id or "<unnamed>"
        extra = conn.extra_dejson if conn.extra else {}
        if not isinstance(extra, Mapping):
            raise JetStreamConfigError(f"connection {conn_id!r}: extra must be a JSON object")
        return cls.from_fields(
            conn_id=conn_id,
            host=conn.host,
            port=conn.port,
            login=conn.login,
            password=conn.password,
            schema=conn.schema,
            extra=dict(extra),
        )

    @classmethod
    def from_fields(
        cls,
        *,
        conn_id: str,
        host: str | None,
        port: int | None = None,
        login: str | None = None,
        password: str | None = None,
        schema: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> JetStreamConnectionConfig:
        """Build from the connection's fields (host, port, login, password, extra)."""
        # The UI may store form fields as "extra__jetstream__<name>"; both spellings are accepted.
        extra = {k.removeprefix("extra__jetstream__"): v for k, v in (extra or {}).items() if v not in (None, "")}
        where = f"connection {conn_id!r}"
        unknown = sorted(set(extra) - set(EXTRA_FIELDS))
        if unknown:
            key = unknown[0]
            raise JetStreamConfigError(
                f"{where}: unknown extra field {key!r}{_closest(key, list(EXTRA_FIELDS))}; "
                f"known fields: {', '.join(EXTRA_FIELDS)}"
            )
        try:
            if port is not None and (isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536):
                raise SpecError("port", port, "use a TCP port from 1 to 65535, or leave it empty for 4222")
            servers = parse_servers(host, port, schema)
            if extra.get("domain") and extra.get("api_prefix"):
                api_prefix_for(extra["domain"], extra["api_prefix"])
            if extra.get("domain"):
                domain_name(extra["domain"])
            if extra.get("api_prefix"):
                extra["api_prefix"] = api_prefix(extra["api_prefix"])
            if "asset_server" in extra:
                validate_asset_server(extra["asset_server"])
            other_auth = [k for k in ("token", "nkey_seed", "creds", "creds_file") if k in extra]
            if (login or password) and other_auth:
                raise JetStreamConfigError(
                    f"{other_auth[0]} and login/password were both given: a server authenticates a user one way; "
                    "give one of them"
                )
            if "creds" in extra and "creds_file" in extra:
                raise JetStreamConfigError("creds and creds_file were both given: give one of them")
            if ("creds" in extra or "creds_file" in extra) and "nkey_seed" in extra:
                raise JetStreamConfigError(
                    "nkey_seed and creds/creds_file were both given: a .creds file already holds the seed"
                )
            if "nkey_seed" in extra:
                check_user_seed(str(extra["nkey_seed"]))
            if bool(extra.get("tls_cert_file")) != bool(extra.get("tls_key_file")):
                raise JetStreamConfigError(
                    "tls_cert_file and tls_key_file go together: give both for mutual TLS, or neither"
                )
            # Extras are JSON or form text: the text forms of numbers and booleans are accepted.
            parsers = {
                "connect_timeout": number(0.1),
                "max_reconnect_attempts": integer(-1),
                "reconnect_time_wait": number(0),
            }
            numbers = {
                name: parse(extra.get(name, EXTRA_FIELDS[name].default), name, text=True)
                for name, parse in parsers.items()
            }
            flags = {
                name: _flag(extra.get(name, spec.default), name)
                for name, spec in EXTRA_FIELDS.items()
                if spec.kind == "boolean"
            }
        except JetStreamConfigError as err:
            raise JetStreamConfigError(f"{where}: {err}") from None
        text = {
            name: str(extra[name])
            for name in EXTRA_FIELDS
            if name in extra and name not in numbers and name not in flags
        }
        config = cls(
            conn_id=conn_id, servers=servers, user=login or None, password=password or None, **text, **numbers, **flags
        )
        try:
            config._check_transport()
        except JetStreamConfigError as err:
            raise JetStreamConfigError(f"{where}: {err}") from None
        return config

    def _check_transport(self) -> None:
        """Refuse server lists that nats-py cannot honour, and TLS asked for over plain websocket."""
        schemes = {urlsplit(s).scheme for s in self.servers}
        websocket = schemes & set(WEBSOCKET_SCHEMES)
        if websocket and schemes - set(WEBSOCKET_SCHEMES):
            raise JetStreamConfigError(
                f"host mixes websocket ({', '.join(s + '://' for s in sorted(websocket))}) and NATS "
                f"({', '.join(s + '://' for s in sorted(schemes - websocket))}) servers: a connection uses one "
                "transport, so list servers of one kind"
            )
        if "ws" in schemes and self.tls_reasons:
            raise JetStreamConfigError(
                f"host has a ws:// server but the connection requires TLS ({', '.join(self.tls_reasons)}): "
                "ws:// is plain text and cannot be upgraded; use wss:// for websocket over TLS"
            )

    @property
    def tls_reasons(self) -> list[str]:
        """Why this connection requires TLS, field by field (empty: it does not).

        A ``tls://`` or ``wss://`` server, ``tls_required``, or any TLS field set away from its
        default means TLS: the client then sends nothing to a server that does not start TLS.
        """
        reasons = [
            f"{scheme}:// server" for scheme in ("tls", "wss") if any(self._scheme(s) == scheme for s in self.servers)
        ]
        reasons += [
            name for name in ("tls_required", "tls_ca_file", "tls_cert_file", "tls_hostname") if getattr(self, name)
        ]
        if not self.tls_verify:
            reasons.append("tls_verify=false")
        if self.tls_handshake_first:
            reasons.append("tls_handshake_first")
        return reasons

    @staticmethod
    def _scheme(server: str) -> str:
        return urlsplit(server).scheme

    @property
    def uses_tls(self) -> bool:
        """True if the connection must be encrypted (see :attr:`tls_reasons`)."""
        return bool(self.tls_reasons)

    @property
    def websocket(self) -> bool:
        """True if the servers are websocket URLs (``ws://`` / ``wss://``)."""
        return any(self._scheme(s) in WEBSOCKET_SCHEMES for s in self.servers)

    def check_files(self) -> None:
        """Raise :class:`JetStreamConfigError` naming the field and path of a file that cannot be read.

        Called just before connecting, on the machine that connects (the files live on the workers,
        not necessarily where the connection is edited).
        """
        for name, what in FILE_FIELDS.items():
            path = getattr(self, name)
            if path:
                try:
                    _check_readable(name, what, path)
                except JetStreamConfigError as err:
                    raise JetStreamConfigError(f"connection {self.conn_id!r}: {err}") from None

    @property
    def redacted_servers(self) -> list[str]:
        return [redact_url(s) for s in self.servers]

    @property
    def secrets(self) -> list[str]:
        """Every secret value of this connection, for the secrets masker."""
        values = [self.password, self.token, self.nkey_seed, self.creds]
        for server in self.servers:
            password = urlsplit(server).password
            values.append(password)
        return [v for v in values if v]

    def ssl_context(self) -> ssl.SSLContext | None:
        """The client TLS context (CA, client certificate, verification), or None without TLS.

        A missing or unreadable file raises :class:`JetStreamConfigError` naming the field and path.
        """
        if not self.uses_tls:
            return None
        self.check_files()
        where = f"connection {self.conn_id!r}"
        try:
            ctx = ssl.create_default_context(cafile=self.tls_ca_file)
        except (ssl.SSLError, OSError) as err:
            raise JetStreamConfigError(
                f"{where}: tls_ca_file: {self.tls_ca_file} holds no usable PEM CA certificate ({_reason(err)})"
            ) from None
        if not self.tls_verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if self.tls_cert_file:
            try:
                ctx.load_cert_chain(self.tls_cert_file, self.tls_key_file)
            except (ssl.SSLError, OSError) as err:
                raise JetStreamConfigError(
                    f"{where}: tls_cert_file/tls_key_file: {self.tls_cert_file} and {self.tls_key_file} are not a "
                    f"matching PEM certificate and unencrypted key ({_reason(err)})"
                ) from None
        return ctx

    def connect_options(self) -> dict[str, Any]:
        """Keyword arguments for ``nats.aio.client.Client.connect`` (secrets included: never log)."""
        from nats.aio.client import RawCredentials

        options: dict[str, Any] = {
            "servers": list(self.servers),
            "name": self.client_name,
            "connect_timeout": self.connect_timeout,
            "allow_reconnect": self.allow_reconnect,
            "max_reconnect_attempts": self.max_reconnect_attempts,
            "reconnect_time_wait": self.reconnect_time_wait,
        }
        if self.user or self.password:
            options.update(user=self.user, password=self.password)
        if self.token:
            options["token"] = self.token
        if self.nkey_seed:
            options["nkeys_seed_str"] = self.nkey_seed.strip()
        if self.creds_file:
            self.check_files()
            options["user_credentials"] = self.creds_file
        if self.creds:
            options["user_credentials"] = RawCredentials(self.creds)
        tls = self.ssl_context()
        if tls is not None:
            options["tls"] = tls
            options["tls_handshake_first"] = self.tls_handshake_first
            if self.tls_hostname:
                options["tls_hostname"] = self.tls_hostname
        return options

    @property
    def auth_method(self) -> str:
        """Which credentials this connection presents, in words (no secret)."""
        if self.creds or self.creds_file:
            return "creds (user JWT)"
        if self.nkey_seed:
            return "NKey"
        if self.token:
            return "token"
        if self.user:
            return f"user {self.user!r}"
        return "no credentials"

    def describe(self) -> str:
        """A one-line, secret-free description for logs: servers, auth method, JetStream target."""
        if self.domain:
            target = f"domain {self.domain!r}"
        elif self.api_prefix:
            target = f"API prefix {self.api_prefix!r}"
        else:
            target = "local JetStream"
        tls = ", TLS" if self.uses_tls else ""
        return f"{', '.join(self.redacted_servers)} ({self.auth_method}{tls}; {target})"


def _reason(err: BaseException) -> str:
    return getattr(err, "reason", None) or getattr(err, "strerror", None) or str(err) or type(err).__name__
