"""The event drift check: a consumer's ack floor against the asset events Airflow stored for its messages.

An event trigger acks a message only once Airflow stored every asset event it produced, so every message
the consumer delivers up to its ack floor (``ack_floor.stream_seq``) has a stored event. A message at or below
the floor without one was acked some other way (another client acked or terminated it, the consumer was
moved) and is lost to Airflow: that is drift. Stored events above the floor are not drift: they were stored,
not acked yet, and fire again after a restart (at-least-once, same ``seq``).

The position the triggers record in the Asset State Store (:func:`position_key`) is where the consumer
resumes, as last read from the server: a position above the ack floor, or recorded on another incarnation of
the stream (``stream_created``), means the consumer was reset or recreated since, and events fire again.
Read through :class:`~airflow_provider_jetstream.core.api.JetStreamApi`; Airflow-free.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_jetstream.core.api import JetStreamApi
from airflow_provider_jetstream.core.arguments.names import consumer_filters, subjects_collide
from airflow_provider_jetstream.core.read.identity import stream_created
from airflow_provider_jetstream.core.status.consumer_lag import existing_consumer

#: Stream sequences without a stored event looked up in the stream by one check, at most (by default).
MAX_LOOKUPS = 1000


def position_key(stream: str, consumer: str) -> str:
    """The Asset State Store key under which an event trigger records its consumer's position on a watched asset."""
    return f"jetstream.position.{stream}.{consumer}"


def event_sequences(events: Iterable[Any]) -> list[int]:
    """The stream sequences of asset events (objects with ``extra``, dicts with ``"extra"``, or event payloads):
    one per message event (a KV event's ``revision``), every message's of a batch event. Events without a
    JetStream payload are skipped."""
    found: list[int] = []
    for event in events:
        extra = event.get("extra") if isinstance(event, Mapping) else getattr(event, "extra", None)
        payload = (extra or {}).get("payload") if isinstance(extra, Mapping) else None
        if payload is None and isinstance(event, Mapping) and {"seq", "messages", "revision"} & event.keys():
            payload = event
        if not isinstance(payload, Mapping):
            continue
        if isinstance(payload.get("messages"), list):
            found.extend(int(m["seq"]) for m in payload["messages"] if isinstance(m, Mapping) and "seq" in m)
        elif "seq" in payload:
            found.append(int(payload["seq"]))
        elif "revision" in payload:  # a KV change: its revision is its sequence in the bucket's stream
            found.append(int(payload["revision"]))
    return found


@dataclass(frozen=True)
class EventDrift:
    """One comparison of a consumer's ack floor with the stream sequences of the asset events Airflow stored.

    :param ack_floor: the consumer's ack floor (stream sequence): every message it delivers up to it is acked.
    :param checked_from: the first stream sequence compared.
    :param lost: sequences from ``checked_from`` to the ack floor whose message (still in the stream, one the
        consumer and ``subjects`` take) has no stored event: acked without Airflow storing it.
    :param unchecked: sequences without a stored event not looked up (over ``max_lookups``).
    :param pending_stored: stored sequences above the ack floor: they may fire again after a restart.
    :param duplicates: stored sequences stored more than once, with their count (at-least-once repeats).
    :param position_problem: why the recorded position disagrees with the consumer, or None.
    :param info: the server's raw consumer info.
    """

    stream: str
    consumer: str
    target: str
    ack_floor: int
    checked_from: int
    lost: list[int]
    unchecked: int
    pending_stored: int
    duplicates: dict[int, int]
    position_problem: str | None
    info: dict[str, Any] = field(repr=False)

    @property
    def drifted(self) -> bool:
        """Whether Airflow and the consumer disagree: a lost message, one not looked up, or a bad position."""
        return bool(self.lost or self.unchecked or self.position_problem)

    @property
    def reason(self) -> str:
        """What was compared and what disagrees, in words."""
        where = f"consumer {self.consumer!r} of {self.stream!r} in {self.target}, ack floor {self.ack_floor}"
        problems = []
        if self.lost:
            shown = ", ".join(map(str, self.lost[:10])) + (", ..." if len(self.lost) > 10 else "")
            problems.append(f"{len(self.lost)} message(s) acked without a stored asset event: {shown}")
        if self.unchecked:
            problems.append(f"{self.unchecked} sequence(s) without a stored event not looked up (max_lookups)")
        if self.position_problem:
            problems.append(self.position_problem)
        if problems:
            return f"{where}: " + "; ".join(problems)
        return (
            f"{where}: every message from {self.checked_from} to the floor has a stored event; "
            f"{self.pending_stored} stored above it (may fire again after a restart), "
            f"{len(self.duplicates)} stored more than once"
        )

    def to_xcom(self) -> dict[str, Any]:
        """The comparison as a JSON-serializable dict."""
        return {
            "stream": self.stream,
            "consumer": self.consumer,
            "target": self.target,
            "drifted": self.drifted,
            "ack_floor": self.ack_floor,
            "checked_from": self.checked_from,
            "lost": list(self.lost),
            "unchecked": self.unchecked,
            "pending_stored": self.pending_stored,
            "duplicates": {str(seq): n for seq, n in self.duplicates.items()},
            "position_problem": self.position_problem,
            "reason": self.reason,
        }


