"""Replication status of a stream (its mirror, or each of its sources) and the "caught up" judgement.

A stream in one domain copies from origins in other domains through a mirror or sources. The
server reports, per origin, the last lag it knew, the time since it last heard from the origin
(``active``) and the last replication error. Across leaf nodes the lag alone lies: while a leaf is
cut off the hub keeps reporting ``lag=0`` with no error, and only a growing ``active`` tells that
the origin went silent. So an origin is *caught up* only when all three hold::

    lag <= max_lag  and  active <= max_inactive  and  no error

and an origin never heard from, or silent for longer than ``max_inactive``, is never caught up.

Pure logic: the sensor's poke and the trigger read the stream's info and judge it with this.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_jetstream.api import domain_of
from airflow_provider_jetstream.exceptions import JetStreamConfigError, JetStreamError
from airflow_provider_jetstream.specs.durations import parse_duration


class JetStreamReplicationError(JetStreamError):
    """An origin has reported a replication error for longer than the grace period."""


def duration_seconds(value: Any, field_name: str) -> float:
    """Seconds in a duration written as DAG authors write them (``10``, ``"500ms"``, ``"5m"``,
    ``"PT1M"``, a ``timedelta``); raises :class:`JetStreamConfigError` naming the field."""
    return parse_duration(value, field_name) / 1e9


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
    """

    kind: str
    origin: str
    api_prefix: str | None
    lag: int
    active: float | None
    error: str | None = None
    filter_subject: str | None = None

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


def statuses_from_stream_info(info: dict[str, Any]) -> list[ReplicationStatus]:
    """The mirror's or every source's status, from a raw ``STREAM.INFO`` response.

    The response carries each origin's ``external.api``; when it does not (older servers), it is
    taken from the stream config's mirror/source of the same name.
    """
    config = info.get("config") or {}
    configured = ([config["mirror"]] if config.get("mirror") else []) + list(config.get("sources") or [])
    external_by_name = {c.get("name"): (c.get("external") or {}).get("api") for c in configured}
    reported = [("mirror", info["mirror"])] if info.get("mirror") else []
    reported += [("source", s) for s in info.get("sources") or []]
    statuses = []
    for kind, entry in reported:
        name = entry.get("name", "?")
        external = entry.get("external") or {}
        api = external.get("api") if "external" in entry else external_by_name.get(name)
        active_ns = entry.get("active", -1)
        error = entry.get("error")
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
                filter_subject=entry.get("filter_subject"),
            )
        )
    return statuses


@dataclass(frozen=True)
class OriginVerdict:
    """One origin's status and whether it is caught up; ``reason`` says why not."""

    status: ReplicationStatus
    caught_up: bool
    reason: str


@dataclass(frozen=True)
class ReplicationCheck:
    """The result of one check of a stream's replication.

    :param caught_up: every watched origin is caught up.
    :param failed: set when a replication error outlasted the grace period: the error text.
    """

    stream: str
    target: str
    verdicts: list[OriginVerdict]
    caught_up: bool
    failed: str | None = None
    messages: int | None = None
    last_seq: int | None = None

    def table(self) -> str:
        """A small text table like ``nats stream report``'s replication report."""
        return replication_table(self.stream, self.verdicts)

    def waiting_for(self) -> str:
        """Why the stream is not caught up, one clause per origin that is not."""
        return "; ".join(f"{v.status.label}: {v.reason}" for v in self.verdicts if not v.caught_up)

    def to_xcom(self) -> dict[str, Any]:
        return {
            "stream": self.stream,
            "target": self.target,
            "messages": self.messages,
            "last_seq": self.last_seq,
            "caught_up": self.caught_up,
            "origins": [{**v.status.to_dict(), "caught_up": v.caught_up, "reason": v.reason} for v in self.verdicts],
        }


