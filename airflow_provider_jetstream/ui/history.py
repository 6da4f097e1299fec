"""The JetStream page's memory of its last checks: since when each domain is (un)reachable and each origin in
its state, the news between checks, and the replication watches, kept per connection in a file of the
api-server's machine that all its workers share.

A page view writes no Airflow Variable and nothing on any NATS server (a user allowed to read a connection needs
no other right). Its memory is a private JSON file per connection (:class:`PageMemory`), so every worker of an
api-server (``[api] workers``) shows the same news; another api-server machine keeps its own. The outage starts it
shows are the hub's server's own, the same on every machine. For a record that lasts, the replication sensor logs
every change (and its XCom keeps the outage). It holds no secret: domain, stream and origin names, states and times.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
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


log = logging.getLogger(__name__)


class PageMemory:
    """Each connection's page history (:func:`record_check`'s dict, with the replication watches' memory under
    ``"watches"``) in ``directory``, one private JSON file per connection, shared by every process that uses the
    same directory (an api-server's workers). A check's read, update and write hold the file's lock, so two checks
    at once never lose each other's news. An unreadable file is started again (logged), never fatal to the page.

    :param directory: where the files live; made private (0700) on first use.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def _path(self, conn_id: str) -> Path:
        # Connection ids may hold any character: the file is named by a digest.
        return self.directory / f"{hashlib.sha256(conn_id.encode()).hexdigest()[:32]}.json"

    @contextlib.contextmanager
    def _locked(self, conn_id: str) -> Iterator[Path]:
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = self._path(conn_id)
        fd = os.open(path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield path
        finally:
            os.close(fd)  # releases the lock

    def _read(self, conn_id: str, path: Path) -> dict[str, Any] | None:
        try:
            return json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as err:
            log.warning("the JetStream page's history of %r could not be read (%s): started again", conn_id, err)
            return None

    def watches(self, conn_id: str) -> dict[str, Any]:
        """What the replication watches of this connection's last check remembered (a copy to change)."""
        with self._locked(conn_id) as path:
            return dict((self._read(conn_id, path) or {}).get("watches") or {})

    def record(self, conn_id: str, overview: dict[str, Any], now: float, watches: dict[str, Any]) -> dict[str, Any]:
        """Record a check (see :func:`record_check`, which annotates ``overview``) and the watches it left; the
        history after it."""
        with self._locked(conn_id) as path:
            history = record_check(self._read(conn_id, path), overview, now)
            history["watches"] = watches
            fd, temporary = tempfile.mkstemp(dir=self.directory, prefix=".history-")
            try:
                with os.fdopen(fd, "w") as out:
                    json.dump(history, out)
                os.replace(temporary, path)
            except BaseException:  # a failed write leaves no stray file beside the history
                with contextlib.suppress(OSError):
                    os.unlink(temporary)
                raise
            return history
