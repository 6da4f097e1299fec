"""What a publish sends and what its acks said: the message tuple, ``PublishSummary`` and ``ack_problems``.

Shared by the publish engine's three modes: per message (:mod:`~airflow_provider_jetstream.core.publish.engine`),
fast-ingest batches (:mod:`~airflow_provider_jetstream.core.publish.fast_ingest`) and atomic batches
(:mod:`~airflow_provider_jetstream.core.publish.atomic`): one tally, one reading of what went wrong,
whichever way the messages went.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import nats.errors
import nats.js.errors

from airflow_provider_jetstream.core.errors import JetStreamPublishError
from airflow_provider_jetstream.core.protocol import PubAck

#: One message to publish: ``(subject, payload, headers or None)``.
Outgoing = tuple[str, bytes, "dict[str, str] | None"]


@dataclass
class PublishSummary:
    """What the acks said: ``stored`` new messages, ``duplicates`` (the stream had the ``Nats-Msg-Id``
    already: stored earlier, e.g. by an attempt whose ack was lost), and ``failures`` (index, error:
    the server's refusal or why no ack came), together ``count``. ``streams`` counts acknowledged
    messages by ``(stream, domain)``; ``republished`` counts messages sent again. ``batches`` counts the
    fast-ingest or atomic batches sent (0: every message was published on its own) and ``replies`` the
    acks received (one per message on its own; one per flow window of a fast-ingest batch, and its final
    ack; one per message of an atomic batch)."""

    count: int = 0
    stored: int = 0
    duplicates: int = 0
    first_seq: int | None = None
    last_seq: int | None = None
    failures: list[tuple[int, BaseException]] = field(default_factory=list)
    streams: dict[tuple[str | None, str | None], int] = field(default_factory=dict)
    seconds: float = 0.0
    republished: int = 0
    batches: int = 0
    replies: int = 0

    def acknowledged(self, ack: PubAck) -> None:
        """Count one message's ack."""
        if ack.duplicate:
            self.duplicates += 1
        else:
            self.stored += 1
        self.first_seq = ack.seq if self.first_seq is None else min(self.first_seq, ack.seq)
        self.last_seq = ack.seq if self.last_seq is None else max(self.last_seq, ack.seq)
        key = (ack.stream, ack.domain)
        self.streams[key] = self.streams.get(key, 0) + 1

    def batch_acknowledged(self, stream: str, domain: str | None, last_seq: int, settled: int, stored: int) -> None:
        """Count the ``settled`` messages of one fast-ingest batch's final ack: ``stored`` of them new
        (the stream's last sequence ``last_seq``), the rest duplicates."""
        self.stored += stored
        self.duplicates += settled - stored
        if stored:
            first = last_seq - stored + 1
            self.first_seq = first if self.first_seq is None else min(self.first_seq, first)
            self.last_seq = last_seq if self.last_seq is None else max(self.last_seq, last_seq)
        key = (stream, domain)
        self.streams[key] = self.streams.get(key, 0) + settled

    def counts(self) -> str:
        """``stored 19000, duplicates 1000, failed 0 (republished 4000)``: the exact tally."""
        again = f" (republished {self.republished})" if self.republished else ""
        return f"stored {self.stored}, duplicates {self.duplicates}, failed {len(self.failures)}{again}"

    def reasons(self) -> str:
        """Each distinct reason of the failures with how many messages it failed and the first one's index."""
        grouped: dict[str, list[int]] = {}
        for index, err in sorted(self.failures, key=lambda f: f[0]):
            grouped.setdefault(failure_reason(err), []).append(index)
        return "; ".join(f"{len(ix)} x {reason} (first: #{ix[0]})" for reason, ix in grouped.items())


def failure_reason(err: BaseException) -> str:
    """A failed message's reason in words: the server's, or why no ack came."""
    if isinstance(err, (nats.js.errors.NoStreamResponseError, nats.errors.NoRespondersError)):
        return "no stream listens on it"
    if isinstance(err, JetStreamPublishError):
        return str(err)
    return f"{type(err).__name__}: {err}"


def ack_problems(
    summary: PublishSummary, *, target_domain: str | None = None, expected_stream: str | None = None
) -> list[str]:
    """What the acks of ``summary`` say went wrong (empty: every message stored where aimed).

    :param target_domain: the domain whose streams must store the messages (None: any).
    :param expected_stream: the stream that must store them (None: any).
    """
    problems = []
    if summary.failures:
        problems.append(
            f"{len(summary.failures)} of {summary.count} messages were not stored ({summary.counts()}): "
            + summary.reasons()
        )
    # An ack without a domain does not count for a target that has one: every server of a domain names it.
    wrong_domain = {k: n for k, n in summary.streams.items() if target_domain and k[1] != target_domain}
    if wrong_domain:
        problems.append(
            "stored outside domain "
            + repr(target_domain)
            + ": "
            + ", ".join(f"{n} by stream {s!r} in domain {d!r}" for (s, d), n in wrong_domain.items())
        )
    wrong_stream = {k: n for k, n in summary.streams.items() if expected_stream and k[0] != expected_stream}
    if wrong_stream:
        problems.append(
            f"stored outside stream {expected_stream!r}: "
            + ", ".join(f"{n} by stream {s!r}" for (s, _), n in wrong_stream.items())
        )
    return problems
