"""An object's messages as ADR-20 lays them out: its meta subject and chunk subjects, its meta's fields and digest.

An object ``name`` of bucket ``b`` is a meta message on ``$O.b.M.<base64url(name)>`` (JSON: ``name``,
``bucket``, ``nuid``, ``size``, ``chunks``, ``digest`` ``SHA-256=<base64url>``, ``options.max_chunk_size``,
``headers``, rolled up: one per object) and its content the chunks on ``$O.b.C.<nuid>``, a new ``nuid`` per put.
What goes over the wire is sent by :mod:`~airflow_provider_jetstream.core.manage.objects`; this module only
builds and reads the messages, and bounds them: a meta subject fits the server's protocol line, a chunk fits
the connected server's ``max_payload`` once read back base64-encoded in a JSON answer.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from airflow_provider_jetstream.core.arguments.names import MAX_SUBJECT_BYTES
from airflow_provider_jetstream.core.errors import ObjectDigestError, ObjectStoreError, SpecError

#: The chunk size of every official client, bytes (at most the server's ``max_payload``).
CHUNK_SIZE = 128 * 1024
DIGEST_TYPE = "SHA-256="


def encode_name(name: str) -> str:
    """An object name as its meta subject's last token: base64url with padding, as nats.go and nats.js."""
    return base64.urlsafe_b64encode(name.encode()).decode()


def meta_subject(bucket: str, name: str) -> str:
    return f"$O.{bucket}.M.{encode_name(name)}"


def chunk_subject(bucket: str, nuid: str) -> str:
    return f"$O.{bucket}.C.{nuid}"


def format_digest(sha256: bytes) -> str:
    """``SHA-256=<base64url of the digest>``, the form every official client writes."""
    return DIGEST_TYPE + base64.urlsafe_b64encode(sha256).decode()


def parse_digest(text: str) -> bytes:
    """The SHA-256 bytes of a meta's ``digest`` (base64url or standard base64, padded or not, as clients wrote
    it over time); :class:`ObjectDigestError` when it is not a SHA-256 digest."""
    if not isinstance(text, str) or not text.upper().startswith(DIGEST_TYPE):
        raise ObjectDigestError(f"the object's digest {text!r} is not a {DIGEST_TYPE} digest")
    body = text[len(DIGEST_TYPE) :].strip()
    body += "=" * (-len(body) % 4)
    try:
        raw = base64.b64decode(body.replace("-", "+").replace("_", "/"), validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != 32:
        raise ObjectDigestError(f"the object's digest {text!r} is not a base64 SHA-256 digest")
    return raw


@dataclass(frozen=True)
class ObjectInfo:
    """An object as its meta message records it: ``size`` bytes in ``chunks`` chunks on ``$O.<bucket>.C.<nuid>``,
    its ``digest`` (``SHA-256=...``), ``revision`` (the meta message's stream sequence: it grows with every put
    and delete of the object), ``modified`` (when the server stored the meta, RFC 3339) and ``deleted``."""

    bucket: str
    name: str
    nuid: str
    size: int
    chunks: int
    digest: str
    revision: int
    modified: str | None = None
    deleted: bool = False
    description: str | None = None
    headers: dict[str, list[str]] = field(default_factory=dict)
    chunk_size: int | None = None
    #: A link's target (``{"bucket", "name"}``, as nats.go's ``AddLink`` writes it); None for an object.
    link: dict[str, Any] | None = None

    @classmethod
    def from_message(cls, message: Mapping[str, Any], bucket: str) -> ObjectInfo:
        """From a ``STREAM.MSG.GET`` answer of a meta subject; :class:`ObjectStoreError` if it is not a meta."""
        try:
            meta = json.loads(base64.b64decode(message.get("data") or ""))
            return cls(
                bucket=bucket,
                name=str(meta["name"]),
                nuid=str(meta.get("nuid") or ""),
                size=int(meta.get("size") or 0),
                chunks=int(meta.get("chunks") or 0),
                digest=str(meta.get("digest") or ""),
                revision=int(message["seq"]),
                modified=message.get("time"),
                deleted=bool(meta.get("deleted")),
                description=meta.get("description") or None,
                headers=dict(meta.get("headers") or {}),
                chunk_size=(meta.get("options") or {}).get("max_chunk_size"),
                link=(meta.get("options") or {}).get("link") or None,
            )
        except (ValueError, KeyError, TypeError, binascii.Error) as err:
            raise ObjectStoreError(
                f"bucket {bucket!r}: the message at sequence {message.get('seq')} on {message.get('subject')!r} is not "
                f"an object's meta ({err})"
            ) from None

    def to_xcom(self) -> dict[str, Any]:
        return {
            "bucket": self.bucket,
            "name": self.name,
            "size": self.size,
            "chunks": self.chunks,
            "digest": self.digest,
            "revision": self.revision,
            "modified": self.modified,
            "deleted": self.deleted,
            "nuid": self.nuid,
        }


#: The bounds of a put's ``chunk_size``, bytes: below 1 KiB a file becomes tens of thousands of messages (1 byte
#: per chunk took 66,000 chunks in 25 s), above 8 MiB no default server takes a chunk.
MIN_CHUNK_SIZE, MAX_CHUNK_SIZE = 1024, 8 * 1024 * 1024
#: The room a ``STREAM.MSG.GET`` answer needs besides its base64 data (its JSON fields, the headers).
_ANSWER_ROOM = 1024


def chunk_size_for(requested: int, max_payload: int | None) -> int:
    """The chunk size a put uses: ``requested``, at most what a read can get back through the connected server.
    A chunk is read as base64 (4/3 of its size) inside a JSON answer, which must fit ``max_payload``: at the
    default 1 MiB, 767 KiB (800 KiB chunks could be stored but not read back through a hub)."""
    if not max_payload:
        return requested
    return max(MIN_CHUNK_SIZE, min(requested, (max_payload - _ANSWER_ROOM) * 3 // 4))


def put_meta_subject(bucket: str, name: str, field: str = "object_name") -> str:
    """The meta subject a put of ``name`` publishes on; :class:`SpecError` when it is longer than a subject may be
    (``MAX_SUBJECT_BYTES``: the server would drop the connection mid-put, after the chunks)."""
    subject = meta_subject(bucket, name)
    if len(subject.encode()) > MAX_SUBJECT_BYTES:
        longest = (MAX_SUBJECT_BYTES - len(meta_subject(bucket, ""))) * 3 // 4
        raise SpecError(
            field,
            name,
            f"an object name is stored base64-encoded in its meta subject $O.{bucket}.M.<name>, at most "
            f"{MAX_SUBJECT_BYTES} bytes: names up to about {longest} bytes (UTF-8) in this bucket",
        )
    return subject


def meta_message(bucket: str, name: str, nuid: str, size: int, chunks: int, digest: str, **extra: Any) -> bytes:
    """The JSON payload of an object's meta message, as nats.go writes it (``mtime`` now); ``extra`` adds fields
    given a value (``options``, ``description``, ``headers``, ``deleted``)."""
    meta: dict[str, Any] = {
        "name": name,
        "bucket": bucket,
        "nuid": nuid,
        "size": size,
        "mtime": datetime.now(timezone.utc).isoformat().replace("+00:00", "Z"),
        "chunks": chunks,
        "digest": digest,
    }
    meta.update({key: value for key, value in extra.items() if value})
    return json.dumps(meta, separators=(",", ":")).encode()
