"""The ``jetstream`` Airflow connection: its fields, their validation, and nats-py connect options.

Pure logic, no network: :class:`JetStreamConnectionConfig` is built from an Airflow ``Connection``
(UI form, ``AIRFLOW_CONN_*`` URI or JSON), checks every field before anything connects, and turns
into keyword arguments for ``nats.aio.client.Client.connect``.
"""

from __future__ import annotations

import difflib
import os
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from airflow_provider_jetstream.core.errors import JetStreamConfigError
from airflow_provider_jetstream.core.specs.names import is_name
from airflow_provider_jetstream.core.values import as_bool, as_number

if TYPE_CHECKING:
    from airflow.sdk import Connection

DEFAULT_PORT = 4222
SCHEMES = ("nats", "tls", "ws", "wss")
WEBSOCKET_SCHEMES = ("ws", "wss")


@dataclass(frozen=True)
class ExtraField:
    """One extra field of the connection: its form label, meaning, JSON type and default."""

    label: str
    description: str
    kind: str = "string"
    default: Any = None
    secret: bool = False
    placeholder: str | None = None


#: The connection's extra fields; the UI form (provider info) and the validation both read this.
#: The form shows them in this order: what this provider is about (domain, API prefix) first.
EXTRA_FIELDS: dict[str, ExtraField] = {
    "domain": ExtraField(
        "JetStream domain", "JetStream domain to address: API prefix $JS.<domain>.API.", placeholder="hub"
    ),
    "api_prefix": ExtraField(
        "JetStream API prefix", "Explicit API prefix, e.g. an import (not with domain).", placeholder="JS.acc@hub.API"
    ),
    "token": ExtraField("Token", "Authentication token, instead of user/password.", secret=True),
    "nkey_seed": ExtraField("NKey seed", "User NKey seed (starts with 'SU').", secret=True, placeholder="SUAM..."),
    "creds_file": ExtraField(
        "Creds file",
        "Path of a .creds file (user JWT and NKey seed) on the workers.",
        placeholder="/opt/airflow/secrets/edge.creds",
    ),
    "creds": ExtraField(
        "Creds content",
        "Content of a .creds file, for secret backends.",
        secret=True,
        placeholder="-----BEGIN NATS USER JWT-----...",
    ),
    "tls_ca_file": ExtraField(
        "TLS CA file",
        "PEM file of the CA that signed the server certificate.",
        placeholder="/opt/airflow/secrets/ca.pem",
    ),
    "tls_cert_file": ExtraField(
        "TLS client certificate",
        "PEM client certificate file, for mutual TLS.",
        placeholder="/opt/airflow/secrets/client-cert.pem",
    ),
    "tls_key_file": ExtraField(
        "TLS client key", "PEM client key file, for mutual TLS.", placeholder="/opt/airflow/secrets/client-key.pem"
    ),
    "tls_verify": ExtraField("TLS verify", "Verify the server certificate and hostname.", "boolean", True),
    "tls_hostname": ExtraField(
        "TLS hostname",
        "Hostname expected in the server certificate (default: the host).",
        placeholder="nats.example.com",
    ),
    "tls_handshake_first": ExtraField(
        "TLS handshake first", "TLS before the NATS INFO (server option handshake_first).", "boolean", False
    ),
    "tls_required": ExtraField(
        "TLS required",
        "Connect only over TLS, verified against the system CAs unless a CA file is given. Implied by a tls:// "
        "or wss:// server and by any other TLS field: a server that does not start TLS is refused before "
        "credentials are sent.",
        "boolean",
        False,
    ),
    "client_name": ExtraField(
        "Client name", "Name shown for this client in the server's connection list.", placeholder="airflow"
    ),
    "connect_timeout": ExtraField("Connect timeout (s)", "Seconds to connect, all servers included.", "number", 5),
    "allow_reconnect": ExtraField("Reconnect", "Reconnect after a lost connection.", "boolean", True),
    "max_reconnect_attempts": ExtraField(
        "Max reconnect attempts", "Reconnect attempts per server; -1 retries forever.", "integer", 60
    ),
    "reconnect_time_wait": ExtraField("Reconnect wait (s)", "Seconds between reconnect attempts.", "number", 2),
}


def validate_domain(domain: str, field_name: str = "domain") -> str:
    """Return ``domain`` if it is a valid JetStream domain name, else raise naming the field."""
    if not isinstance(domain, str) or not is_name(domain):
        raise JetStreamConfigError(
            f"{field_name}={domain!r} is not a JetStream domain name: use a non-empty name without "
            "whitespace, '.', '*', '>' or path separators (e.g. 'hub', 'leaf-a')"
        )
    return domain


