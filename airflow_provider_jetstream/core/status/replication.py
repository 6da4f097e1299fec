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
- **durable** (a durable source, nats-server 2.14+: the source names the origin's flow-control
  consumer): the copy acknowledges what it stored, so the origin's consumer is read in the origin's
  domain: caught up when it has nothing pending and nothing unacknowledged, the copy holds at least
  its ack floor, and the origin's stream no longer holds what was acknowledged (a work queue deletes it
  at once; an interest stream when no other consumer needs it).
- **unreachable**: no JetStream answers in the origin's domain (a leaf that is offline, or a wrong
  domain name): never caught up. With ``unreachable_origins="proceed"`` such an origin does not hold
  the sensor back; it is reported under ``"unreachable"``.
- **lag/active rule**: with ``verify_origin="off"``, or ``"auto"`` where this account cannot call
  the origin's API by design (an imported prefix such as ``JS.acc@hub.API`` that exports only the
  consumer API): caught up when ``lag <= max_lag``, ``active <= max_inactive`` and no error; after a
  silence the lag is trusted only after ``max_inactive`` of contact again.

What a check must remember across checks (since when an error or an unreachable origin lasts, the
silences seen, what was last logged, and the identity of the stream and of each origin) is a small
JSON dict (:meth:`ReplicationWatch.state`), kept by the sensor between reschedules and handed to the
trigger when it defers. A stream deleted and created again between two checks (its ``created`` time
changed) is a new copy: what the watch remembered of the old one is dropped, with a warning. An
origin deleted and created again fails the check (``StreamRecreatedError``): the copy holds the old
origin's sequences, which say nothing about the new origin's.

