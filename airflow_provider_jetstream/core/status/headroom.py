"""Retention headroom: what a copy has not taken yet from each origin, against the limits that will discard it.

For every origin the replication check reads exactly (asked in its own domain), the **uncopied** data is
what the origin holds after the last origin sequence the copy holds (:class:`~.origins.HeldSeq`):

- messages: the origin's last sequence on the copied subjects minus the held one (exact for an origin
  with no message deleted after the held one and a copy of every subject; otherwise an upper bound);
- bytes: that count times the origin's average stored message size (``state.bytes / state.messages``):
  an estimate, not a sum of message sizes (which would take one request per message);
- the oldest uncopied message's age: its timestamp, read with one direct get (``STREAM.MSG.GET`` with
  ``next_by_subj`` from the held sequence + 1, per copied subject filter).

What will discard it, each limit giving the room left and the time until that room is gone:

- ``max_age``: the oldest uncopied message's age against ``max_age``; time left ``max_age - age``.
- ``max_msgs`` / ``max_bytes``: the messages (bytes) from the first uncopied one on against the limit; time
  left: the room over the message (byte) rate.
- ``max_msgs_per_subject``: the messages on the first uncopied message's subject (copied ones count too,
  so the room is a lower bound); time left: the room over the stream's whole message rate (at least any one
  subject's, so the time is a lower bound too).
- the account's storage limit in the origin's domain (``$JS.<domain>.API.INFO``: ``max_storage``, or
  ``max_memory`` for a memory stream, against what the account stores); time left: the room over this
  stream's byte rate.

With ``discard: old`` (the default) a full stream discards its oldest messages: the first uncopied one is
lost when the room is gone (``discards``). With ``discard: new`` nothing is discarded: the stream refuses
new messages once every message it holds, copied or not, fills the limit, and the edge's publishers get
errors (``refuses``). The account's storage limit always refuses; ``max_age`` always discards.

**Time to loss**: the least time over the limits, if the copy stopped now and messages went on arriving at
the current rate. **Headroom**: the least ``room / limit`` over the limits (0: full, 1: empty).

**Rate**: messages per second between two checks of one watch at least :data:`RATE_WINDOW` seconds apart
(the origin's last sequence: sequences are never reused); at a watch's first check, the average over what
the origin holds (``(last_seq - first_seq) / (last_ts - first_ts)``). Bytes per second: the message rate
times the average stored size.

An origin that does not answer cannot be measured: its **last known** headroom is kept by the watch and
reported with when it was measured and since when the origin is unreachable, **projected** to now: each
limit's time shortened by the time since it was measured (exact for ``max_age``; the others as if messages
went on arriving at the last known rate). An origin the watch never measured has no known headroom, and is
never judged low.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import Any

import nats.errors

from airflow_provider_jetstream.core.api import JetStreamApi
from airflow_provider_jetstream.core.arguments.durations import instant
from airflow_provider_jetstream.core.errors import JetStreamError
from airflow_provider_jetstream.core.status.origins import ReplicationStatus
from airflow_provider_jetstream.core.status.report import format_seconds, iso_utc

#: A limit reached discards the first uncopied message.
DISCARDS = "discards"
#: A limit reached makes the origin refuse new messages (nothing held is discarded).
REFUSES = "refuses"
#: ``low_headroom`` values: a check below a threshold fails, or logs a warning and goes on.
LOW_HEADROOM = ("fail", "warn")
#: Least seconds between the two readings a rate is measured over.
RATE_WINDOW = 1.0

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LimitRoom:
    """One limit of an origin against its uncopied data.

    :param limit: ``max_age``, ``max_msgs``, ``max_bytes``, ``max_msgs_per_subject`` or ``account_storage``.
    :param value: the limit (seconds, messages or bytes).
    :param used: how much of it is used (see the module doc for each limit).
    :param effect: :data:`DISCARDS` or :data:`REFUSES`: what happens when the room is gone.
    :param seconds: seconds until the room is gone at the current rate; None when nothing arrives.
    """

    limit: str
    value: float
    used: float
    effect: str
    seconds: float | None

    @property
    def room(self) -> float:
        return max(0.0, self.value - self.used)

    @property
    def fraction(self) -> float:
        """``room / value``: 0 when full, 1 when nothing is used."""
        return self.room / self.value if self.value > 0 else 0.0

    def words(self) -> str:
        """``max_msgs discards the first uncopied message``, ``account_storage refuses new messages``."""
        what = "discards the first uncopied message" if self.effect == DISCARDS else "refuses new messages"
        return f"{self.limit} {what}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "limit": self.limit,
            "value": self.value,
            "used": round(self.used, 3),
            "room": round(self.room, 3),
            "fraction": round(self.fraction, 4),
            "effect": self.effect,
            "seconds": None if self.seconds is None else round(self.seconds, 3),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LimitRoom:
        seconds = data.get("seconds")
        return cls(
            str(data["limit"]),
            float(data["value"]),
            float(data["used"]),
            str(data["effect"]),
            None if seconds is None else float(seconds),
        )


@dataclass(frozen=True)
class Headroom:
    """One origin's retention headroom, measured now or last known (see the module doc).

    :param uncopied_msgs: messages the copy has not taken yet.
    :param uncopied_bytes: their size, estimated from the origin's average stored message size.
    :param oldest_age: seconds since the oldest uncopied message was stored; None when nothing is uncopied.
    :param first_uncopied_seq: its sequence in the origin; None when nothing is uncopied.
    :param rate_msgs: messages per second arriving at the origin.
    :param rate_bytes: bytes per second.
    :param limits: every limit the origin has, with its room and time.
    :param measured_at: wall-clock time (epoch seconds) of the measurement.
    :param discarded: origin sequences after the held one already gone (uncopied messages the origin
        discarded, or messages on subjects the copy does not take): 0 when none.
    :param last_known: measured at an earlier check; the origin does not answer now (projected to now).
    :param unreachable_since: since when the origin does not answer (with ``last_known``).
    """

    uncopied_msgs: int
    uncopied_bytes: int
    oldest_age: float | None
    first_uncopied_seq: int | None
    rate_msgs: float
    rate_bytes: float
    limits: tuple[LimitRoom, ...]
    measured_at: float
    discarded: int = 0
    last_known: bool = False
    unreachable_since: float | None = None

    @property
    def binding(self) -> LimitRoom | None:
        """The limit reached first at the current rate (None: no limit is ever reached at it)."""
        timed = [limit for limit in self.limits if limit.seconds is not None]
        return min(timed, key=lambda limit: limit.seconds) if timed else None

    @property
    def seconds_left(self) -> float | None:
        """Time to loss: seconds until the first limit is reached; None when none is at the current rate."""
        binding = self.binding
        return None if binding is None else binding.seconds

    @property
    def fraction(self) -> float | None:
        """Headroom: the least ``room / limit`` over the limits; None for an origin without limits."""
        return min((limit.fraction for limit in self.limits), default=None)

    def projected(self, now: float, unreachable_since: float | None) -> Headroom:
        """This (last known) headroom at ``now``, as if the copy had stopped when it was measured and
        messages went on arriving at its rate."""
        elapsed = max(0.0, now - self.measured_at)
        arriving = self.rate_msgs > 0
        limits = []
        for limit in self.limits:
            if limit.limit == "max_age":
                aging = self.uncopied_msgs > 0 or arriving
                used = min(limit.value, limit.used + elapsed) if aging else limit.used
                limits.append(replace(limit, used=used, seconds=max(0.0, limit.value - used)))
            elif limit.seconds is not None:
                left = max(0.0, limit.seconds - elapsed)
                filled = 1.0 if limit.seconds <= 0 else min(1.0, elapsed / limit.seconds)
                limits.append(replace(limit, used=limit.used + limit.room * filled, seconds=left))
            else:
                limits.append(limit)
        added = int(self.rate_msgs * elapsed)
        oldest = self.oldest_age + elapsed if self.oldest_age is not None else (elapsed if added else None)
        return replace(
            self,
            uncopied_msgs=self.uncopied_msgs + added,
            uncopied_bytes=self.uncopied_bytes + int(self.rate_bytes * elapsed),
            oldest_age=oldest,
            limits=tuple(limits),
            last_known=True,
            unreachable_since=unreachable_since,
        )

    def cells(self) -> list[str]:
        """The replication table's columns: uncopied, oldest uncopied, time to loss."""
        uncopied = f"{self.uncopied_msgs} ({human_bytes(self.uncopied_bytes)})"
        oldest = format_seconds(self.oldest_age) if self.oldest_age is not None else "-"
        binding = self.binding
        loss = f"{format_seconds(binding.seconds)} ({binding.limit})" if binding else "none at this rate"
        if self.last_known:
            loss = f"{loss}, last known {iso_utc(self.measured_at)}"
        return [uncopied, oldest, loss]

    def to_dict(self) -> dict[str, Any]:
        binding = self.binding
        return {
            "uncopied_msgs": self.uncopied_msgs,
            "uncopied_bytes": self.uncopied_bytes,
            "oldest_uncopied_age": None if self.oldest_age is None else round(self.oldest_age, 3),
            "first_uncopied_seq": self.first_uncopied_seq,
            "rate_msgs": round(self.rate_msgs, 3),
            "rate_bytes": round(self.rate_bytes, 1),
            "time_to_loss": None if binding is None or binding.seconds is None else round(binding.seconds, 3),
            "binding_limit": binding.limit if binding else None,
            "headroom": None if self.fraction is None else round(self.fraction, 4),
            "limits": [limit.to_dict() for limit in self.limits],
            "discarded": self.discarded,
            "measured_at": iso_utc(self.measured_at),
            "measured_at_epoch": self.measured_at,
            "last_known": self.last_known,
            "unreachable_since": iso_utc(self.unreachable_since),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Headroom:
        age = data.get("oldest_uncopied_age")
        return cls(
            uncopied_msgs=int(data["uncopied_msgs"]),
            uncopied_bytes=int(data["uncopied_bytes"]),
            oldest_age=None if age is None else float(age),
            first_uncopied_seq=data.get("first_uncopied_seq"),
            rate_msgs=float(data["rate_msgs"]),
            rate_bytes=float(data["rate_bytes"]),
            limits=tuple(LimitRoom.from_dict(limit) for limit in data.get("limits") or ()),
            measured_at=float(data["measured_at_epoch"]),
            discarded=int(data.get("discarded") or 0),
        )


def human_bytes(amount: float) -> str:
    """``512 B``, ``12.0 KiB``, ``3.5 MiB``..."""
    size = float(amount)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"  # pragma: no cover - the loop returns


def _time_for(room: float, rate: float) -> float | None:
    """Seconds until ``room`` is used at ``rate`` per second: 0 when none is left, None when nothing arrives."""
    if room <= 0:
        return 0.0
    return room / rate if rate > 0 else None


def _positive(config: dict[str, Any], name: str) -> float:
    value = config.get(name)
    return float(value) if isinstance(value, (int, float)) and value > 0 else 0.0


def compute_headroom(
    *,
    info: dict[str, Any],
    account: dict[str, Any] | None,
    held: int,
    origin_last: int,
    first_uncopied: dict[str, Any] | None,
    subject_messages: int | None,
    rate_msgs: float,
    now: float,
) -> Headroom:
    """One origin's headroom from what was read (pure; see the module doc for every rule).

    :param info: the origin's raw ``STREAM.INFO``.
    :param account: its domain's ``INFO`` (None: unknown).
    :param held: the highest origin sequence the copy holds.
    :param origin_last: the origin's last sequence on the copied subjects.
    :param first_uncopied: the origin's first message after ``held`` on those
        subjects (raw ``STREAM.MSG.GET`` message: ``seq``, ``time``, ``subject``), None when there is none.
    :param subject_messages: messages on that message's subject (for ``max_msgs_per_subject``; None: not read).
    :param rate_msgs: messages per second arriving.
    :param now: wall-clock time, epoch seconds.
    """
    config = info.get("config") or {}
    state = info.get("state") or {}
    messages = int(state.get("messages") or 0)
    stored = int(state.get("bytes") or 0)
    average = stored / messages if messages else 0.0
    last_seq = max(int(state.get("last_seq") or 0), origin_last)
    uncopied = max(0, origin_last - held)
    first_seq = int(first_uncopied["seq"]) if first_uncopied and uncopied else None
    oldest_age = None
    if first_seq is not None:
        stamp = instant(first_uncopied.get("time"))  # type: ignore[union-attr]
        oldest_age = max(0.0, now - stamp.timestamp()) if stamp else None
    # Messages from the first uncopied one on (every subject: all of them count against the limits).
    from_first = last_seq - first_seq + 1 if first_seq is not None else 0
    discard_new = str(config.get("discard") or "old").lower() == "new"
    rate_bytes = rate_msgs * average
    limits: list[LimitRoom] = []
    max_age = _positive(config, "max_age") / 1e9
    if max_age:
        used = min(max_age, oldest_age or 0.0)
        limits.append(LimitRoom("max_age", max_age, used, DISCARDS, max(0.0, max_age - used)))
    effect = REFUSES if discard_new else DISCARDS
    max_msgs = _positive(config, "max_msgs")
    if max_msgs:
        used = float(messages if discard_new else from_first)
        limits.append(LimitRoom("max_msgs", max_msgs, used, effect, _time_for(max_msgs - used, rate_msgs)))
    max_bytes = _positive(config, "max_bytes")
    if max_bytes:
        used = float(stored if discard_new else from_first * average)
        limits.append(LimitRoom("max_bytes", max_bytes, used, effect, _time_for(max_bytes - used, rate_bytes)))
    per_subject = _positive(config, "max_msgs_per_subject")
    if per_subject and subject_messages is not None:
        refuses = discard_new and bool(config.get("discard_new_per_subject"))
        limits.append(
            LimitRoom(
                "max_msgs_per_subject",
                per_subject,
                float(subject_messages),
                REFUSES if refuses else DISCARDS,
                _time_for(per_subject - subject_messages, rate_msgs),
            )
        )
    memory = str(config.get("storage") or "file").lower() == "memory"
    account_limit = _positive((account or {}).get("limits") or {}, "max_memory" if memory else "max_storage")
    if account_limit:
        used = float((account or {}).get("memory" if memory else "storage") or 0)
        limits.append(
            LimitRoom("account_storage", account_limit, used, REFUSES, _time_for(account_limit - used, rate_bytes))
        )
    first_held = int(state.get("first_seq") or 0)
    return Headroom(
        uncopied_msgs=uncopied,
        uncopied_bytes=int(uncopied * average),
        oldest_age=oldest_age,
        first_uncopied_seq=first_seq,
        rate_msgs=rate_msgs,
        rate_bytes=rate_bytes,
        limits=tuple(limits),
        measured_at=now,
        discarded=max(0, first_held - held - 1) if held > 0 and uncopied else 0,
    )


def history_rate(info: dict[str, Any]) -> float:
    """Messages per second over what a stream holds: ``(last_seq - first_seq) / (last_ts - first_ts)``; 0
    for a stream of fewer than two messages."""
    state = info.get("state") or {}
    first, last = instant(state.get("first_ts")), instant(state.get("last_ts"))
    span = (last - first).total_seconds() if first and last else 0.0
    count = int(state.get("last_seq") or 0) - int(state.get("first_seq") or 0)
    if int(state.get("messages") or 0) < 2 or span <= 0 or count <= 0:
        return 0.0
    return count / span


@dataclass
class HeadroomMemory:
    """What a watch keeps of each origin's headroom across checks: the reading its rate is measured from
    and the last measured headroom (reported, projected, while the origin does not answer)."""

    _rate_from: dict[str, list[float]] = field(default_factory=dict)  # key -> [at, last_seq, rate]
    _last: dict[str, dict[str, Any]] = field(default_factory=dict)

    def state(self) -> dict[str, Any]:
        return {"rate_from": {k: list(v) for k, v in self._rate_from.items()}, "last": dict(self._last)}

    def restore(self, state: dict[str, Any] | None) -> HeadroomMemory:
        state = state or {}
        self._rate_from = {str(k): [float(x) for x in v] for k, v in (state.get("rate_from") or {}).items()}
        self._last = {str(k): dict(v) for k, v in (state.get("last") or {}).items()}
        return self

    def rate(self, key: str, last_seq: int, info: dict[str, Any], now: float) -> float:
        """Messages per second arriving at origin ``key`` (see the module doc)."""
        start = self._rate_from.get(key)
        if start is not None and last_seq >= start[1]:
            if now - start[0] < RATE_WINDOW:
                return start[2]
            rate = (last_seq - start[1]) / (now - start[0])
            self._rate_from[key] = [now, float(last_seq), rate]
            return rate
        rate = history_rate(info)
        self._rate_from[key] = [now, float(last_seq), rate]
        return rate

    def remember(self, key: str, headroom: Headroom) -> None:
        self._last[key] = headroom.to_dict()

    def last_known(self, key: str, now: float, unreachable_since: float | None) -> Headroom | None:
        """Origin ``key``'s last measured headroom projected to ``now``; None when never measured."""
        data = self._last.get(key)
        return Headroom.from_dict(data).projected(now, unreachable_since) if data else None


def low_headroom(
    label: str, headroom: Headroom, min_time_to_loss: float | None, min_headroom: float | None
) -> str | None:
    """Why ``headroom`` is below a threshold, in words; None when it is not (or no threshold is set)."""
    reasons = []
    binding = headroom.binding
    seconds = None if binding is None else binding.seconds
    if min_time_to_loss is not None and binding is not None and seconds is not None and seconds < min_time_to_loss:
        reasons.append(
            f"{binding.words()} in {format_seconds(seconds)} < min_time_to_loss {format_seconds(min_time_to_loss)}"
        )
    fraction = headroom.fraction
    if min_headroom is not None and fraction is not None and fraction < min_headroom:
        tightest = min(headroom.limits, key=lambda limit: limit.fraction)
        reasons.append(f"headroom {fraction:.1%} of {tightest.limit} < min_headroom {min_headroom:.1%}")
    if not reasons:
        return None
    detail = f"{headroom.uncopied_msgs} uncopied messages"
    if headroom.oldest_age is not None:
        detail += f", the oldest {format_seconds(headroom.oldest_age)} old"
    if headroom.last_known:
        since = iso_utc(headroom.unreachable_since) or "?"
        detail += (
            f"; last known headroom measured {iso_utc(headroom.measured_at)}, projected to now at "
            f"{headroom.rate_msgs:.1f} msg/s (unreachable since {since})"
        )
    return f"{label}: low retention headroom: {'; '.join(reasons)} ({detail})"


async def measure_headroom(
    api: JetStreamApi,
    status: ReplicationStatus,
    info: dict[str, Any],
    held: int,
    origin_last: int,
    memory: HeadroomMemory,
    now: float,
) -> Headroom | None:
    """Measure one origin's headroom in its own domain (``api``), from its ``STREAM.INFO`` (``info``, read
    by the check's probe) and the sequence the copy holds; remembered in ``memory``. Requests: the domain's
    ``INFO``, and while something is uncopied one direct get per copied subject filter (and one
    ``STREAM.INFO`` of the first uncopied message's subject when the origin has ``max_msgs_per_subject``).
    None when the origin stopped answering meanwhile (its last known headroom is used instead)."""
    try:
        first: dict[str, Any] | None = None
        if origin_last > held:
            for subject in status.origin_filters:
                message = await api.next_msg(status.origin, held + 1, subject)
                if message and (first is None or int(message["seq"]) < int(first["seq"])):
                    first = message
        try:
            account: dict[str, Any] | None = await api.account_info()
        except JetStreamError as err:  # e.g. refused to this user: no account limit to judge
            log.debug("%s: account info not read: %s", api.target, err)
            account = None
        subject_messages = None
        if _positive(info.get("config") or {}, "max_msgs_per_subject"):
            subject_messages = 0
            if first is not None:
                reply = await api.request(f"STREAM.INFO.{status.origin}", {"subjects_filter": first["subject"]})
                subject_messages = int(((reply.get("state") or {}).get("subjects") or {}).get(first["subject"], 0))
    except (JetStreamError, nats.errors.Error) as err:
        log.info("%s: headroom not measured: %s", status.label, err)
        return None
    last_seq = max(origin_last, int((info.get("state") or {}).get("last_seq") or 0))
    rate = memory.rate(status.key, last_seq, info, now)
    headroom = compute_headroom(
        info=info,
        account=account,
        held=held,
        origin_last=origin_last,
        first_uncopied=first,
        subject_messages=subject_messages,
        rate_msgs=rate,
        now=now,
    )
    memory.remember(status.key, headroom)
    return headroom