async def check_event_drift(
    api: JetStreamApi,
    stream: str,
    consumer: str,
    stored: Iterable[int],
    *,
    start_seq: int | None = None,
    subjects: list[str] | None = None,
    position: Mapping[str, Any] | None = None,
    max_lookups: int = MAX_LOOKUPS,
) -> EventDrift:
    """Compare ``consumer``'s ack floor with the ``stored`` stream sequences (see :class:`EventDrift`).

    Every sequence from ``start_seq`` (default: the lowest stored one, else the stream's first) to the ack floor
    without a stored event is looked up in the stream (at most ``max_lookups``): it is lost if its message is
    still there and on a subject the consumer's filters and ``subjects`` (a watcher's ``event_subjects``) take.
    Raises :class:`JetStreamNotFoundError` when the stream or the consumer does not exist.
    """
    info = await existing_consumer(api, stream, consumer)
    stream_info = await api.stream_info(stream) or {}
    counts = Counter(int(seq) for seq in stored)
    floor = int((info.get("ack_floor") or {}).get("stream_seq") or 0)
    first = int((stream_info.get("state") or {}).get("first_seq") or 1)
    start = start_seq if start_seq is not None else (min(counts) if counts else first)
    filters = consumer_filters(info.get("config") or {})
    lost: list[int] = []
    unchecked = looked_up = 0
    for seq in range(max(start, first), floor + 1):
        if seq in counts:
            continue
        if looked_up >= max_lookups:
            unchecked += 1
            continue
        looked_up += 1
        message = await api.msg(stream, seq)
        if message is None:  # deleted, or removed by the stream's limits: nothing to deliver
            continue
        subject = message.get("subject", "")
        if all(any(subjects_collide(f, subject) for f in group) for group in (filters, subjects or []) if group):
            lost.append(seq)
    return EventDrift(
        stream=stream,
        consumer=consumer,
        target=api.target,
        ack_floor=floor,
        checked_from=start,
        lost=lost,
        unchecked=unchecked,
        pending_stored=sum(1 for seq in counts if seq > floor),
        duplicates={seq: n for seq, n in sorted(counts.items()) if n > 1},
        position_problem=_position_problem(position, floor, stream_created(stream_info) if stream_info else None),
        info=info,
    )


def _position_problem(position: Mapping[str, Any] | None, floor: int, created: str | None) -> str | None:
    """Why a recorded position disagrees with the consumer now (None when it agrees, or when none is given)."""
    if not position:
        return None
    recorded = int(position.get("stream_seq") or 0)
    then = position.get("stream_created")
    if then and created and then != created:
        return f"the position ({recorded}) was recorded on stream created {then}; the stream now was created {created}"
    if recorded > floor:
        return (
            f"the recorded position {recorded} is above the ack floor {floor}: the consumer was reset or recreated "
            "since, and the messages between fire again"
        )
    return None