Each origin read exactly also has its retention headroom measured (:mod:`.headroom`: what the copy lacks
against the origin's limits, the time to loss); the watch keeps the last one, judged projected while the
origin is unreachable, against ``min_time_to_loss`` / ``min_headroom``.

The rules are pure logic (:class:`ReplicationWatch`); :func:`check_replication` is the one check that
reads the servers (the stream, each origin in its domain, the stream again) and judges what it read,
for the hook, the sensor's poke and the trigger alike. What the server reports is :mod:`.origins`;
what a check found, :mod:`.report`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field, replace
from typing import Any

from nats.aio.client import Client

from airflow_provider_jetstream.core.api import JetStreamApi, describe_prefix, no_leader_error
from airflow_provider_jetstream.core.errors import JetStreamConfigError
from airflow_provider_jetstream.core.manage.cluster import cluster_health
from airflow_provider_jetstream.core.read.identity import same_stream, stream_created
from airflow_provider_jetstream.core.status.durable import judge_durable
from airflow_provider_jetstream.core.status.headroom import Headroom, HeadroomMemory, low_headroom, measure_headroom
from airflow_provider_jetstream.core.status.origins import (
    HeldSeq,
    OriginProbe,
    ReplicationStatus,
    held_seq,
    leading_stream_info,
    origin_info,
    probe_origin,
    statuses_from_stream_info,
)
from airflow_provider_jetstream.core.status.report import OriginVerdict, ReplicationCheck, format_seconds, summary_due

#: ``verify_origin`` values: probe each origin where it can be (auto), everywhere (required), never (off).
VERIFY_ORIGIN = ("auto", "required", "off")
#: ``unreachable_origins`` values: an unreachable origin holds the sensor back (wait), or not (proceed).
UNREACHABLE_ORIGINS = ("wait", "proceed")
#: Seconds between two logs of an unchanged replication table (a one-line summary each minute between).
LOG_HEARTBEAT = 300.0

log = logging.getLogger(__name__)


@dataclass
class ReplicationWatch:
    """Judges successive reads of one stream's replication against the thresholds and policies.

    Keeps, between checks (see :meth:`state` / :meth:`restore`): since when each origin has reported
    an error, so that an error fails the task only once it has lasted ``error_grace`` seconds (a
    source created before its origin stream reports "stream not found" until the origin exists);
    since when each origin has been unreachable; which origins it has seen silent (for the
    lag/active rule: once such an origin is heard from again, its lag is trusted only after
    ``max_inactive`` of contact, because right after a relink the server reports fresh contact with
    the lag it knew before the outage, seen on nats-server 2.10); what it last logged; and the
    identity (``created``) of the stream and of each origin it read (see the module doc).

    :param stream: the stream that mirrors or sources (in the sensor's domain).
    :param max_lag: most messages an origin may be behind (lag/active rule). Default 0.
    :param max_inactive: most seconds since the last contact with an origin (lag/active rule). Default 10.
    :param error_grace: seconds a replication error may last before the check fails. Default 30.
    :param sources: only these origin stream names (None: the mirror or every source).
    :param verify_origin: ``"auto"`` (default), ``"required"`` or ``"off"``: see the module doc.
    :param unreachable_origins: ``"wait"`` (default) or ``"proceed"``: see the module doc.
    :param unreachable_timeout: seconds an origin may stay unreachable before the check fails
        (with ``"wait"``); None (default) waits until the sensor's own timeout.
    :param min_time_to_loss: seconds: an origin whose retention headroom (measured, or last known and
        projected for an unreachable one: :mod:`.headroom`) says a limit discards its first uncopied message,
        or refuses new ones, sooner is low. None (default): not judged.
    :param min_headroom: a fraction (0 to 1): an origin whose least ``room / limit`` is below it is low.
        None (default): not judged.
    :param low_headroom: ``"fail"`` (default): a low origin fails the check (``failed_reason``
        ``"low_headroom"``); ``"warn"``: it is listed in ``low_headroom`` and the check goes on.
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
    min_time_to_loss: float | None = None
    min_headroom: float | None = None
    low_headroom: str = "fail"
    #: Each origin's headroom across checks: its rate's start and its last measurement.
    headroom_memory: HeadroomMemory = field(default_factory=HeadroomMemory, repr=False)
    _errors_since: dict[str, float] = field(default_factory=dict, repr=False)
    # Origins seen silent: None while silent, then the time contact resumed.
    _back_since: dict[str, float | None] = field(default_factory=dict, repr=False)
    _unreachable_since: dict[str, float] = field(default_factory=dict, repr=False)
    # Unreachable origins' outage start (the copy's last contact, else first seen); origins' last [seq, time] seen.
    _outage_since: dict[str, float] = field(default_factory=dict, repr=False)
    _last_seen: dict[str, list[float]] = field(default_factory=dict, repr=False)
    _logged: dict[str, Any] = field(default_factory=dict, repr=False)
    _created: str | None = field(default=None, repr=False)
    _origins_created: dict[str, str] = field(default_factory=dict, repr=False)
    #: Origins whose ``STREAM.INFO`` this user may not read: their identity is not asked again.
    identity_refused: set[str] = field(default_factory=set, repr=False)

    # -- state across checks ------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """What the next check needs to know, as plain JSON (wall-clock times in epoch seconds)."""
        return {
            "errors_since": dict(self._errors_since),
            "back_since": dict(self._back_since),
            "unreachable_since": dict(self._unreachable_since),
            "outage_since": dict(self._outage_since),
            "last_seen": dict(self._last_seen),
            "logged": dict(self._logged),
            "created": self._created,
            "origins_created": dict(self._origins_created),
            "identity_refused": sorted(self.identity_refused),
            "headroom": self.headroom_memory.state(),
        }

    def restore(self, state: dict[str, Any] | None) -> ReplicationWatch:
        """Take up the state an earlier check (another process, the sensor before deferring) left."""
        state = state or {}
        self._errors_since = {str(k): float(v) for k, v in (state.get("errors_since") or {}).items()}
        self._back_since = {
            str(k): (None if v is None else float(v)) for k, v in (state.get("back_since") or {}).items()
        }
        self._unreachable_since = {str(k): float(v) for k, v in (state.get("unreachable_since") or {}).items()}
        self._outage_since = {str(k): float(v) for k, v in (state.get("outage_since") or {}).items()}
        self._last_seen = {str(k): [float(x) for x in v] for k, v in (state.get("last_seen") or {}).items()}
        self._logged = dict(state.get("logged") or {})
        self._created = state.get("created") or None
        self._origins_created = {str(k): str(v) for k, v in (state.get("origins_created") or {}).items()}
        self.identity_refused = {str(k) for k in state.get("identity_refused") or ()}
        self.headroom_memory = HeadroomMemory().restore(state.get("headroom"))
        return self

    def same_identities(self, info: dict[str, Any], probes: dict[str, OriginProbe]) -> None:
        """Compare the stream's and each probed origin's identity with what earlier checks saw, and
        remember them. A recreated stream drops what the watch remembered of the old one (warning);
        a recreated origin raises :class:`StreamRecreatedError` (see the module doc)."""
        where = self.target or "its domain"
        created = stream_created(info)
        if not same_stream(
            self.stream,
            self._created,
            created,
            position=f"the replication watch of {self.stream!r} in {where}",
            fail_on_data_loss=False,
            restart="as a new copy, forgetting what earlier checks remembered (errors, unreachable origins, silences)",
            logger=log,
        ):
            self._errors_since, self._back_since, self._unreachable_since = {}, {}, {}
            self._outage_since, self._last_seen = {}, {}
            self._origins_created, self._logged, self.headroom_memory = {}, {}, HeadroomMemory()
        self._created = created or self._created
        for status in self.select(info):
            probe = probes.get(status.key)
            if probe is None or probe.created is None:
                continue
            same_stream(
                status.origin,
                self._origins_created.get(status.key),
                probe.created,
                position=f"the replication watch of {self.stream!r} in {where} ({status.label})",
                remedy=(
                    f"{self.stream!r} holds sequences of the old origin, which say nothing about the new one's: "
                    f"recreate {self.stream!r} (or its source of {status.origin!r}) so it copies the new origin, "
                    "then run the sensor again"
                ),
                logger=log,
            )
            self._origins_created[status.key] = probe.created

    def should_log(self, check: ReplicationCheck, now: float | None = None) -> bool:
        """Log the table when what it says changed, or ``LOG_HEARTBEAT`` seconds after the last log."""
        return check.is_news(self._logged, LOG_HEARTBEAT, time.time() if now is None else now)

    def should_summarize(self, now: float | None = None) -> bool:
        """A check with no news: a one-line summary ``LOG_SUMMARY_EVERY`` seconds after the last log, else nothing."""
        return summary_due(self._logged, time.time() if now is None else now)

    # -- the rules ------------------------------------------------------------------------------------

    def select(self, info: dict[str, Any]) -> list[ReplicationStatus]:
        """The watched origins of a raw ``STREAM.INFO``. Raises :class:`JetStreamConfigError` when the
        stream has no mirror or sources, or lacks a named source, and :class:`JetStreamNoLeaderError` when
        its config has them but none runs (a clustered stream without a leader: wait)."""
        statuses = statuses_from_stream_info(info)
        config = info.get("config") or {}
        if not statuses and (config.get("mirror") or config.get("sources")):
            # Configured but not running: the stream has no leader to run it (quorum lost, an election).
            raise no_leader_error(
                self.target or "its domain",
                self.stream,
                ": its replication is configured but not running, so there is nothing to judge yet",
            )
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

    def judge_exact(self, status: ReplicationStatus, probe: OriginProbe, held: HeldSeq, now: float) -> OriginVerdict:
        """The origin answered: caught up iff the stream holds the origin's last sequence and its copy
        reports no replication error (a durable source: :func:`~.durable.judge_durable`)."""
        if probe.drain is not None:
            return judge_durable(status, probe, held)
        origin_last = probe.last_seq or 0
        if held.seq is None:
            verdict = self.lag_active_rule(status, now, f"exact check impossible ({held.reason}): lag/active rule")
            return OriginVerdict(status, verdict.caught_up, verdict.reason, "lag/active", origin_last, None)
        if held.seq >= origin_last and status.error:
            # The copy is not running, so what it holds may be of an origin it no longer sees.
            return OriginVerdict(
                status,
                False,
                f"holds origin seq {held.seq} >= the origin's last {origin_last}, but the copy reports a "
                f"replication error: {status.error}",
                "exact",
                origin_last,
                held.seq,
            )
        if held.seq >= origin_last:
            reason = (
                f"holds origin seq {held.seq} >= the origin's last {origin_last}"
                if origin_last
                else "the origin has no message to copy"
            )
            return OriginVerdict(status, True, reason, "exact", origin_last, held.seq)
        reason = f"holds origin seq {held.seq} < the origin's last {origin_last}: copy not complete"
        return OriginVerdict(status, False, reason, "exact", origin_last, held.seq)

    def judge(
        self,
        info: dict[str, Any],
        now: float | None = None,
        probes: dict[str, OriginProbe] | None = None,
        held: dict[str, HeldSeq] | None = None,
        measured: dict[str, Headroom] | None = None,
    ) -> ReplicationCheck:
        """Judge a raw ``STREAM.INFO`` (read after the probes) with the origins' probes, the sequences
        the stream holds from each and their measured headroom (all keyed by :attr:`ReplicationStatus.key`;
        without probes every origin gets the lag/active rule). ``now`` is wall-clock seconds since the epoch.

        Raises :class:`JetStreamConfigError` when the stream has no mirror or sources, or lacks a
        named source."""
        now = time.time() if now is None else now
        self.same_identities(info, probes or {})
        statuses = self.select(info)
        verdicts = []
        failed = []
        unreachable_failures = 0
        for status in statuses:
            probe = (probes or {}).get(status.key) or OriginProbe("off")
            if probe.state != "unreachable":
                self._unreachable_since.pop(status.key, None)
                self._outage_since.pop(status.key, None)
            if probe.state == "ok":
                if probe.last_seq is not None:
                    self._last_seen[status.key] = [float(probe.last_seq), now]
                verdicts.append(
                    self.judge_exact(status, probe, (held or {}).get(status.key) or HeldSeq(None, "?"), now)
                )
            elif probe.state == "unreachable":
                since = self._unreachable_since.setdefault(status.key, now)
                # The earliest start seen: nats-server 2.10 moves its last contact at each retry of a cut-off source.
                start = status.last_contact or since
                outage = self._outage_since[status.key] = min(self._outage_since.get(status.key, start), start)
                seq, at = self._last_seen.get(status.key) or (None, None)
                seq = None if seq is None else int(seq)
                kept = (held or {}).get(status.key, HeldSeq(None)).seq
                verdicts.append(OriginVerdict(status, False, probe.reason, "unreachable", None, kept, outage, seq, at))
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
        headroom: dict[str, Headroom] = dict(measured or {})
        for verdict in verdicts:
            if verdict.unreachable:
                known = self.headroom_memory.last_known(verdict.status.key, now, verdict.unreachable_since)
                if known is not None:
                    headroom[verdict.status.key] = known
        low = [
            reason
            for v in verdicts
            if v.status.key in headroom
            and (
                reason := low_headroom(v.status.label, headroom[v.status.key], self.min_time_to_loss, self.min_headroom)
            )
        ]
        if self.low_headroom == "fail":
            failed += low
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
            failed_reason=(
                "unreachable"
                if failed and unreachable_failures == len(failed)
                else "low_headroom"
                if failed and self.low_headroom == "fail" and len(low) == len(failed)
                else "replication_error"
            ),
            cluster=cluster_health(info.get("cluster")),
            headroom=headroom if headroom or any(v.check in ("exact", "unreachable") for v in verdicts) else None,
            low_headroom=tuple(low),
        )

    @property
    def errors_pending(self) -> bool:
        """Some origin reports an error that has not yet outlasted the grace period."""
        return bool(self._errors_since)


async def check_replication(nc: Client, api: JetStreamApi, watch: ReplicationWatch) -> ReplicationCheck:
    """Read the stream through ``api``, probe each watched origin in its own domain, read the
    stream again, judge (``watch`` keeps what successive checks must remember).

    The origins are probed before the stream is read, so "the stream holds the origin's last
    sequence" is exact. Raises :class:`JetStreamNotFoundError` when the stream does not exist,
    :class:`JetStreamConfigError` when it has no mirror/sources or lacks a named one,
    :class:`JetStreamPermissionError` when a request is refused,
    :class:`JetStreamNoLeaderError` when a clustered stream has no leader now (a node down, an election:
    waited for), and :class:`JetStreamDomainUnavailableError` when no JetStream answers for the stream's domain.
    """
    watch.target = api.target
    # The raw info: nats-py's parsed one drops each origin's external API prefix.
    info = await leading_stream_info(api, watch.stream)
    statuses = watch.select(info)
    probes: dict[str, OriginProbe] = {}
    origins: dict[str, tuple[JetStreamApi, dict[str, Any]]] = {}
    if watch.verify_origin != "off":

        async def probe(status: ReplicationStatus) -> None:
            prefix = status.api_prefix or api.prefix
            origin_api = JetStreamApi(nc, prefix, timeout=api.timeout, target=describe_prefix(prefix))
            found, read = await asyncio.gather(
                probe_origin(origin_api, status), origin_info(origin_api, status, watch.identity_refused)
            )
            probes[status.key] = replace(found, created=stream_created(read)) if found.state == "ok" else found
            if found.state == "ok" and read:
                origins[status.key] = (origin_api, read)

        await asyncio.gather(*(probe(s) for s in statuses))
    after = await leading_stream_info(api, watch.stream)  # read after the probes: exact
    held: dict[str, HeldSeq] = {}
    looked_up = False
    for status in watch.select(after):
        found = probes.get(status.key)
        if found is not None and found.state in ("ok", "unreachable"):
            # An unreachable origin too: what the copy holds of it, against its last known sequence.
            held[status.key] = await held_seq(api, after, status, found)
            looked_up = looked_up or status.kind == "source"
    if looked_up:
        # A lookup may find copies stored after ``after`` was read, and a source's ``seq`` (2.15) can move
        # just before its copy is stored (one STREAM.INFO said held 2, messages 1): the state reported
        # beside the verdicts is read last, so it never counts fewer messages than the verdicts saw held.
        after = await leading_stream_info(api, watch.stream)
    now = time.time()
    measured: dict[str, Headroom] = {}
    for key, (origin_api, read) in origins.items():
        found_held = held.get(key)
        if found_held is not None and found_held.seq is not None:
            status = next(s for s in statuses if s.key == key)
            headroom = await measure_headroom(
                origin_api, status, read, found_held.seq, probes[key].last_seq or 0, watch.headroom_memory, now
            )
            if headroom is not None:
                measured[key] = headroom
    return watch.judge(after, now, probes=probes, held=held, measured=measured)
