"""What a replication wait logs and gives while leaves are away, on real servers (issue #29).

Two leaves each hold a stream of the same name, both sourced by one hub stream (the edge pipeline's
layout): the hub lists the two sources in no fixed order. With both leaves cut off and
``unreachable_origins="wait"``, many checks log the table once, then one summary line a minute (issue #36:
one per check was 131 lines in 4.5 minutes); the lag of a leaf the hub cannot reach is unknown, never 0;
every task that reads the same outage gives the same ``since`` (the hub's last contact with the leaf).
After a relink, while the hub has not taken what the leaf stored meanwhile, the table's lag is what the
copy lacks, never the hub's own 0 (issue #36).
"""

from __future__ import annotations

import asyncio
import re
import time
from concurrent.futures import ThreadPoolExecutor

from nats.js.api import ExternalStream, StreamConfig, StreamSource

from airflow_provider_jetstream.core.api import JetStreamApi
from airflow_provider_jetstream.core.status import report
from airflow_provider_jetstream.core.status.origins import statuses_from_stream_info
from airflow_provider_jetstream.core.status.report import LOG_SUMMARY_EVERY, iso_utc
from airflow_provider_jetstream.sensors.replication_lag import JetStreamReplicationLagSensor
from airflow_provider_jetstream.testing.servers import USERS
from tests.support.logs import captured_logs
from tests.support.natsutil import connect, leaf_origin_and_hub_copies, leaf_stream_with_messages, publish, unique
from tests.support.waiting import wait_until

LEAVES = ("leaf-a", "leaf-b")
CHECKS = 30  # checks made while both leaves are away


async def same_named_leaf_streams(topology, name: str, messages: int) -> str:
    """A stream ``name`` with ``messages`` messages on each leaf, and a hub stream sourcing both. (The leaves'
    streams take the same subjects, so each also stores the other's messages while linked.)"""
    for leaf in LEAVES:
        await leaf_stream_with_messages(topology.url(leaf), name, messages)
    hub = await connect(topology.url("hub"))
    aggregate = f"{name}_agg"
    sources = [StreamSource(name=name, external=ExternalStream(api=f"$JS.{leaf}.API")) for leaf in LEAVES]
    await hub.jetstream().add_stream(StreamConfig(name=aggregate, sources=sources))
    await hub.close()
    return aggregate


async def hub_last_contacts(topology, aggregate: str) -> dict[str, str | None]:
    """Each leaf's last contact as the hub's own ``STREAM.INFO`` says (server time minus ``active``)."""
    nc = await connect(topology.url("hub"))
    try:
        info = await JetStreamApi(nc, "$JS.hub.API").stream_info(aggregate) or {}
    finally:
        await nc.close()
    return {s.domain: iso_utc(s.last_contact) for s in statuses_from_stream_info(info)}


def tables_of(lines: list[str], aggregate: str) -> list[list[str]]:
    """The replication tables logged, each as its origin rows sorted (the order of rows is no news)."""
    return [sorted(line.splitlines()[3:]) for line in lines if line.startswith(f"Replication of stream {aggregate!r}")]


