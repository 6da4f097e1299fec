"""What a replication check found: a verdict per origin, the check as a whole, and how both read
(the log table, the XCom, the trigger's event). Made by :class:`.replication.ReplicationWatch`."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from airflow_provider_jetstream.core.status.origins import ReplicationStatus


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


@dataclass(frozen=True)
class OriginVerdict:
    """One origin's status and whether it is caught up; ``reason`` says why not.

    :param check: the rule applied: ``"exact"``, ``"durable"`` (a durable source: its origin's consumer),
        ``"lag/active"``, ``"unreachable"`` or ``"missing"``.
    :param origin_last_seq: the origin's last sequence as probed (exact rule), else None.
    :param held_seq: the highest origin sequence the stream holds (exact rule), else None.
    :param unreachable_since: an unreachable origin's outage start (wall-clock epoch seconds): the stream's
        last contact with it as the server reports it (:attr:`~.origins.ReplicationStatus.last_contact`), else
        when a check first found it unreachable; the same instant in every check and task of one outage.
    :param last_known_seq: an unreachable origin's last sequence when a check last reached it (None: never).
    :param last_known_at: when that was (wall-clock epoch seconds).
    """

    status: ReplicationStatus
    caught_up: bool
    reason: str
    check: str = "lag/active"
    origin_last_seq: int | None = None
    held_seq: int | None = None
    unreachable_since: float | None = None
    last_known_seq: int | None = None
    last_known_at: float | None = None

    @property
    def unreachable(self) -> bool:
        return self.check == "unreachable"

    @property
    def lag(self) -> int | None:
        """Messages the copy lacks. By the exact rule, the origin's last sequence less the one the copy holds: the
        server's own figure stays 0 until the copy hears from the origin again (a leaf relinked with 500 new
        messages reads lag 0 for seconds). None (unknown) for an unreachable origin: the server's figure is the
        last it knew, 0 for a leaf cut off with messages the hub never got. Else the server's figure."""
        if self.unreachable:
            return None
        if self.check == "exact" and self.origin_last_seq is not None and self.held_seq is not None:
            return max(0, self.origin_last_seq - self.held_seq)
        return self.status.lag

    def lag_cell(self) -> str:
        """The table's lag: a number, or ``unknown`` with what the copy holds against the origin's last known
        sequence."""
        if not self.unreachable:
            return str(self.lag)
        held = "?" if self.held_seq is None else str(self.held_seq)
        if self.last_known_seq is None:
            return f"unknown (holds {held})"
        return f"unknown (holds {held} of {self.last_known_seq} at {iso_utc(self.last_known_at)})"

    def to_dict(self) -> dict[str, Any]:
        found = {
            **self.status.to_dict(),
            "lag": self.lag,
            "caught_up": self.caught_up,
            "reason": self.reason,
            "check": self.check,
            "origin_last_seq": self.origin_last_seq,
            "held_seq": self.held_seq,
        }
        if self.unreachable:
            found.update(
                reported_lag=self.status.lag,
                since=iso_utc(self.unreachable_since),
                origin_last_known_seq=self.last_known_seq,
                origin_last_known_at=iso_utc(self.last_known_at),
            )
        return found


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
    :param cluster: the stream's leader and replica health
        (:func:`~airflow_provider_jetstream.core.manage.cluster.cluster_health`); None (default) on a
        single server.
    :param headroom: each origin's retention headroom by :attr:`~.origins.ReplicationStatus.key`
        (:class:`~.headroom.Headroom`: measured, or last known for an unreachable origin); None (default)
        when no origin could be measured (every origin judged by the lag/active rule).
    :param low_headroom: why origins are below the headroom thresholds, one clause each (failed or warned).
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
    cluster: dict[str, Any] | None = None
    headroom: dict[str, Any] | None = None
    low_headroom: tuple[str, ...] = ()

    @property
    def done(self) -> bool:
        return self.caught_up if self.ready is None else self.ready

    def table(self) -> str:
        """A small text table like ``nats stream report``'s replication report; on a cluster, a line with the
        stream's leader and replica health under it."""
        table = replication_table(self.stream, self.verdicts, self.headroom)
        return table + (f"\n{cluster_line(self.cluster)}" if self.cluster else "")

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
                "held_seq": v.held_seq,
                "origin_last_known_seq": v.last_known_seq,
                **({"headroom": self.headroom_of(v)} if self.headroom is not None else {}),
            }
            for v in self.verdicts
            if v.unreachable
        ]

    def headroom_of(self, verdict: OriginVerdict) -> dict[str, Any] | None:
        """One origin's headroom as the XCom gives it (None: not known)."""
        found = (self.headroom or {}).get(verdict.status.key)
        return found.to_dict() if found is not None else None

    def note(self) -> str | None:
        """A short line for a check that is done without some origins (``unreachable_origins="proceed"``):
        which ones, since when, what the copy holds of them; None when every origin is caught up or not done."""
        if not self.done or self.caught_up:
            return None
        away = [
            f"{v.status.label} (unreachable since {iso_utc(v.unreachable_since) or '?'}; lag {v.lag_cell()})"
            for v in self.verdicts
            if v.unreachable
        ]
        left = [v.status.label for v in self.verdicts if not v.caught_up and not v.unreachable]
        return f"Proceeded without {len(away) + len(left)} origin(s) of {self.stream!r}: " + "; ".join(away + left)

    def summary(self) -> str:
        """One line for a check that found nothing new: origins caught up, unreachable (since when), waiting."""
        verdicts = sorted(self.verdicts, key=lambda v: v.status.key)
        caught = sum(v.caught_up for v in verdicts)
        parts = [f"{caught}/{len(verdicts)} origins caught up"]
        away = [f"{v.status.label} since {iso_utc(v.unreachable_since) or '?'}" for v in verdicts if v.unreachable]
        waiting = [v.status.label for v in verdicts if not v.caught_up and not v.unreachable]
        if away:
            parts.append("unreachable: " + ", ".join(away))
        if waiting:
            parts.append("waiting: " + ", ".join(waiting))
        return f"Stream {self.stream!r} in {self.target}: no change: " + "; ".join(parts)

    def to_xcom(self) -> dict[str, Any]:
        note = self.note()
        return {
            "stream": self.stream,
            "target": self.target,
            "messages": self.messages,
            "last_seq": self.last_seq,
            "caught_up": self.caught_up,
            "origins": [
                {**v.to_dict(), **({"headroom": self.headroom_of(v)} if self.headroom is not None else {})}
                for v in self.verdicts
            ],
            "unreachable": self.unreachable(),
            **({"low_headroom": list(self.low_headroom)} if self.headroom is not None else {}),
            **({"cluster": self.cluster} if self.cluster else {}),
            **({"note": note} if note else {}),
        }

    def is_news(self, logged: dict[str, Any], heartbeat: float, now: float) -> bool:
        """Whether this check's table is worth a log: it says something the last one logged (``logged``:
        its fingerprint and time, updated when so) did not, or ``heartbeat`` seconds passed since."""
        fingerprint = self.fingerprint()
        if fingerprint != logged.get("fingerprint") or now - float(logged.get("at", 0)) >= heartbeat:
            logged.update(fingerprint=fingerprint, at=now)
            return True
        return False

    def fingerprint(self) -> str:
        """What the table says apart from the ticking ``active`` times: a change is news worth a log. Rows are
        compared by origin, in no order (a table with two rows swapped is no news)."""
        rows = sorted(
            (
                [v.status.key, v.caught_up, v.check, v.origin_last_seq, v.held_seq, v.lag, v.status.error]
                for v in self.verdicts
            ),
            key=lambda row: row[0],
        )
        health = (
            [self.cluster["leader"], [[r["name"], r["state"]] for r in self.cluster["replicas"]]]
            if self.cluster
            else None
        )
        return json.dumps([rows, self.failed, self.done, health, len(self.low_headroom)], default=str)