def replication_table(stream: str, verdicts: Iterable[OriginVerdict]) -> str:
    """Stream, kind, origin, domain / API prefix, lag, active, error, state: one row per origin."""
    header = ["Stream", "Kind", "Origin", "Domain / API prefix", "Lag", "Active", "Error", "State"]
    rows = [
        [
            stream,
            v.status.kind.capitalize(),
            v.status.origin + (f" ({v.status.filter_subject})" if v.status.filter_subject else ""),
            v.status.where,
            str(v.status.lag),
            format_seconds(v.status.active),
            v.status.error or "",
            "caught up" if v.caught_up else "WAITING",
        ]
        for v in verdicts
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = [" | ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in [header, *rows]]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines)


@dataclass
class ReplicationWatch:
    """Judges successive reports of one stream's replication against the thresholds.

    Keeps, between checks, since when each origin has reported an error, so that an error fails the
    task only once it has lasted ``error_grace`` seconds (a source created before its origin stream
    reports "stream not found" until the origin exists); and which origins it has seen silent: once
    such an origin is heard from again, its lag is trusted only after ``max_inactive`` of contact,
    because right after a relink the server reports fresh contact with the lag it knew before the
    outage (seen on nats-server 2.10: ``lag=0`` a moment before the missed messages arrive).

    :param stream: the stream that mirrors or sources (in the sensor's domain).
    :param max_lag: most messages an origin may be behind. Default 0.
    :param max_inactive: most seconds since the last contact with an origin. Default 10.
    :param error_grace: seconds a replication error may last before the check fails. Default 30.
    :param sources: only these origin stream names (None: the mirror or every source).
    """

    stream: str
    max_lag: int = 0
    max_inactive: float = 10.0
    error_grace: float = 30.0
    sources: list[str] | None = None
    target: str = ""
    _errors_since: dict[tuple[str, str, str | None], float] = field(default_factory=dict, repr=False)
    # Origins seen silent: None while silent, then the time contact resumed.
    _back_since: dict[tuple[str, str, str | None], float | None] = field(default_factory=dict, repr=False)

    def judge_origin(self, status: ReplicationStatus, now: float) -> OriginVerdict:
        key = (status.kind, status.origin, status.api_prefix)
        if status.active is not None and status.active > self.max_inactive:
            self._back_since[key] = None
        elif key in self._back_since and status.active is not None:
            back = self._back_since[key]
            back = self._back_since[key] = now if back is None else back
            if now - back < self.max_inactive:
                return OriginVerdict(
                    status,
                    False,
                    f"origin heard from again {format_seconds(now - back)} ago after a silence: its lag "
                    f"{status.lag} is trusted after {format_seconds(self.max_inactive)} of contact",
                )
            del self._back_since[key]
        if status.error:
            return OriginVerdict(status, False, f"replication error: {status.error}")
        if status.active is None:
            return OriginVerdict(status, False, "never heard from the origin yet (is its domain reachable?)")
        if status.active > self.max_inactive:
            return OriginVerdict(
                status,
                False,
                f"origin silent for {format_seconds(status.active)} > max_inactive "
                f"{format_seconds(self.max_inactive)}: its domain may be cut off, so the last known "
                f"lag {status.lag} cannot be trusted",
            )
        if status.lag > self.max_lag:
            return OriginVerdict(status, False, f"lag {status.lag} > max_lag {self.max_lag}")
        return OriginVerdict(status, True, "caught up")

    def judge(self, info: dict[str, Any], now: float | None = None) -> ReplicationCheck:
        """Judge a raw ``STREAM.INFO`` response. Raises :class:`JetStreamConfigError` when the
        stream has no mirror or sources, or lacks a named source."""
        now = time.monotonic() if now is None else now
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
        verdicts = [self.judge_origin(s, now) for s in statuses]
        failed = []
        seen = set()
        for status in statuses:
            key = (status.kind, status.origin, status.api_prefix)
            if status.error:
                seen.add(key)
                since = self._errors_since.setdefault(key, now)
                if now - since >= self.error_grace:
                    failed.append(
                        f"{status.label} reports a replication error for {format_seconds(now - since)} "
                        f"(grace {format_seconds(self.error_grace)}): {status.error}"
                    )
        for key in set(self._errors_since) - seen:
            del self._errors_since[key]
        state = info.get("state") or {}
        return ReplicationCheck(
            stream=self.stream,
            target=self.target,
            verdicts=verdicts,
            caught_up=all(v.caught_up for v in verdicts),
            failed="; ".join(failed) or None,
            messages=state.get("messages"),
            last_seq=state.get("last_seq"),
        )

    @property
    def errors_pending(self) -> bool:
        """Some origin reports an error that has not yet outlasted the grace period."""
        return bool(self._errors_since)
