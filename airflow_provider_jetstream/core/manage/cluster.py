"""A stream's cluster health: its leader and each replica current, lagging or offline, read from ``STREAM.INFO``.

A clustered JetStream reports, in ``STREAM.INFO``'s ``cluster`` block, the cluster's ``name``, the
``leader`` of the stream's Raft group (absent while no leader is elected) and every other peer under
``replicas``: ``name``, ``current`` (caught up with the leader), ``offline`` (the server is gone),
``active`` (nanoseconds since the leader last heard from it) and ``lag`` (operations behind). The
servers do not flag a killed peer ``offline`` within a minute of its death (measured), while the
leader hears from every live replica about once a second (Raft heartbeats): so a replica the leader
has not heard from for longer than ``silent_after`` (default :data:`SILENT_AFTER`) counts as offline
too. A single
server (no ``cluster`` block) or a stream of one replica lists no replicas: there is no replica
health to report. :func:`cluster_health` is the one reading of that block: the create / reconcile
operators' XCom (``state["cluster"]``), the replication check's XCom and table, and the sensors'
tables all show what it returns.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: A replica's health: caught up with the leader, behind it, or its server gone.
REPLICA_STATES = ("current", "lagging", "offline")
#: Seconds without word from a replica after which it counts as offline (the leader hears from a live
#: replica about once a second).
SILENT_AFTER = 5.0


def replica_state(peer: Mapping[str, Any], silent_after: float = SILENT_AFTER) -> str:
    """``"offline"`` when the server reports the peer's server gone or the leader has not heard from it for
    longer than ``silent_after`` seconds (default :data:`SILENT_AFTER`), else ``"current"`` when it is
    caught up with the leader, else ``"lagging"``."""
    active = peer.get("active")
    if peer.get("offline") or (isinstance(active, int) and active > silent_after * 1e9):
        return "offline"
    return "current" if peer.get("current") else "lagging"


def cluster_health(cluster: Mapping[str, Any] | None, silent_after: float = SILENT_AFTER) -> dict[str, Any] | None:
    """The health summary of a ``STREAM.INFO`` ``cluster`` block, or None for a single server (no block,
    or no replicas listed): nothing to report, never an error. ``silent_after``: see :func:`replica_state`.

    Returns ``{"name": cluster name or None, "leader": server name or None (no leader elected),
    "replicas": [{"name", "state": "current" | "lagging" | "offline", "lag", "active_s"}, ...],
    "current": n, "lagging": n, "offline": n, "healthy": bool, "summary": text}``: ``healthy`` when a
    leader is elected and every replica is current; ``summary`` is the line the tables print, e.g.
    ``leader n1; replicas n2 current, n3 offline``. ``active_s`` is seconds since the leader last heard
    from the replica (None when not reported).
    """
    if not cluster:
        return None
    peers = [peer for peer in cluster.get("replicas") or () if isinstance(peer, Mapping)]
    if not peers:
        return None
    replicas = []
    for peer in peers:
        active = peer.get("active")
        replicas.append(
            {
                "name": peer.get("name") or peer.get("peer") or "?",
                "state": replica_state(peer, silent_after),
                "lag": int(peer.get("lag") or 0),
                "active_s": round(active / 1e9, 3) if isinstance(active, int) and active >= 0 else None,
            }
        )
    counts = {state: sum(1 for r in replicas if r["state"] == state) for state in REPLICA_STATES}
    leader = cluster.get("leader") or None
    return {
        "name": cluster.get("name") or None,
        "leader": leader,
        "replicas": replicas,
        **counts,
        "healthy": leader is not None and counts["current"] == len(replicas),
        "summary": health_summary(leader, replicas),
    }


def health_summary(leader: str | None, replicas: list[dict[str, Any]]) -> str:
    """``leader n1; replicas n2 current, n3 lagging (lag 4), n4 offline``; ``no leader; ...`` while none
    is elected."""
    parts = []
    for replica in replicas:
        lag = f" (lag {replica['lag']})" if replica["state"] == "lagging" and replica["lag"] else ""
        parts.append(f"{replica['name']} {replica['state']}{lag}")
    head = f"leader {leader}" if leader else "no leader"
    return f"{head}; replicas {', '.join(parts)}"
