"""The JetStream page's memory of its last checks: since when each domain is (un)reachable and each origin in
its state, the news between checks, and the replication watches, kept in one Airflow Variable per connection.

A Variable lives in Airflow's own database (encrypted with its Fernet key when one is set), shows in
Admin > Variables with a description saying what keeps it, and needs no write access to any NATS server:
a page view never creates a bucket or a stream. It holds no secret: domain, stream and origin names,
states and times. Two page views at once may each write; the later one wins, and the next check
repairs what the other saw.
"""

from __future__ import annotations

import json
from typing import Any

from airflow_provider_jetstream.core.arguments.durations import instant
from airflow_provider_jetstream.core.status.report import iso_utc

#: The Variable of a connection's page history: ``jetstream_page.<conn_id>``.
KEY_PREFIX = "jetstream_page."
#: Most news entries kept (the oldest go first).
MAX_NEWS = 200
DESCRIPTION = "Kept by the JetStream page (airflow-provider-jetstream): its last checks of connection {conn_id!r}"


def variable_key(conn_id: str) -> str:
    return f"{KEY_PREFIX}{conn_id}"


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


class VariableStore:
    """The history of each connection's page in Airflow's ``variable`` table (one row per connection)."""

    def load(self, conn_id: str) -> dict[str, Any] | None:
        from airflow.models.variable import Variable
        from airflow.utils.session import create_session
        from sqlalchemy import select

        with create_session() as session:
            row = session.scalar(select(Variable).where(Variable.key == variable_key(conn_id)))
            text = row.val if row is not None else None
        try:
            found = json.loads(text) if text else None
        except ValueError:  # edited by hand into something else: start again
            return None
        return found if isinstance(found, dict) else None

    def save(self, conn_id: str, history: dict[str, Any]) -> None:
        from airflow.models.variable import Variable
        from airflow.utils.session import create_session
        from sqlalchemy import select

        text = json.dumps(history, sort_keys=True)
        with create_session() as session:
            row = session.scalar(select(Variable).where(Variable.key == variable_key(conn_id)))
            if row is None:
                session.add(
                    Variable(key=variable_key(conn_id), val=text, description=DESCRIPTION.format(conn_id=conn_id))
                )
            else:
                row.val = text