def validate_api_prefix(api_prefix: str, field_name: str = "api_prefix") -> str:
    """Return ``api_prefix`` without a trailing dot if it is a valid subject prefix."""
    prefix = api_prefix.rstrip(".") if isinstance(api_prefix, str) else api_prefix
    if not isinstance(prefix, str) or not prefix or re.search(r"[\s*>]", prefix) or ".." in prefix:
        raise JetStreamConfigError(
            f"{field_name}={api_prefix!r} is not a JetStream API prefix: use a subject without "
            "whitespace or wildcards, e.g. '$JS.hub.API' or 'JS.acc@hub.API'"
        )
    return prefix


def api_prefix_for(domain: str | None = None, api_prefix: str | None = None) -> str:
    """The JetStream API prefix for a domain or an explicit prefix (at most one of them)."""
    if domain and api_prefix:
        raise JetStreamConfigError(
            f"domain={domain!r} and api_prefix={api_prefix!r} were both given: a domain means the "
            f"prefix '$JS.{domain}.API', so give one or the other"
        )
    if api_prefix:
        return validate_api_prefix(api_prefix)
    if domain:
        return f"$JS.{validate_domain(domain)}.API"
    return "$JS.API"


def redact_url(url: str) -> str:
    """``url`` without the password or token in its userinfo (``nats://acc:***@host:4222``)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable url>"
    if not parts.username and not parts.password:
        return url
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    user = f"{parts.username}:***" if parts.password else "***"
    return urlunsplit((parts.scheme, f"{user}@{host}", parts.path, parts.query, parts.fragment))


def _closest(key: str, known: list[str]) -> str:
    match = difflib.get_close_matches(key, known, n=1)
    return f" (did you mean {match[0]!r}?)" if match else ""


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
            servers = _servers(host, port, schema)
            if extra.get("domain") and extra.get("api_prefix"):
                api_prefix_for(extra["domain"], extra["api_prefix"])
            if extra.get("domain"):
                validate_domain(extra["domain"])
            if extra.get("api_prefix"):
                extra["api_prefix"] = validate_api_prefix(extra["api_prefix"])
            if "token" in extra and (login or password):
                raise JetStreamConfigError("token and login/password were both given: a server takes one of them")
            if "creds" in extra and "creds_file" in extra:
                raise JetStreamConfigError("creds and creds_file were both given: give one of them")
            if ("creds" in extra or "creds_file" in extra) and "nkey_seed" in extra:
                raise JetStreamConfigError(
                    "nkey_seed and creds/creds_file were both given: a .creds file already holds the seed"
                )
            if "nkey_seed" in extra and not str(extra["nkey_seed"]).strip().startswith("SU"):
                raise JetStreamConfigError("nkey_seed is not a user NKey seed: it must start with 'SU'")
            if bool(extra.get("tls_cert_file")) != bool(extra.get("tls_key_file")):
                raise JetStreamConfigError(
                    "tls_cert_file and tls_key_file go together: give both for mutual TLS, or neither"
                )
            minimums = {"connect_timeout": 0.1, "max_reconnect_attempts": -1, "reconnect_time_wait": 0}
            numbers = {
                name: as_number(
                    name,
                    extra.get(name, EXTRA_FIELDS[name].default),
                    minimum=minimum,
                    integer=EXTRA_FIELDS[name].kind == "integer",
                )
                for name, minimum in minimums.items()
            }
            flags = {
                name: as_bool(name, extra.get(name, spec.default), "is not a boolean")
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


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _servers(host: str | None, port: int | None, schema: str | None) -> list[str]:
    """Turn the host field (one host, or a comma list of hosts / URLs) into server URLs."""
    if not host or not host.strip():
        raise JetStreamConfigError(
            "host is empty: give a server or a comma-separated list, e.g. nats://hub-1:4222,nats://hub-2:4222"
        )
    default_scheme = schema if schema in SCHEMES else "nats"
    servers = []
    for item in (part.strip(" ") for part in host.split(",")):
        if not item:
            continue
        bad = _CONTROL.search(item) or re.search(r"\s", item)
        if bad:
            # urlsplit silently drops tabs and newlines, so "hub\nevil" would connect to "hubevil".
            raise JetStreamConfigError(
                f"host entry {redact_url(item)!r} is not allowed: it holds the whitespace or control character "
                f"{bad.group()!r}; use host[:port] or a URL, several separated by commas"
            )
        url = item if "://" in item else f"{default_scheme}://{item}"
        try:
            parts = urlsplit(url)
            parsed_port = parts.port
        except ValueError:
            raise JetStreamConfigError(f"host entry {redact_url(item)!r} is not a server address") from None
        if parts.scheme not in SCHEMES or not parts.hostname:
            raise JetStreamConfigError(
                f"host entry {redact_url(item)!r} is not allowed: use host[:port] or a URL with "
                f"scheme {', '.join(s + '://' for s in SCHEMES)}"
            )
        if parsed_port is None and parts.scheme in ("nats", "tls"):
            netloc = parts.netloc + f":{port or DEFAULT_PORT}"
            url = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
        servers.append(url)
    return servers
