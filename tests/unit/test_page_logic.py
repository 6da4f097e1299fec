"""The JetStream page's logic: its history of news between checks (in a file its workers share), servers shown
without credentials, and values escaped in its HTML."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from airflow_provider_jetstream.ui.history import PageMemory, record_check
from airflow_provider_jetstream.ui.overview import public_servers
from airflow_provider_jetstream.ui.render import render_page


def overview(reachable: bool, state: str, summary: str) -> dict[str, Any]:
    origin = {"key": "mirror:r:$JS.leaf.API", "state": state, "summary": summary, "kind": "mirror", "origin": "r",
              "where": "leaf", "check": "exact", "headroom": None}  # fmt: skip
    stream = {"name": "m", "key": "hub/m", "messages": 3, "first_seq": 1, "last_seq": 3, "cluster": None,
              "asset_uri": "jetstream://h/hub/m", "replication": {"caught_up": state == "caught up", "error": None,
              "origins": [origin]}, "consumers": []}  # fmt: skip
    return {
        "connection": {"conn_id": "c", "servers": ["nats://h:4222"], "domain": None, "api_prefix": None},
        "checked_at": "t",
        "domains": [
            {"domain": "hub", "role": "connection", "reachable": True, "reason": None, "streams": [stream]},
            {"domain": "leaf", "role": "origin", "reachable": reachable, "reason": None if reachable else "gone",
             "streams": []},
        ],
    }  # fmt: skip


def test_history_records_news_only_and_since_when() -> None:
    first = record_check(None, overview(True, "caught up", "caught up"), 100.0)
    assert [n["what"] for n in first["news"]] == [
        "domain hub reachable (first seen)",
        "domain leaf reachable (first seen)",
        "hub/m <- mirror:r:$JS.leaf.API: caught up (first seen)",
    ]
    same = record_check(copy.deepcopy(first), overview(True, "caught up", "caught up"), 130.0)
    assert same["news"] == first["news"] and same["checks"] == 2
    cut = overview(False, "unreachable", "unreachable since x: lag unknown")
    after_cut = record_check(same, cut, 160.0)
    assert [n["what"] for n in after_cut["news"][3:]] == [
        "domain leaf UNREACHABLE",
        "hub/m <- mirror:r:$JS.leaf.API: unreachable since x: lag unknown",
    ]
    # The page shows since when each state holds: the hub since the first check, the leaf since the cut.
    assert [d["since"] for d in cut["domains"]] == ["1970-01-01T00:01:40Z", "1970-01-01T00:02:40Z"]
    assert cut["domains"][0]["streams"][0]["replication"]["origins"][0]["since"] == "1970-01-01T00:02:40Z"


def test_servers_are_shown_without_user_password_or_token() -> None:
    shown = public_servers(["nats://acc:s3cret-pw@hub-1:4222", "tls://tok3n@hub-2:4443", "hub-3"])
    assert shown == ["nats://hub-1:4222", "tls://hub-2:4443", "nats://hub-3"]


def test_the_page_escapes_what_servers_and_connections_say() -> None:
    page = overview(False, "unreachable", "<script>alert(1)</script>")
    record_check(None, page, 1.0)
    text = render_page(["<c>"], "<c>", page, "<b>bad</b>", root="../../")
    # The page's own script (links opening in Airflow's window) is the only one; what servers say is text.
    assert text.count("<script>") == 1 and "<script>alert" not in text and "&lt;script&gt;alert(1)" in text
    assert "<b>bad" not in text and "&lt;c&gt;" in text


def test_an_outage_is_dated_from_the_hubs_last_contact_on_every_row() -> None:
    """The leaf's row and its origin's row give the same start for one outage: the hub's last contact
    (what the sensors' XComs say), not when the page first saw it."""
    record = record_check(None, overview(True, "caught up", "caught up"), 100.0)
    cut = overview(False, "unreachable", "unreachable since 1970-01-01T00:02:10Z: lag unknown")
    origin = cut["domains"][0]["streams"][0]["replication"]["origins"][0]
    origin.update(domain="leaf", unreachable_since="1970-01-01T00:02:10Z")
    record_check(record, cut, 160.0)
    assert cut["domains"][1]["since"] == origin["since"] == "1970-01-01T00:02:10Z"
    # A reported start after the check itself (clocks apart) is not used: the check's time is.
    later = overview(False, "unreachable", "unreachable since 1970-01-01T00:09:00Z: lag unknown")
    later["domains"][0]["streams"][0]["replication"]["origins"][0].update(
        domain="leaf", unreachable_since="1970-01-01T00:09:00Z"
    )
    record_check(None, later, 160.0)
    assert later["domains"][1]["since"] == "1970-01-01T00:02:40Z"


def test_the_history_is_shared_by_every_worker_using_its_directory(tmp_path) -> None:
    """Two api-server workers (two ``PageMemory`` on one directory): a check recorded by one is news the other
    shows, and a broken file starts the history again instead of failing the page."""
    first, second = PageMemory(tmp_path / "page"), PageMemory(tmp_path / "page")
    first.record("nats/hub", overview(True, "caught up", "caught up"), 1_000.0, {"AGG": {"since": 1}})
    assert second.watches("nats/hub") == {"AGG": {"since": 1}}
    history = second.record("nats/hub", overview(False, "unreachable", "lag unknown"), 1_060.0, {})
    assert "domain leaf UNREACHABLE" in [n["what"] for n in history["news"]]
    assert first.watches("nats/hub") == {} and second.watches("other") == {}
    assert oct((tmp_path / "page").stat().st_mode & 0o777) == "0o700"
    for stored in (tmp_path / "page").glob("*.json"):
        stored.write_text("{not json")
    again = first.record("nats/hub", overview(True, "caught up", "caught up"), 1_120.0, {})
    assert [n["what"] for n in again["news"]] == [
        "domain hub reachable (first seen)",
        "domain leaf reachable (first seen)",
        "hub/m <- mirror:r:$JS.leaf.API: caught up (first seen)",
    ]
    # A write that fails (a value JSON cannot hold) keeps the last history and leaves no stray file.
    with pytest.raises(TypeError):
        first.record("nats/hub", overview(True, "caught up", "caught up"), 1_180.0, {"AGG": {"since": object()}})
    assert sorted(p.name for p in (tmp_path / "page").iterdir() if p.name.startswith(".")) == []
    assert first.watches("nats/hub") == {}
