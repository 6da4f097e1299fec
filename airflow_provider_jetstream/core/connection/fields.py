"""The ``jetstream`` connection's fields: the extras of its form, and the server addresses, domain and
API prefix it holds, each checked (used by
:mod:`~airflow_provider_jetstream.core.connection.settings`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from airflow_provider_jetstream.core.arguments import names
from airflow_provider_jetstream.core.errors import JetStreamConfigError

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
    "asset_server": ExtraField(
        "Asset server name",
        "Server part of this connection's jetstream:// asset URIs and OpenLineage namespaces (host[:port]); give "
        "every connection of one NATS system the same one, so a stream has one name whichever server reached it. "
        "Default: the first server's host[:port].",
        placeholder="nats-hub",
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


def validate_asset_server(value: Any, field_name: str = "asset_server") -> str:
    """Return ``value`` if it is a ``host[:port]`` for asset URIs (no scheme, user, path or whitespace)."""
    text = value if isinstance(value, str) else ""
    host, _, port = text.rpartition(":") if not text.endswith("]") and text.count(":") == 1 else (text, "", "")
    bad_port = bool(port) and not (port.isdigit() and 0 < int(port) < 65536)
    if not text or re.search(r"[\s/@?#]", text) or not host or bad_port:
        raise JetStreamConfigError(
            f"{field_name}={value!r} is not allowed: give a host name with an optional port, e.g. 'nats-hub' or "
            "'nats-hub:4222' (no scheme, user or path)"
        )
    return text


def check_user_seed(seed: str) -> None:
    """Refuse an ``nkey_seed`` that is not a user NKey seed (``SU...`` with a valid checksum), naming the
    field but never the seed: otherwise it would only fail when connecting, as "no server reachable"."""
    import base64
    import binascii

    import nkeys

    text = seed.strip()
    if not text.startswith("SU"):
        raise JetStreamConfigError("nkey_seed is not a user NKey seed: it must start with 'SU'")
    try:
        # nkeys decodes a seed without checking its CRC-16: a mistyped character would still give a key.
        decoded = base64.b32decode(text + "=" * (-len(text) % 8))
        nkeys.decode_seed(text.encode())
        intact = len(decoded) > 2 and nkeys.crc16_checksum(decoded[:-2]) == decoded[-2:]
    except (binascii.Error, nkeys.NkeysError, ValueError):
        intact = False
    if not intact:
        raise JetStreamConfigError(
            "nkey_seed is not a valid user NKey seed (its encoding or checksum is wrong): copy it again from "
            "the .nk file or `nsc`"
        )


def api_prefix_for(domain: str | None = None, api_prefix: str | None = None) -> str:
    """The JetStream API prefix for a domain or an explicit prefix (at most one of them)."""
    if domain and api_prefix:
        raise JetStreamConfigError(
            f"domain={domain!r} and api_prefix={api_prefix!r} were both given: a domain means the "
            f"prefix '$JS.{domain}.API', so give one or the other"
        )
    if api_prefix:
        return names.api_prefix(api_prefix)
    if domain:
        return f"$JS.{names.domain_name(domain)}.API"
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


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def parse_servers(host: str | None, port: int | None, schema: str | None) -> list[str]:
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
        if parsed_port == 0:
            raise JetStreamConfigError(
                f"host entry {redact_url(item)!r} is not allowed: port 0 is no server's; use a TCP port from 1 to "
                "65535, or none for 4222"
            )
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
