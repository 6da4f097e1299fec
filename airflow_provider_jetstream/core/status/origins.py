"""What the server reports about the origins of a stream (its mirror, or each source), and the subject
transforms needed to find an origin's messages in the copy. Judged by :mod:`.replication`."""

from __future__ import annotations

import base64
import hashlib
import math
import re
from dataclasses import dataclass
from typing import Any

import nats.errors

from airflow_provider_jetstream.core.api import (
    JetStreamApi,
    JetStreamApiError,
    leaderless,
    no_leader_error,
    unavailable_hint,
)
from airflow_provider_jetstream.core.arguments.durations import instant
from airflow_provider_jetstream.core.arguments.names import domain_of
from airflow_provider_jetstream.core.errors import (
    JetStreamDomainUnavailableError,
    JetStreamError,
    JetStreamImportMissingError,
    JetStreamNotFoundError,
    JetStreamPermissionError,
)


@dataclass(frozen=True)
class ReplicationStatus:
    """What the server reports about one origin of a stream.

    :param kind: ``"mirror"`` or ``"source"``.
    :param origin: name of the origin stream.
    :param api_prefix: JetStream API prefix of the origin (``$JS.leaf.API``, ``JS.acc@hub.API``);
        None when the origin is in the stream's own domain.
    :param lag: messages the origin had that this stream had not, at last contact.
    :param active: seconds since the last contact with the origin; None if never contacted.
    :param error: the last replication error reported, or None.
    :param filter_subject: the source's subject filter, if any.
    :param subject_transforms: the source's ``(src, dest)`` subject transforms, if any.
    :param seq: the last origin sequence this stream holds from the source, when the server says
        (nats-server >= 2.15 reports it per source); None otherwise.
    :param external_api: the configured external API prefix, exactly as written (the server names
        the origin in ``Nats-Stream-Source`` headers with a hash of it).
    :param consumer: durable sourcing (nats-server 2.14+): the origin's flow-control consumer this
        copy reads; None for an ordinary source or mirror.
    :param last_contact: when the server last heard from the origin, in whole epoch seconds: the info's
        server time (``ts``) minus ``active``, so every reader of the same outage finds the same instant
        (nats-server 2.15 keeps it through an outage; 2.10 moves it at each retry of a cut-off source).
        None when never contacted, or when the info has no server time (nats-server before 2.10).
    """

    kind: str
    origin: str
    api_prefix: str | None
    lag: int
    active: float | None
    error: str | None = None
    filter_subject: str | None = None
    subject_transforms: tuple[tuple[str, str], ...] = ()
    seq: int | None = None
    external_api: str | None = None
    consumer: str | None = None
    last_contact: float | None = None

    @property
    def key(self) -> str:
        """Identifies the origin in the watch's state: ``kind:origin:api prefix``."""
        return f"{self.kind}:{self.origin}:{self.api_prefix or ''}"

    @property
    def domain(self) -> str | None:
        return domain_of(self.api_prefix)

    @property
    def where(self) -> str:
        """The origin's location in words for the table: ``leaf``, ``JS.acc@hub.API`` or ``(local)``."""
        if self.api_prefix is None:
            return "(local)"
        return self.domain or self.api_prefix

    @property
    def label(self) -> str:
        return f"{self.kind} {self.origin!r} in {self.where}"

    @property
    def origin_filters(self) -> list[str]:
        """The subjects of the origin this copy takes: the transforms' sources, the filter, or all."""
        if self.subject_transforms:
            return [src or ">" for src, _ in self.subject_transforms]
        return [self.filter_subject or ">"]

    @property
    def copy_patterns(self) -> list[str]:
        """Subject patterns the copies of this origin land on in the stream (transforms applied)."""
        if not self.subject_transforms:
            return [self.filter_subject or ">"]
        return [transform_pattern(src, dest) for src, dest in self.subject_transforms]

    @property
    def index_name(self) -> str:
        """How the server names this origin in a ``Nats-Stream-Source`` header: ``name:<hash of the
        external API prefix>``, or the bare name for an origin in the same domain."""
        if not self.external_api:
            return self.origin
        return f"{self.origin}:{server_hash(self.external_api)}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "origin": self.origin,
            "domain": self.domain,
            "api_prefix": self.api_prefix,
            "lag": self.lag,
            "active": self.active,
            "error": self.error,
            **({"consumer": self.consumer} if self.consumer else {}),
        }


_HASH_DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_WILDCARD_REF = re.compile(r"^(\$\d+|\{\{\s*wildcard\s*\(\s*\d+\s*\)\s*\}\})$", re.IGNORECASE)


