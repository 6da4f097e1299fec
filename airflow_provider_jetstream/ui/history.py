"""The JetStream page's memory of its last checks: since when each domain is (un)reachable and each origin in
its state, the news between checks, and the replication watches, kept per connection in the api-server's memory.

A page view only reads: it writes no Airflow Variable and nothing on any NATS server (a user allowed to read a
connection needs no other right, and a GET changes nothing). The memory lasts as long as the api-server process
(each api-server, and each of its workers, keeps its own); the outage starts it shows survive a restart, as the
hub's server reports them. For a record that lasts, the replication sensor logs every change (and its XCom keeps
the outage). It holds no secret: domain, stream and origin names, states and times.
"""

from __future__ import annotations

import threading
from typing import Any

from airflow_provider_jetstream.core.arguments.durations import instant
from airflow_provider_jetstream.core.status.report import iso_utc

#: Most news entries kept per connection (the oldest go first).
MAX_NEWS = 200


def _states(overview: dict[str, Any]) -> tuple[dict[str, bool], dict[str, tuple[str, str, str | None]]]:
    domains = {d["domain"]: d["reachable"] for d in overview["domains"]}
    origins = {
        f"{s['key']} <- {o['key']}": (o["state"], o["summary"], o.get("unreachable_since"))
        for d in overview["domains"]
        for s in d["streams"]
        for o in (s["replication"] or {}).get("origins", [])
    }
    return domains, origins


def _outage_starts(overview: dict[str, Any]) -> dict[str, str]:
    """Per domain, the earliest outage start its origins report (``unreachable_since``: the copy's last
    contact with the origin, as its server reports it)."""
    starts: dict[str, str] = {}
    for d in overview["domains"]:
        for s in d["streams"]:
            for o in (s["replication"] or {}).get("origins", []):
                since, domain = o.get("unreachable_since"), o.get("domain")
                if since and domain and (domain not in starts or instant(since) < instant(starts[domain])):
                    starts[domain] = since
    return starts


def _began(reported: str | None, at: str) -> str:
    """When a state began: the outage start a server reported, if it is before this check, else this check."""
    return reported if reported and instant(reported) < instant(at) else at


def record_check(history: dict[str, Any] | None, overview: dict[str, Any], now: float) -> dict[str, Any]:
    """The history after this check, and the overview annotated with it (each domain's and origin's
    ``since``): a domain whose reachability changed, an origin whose state changed, is news. An outage's
    ``since`` is its start as the hub's server reports it (the same instant the sensors' XComs give), when
    known, not the moment this page first saw it."""
    history = dict(history or {})
    at = iso_utc(now)
    known_domains: dict[str, Any] = dict(history.get("domains") or {})
    known_origins: dict[str, Any] = dict(history.get("origins") or {})
    news: list[dict[str, Any]] = list(history.get("news") or [])
    domains, origins = _states(overview)
    starts = _outage_starts(overview)
    for domain, reachable in domains.items():
        before = known_domains.get(domain)
        if before is None or before["reachable"] != reachable:
            since = at if reachable else _began(starts.get(domain), at)
            known_domains[domain] = {"reachable": reachable, "since": since}
            what = "reachable" if reachable else "UNREACHABLE"
            news.append({"at": at, "what": f"domain {domain} {what}" + (" (first seen)" if before is None else "")})
    for key, (state, summary, outage) in origins.items():
        before = known_origins.get(key)
        if before is None or before["state"] != state:
            known_origins[key] = {"state": state, "since": _began(outage, at)}
            news.append({"at": at, "what": f"{key}: {summary}" + (" (first seen)" if before is None else "")})
    for domain in overview["domains"]:
        domain["since"] = known_domains[domain["domain"]]["since"]
        for stream in domain["streams"]:
            for origin in (stream["replication"] or {}).get("origins", []):
                origin["since"] = known_origins[f"{stream['key']} <- {origin['key']}"]["since"]
    history.update(
        domains=known_domains, origins=known_origins, news=news[-MAX_NEWS:], last_checked=at, checks=history.get(
            "checks", 0) + 1
    )  # fmt: skip
    return history


class PageMemory:
    """Each connection's page history in this process's memory (:func:`record_check`'s dict, with the replication
    watches' memory under ``"watches"``). Two checks at once each record; the later one wins, and the next check
    repairs what the other saw."""

    def __init__(self) -> None:
        self._histories: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def watches(self, conn_id: str) -> dict[str, Any]:
        """What the replication watches of this connection's last check remembered (a copy to change)."""
        with self._lock:
            return dict((self._histories.get(conn_id) or {}).get("watches") or {})

    def record(self, conn_id: str, overview: dict[str, Any], now: float, watches: dict[str, Any]) -> dict[str, Any]:
        """Record a check (see :func:`record_check`, which annotates ``overview``) and the watches it left; the
        history after it."""
        with self._lock:
            history = record_check(self._histories.get(conn_id), overview, now)
            history["watches"] = watches
            self._histories[conn_id] = history
            return history
