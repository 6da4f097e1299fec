"""The replication check's rule for a durable source (nats-server 2.14+): the copy reads the origin through a
flow-control consumer it acknowledges, so "caught up" is read from that consumer and the origin's stream.

Pure logic, Airflow-free.
"""

from __future__ import annotations

from airflow_provider_jetstream.core.status.origins import HeldSeq, OriginProbe, ReplicationStatus
from airflow_provider_jetstream.core.status.report import OriginVerdict


def judge_durable(status: ReplicationStatus, probe: OriginProbe, held: HeldSeq) -> OriginVerdict:
    """A durable source's origin answered: caught up iff its flow-control consumer has nothing pending
    or unacknowledged (the copy acknowledges what it stored), the copy holds at least the consumer's
    ack floor, the origin no longer holds what was acknowledged, and the copy reports no error."""
    drain = probe.drain
    assert drain is not None  # a durable probe
    consumer = f"consumer {status.consumer!r}"
    problems = []
    if not drain.acknowledged:
        problems.append(
            f"{drain.pending} messages not yet delivered and {drain.ack_pending} not yet acknowledged by the "
            f"copy ({consumer}, ack floor {drain.ack_floor})"
        )
    if held.seq is not None and held.seq < drain.ack_floor:
        problems.append(f"holds origin seq {held.seq} < the {consumer}'s ack floor {drain.ack_floor}")
    if not drain.drained:
        problems.append(f"the origin still holds acknowledged messages up to seq {drain.last_held}: not yet drained")
    if status.error:
        problems.append(f"replication error: {status.error}")
    if problems:
        return OriginVerdict(status, False, "; ".join(problems), "durable", probe.last_seq, held.seq)
    kept = (
        f"; the origin keeps them for its {drain.other_consumers} other consumers"
        if drain.retention == "interest" and drain.other_consumers
        else "; the origin's stream is drained"
        if drain.retention in ("workqueue", "interest")
        else ""
    )
    return OriginVerdict(
        status,
        True,
        f"the copy stored and acknowledged everything {consumer} takes (ack floor {drain.ack_floor}){kept}",
        "durable",
        probe.last_seq,
        held.seq,
    )
