"""The ``jetstream://<server>/<domain>/<stream>`` asset URI: parse, sanitize (clear refusals), build, OpenLineage."""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_jetstream.core.arguments.names import MAX_NAME

if TYPE_CHECKING:
    from airflow.sdk import Asset

SCHEME = "jetstream"
#: The domain segment of a stream in the default (no domain) JetStream.
NO_DOMAIN = "_"
DEFAULT_PORT = 4222
EXPECTED = "expected jetstream://<server>[:port]/<domain>/<stream> (domain '_' for no domain)"
_NAME_BAD = re.compile(r"[\s.*>/\\]|[\x00-\x1f\x7f]")


@dataclass(frozen=True)
class StreamUri:
    """A parsed stream URI. ``domain`` is None for the default JetStream (``_`` in the URI)."""

    server: str
    domain: str | None
    stream: str

    def __str__(self) -> str:
        return f"{SCHEME}://{self.server}/{self.domain or NO_DOMAIN}/{self.stream}"


def _refuse(uri: str, field: str, value: Any, allowed: str) -> ValueError:
    return ValueError(f"jetstream:// asset URI {uri!r}: {field}={value!r} is not allowed: {allowed}; {EXPECTED}")


def _name_ok(value: str) -> bool:
    return bool(value) and len(value) <= MAX_NAME and not _NAME_BAD.search(value)


def _normal_netloc(uri: str, netloc: str) -> str:
    if not netloc:
        raise _refuse(uri, "server", netloc, "give the NATS server host (and port)")
    if "@" in netloc:
        raise _refuse(uri, "server", netloc.rpartition("@")[0] + "@...", "no user or password in an asset URI")
    host, sep, port = netloc.rpartition(":") if not netloc.endswith("]") else (netloc, "", "")
    if not sep:
        host, port = netloc, ""
    if port and (not port.isdigit() or not 0 < int(port) < 65536):
        raise _refuse(uri, "port", port, "a port number 1-65535")
    if not host or re.search(r"[\s/?#]", host):
        raise _refuse(uri, "server", host, "a host name or IP address")
    host = host.lower()
    return host if not port or int(port) == DEFAULT_PORT else f"{host}:{int(port)}"


def sanitize_uri(uri: urllib.parse.SplitResult) -> urllib.parse.SplitResult:
    """Check and normalize a ``jetstream://`` URI (Airflow's asset-URI handler); ``ValueError`` names the
    field, its value and what is allowed. Normalizes: lower-case host, no default port 4222."""
    text = f"{uri.scheme}://{uri.netloc}{uri.path}" + (f"?{uri.query}" if uri.query else "")
    netloc = _normal_netloc(text, uri.netloc)
    if uri.query:
        raise _refuse(text, "query", uri.query, "no query: the stream is named by the path")
    if uri.fragment:
        raise _refuse(text, "fragment", uri.fragment, "no fragment")
    parts = uri.path.strip("/").split("/") if uri.path.strip("/") else []
    if len(parts) != 2:
        raise _refuse(text, "path", uri.path, "exactly two segments, /<domain>/<stream>")
    domain, stream = parts
    if domain != NO_DOMAIN and not _name_ok(domain):
        raise _refuse(text, "domain", domain, "a domain name without whitespace, '.', '*', '>' or '\\', or '_'")
    if not _name_ok(stream):
        raise _refuse(
            text, "stream", stream, f"a stream name of 1-{MAX_NAME} characters without whitespace, '.', '*', '>'"
        )
    return uri._replace(netloc=netloc, path=f"/{domain}/{stream}")


def parse_stream_uri(uri: str) -> StreamUri:
    """Parse and check a ``jetstream://<server>/<domain>/<stream>`` URI (``ValueError`` if malformed)."""
    split = urllib.parse.urlsplit(uri)
    if split.scheme.lower() != SCHEME:
        raise _refuse(uri, "scheme", split.scheme, "'jetstream'")
    clean = sanitize_uri(split)
    domain, stream = clean.path.strip("/").split("/")
    return StreamUri(clean.netloc, None if domain == NO_DOMAIN else domain, stream)


def create_asset(*, server: str, stream: str, domain: str | None = None, extra: dict | None = None) -> Asset:
    """An ``Asset``: ``jetstream://<server>/<domain or _>/<stream>``, named by that URI.

    The name is the URI, as for ``Asset("jetstream://...")``: Airflow matches asset events by name
    and URI together and keeps one active asset per URI, so the asset the operators emit at run time
    (:mod:`airflow_provider_jetstream.assets.lineage`), this one and one a DAG author writes by URI
    are the same asset.
    """
    from airflow.sdk import Asset

    uri = str(parse_stream_uri(str(StreamUri(server, domain, stream))))
    return Asset(uri=uri, extra=extra or {})


def convert_asset_to_openlineage(asset: Asset, lineage_context: Any) -> Any:
    """The OpenLineage dataset of a stream asset: namespace ``jetstream://<server>``, name ``<domain>/<stream>``."""
    from airflow.providers.common.compat.openlineage.facet import Dataset

    parsed = parse_stream_uri(asset.uri)
    return Dataset(namespace=f"{SCHEME}://{parsed.server}", name=f"{parsed.domain or NO_DOMAIN}/{parsed.stream}")