def server_hash(text: str) -> str:
    """nats-server's ``getHash``: 8 base-62 digits of the SHA-256 of ``text`` (seen in
    ``Nats-Stream-Source: orig:mSx7q4yJ 9 ...`` for ``$JS.leaf.API`` on 2.10, 2.12 and 2.15)."""
    digest = hashlib.sha256(text.encode()).digest()
    return "".join(_HASH_DIGITS[b % 62] for b in digest[:8])


def transform_pattern(src: str, dest: str) -> str:
    """The subjects a transform ``src -> dest`` can produce, as a pattern: ``$1`` / ``{{wildcard(1)}}``
    become ``*``; any other mapping function (partition, split...) and what follows become ``>``."""
    if not dest:
        return src or ">"
    tokens = []
    for token in dest.split("."):
        if _WILDCARD_REF.match(token.strip()):
            tokens.append("*")
        elif "{{" in token or "$" in token:
            tokens.append(">")
            break
        else:
            tokens.append(token)
    return ".".join(tokens)


def subject_matches(subject: str, pattern: str) -> bool:
    """NATS subject matching: ``*`` one token, ``>`` one or more trailing tokens."""
    tokens, parts = subject.split("."), pattern.split(".")
    for i, part in enumerate(parts):
        if part == ">":
            return len(tokens) > i
        if i >= len(tokens) or (part != "*" and part != tokens[i]):
            return False
    return len(tokens) == len(parts)


def stream_source_seq(message: dict[str, Any], index_name: str) -> int | None:
    """The origin sequence in a raw stored message's ``Nats-Stream-Source`` header, if that header
    names ``index_name`` (``orig:mSx7q4yJ 9 o.a.* > [o.a.0 [hash]]``: the trailing fields vary by
    server version, the first two do not); None for a message from another origin or none."""
    raw = message.get("hdrs")
    if not raw:
        return None
    for line in base64.b64decode(raw).decode(errors="replace").split("\r\n"):
        name, _, value = line.partition(":")
        if name.strip().lower() == "nats-stream-source":
            fields = value.split()
            if len(fields) >= 2 and fields[0] == index_name and fields[1].isdigit():
                return int(fields[1])
    return None


def statuses_from_stream_info(info: dict[str, Any]) -> list[ReplicationStatus]:
    """The mirror's or every source's status, from a raw ``STREAM.INFO`` response.

    The response carries each origin's ``external.api``; when it does not (older servers), it is
    taken from the stream config's mirror/source of the same name.
    """
    config = info.get("config") or {}
    configured = ([config["mirror"]] if config.get("mirror") else []) + list(config.get("sources") or [])
    external_by_name = {c.get("name"): (c.get("external") or {}).get("api") for c in configured}
    config_by_name = {c.get("name"): c for c in configured}
    config_by_key = {(c.get("name"), (c.get("external") or {}).get("api")): c for c in configured}
    reported = [("mirror", info["mirror"])] if info.get("mirror") else []
    # The server lists sources in no fixed order: keep the configured one, so tables compare. Sources of one
    # name in several domains (each leaf's ``readings``) are told apart by their external API prefix.
    order = {(c.get("name"), (c.get("external") or {}).get("api")): i for i, c in enumerate(configured)}

    def position(source: dict[str, Any]) -> int:
        name, api = source.get("name"), (source.get("external") or {}).get("api")
        return order.get((name, api), order.get((name, external_by_name.get(name)), 1 << 30))

    reported += sorted((("source", s) for s in info.get("sources") or []), key=lambda r: position(r[1]))
    # The server's time of this info (nats-server 2.10+): without it, no last contact is known.
    server_now = instant(info.get("ts"))
    statuses = []
    for kind, entry in reported:
        name = entry.get("name", "?")
        external = entry.get("external") or {}
        api = external.get("api") if "external" in entry else external_by_name.get(name)
        active_ns = entry.get("active", -1)
        error = entry.get("error")
        configured_entry = config_by_key.get((name, api)) or config_by_name.get(name) or {}
        transforms = entry.get("subject_transforms") or configured_entry.get("subject_transforms") or []
        statuses.append(
            ReplicationStatus(
                kind=kind,
                origin=name,
                api_prefix=api.rstrip(".") if api else None,
                lag=int(entry.get("lag", 0)),
                active=None if active_ns is None or active_ns < 0 else active_ns / 1e9,
                error=(
                    f"{error.get('description')} (code {error.get('err_code', error.get('code'))})" if error else None
                ),
                filter_subject=entry.get("filter_subject") or configured_entry.get("filter_subject"),
                subject_transforms=tuple((t.get("src", ""), t.get("dest", "")) for t in transforms),
                seq=entry.get("seq") if kind == "source" and isinstance(entry.get("seq"), int) else None,
                external_api=api or None,
                consumer=((configured_entry.get("consumer") or {}).get("name")) or None,
                last_contact=(
                    None
                    if server_now is None or active_ns is None or active_ns < 0
                    else float(math.floor(server_now.timestamp() - active_ns / 1e9))
                ),
            )
        )
    return statuses