def test_a_long_wait_for_leaves_away_logs_news_only_and_unknown_lags(
    make_topology, jetstream_conn, monkeypatch
) -> None:
    topology = make_topology(leaf_domains=list(LEAVES))
    user, password = USERS["ACC"]
    conn_id = jetstream_conn(f"127.0.0.1:{topology.hub.port}", login=user, password=password, connect_timeout=2)
    name = unique("rd")
    aggregate = asyncio.run(same_named_leaf_streams(topology, name, 3))

    def sensor(task_id: str, policy: str) -> JetStreamReplicationLagSensor:
        return JetStreamReplicationLagSensor(
            task_id=task_id,
            jetstream_conn_id=conn_id,
            domain="hub",
            stream=aggregate,
            options={"max_inactive": "30s"},
            unreachable_origins=policy,
            poke_interval=0.2,
        )

    waiting = sensor("wait_replicated", "wait")
    # Caught up first: the sensor's watch learns each leaf's last sequence (3) while it answers.
    wait_until(lambda: waiting.poke({}), bool, timeout=30, what="caught up before the cut")
    for leaf in LEAVES:
        topology.disconnect_leaf(leaf)

    def away(lines: list[str]) -> bool:
        tables = tables_of(lines, aggregate)
        return bool(tables) and all("UNREACHABLE" in row for row in tables[-1])

    with captured_logs() as logs:
        wait_until(lambda: (waiting.poke({}), logs.lines())[1], away, timeout=30, what="both leaves unreachable")
        cut_from = len(logs.lines())
        started = time.monotonic()
        for _ in range(CHECKS):
            assert waiting.poke({}) is False
        elapsed = time.monotonic() - started
        lines = [line for line in logs.lines()[cut_from:] if aggregate in line]

    # Many checks of an unchanged state: no table at all, and a summary line a minute at most, not one per check.
    assert tables_of(lines, aggregate) == []
    assert len(lines) <= 1 + elapsed // LOG_SUMMARY_EVERY, (elapsed, lines)

    # The summary itself (made due at every check here): the same line each time (the rows never "swap").
    monkeypatch.setattr(report, "LOG_SUMMARY_EVERY", 0.0)
    with captured_logs() as every_check:
        for _ in range(3):
            assert waiting.poke({}) is False
    assert tables_of(every_check.lines(), aggregate) == []
    summaries = [line for line in every_check.lines() if "no change" in line]
    assert len(summaries) == 3 and len(set(summaries)) == 1, summaries
    assert re.search(
        rf"0/2 origins caught up; unreachable: source '{name}' in leaf-a since \S+Z, source '{name}' in leaf-b since",
        summaries[0],
    )
    # The table logged when the leaves went away: each lag unknown, with what the hub holds of the leaf's last known.
    (rows,) = tables_of(logs.lines()[:cut_from], aggregate)[-1:]
    for row in rows:
        found = re.search(r"\| unknown \(holds (\d+) of (\d+) at \S+Z\) \|", row)
        assert found and found[1] == found[2] and int(found[1]) >= 3, row
        assert "| 0 " not in row

    # Two tasks of one run read the same outage: the same "since", the hub's last contact with each leaf.
    xcoms = [sensor(task, "proceed").poke({}).xcom_value for task in ("wait_replicated", "mark_run")]
    contacts = asyncio.run(hub_last_contacts(topology, aggregate))
    for xcom in xcoms:
        since = {u["domain"]: u["since"] for u in xcom["unreachable"]}
        assert since == contacts and None not in since.values()
        for origin in xcom["origins"]:
            assert (origin["lag"], origin["check"]) == (None, "unreachable")
            # A task that never reached the leaf knows what the hub holds, not the leaf's last sequence.
            assert origin["held_seq"] >= 3 and origin["origin_last_known_seq"] is None, origin
        assert xcom["note"].startswith(f"Proceeded without 2 origin(s) of {aggregate!r}: source '{name}' in leaf-a")


AWAY = 500  # messages the leaf stores while cut off


def rows_of(table: list[str]) -> list[list[str]]:
    return [[cell.strip() for cell in row.split(" | ")] for row in table]


def test_after_a_relink_the_table_shows_what_the_copy_lacks_never_the_hubs_lag_0(make_topology, jetstream_conn) -> None:
    topology = make_topology(leaf_domains=["leaf"])
    user, password = USERS["ACC"]
    conn_id = jetstream_conn(f"127.0.0.1:{topology.hub.port}", login=user, password=password, connect_timeout=2)
    origin = unique("rl")
    copies = asyncio.run(leaf_origin_and_hub_copies(topology, origin, 5))  # a hub source and a hub mirror
    sensors = {
        copy: JetStreamReplicationLagSensor(
            task_id=f"wait_{copy}", jetstream_conn_id=conn_id, domain="hub", stream=copy, poke_interval=0.2
        )
        for copy in copies
    }
    for sensor in sensors.values():
        wait_until(lambda s=sensor: s.poke({}), bool, timeout=30, what="caught up before the cut")
    topology.disconnect_leaf("leaf")
    asyncio.run(publish(topology.url("leaf"), f"{origin}.in", [b"x"] * AWAY))
    for sensor in sensors.values():
        assert sensor.poke({}) is False  # the leaf away: its lag unknown

    def poke_until_caught_up() -> None:
        for copy, sensor in sensors.items():
            wait_until(lambda s=sensor: s.poke({}), bool, timeout=120, what=f"{copy} caught up after the relink")

    with captured_logs() as logs, ThreadPoolExecutor(1) as pool:
        checking = pool.submit(poke_until_caught_up)  # checks while the leaf relinks and the hub catches up
        topology.reconnect_leaf("leaf")
        checking.result()
    aggregate, _ = copies
    for copy in copies:
        tables = [rows_of(table) for table in tables_of(logs.lines(), copy)]
        behind = [row for table in tables for row in table if row[7] == "WAITING"]
        for row in behind:
            held, last = map(int, re.search(r"holds origin seq (\d+) < the origin's last (\d+)", row[-1]).groups())
            assert row[4] == str(last - held) and last - held > 0, row
        assert tables[-1][0][7] == "caught up" and tables[-1][0][4] == "0", tables[-1]
        if copy == aggregate:
            # The hub resumes sourcing seconds after the relink (a mirror may catch up at once): checks see it behind.
            assert behind, tables
