"""Replication status of a stream (its mirror, or each of its sources) and the "caught up" judgement.

A stream in one domain copies from origins in other domains through a mirror or sources. The
server reports, per origin, the last lag it knew, the time since it last heard from the origin
(``active``) and the last replication error. Across leaf nodes that report lies: right after a leaf
is cut off the hub keeps reporting ``lag=0``, no error and a small ``active`` while the leaf holds
messages the hub never got. The hub cannot know; the origin can, and one connection reaches every
domain. So each origin is judged by one of these rules (the table's "Check" column says which):

- **exact** (``verify_origin="auto"`` or ``"required"``, the origin answers): the origin's last
  (matching) sequence is read in the origin's own domain first, then the stream: a mirror is caught
  up when it holds that sequence (mirrors keep sequences); a source when the newest copy from that
  origin carries an origin sequence (``Nats-Stream-Source`` header, or the server's ``seq`` of the
  source on nats-server >= 2.15) at least as high.
- **unreachable**: no JetStream answers in the origin's domain (a leaf that is offline, or a wrong
  domain name): never caught up. With ``unreachable_origins="proceed"`` such an origin does not hold
  the sensor back; it is reported under ``"unreachable"``.
- **lag/active rule**: with ``verify_origin="off"``, or ``"auto"`` where this account cannot call
  the origin's API by design (an imported prefix such as ``JS.acc@hub.API`` that exports only the
  consumer API): caught up when ``lag <= max_lag``, ``active <= max_inactive`` and no error; after a
  silence the lag is trusted only after ``max_inactive`` of contact again.

What a check must remember across checks (since when an error or an unreachable origin lasts, the
silences seen, what was last logged) is a small JSON dict (:meth:`ReplicationWatch.state`), kept by
the sensor between reschedules and handed to the trigger when it defers.

Pure logic: the sensor's poke and the trigger read the servers and judge what they read with this.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from airflow_provider_jetstream.core.errors import JetStreamConfigError
from airflow_provider_jetstream.core.jetstream_api import unavailable_hint
from airflow_provider_jetstream.core.specs.durations import parse_duration
from airflow_provider_jetstream.core.specs.names import domain_of

#: ``verify_origin`` values: probe each origin where it can be (auto), everywhere (required), never (off).
VERIFY_ORIGIN = ("auto", "required", "off")
#: ``unreachable_origins`` values: an unreachable origin holds the sensor back (wait), or not (proceed).
UNREACHABLE_ORIGINS = ("wait", "proceed")
#: Seconds between two logs of an unchanged replication table.
LOG_HEARTBEAT = 60.0


def duration_seconds(value: Any, field_name: str, *, positive: bool = False) -> float:
    """Seconds in a duration written as DAG authors write them (``10``, ``"500ms"``, ``"5m"``,
    ``"PT1M"``, a ``timedelta``); raises :class:`JetStreamConfigError` naming the field. With
    ``positive``, zero is refused too."""
    return parse_duration(value, field_name, allow_zero=not positive) / 1e9


def optional_duration_seconds(value: Any, field_name: str) -> float | None:
    """Like :func:`duration_seconds` (positive) for a bound that may be None (no bound)."""
    return None if value is None else duration_seconds(value, field_name, positive=True)


def validate_choice(value: Any, field_name: str, allowed: tuple[str, ...]) -> str:
    """Return ``value`` if it is one of ``allowed``, else raise naming the field and the choices."""
    if value not in allowed:
        raise JetStreamConfigError(
            f"{field_name}={value!r} is not allowed: use one of {', '.join(repr(a) for a in allowed)}"
        )
    return value


def iso_utc(epoch: float | None) -> str | None:
    """ISO-8601 UTC text for a wall-clock time (seconds since the epoch); None stays None."""
    if epoch is None:
        return None
    return datetime.fromtimestamp(epoch, tz=timezone.utc).isoformat().replace("+00:00", "Z")


def format_seconds(seconds: float | None) -> str:
    """``0.59s``, ``18.2s``, ``2m05s``; ``never`` for an origin never heard from."""
    if seconds is None:
        return "never"
    if seconds < 10:
        return f"{seconds:.2f}s"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, rest = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{rest:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def validate_count(value: Any, field_name: str, allow_none: bool = False) -> int | None:
    """Return a count threshold (an integer >= 0, or None when allowed), or raise naming the field."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        allowed = "an integer >= 0" + (" or None" if allow_none else "")
        raise JetStreamConfigError(f"{field_name}={value!r} is not allowed: use {allowed}")
    return value


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
    reported = [("mirror", info["mirror"])] if info.get("mirror") else []
    # The server lists sources in no fixed order: keep the configured one, so tables compare.
    order = {c.get("name"): i for i, c in enumerate(configured)}
    reported += sorted(
        (("source", s) for s in info.get("sources") or []), key=lambda r: order.get(r[1].get("name"), 1 << 30)
    )
    statuses = []
    for kind, entry in reported:
        name = entry.get("name", "?")
        external = entry.get("external") or {}
        api = external.get("api") if "external" in entry else external_by_name.get(name)
        active_ns = entry.get("active", -1)
        error = entry.get("error")
        configured_entry = config_by_name.get(name) or {}
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
    """

    state: str
    last_seq: int | None = None
    reason: str = ""


@dataclass(frozen=True)
class HeldSeq:
    """The highest origin sequence the stream holds from one origin (None: could not tell, ``reason``)."""

    seq: int | None
    reason: str = ""


@dataclass(frozen=True)
class OriginVerdict:
    """One origin's status and whether it is caught up; ``reason`` says why not.

    :param check: the rule applied: ``"exact"``, ``"lag/active"``, ``"unreachable"`` or ``"missing"``.
    :param origin_last_seq: the origin's last sequence as probed (exact rule), else None.
    :param held_seq: the highest origin sequence the stream holds (exact rule), else None.
    :param unreachable_since: wall-clock time the origin was first seen unreachable, if it is.
    """

    status: ReplicationStatus
    caught_up: bool
    reason: str
    check: str = "lag/active"
    origin_last_seq: int | None = None
    held_seq: int | None = None
    unreachable_since: float | None = None

    @property
    def unreachable(self) -> bool:
        return self.check == "unreachable"

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.status.to_dict(),
            "caught_up": self.caught_up,
            "reason": self.reason,
            "check": self.check,
            "origin_last_seq": self.origin_last_seq,
            "held_seq": self.held_seq,
        }


@dataclass(frozen=True)
class ReplicationCheck:
    """The result of one check of a stream's replication.

    :param caught_up: every watched origin is caught up.
    :param ready: the sensor may succeed: every origin is caught up, or with
        ``unreachable_origins="proceed"`` every reachable one is.
    :param failed: set when waiting cannot help (a replication error that outlasted the grace period,
        an origin unreachable for longer than ``unreachable_timeout``, an origin that cannot be
        verified with ``verify_origin="required"``): the reason.
    :param failed_reason: ``"unreachable"`` when only unreachable origins failed the check, else
        ``"replication_error"`` (the trigger's error event ``reason``).
    """

    stream: str
    target: str
    verdicts: list[OriginVerdict]
    caught_up: bool
    failed: str | None = None
    messages: int | None = None
    last_seq: int | None = None
    ready: bool | None = None
    failed_reason: str = "replication_error"

    @property
    def done(self) -> bool:
        return self.caught_up if self.ready is None else self.ready

    def table(self) -> str:
        """A small text table like ``nats stream report``'s replication report."""
        return replication_table(self.stream, self.verdicts)

    def waiting_for(self) -> str:
        """Why the stream is not caught up, one clause per origin that is not."""
        return "; ".join(f"{v.status.label}: {v.reason}" for v in self.verdicts if not v.caught_up)

    def unreachable(self) -> list[dict[str, Any]]:
        """The origins no JetStream answered for, as the XCom's ``"unreachable"`` entries."""
        return [
            {
                "origin": v.status.origin,
                "kind": v.status.kind,
                "domain": v.status.domain,
                "api_prefix": v.status.api_prefix,
                "reason": v.reason,
                "since": iso_utc(v.unreachable_since),
            }
            for v in self.verdicts
            if v.unreachable
        ]

    def to_xcom(self) -> dict[str, Any]:
        return {
            "stream": self.stream,
            "target": self.target,
            "messages": self.messages,
            "last_seq": self.last_seq,
            "caught_up": self.caught_up,
            "origins": [v.to_dict() for v in self.verdicts],
            "unreachable": self.unreachable(),
        }

    def fingerprint(self) -> str:
        """What the table says apart from the ticking ``active`` times: a change is news worth a log."""
        rows = [
            [v.status.key, v.caught_up, v.check, v.origin_last_seq, v.held_seq, v.status.lag, v.status.error]
            for v in self.verdicts
        ]
        return json.dumps([rows, self.failed, self.done], default=str)


def replication_table(stream: str, verdicts: Iterable[OriginVerdict]) -> str:
    """Stream, kind, origin, domain / API prefix, lag, active, error, state and the check made (the
    rule and its reason): one row per origin."""
    header = ["Stream", "Kind", "Origin", "Domain / API prefix", "Lag", "Active", "Error", "State", "Check"]
    rows = [
        [
            stream,
            v.status.kind.capitalize(),
            v.status.origin + (f" ({v.status.filter_subject})" if v.status.filter_subject else ""),
            v.status.where,
            str(v.status.lag),
            format_seconds(v.status.active),
            v.status.error or "",
            "caught up" if v.caught_up else ("UNREACHABLE" if v.unreachable else "WAITING"),
            f"{v.check}: {v.reason}",
        ]
        for v in verdicts
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = [" | ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in [header, *rows]]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines)


@dataclass
class ReplicationWatch:
    """Judges successive reads of one stream's replication against the thresholds and policies.

    Keeps, between checks (see :meth:`state` / :meth:`restore`): since when each origin has reported
    an error, so that an error fails the task only once it has lasted ``error_grace`` seconds (a
    source created before its origin stream reports "stream not found" until the origin exists);
    since when each origin has been unreachable; which origins it has seen silent (for the
    lag/active rule: once such an origin is heard from again, its lag is trusted only after
    ``max_inactive`` of contact, because right after a relink the server reports fresh contact with
    the lag it knew before the outage, seen on nats-server 2.10); and what it last logged.

    :param stream: the stream that mirrors or sources (in the sensor's domain).
    :param max_lag: most messages an origin may be behind (lag/active rule). Default 0.
    :param max_inactive: most seconds since the last contact with an origin (lag/active rule). Default 10.
    :param error_grace: seconds a replication error may last before the check fails. Default 30.
    :param sources: only these origin stream names (None: the mirror or every source).
    :param verify_origin: ``"auto"`` (default), ``"required"`` or ``"off"``: see the module doc.
    :param unreachable_origins: ``"wait"`` (default) or ``"proceed"``: see the module doc.
    :param unreachable_timeout: seconds an origin may stay unreachable before the check fails
        (with ``"wait"``); None (default) waits until the sensor's own timeout.
    """

    stream: str
    max_lag: int = 0
    max_inactive: float = 10.0
    error_grace: float = 30.0
    sources: list[str] | None = None
    target: str = ""
    verify_origin: str = "auto"
    unreachable_origins: str = "wait"
    unreachable_timeout: float | None = None
    _errors_since: dict[str, float] = field(default_factory=dict, repr=False)
    # Origins seen silent: None while silent, then the time contact resumed.
    _back_since: dict[str, float | None] = field(default_factory=dict, repr=False)
    _unreachable_since: dict[str, float] = field(default_factory=dict, repr=False)
    _logged: dict[str, Any] = field(default_factory=dict, repr=False)

    # -- state across checks ------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """What the next check needs to know, as plain JSON (wall-clock times in epoch seconds)."""
        return {
            "errors_since": dict(self._errors_since),
            "back_since": dict(self._back_since),
            "unreachable_since": dict(self._unreachable_since),
            "logged": dict(self._logged),
        }

    def restore(self, state: dict[str, Any] | None) -> ReplicationWatch:
        """Take up the state an earlier check (another process, the sensor before deferring) left."""
        state = state or {}
        self._errors_since = {str(k): float(v) for k, v in (state.get("errors_since") or {}).items()}
        self._back_since = {
            str(k): (None if v is None else float(v)) for k, v in (state.get("back_since") or {}).items()
        }
        self._unreachable_since = {str(k): float(v) for k, v in (state.get("unreachable_since") or {}).items()}
        self._logged = dict(state.get("logged") or {})
        return self

    def should_log(self, check: ReplicationCheck, now: float | None = None, heartbeat: float = LOG_HEARTBEAT) -> bool:
        """Log the table when what it says changed, or ``heartbeat`` seconds after the last log."""
        now = time.time() if now is None else now
        fingerprint = check.fingerprint()
        if fingerprint != self._logged.get("fingerprint") or now - float(self._logged.get("at", 0)) >= heartbeat:
            self._logged = {"fingerprint": fingerprint, "at": now}
            return True
        return False

    # -- the rules ------------------------------------------------------------------------------------

    def select(self, info: dict[str, Any]) -> list[ReplicationStatus]:
        """The watched origins of a raw ``STREAM.INFO``. Raises :class:`JetStreamConfigError` when the
        stream has no mirror or sources, or lacks a named source."""
        statuses = statuses_from_stream_info(info)
        if not statuses:
            raise JetStreamConfigError(
                f"stream {self.stream!r} in {self.target or 'its domain'} has no mirror and no sources: "
                "there is no replication to wait for"
            )
        if self.sources:
            known = sorted({s.origin for s in statuses})
            missing = [name for name in self.sources if name not in known]
            if missing:
                raise JetStreamConfigError(
                    f"sources={self.sources!r}: stream {self.stream!r} has no mirror or source named "
                    f"{', '.join(map(repr, missing))}; its origins are {', '.join(map(repr, known))}"
                )
            statuses = [s for s in statuses if s.origin in self.sources]
        return statuses

    def lag_active_rule(self, status: ReplicationStatus, now: float, why: str = "") -> OriginVerdict:
        """``lag <= max_lag and active <= max_inactive and no error``, trusting the lag after a silence
        only after ``max_inactive`` of contact. ``why`` says why this rule applies."""
        prefix = f"{why}: " if why else ""

        def verdict(caught_up: bool, reason: str) -> OriginVerdict:
            return OriginVerdict(status, caught_up, prefix + reason, "lag/active")

        key = status.key
        if status.active is not None and status.active > self.max_inactive:
            self._back_since[key] = None
        elif key in self._back_since and status.active is not None:
            back = self._back_since[key]
            back = self._back_since[key] = now if back is None else back
            if now - back < self.max_inactive:
                return verdict(
                    False,
                    f"origin heard from again {format_seconds(now - back)} ago after a silence: its lag "
                    f"{status.lag} is trusted after {format_seconds(self.max_inactive)} of contact",
                )
            del self._back_since[key]
        if status.error:
            return verdict(False, f"replication error: {status.error}")
        if status.active is None:
            return verdict(False, "never heard from the origin yet (is its domain reachable?)")
        if status.active > self.max_inactive:
            return verdict(
                False,
                f"origin silent for {format_seconds(status.active)} > max_inactive "
                f"{format_seconds(self.max_inactive)}: its domain may be cut off, so the last known "
                f"lag {status.lag} cannot be trusted",
            )
        if status.lag > self.max_lag:
            return verdict(False, f"lag {status.lag} > max_lag {self.max_lag}")
        return verdict(True, "caught up")

    # Kept for callers of the former API: the lag/active rule alone.
    judge_origin = lag_active_rule

    def judge_exact(self, status: ReplicationStatus, probe: OriginProbe, held: HeldSeq, now: float) -> OriginVerdict:
        """The origin answered: caught up iff the stream holds the origin's last sequence."""
        origin_last = probe.last_seq or 0
        if held.seq is None:
            verdict = self.lag_active_rule(status, now, f"exact check impossible ({held.reason}): lag/active rule")
            return OriginVerdict(status, verdict.caught_up, verdict.reason, "lag/active", origin_last, None)
        if held.seq >= origin_last:
            reason = (
                f"holds origin seq {held.seq} >= the origin's last {origin_last}"
                if origin_last
                else "the origin has no message to copy"
            )
            return OriginVerdict(status, True, reason, "exact", origin_last, held.seq)
        return OriginVerdict(
            status,
            False,
            f"holds origin seq {held.seq} < the origin's last {origin_last}: copy not complete",
            "exact",
            origin_last,
            held.seq,
        )

    def judge(
        self,
        info: dict[str, Any],
        now: float | None = None,
        probes: dict[str, OriginProbe] | None = None,
        held: dict[str, HeldSeq] | None = None,
    ) -> ReplicationCheck:
        """Judge a raw ``STREAM.INFO`` (read after the probes) with the origins' probes and the
        sequences the stream holds from each (both keyed by :attr:`ReplicationStatus.key`; without
        probes every origin gets the lag/active rule). ``now`` is wall-clock seconds since the epoch.

        Raises :class:`JetStreamConfigError` when the stream has no mirror or sources, or lacks a
        named source."""
        now = time.time() if now is None else now
        statuses = self.select(info)
        verdicts = []
        failed = []
        unreachable_failures = 0
        for status in statuses:
            probe = (probes or {}).get(status.key) or OriginProbe("off")
            if probe.state != "unreachable":
                self._unreachable_since.pop(status.key, None)
            if probe.state == "ok":
                verdicts.append(
                    self.judge_exact(status, probe, (held or {}).get(status.key) or HeldSeq(None, "?"), now)
                )
            elif probe.state == "unreachable":
                since = self._unreachable_since.setdefault(status.key, now)
                verdicts.append(OriginVerdict(status, False, probe.reason, "unreachable", unreachable_since=since))
                # An unreachable origin keeps the silence rule primed for when it comes back.
                self._back_since[status.key] = None
                if (
                    self.unreachable_origins == "wait"
                    and self.unreachable_timeout is not None
                    and now - since > self.unreachable_timeout
                ):
                    unreachable_failures += 1
                    failed.append(
                        f"{status.label} unreachable for {format_seconds(now - since)} > unreachable_timeout "
                        f"{format_seconds(self.unreachable_timeout)}: {probe.reason}"
                    )
            elif probe.state == "missing":
                verdicts.append(OriginVerdict(status, False, probe.reason, "missing"))
            elif probe.state == "unverifiable":
                if self.verify_origin == "required":
                    failed.append(f"{status.label} cannot be verified (verify_origin='required'): {probe.reason}")
                verdicts.append(self.lag_active_rule(status, now, probe.reason))
            else:
                verdicts.append(self.lag_active_rule(status, now))
        seen = set()
        unreachable = {v.status.key for v in verdicts if v.unreachable}
        for status in statuses:
            # An unreachable origin's error (it cannot be reached) is ruled by unreachable_timeout.
            if status.error and status.key not in unreachable:
                seen.add(status.key)
                since = self._errors_since.setdefault(status.key, now)
                if now - since >= self.error_grace:
                    failed.append(
                        f"{status.label} reports a replication error for {format_seconds(now - since)} "
                        f"(grace {format_seconds(self.error_grace)}): {status.error}"
                    )
        for key in set(self._errors_since) - seen:
            del self._errors_since[key]
        caught_up = all(v.caught_up for v in verdicts)
        if self.unreachable_origins == "proceed":
            ready = all(v.caught_up for v in verdicts if not v.unreachable)
        else:
            ready = caught_up
        state = info.get("state") or {}
        return ReplicationCheck(
            stream=self.stream,
            target=self.target,
            verdicts=verdicts,
            caught_up=caught_up,
            failed="; ".join(failed) or None,
            messages=state.get("messages"),
            last_seq=state.get("last_seq"),
            ready=ready,
            failed_reason="unreachable" if failed and unreachable_failures == len(failed) else "replication_error",
        )

    @property
    def errors_pending(self) -> bool:
        """Some origin reports an error that has not yet outlasted the grace period."""
        return bool(self._errors_since)


def unreachable_reason(prefix: str) -> str:
    """Why an origin counts as unreachable, in words: ``domain 'leaf-a' did not answer: ...``."""
    domain = domain_of(prefix)
    where = f"domain {domain!r}" if domain else f"API prefix {prefix!r}"
    return f"{where} did not answer: {unavailable_hint(prefix)}"