@dataclass(frozen=True)
class OriginProbe:
    """What the origin's own domain said when asked for its last (matching) sequence.

    :param state: ``"ok"`` (answered: ``last_seq``), ``"unreachable"`` (no JetStream answered in
        its domain), ``"unverifiable"`` (this account cannot call the origin's API: an imported
        prefix without that import), ``"missing"`` (the origin stream does not exist) or ``"off"``
        (not probed).
    :param last_seq: the origin's last sequence among the subjects the copy takes (0: none).
    :param reason: why it could not be read, in words.
    :param created: the origin stream's identity (``STREAM.INFO``'s ``created``; None: not read).
    """

    state: str
    last_seq: int | None = None
    reason: str = ""
    created: str | None = None
    drain: ConsumerDrain | None = None


@dataclass(frozen=True)
class ConsumerDrain:
    """Durable sourcing: how far the origin's flow-control consumer is acknowledged, and what the origin
    still holds of what it takes. The copying server acknowledges what it stored, so everything at or
    below ``ack_floor`` is in the copy, and the origin deletes it (a work queue; an interest stream once
    its other consumers acknowledged it too).

    :param pending: messages not yet delivered to the copy (``num_pending``).
    :param ack_pending: delivered but not yet acknowledged by the copy (``num_ack_pending``).
    :param ack_floor: the origin sequence up to which everything is acknowledged.
    :param last_held: the origin's last stored sequence on the consumer's subjects (0: none left).
    :param retention: the origin's retention (``workqueue``, ``interest``, ``limits``).
    :param other_consumers: the origin's consumers besides this one (an interest stream keeps messages
        for them).
    """

    pending: int
    ack_pending: int
    ack_floor: int
    last_held: int
    retention: str
    other_consumers: int

    @property
    def acknowledged(self) -> bool:
        """The copy acknowledged everything the consumer takes: nothing pending, nothing in flight."""
        return self.pending == 0 and self.ack_pending == 0

    @property
    def drained(self) -> bool:
        """The origin no longer holds what the copy acknowledged (kept only where other consumers of an
        interest stream still need it, or the origin is a limits stream, which deletes by its limits)."""
        if self.retention == "workqueue" or (self.retention == "interest" and self.other_consumers == 0):
            return self.last_held <= 0 or self.last_held > self.ack_floor
        return True


@dataclass(frozen=True)
class HeldSeq:
    """The highest origin sequence the stream holds from one origin (None: could not tell, ``reason``)."""

    seq: int | None
    reason: str = ""


def unreachable_reason(prefix: str) -> str:
    """Why an origin counts as unreachable, in words: ``domain 'leaf-a' did not answer: ...``."""
    domain = domain_of(prefix)
    where = f"domain {domain!r}" if domain else f"API prefix {prefix!r}"
    return f"{where} did not answer: {unavailable_hint(prefix)}"


#: Most messages read back from the end of a stream to find the newest copy from one origin, when
#: other origins write to the same subjects (each read is one request; see :func:`held_seq`).
WALK_BACK_LIMIT = 500


async def probe_origin(api: JetStreamApi, status: ReplicationStatus) -> OriginProbe:
    """Ask the origin, through its own domain or API prefix, for its last sequence among the
    subjects the copy takes (``STREAM.MSG.GET`` with ``last_by_subj``: one indexed lookup per
    filter, wildcards allowed, on every server version; 0 when nothing matches). A durable source
    is asked for its consumer's state too (:func:`probe_durable_origin`).

    A refused request (``Permissions Violation``) raises :class:`JetStreamPermissionError`.
    """
    try:
        if status.consumer:
            return await probe_durable_origin(api, status)
        last = 0
        for subject in status.origin_filters:
            message = await api.last_msg(status.origin, subject)
            if message:
                last = max(last, int(message["seq"]))
        return OriginProbe("ok", last)
    except JetStreamNotFoundError:
        return OriginProbe("missing", None, f"origin stream {status.origin!r} does not exist in {api.target}")
    except JetStreamImportMissingError:
        return OriginProbe(
            "unverifiable",
            None,
            f"origin not verifiable from this account (no import of {api.prefix}.STREAM.MSG.GET): lag/active rule",
        )
    except JetStreamDomainUnavailableError:
        return OriginProbe("unreachable", None, unreachable_reason(api.prefix))
    except JetStreamApiError as err:  # e.g. 503: JetStream temporarily unavailable there
        return OriginProbe("unreachable", None, f"{api.target} did not answer: {err.description}")