#: Seconds between two one-line summaries of checks that found nothing new (news logs the table at once): a
#: leaf away for hours logs a line a minute, not one per poke.
LOG_SUMMARY_EVERY = 60.0


def summary_due(logged: dict[str, Any], now: float) -> bool:
    """Whether a check with no news logs its one-line summary: ``LOG_SUMMARY_EVERY`` seconds passed since the last
    table or summary (``logged``: their times, updated when so)."""
    last = max(float(logged.get("at", 0)), float(logged.get("summary_at", 0)))
    if now - last >= LOG_SUMMARY_EVERY:
        logged["summary_at"] = now
        return True
    return False


def cluster_line(health: dict[str, Any]) -> str:
    """``Cluster hub: leader n1; replicas n2 current, n3 offline`` for a cluster health summary."""
    return f"Cluster {health.get('name') or '?'}: {health['summary']}"


def headroom_cells(verdict: OriginVerdict, headroom: dict[str, Any]) -> list[str]:
    """The headroom columns of one origin's row: measured or last known, unknown, or empty (not measurable)."""
    found = headroom.get(verdict.status.key)
    if found is not None:
        return found.cells()
    if verdict.unreachable:
        return ["unknown", "-", "unknown: never measured"]
    return ["", "", ""]


def replication_table(stream: str, verdicts: Iterable[OriginVerdict], headroom: dict[str, Any] | None = None) -> str:
    """Stream, kind, origin, domain / API prefix, lag, active, error, state, (with ``headroom``: uncopied
    messages and bytes, the oldest uncopied message's age, time to loss and the limit that sets it) and
    the check made (the rule and its reason): one row per origin."""
    extra = ["Uncopied", "Oldest uncopied", "Time to loss"] if headroom is not None else []
    header = ["Stream", "Kind", "Origin", "Domain / API prefix", "Lag", "Active", "Error", "State", *extra, "Check"]
    rows = [
        [
            stream,
            v.status.kind.capitalize(),
            v.status.origin + (f" ({v.status.filter_subject})" if v.status.filter_subject else ""),
            v.status.where,
            v.lag_cell(),
            format_seconds(v.status.active),
            v.status.error or "",
            "caught up" if v.caught_up else ("UNREACHABLE" if v.unreachable else "WAITING"),
            *(headroom_cells(v, headroom) if headroom is not None else []),
            f"{v.check}: {v.reason}",
        ]
        for v in verdicts
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = [" | ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in [header, *rows]]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines)