async def probe_durable_origin(api: JetStreamApi, status: ReplicationStatus) -> OriginProbe:
    """A durable source's origin: its flow-control consumer's state (``CONSUMER.INFO``), read first, then
    the origin's last stored sequence on that consumer's subjects (what it takes: its filters, the
    source has none) and the stream's retention. ``last_seq`` is what the copy must hold at least: the
    consumer's ack floor, or the origin's last message when that is higher (not yet acknowledged)."""
    info = await api.consumer_info(status.origin, status.consumer or "")
    if info is None:
        stream = await api.stream_info(status.origin)
        what = (
            f"origin stream {status.origin!r}"
            if stream is None
            else f"consumer {status.consumer!r} of {status.origin!r}"
        )
        return OriginProbe("missing", None, f"{what} does not exist in {api.target} (durable sourcing reads it)")
    config = info.get("config") or {}
    filters = list(config.get("filter_subjects") or []) or [config.get("filter_subject") or ">"]
    last_held = 0
    for subject in filters:
        message = await api.last_msg(status.origin, subject)
        if message:
            last_held = max(last_held, int(message["seq"]))
    stream = await api.stream_info(status.origin) or {}
    drain = ConsumerDrain(
        pending=int(info.get("num_pending") or 0),
        ack_pending=int(info.get("num_ack_pending") or 0),
        ack_floor=int((info.get("ack_floor") or {}).get("stream_seq") or 0),
        last_held=last_held,
        retention=str((stream.get("config") or {}).get("retention") or "limits"),
        other_consumers=max(0, int((stream.get("state") or {}).get("consumer_count") or 1) - 1),
    )
    return OriginProbe("ok", max(drain.ack_floor, last_held), drain=drain)


async def held_seq(api: JetStreamApi, info: dict[str, Any], status: ReplicationStatus, probe: OriginProbe) -> HeldSeq:
    """The highest origin sequence the stream holds from one origin.

    A mirror keeps the origin's sequences: its last sequence. For a source, nats-server >= 2.15
    reports it (the source's ``seq``); otherwise the newest message on the subjects this origin's
    copies land on (``last_by_subj``, one lookup) names its origin and origin sequence in the
    ``Nats-Stream-Source`` header. When other origins write to the same subjects, that message may
    be theirs: then the stream is read backwards from there, at most :data:`WALK_BACK_LIMIT`
    messages, to the newest copy from this origin (copies from one origin arrive in order, so the
    newest holds the highest sequence). Beyond that the answer is unknown (``seq`` None).
    """
    state = info.get("state") or {}
    if status.kind == "mirror":
        return HeldSeq(int(state.get("last_seq") or 0))
    if status.seq is not None:
        return HeldSeq(status.seq)
    if probe.last_seq == 0:  # the origin has nothing to copy (None: not known now, look)
        return HeldSeq(0)
    first = max(1, int(state.get("first_seq") or 0))  # an info read while the stream was empty says 0
    best = 0
    walked = 0
    for pattern in status.copy_patterns:
        message = await api.last_msg(info["config"]["name"], pattern)
        while message is not None:
            origin_seq = stream_source_seq(message, status.index_name)
            if origin_seq is not None:
                best = max(best, origin_seq)
                break
            seq, message = int(message["seq"]) - 1, None
            while seq >= first:
                walked += 1
                if walked > WALK_BACK_LIMIT:
                    return HeldSeq(
                        None,
                        f"the last {WALK_BACK_LIMIT} messages on its subjects came from other origins sharing them",
                    )
                candidate = await api.msg(info["config"]["name"], seq)
                if candidate is not None and subject_matches(candidate["subject"], pattern):
                    message = candidate
                    break
                seq -= 1
    return HeldSeq(best)


async def leading_stream_info(api: JetStreamApi, stream: str) -> dict[str, Any]:
    """The stream's raw ``STREAM.INFO``, answered by its leader: :class:`JetStreamNotFoundError` when it does
    not exist, :class:`JetStreamNoLeaderError` when a clustered stream has no leader (a survivor of a lost
    quorum reports the config, not what runs: the hub is unavailable, not misconfigured)."""
    info = await api.stream_info(stream)
    if info is None:
        raise JetStreamNotFoundError(f"stream {stream!r} does not exist in {api.target}")
    if leaderless(info):
        raise no_leader_error(api.target, stream, ": its replication cannot be read now")
    return info


async def origin_info(api: JetStreamApi, status: ReplicationStatus, refused: set[str]) -> dict[str, Any] | None:
    """An origin's raw ``STREAM.INFO`` in its own domain (its identity, limits and state), None when it cannot
    be read now (gone, unreachable) or ever: this user may not read it, remembered in ``refused`` (the watch's
    keys), so later checks do not wait for that refusal again."""
    if status.key in refused:
        return None
    try:
        return await api.stream_info(status.origin)
    except JetStreamPermissionError:
        refused.add(status.key)
        return None
    except (JetStreamError, nats.errors.Error):
        return None
