"""Issue #9 / #11: the exact replication check on real servers.

Filtered and transformed sources, origins whose copies share subjects in the aggregate, origins
that do not answer (``unreachable_origins``, ``unreachable_timeout``), an origin this account cannot
verify by design (``verify_origin``), and the table logged only when it changes.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import time
from collections.abc import Iterator
from typing import Any

import pytest
from nats.js.api import ExternalStream, StreamConfig, StreamSource, SubjectTransform

from airflow_provider_jetstream.compat import AirflowFailException
from airflow_provider_jetstream.core.status import origins as origins_module
from airflow_provider_jetstream.core.status.origins import (
    HeldSeq,
    OriginProbe,
    ReplicationStatus,
    held_seq,
    server_hash,
    stream_source_seq,
    subject_matches,
    transform_pattern,
)
from airflow_provider_jetstream.core.status.replication import ReplicationWatch
from airflow_provider_jetstream.hooks.jetstream import JetStreamHook
from airflow_provider_jetstream.sensors.replication_lag import JetStreamReplicationLagSensor
from airflow_provider_jetstream.testing.servers import USERS
from airflow_provider_jetstream.triggers.replication_lag import JetStreamReplicationLagTrigger
from tests.support.natsutil import LEAF_API, connect, unique
from tests.support.triggers import first_event, rebuild
from tests.support.waiting import eventually

GHOST_API = ExternalStream(api="$JS.ghost.API")  # a domain no server has: it never answers


def check(conn_id: str, stream: str, **watch: Any):
    return JetStreamHook(conn_id, domain="hub").check_replication(ReplicationWatch(stream, **watch))


async def wait_messages(nc, stream: str, count: int, timeout: float = 30) -> None:
    js = nc.jetstream()
    deadline = time.monotonic() + timeout
    while (await js.stream_info(stream)).state.messages < count:
        assert time.monotonic() < deadline, f"{stream} never reached {count} messages"
        await asyncio.sleep(0.1)


@pytest.fixture
def shared_subjects(hub_leaf) -> dict[str, Any]:
    """Two leaf origins whose copies land on the same subjects of one hub aggregate, plus a hub
    stream sourcing only one subject of the first origin."""
    a, b, x = unique("xa"), unique("xb"), unique("xx")

    async def setup() -> dict[str, Any]:
        leaf, hub = await connect(hub_leaf.url("leaf")), await connect(hub_leaf.url("hub"))
        ljs, hjs = leaf.jetstream(), hub.jetstream()
        await ljs.add_stream(StreamConfig(name=a, subjects=[f"{a}.>"]))
        await ljs.add_stream(StreamConfig(name=b, subjects=[f"{b}.>"]))
        for subject in ("one", "one", "one", "two", "two"):  # a's last "one" is seq 3, its last is 5
            await ljs.publish(f"{a}.{subject}", b"a")
        shared = f"{x}_agg"
        await hjs.add_stream(
            StreamConfig(
                name=shared,
                sources=[
                    StreamSource(
                        name=a, external=LEAF_API, subject_transforms=[SubjectTransform(src=f"{a}.>", dest=f"{x}.>")]
                    ),
                    StreamSource(
                        name=b, external=LEAF_API, subject_transforms=[SubjectTransform(src=f"{b}.>", dest=f"{x}.>")]
                    ),
                ],
            )
        )
        filtered = f"{x}one_spec_error"
        await hjs.add_stream(
            StreamConfig(name=filtered, sources=[StreamSource(name=a, external=LEAF_API, filter_subject=f"{a}.one")])
        )
        await wait_messages(hub, shared, 5)
        for _ in range(60):  # the aggregate's newest 60 copies on x.> now all come from b
            await ljs.publish(f"{b}.one", b"b")
        await wait_messages(hub, shared, 65)
        await wait_messages(hub, filtered, 3)
        info = await hub.request(f"$JS.API.STREAM.INFO.{shared}", b"")
        await leaf.close()
        await hub.close()
        return {"a": a, "b": b, "shared": shared, "filtered": filtered, "server_seq": b'"seq"' in info.data}

    return asyncio.run(setup())


def test_sources_sharing_subjects_and_a_filtered_source_are_judged_exactly(
    hub_leaf, hub_conn, shared_subjects, monkeypatch
) -> None:
    names = shared_subjects
    result = check(hub_conn, names["shared"])
    by_origin = {v.status.origin: v for v in result.verdicts}
    assert result.caught_up
    # a's newest copy is 60 messages back, behind b's: found by the server's seq (>= 2.15) or the walk back.
    assert (by_origin[names["a"]].check, by_origin[names["a"]].origin_last_seq, by_origin[names["a"]].held_seq) == (
        "exact",
        5,
        5,
    )
    assert (by_origin[names["b"]].check, by_origin[names["b"]].origin_last_seq, by_origin[names["b"]].held_seq) == (
        "exact",
        60,
        60,
    )
    # The filtered source: the origin's last message on its filter is seq 3, not the origin's last (5).
    (one,) = check(hub_conn, names["filtered"]).verdicts
    assert (one.check, one.caught_up, one.origin_last_seq, one.held_seq) == ("exact", True, 3, 3)

    # Beyond the walk-back bound the exact answer is unknown: the lag/active rule, saying why.
    monkeypatch.setattr(origins_module, "WALK_BACK_LIMIT", 10)
    bounded = {v.status.origin: v for v in check(hub_conn, names["shared"]).verdicts}
    if names["server_seq"]:  # nats-server >= 2.15 reports each source's last origin sequence
        assert bounded[names["a"]].check == "exact"
    else:
        assert bounded[names["a"]].check == "lag/active"
        assert "other origins sharing them" in bounded[names["a"]].reason
    assert bounded[names["b"]].check == "exact"


def test_looking_back_stops_at_sequence_1_when_the_info_was_read_while_the_stream_was_empty(hub_conn, raw) -> None:
    """The check reads the aggregate's info, then its newest message on an origin's subjects: a copy can land
    in between. Read while the stream was empty, the info says ``first_seq`` 0, and the server refuses a
    request for sequence 0: looking back from a message of another writer stops at 1."""
    name = unique("walk0")
    raw.create("hub", {"name": name, "subjects": [f"{name}.>"]})
    status = ReplicationStatus("source", "elsewhere", "$JS.leaf.API", lag=0, active=None, external_api="$JS.leaf.API")

    async def walk() -> HeldSeq:
        async with JetStreamHook(hub_conn).aapi(domain="hub") as api:
            before = await api.stream_info(name)
            assert before is not None and before["state"]["first_seq"] == 0
            await api.nc.request(f"{name}.x", b"another writer's", timeout=5)
            return await held_seq(api, before, status, OriginProbe("ok", last_seq=3))

    assert asyncio.run(walk()) == HeldSeq(0)


def test_header_parsing_hash_and_patterns() -> None:
    assert server_hash("$JS.leaf.API") == "mSx7q4yJ"  # as in the docs' "Nats-Stream-Source: test:mSx7q4yJ 1"
    # 2.10, 2.12 and 2.15 formats: the fields after the origin sequence vary.
    for tail in ("", " o.a.0", " o.a.0 1aZ9tXNr"):
        header = f"orig:mSx7q4yJ 9 o.a.* >{tail}"
        raw = base64.b64encode(f"NATS/1.0\r\nNats-Stream-Source: {header}\r\n\r\n".encode()).decode()
        assert stream_source_seq({"hdrs": raw}, "orig:mSx7q4yJ") == 9
        assert stream_source_seq({"hdrs": raw}, "orig:other123") is None
    assert stream_source_seq({}, "orig") is None
    assert transform_pattern("o.b.*", "x.b.$1") == "x.b.*"
    assert transform_pattern("o.*.*", "x.{{wildcard(2)}}.{{ wildcard(1) }}") == "x.*.*"
    assert transform_pattern("o.>", "x.{{partition(3,1)}}.y") == "x.>"
    assert transform_pattern("o.>", "") == "o.>"
    assert subject_matches("x.b.1", "x.b.*") and subject_matches("x.b.1.2", "x.>")
    assert not subject_matches("x.b", "x.b.*") and not subject_matches("x", "x.>")


@pytest.fixture
def with_ghost(hub_leaf) -> Iterator[dict[str, str]]:
    """A hub aggregate with a live leaf origin and an origin in a domain that never answers.

    Deleted afterwards: the shared topology's other tests create streams whose double-store guard
    checks the domains of every existing source, and a domain that never answers refuses them."""
    origin, ghost = unique("live"), unique("ghost")

    async def setup() -> str:
        leaf, hub = await connect(hub_leaf.url("leaf")), await connect(hub_leaf.url("hub"))
        await leaf.jetstream().add_stream(StreamConfig(name=origin, subjects=[f"{origin}.in"]))
        for i in range(4):
            await leaf.jetstream().publish(f"{origin}.in", f"m{i}".encode())
        aggregate = f"{origin}_agg"
        await hub.jetstream().add_stream(
            StreamConfig(
                name=aggregate,
                sources=[StreamSource(name=origin, external=LEAF_API), StreamSource(name=ghost, external=GHOST_API)],
            )
        )
        await wait_messages(hub, aggregate, 4)
        await leaf.close()
        await hub.close()
        return aggregate

    async def teardown(aggregate: str) -> None:
        hub = await connect(hub_leaf.url("hub"))
        await hub.jetstream().delete_stream(aggregate)
        await hub.close()

    aggregate = asyncio.run(setup())
    yield {"origin": origin, "ghost": ghost, "aggregate": aggregate}
    asyncio.run(teardown(aggregate))


def test_unreachable_origins_proceed_succeeds_with_the_reachable_ones_and_lists_the_rest(
    hub_leaf, hub_conn, with_ghost
) -> None:
    started = time.time()

    def sensor(**kwargs: Any) -> JetStreamReplicationLagSensor:
        return JetStreamReplicationLagSensor(
            task_id="t", jetstream_conn_id=hub_conn, domain="hub", stream=with_ghost["aggregate"], **kwargs
        )

    assert sensor().poke({}) is False  # the safe default waits for every origin
    result = sensor(unreachable_origins="proceed").poke({})
    assert result, "every reachable origin is caught up"
    report = result.xcom_value
    assert report["caught_up"] is False and report["messages"] == 4
    (unreachable,) = report["unreachable"]
    assert {k: unreachable[k] for k in ("origin", "kind", "domain", "api_prefix", "reason")} == {
        "origin": with_ghost["ghost"],
        "kind": "source",
        "domain": "ghost",
        "api_prefix": "$JS.ghost.API",
        "reason": "domain 'ghost' did not answer: a leaf that is offline, or a wrong domain name?",
    }
    assert unreachable["since"].endswith("Z") and unreachable["since"] >= time.strftime(
        "%Y-%m-%dT%H:%M:%S", time.gmtime(started - 1)
    )
    live = next(o for o in report["origins"] if o["origin"] == with_ghost["origin"])
    assert (live["check"], live["caught_up"], live["origin_last_seq"], live["held_seq"]) == ("exact", True, 4, 4)

    trigger = JetStreamReplicationLagTrigger(
        hub_conn, with_ghost["aggregate"], domain="hub", unreachable_origins="proceed", poll_interval=0.2
    )
    event = asyncio.run(first_event(trigger, timeout=20))
    assert event.payload["status"] == "success"
    assert [u["origin"] for u in event.payload["replication"]["unreachable"]] == [with_ghost["ghost"]]


def test_an_origin_unreachable_beyond_unreachable_timeout_fails(hub_leaf, hub_conn, with_ghost) -> None:
    sensor = JetStreamReplicationLagSensor(
        task_id="t", jetstream_conn_id=hub_conn, domain="hub", stream=with_ghost["aggregate"], unreachable_timeout="1s"
    )
    started = time.monotonic()
    assert sensor.poke({}) is False
    with pytest.raises(AirflowFailException, match=r"unreachable for .* > unreachable_timeout 1.00s: domain 'ghost'"):
        while time.monotonic() - started < 10:
            assert sensor.poke({}) is False
            time.sleep(0.2)
    assert time.monotonic() - started >= 1.0

    async def trigger_run() -> tuple[dict, float]:
        began = time.monotonic()
        trigger = JetStreamReplicationLagTrigger(
            hub_conn, with_ghost["aggregate"], domain="hub", unreachable_timeout=1, poll_interval=0.2
        )
        event = await first_event(trigger, timeout=20)
        return event.payload, time.monotonic() - began

    payload, elapsed = asyncio.run(trigger_run())
    assert payload["status"] == "error" and payload["reason"] == "unreachable" and elapsed >= 1.0
    assert "did not answer: a leaf that is offline, or a wrong domain name?" in payload["message"]


def test_the_trigger_logs_the_table_when_it_changes_not_at_every_check(
    hub_leaf, hub_conn, with_ghost, capsys, monkeypatch
) -> None:
    checks = []

    class CountedHook(JetStreamHook):
        async def acheck_replication(self, watch, **kwargs):
            result = await super().acheck_replication(watch, **kwargs)
            checks.append(result)
            return result

    monkeypatch.setattr(
        JetStreamReplicationLagTrigger,
        "new_hook",
        lambda self: CountedHook(self.jetstream_conn_id, domain=self.domain, api_prefix=self.api_prefix),
    )

    async def run_until(count: int) -> bool:
        """Run the trigger until it made ``count`` checks (however long a busy machine takes); whether it fired."""
        trigger = rebuild(JetStreamReplicationLagTrigger(hub_conn, with_ghost["aggregate"], poll_interval=0.1))
        events = trigger.run()
        first = asyncio.ensure_future(anext(events))
        await eventually(lambda: len(checks), lambda n: n >= count or first.done(), timeout=60)
        fired = first.done()
        first.cancel()
        with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
            await first
        await events.aclose()
        return fired

    capsys.readouterr()
    assert asyncio.run(run_until(10)) is False  # the unreachable origin keeps it waiting: no event
    out = capsys.readouterr().out
    assert len(checks) >= 10
    assert out.count(f"Replication of stream {with_ghost['aggregate']!r}") == 1, out


@pytest.fixture
def cross_account(make_topology, jetstream_conn) -> dict[str, str]:
    """The docs' cross-account mirror: IMPORT_MIRROR mirrors ACC's hub stream through JS.acc@hub.API,
    which exports only the consumer API: IMPORT_MIRROR cannot ask the origin for its last sequence."""
    topology = make_topology(leaf_domains=["leaf"])

    async def setup() -> None:
        acc = await connect(topology.url("hub"))
        await acc.jetstream().add_stream(StreamConfig(name="aggregate-test-leaf", subjects=["agg.in"]))
        for i in range(3):
            await acc.jetstream().publish("agg.in", f"m{i}".encode())
        importer = await connect(topology.url("hub", "IMPORT_MIRROR"))
        external = ExternalStream(
            api="JS.acc@hub.API", deliver="deliver.acc.hub.import_mirror.hub.aggregate-test-leaf-from-acc"
        )
        await importer.jetstream().add_stream(
            StreamConfig(
                name="aggregate-test-leaf-from-acc", mirror=StreamSource(name="aggregate-test-leaf", external=external)
            )
        )
        await wait_messages(importer, "aggregate-test-leaf-from-acc", 3)
        await acc.close()
        await importer.close()

    asyncio.run(setup())
    user, password = USERS["IMPORT_MIRROR"]
    return {"conn_id": jetstream_conn(f"127.0.0.1:{topology.hub.port}", login=user, password=password)}


def test_an_origin_not_verifiable_from_this_account_uses_the_lag_active_rule_or_fails_if_required(
    cross_account,
) -> None:
    def sensor(**kwargs: Any) -> JetStreamReplicationLagSensor:
        return JetStreamReplicationLagSensor(
            task_id="t",
            jetstream_conn_id=cross_account["conn_id"],
            domain="hub",
            stream="aggregate-test-leaf-from-acc",
            **kwargs,
        )

    deadline = time.monotonic() + 30
    while not (result := sensor().poke({})):  # verify_origin="auto"
        assert time.monotonic() < deadline
        time.sleep(0.2)
    (origin,) = result.xcom_value["origins"]
    assert origin["check"] == "lag/active" and origin["api_prefix"] == "JS.acc@hub.API"
    assert origin["reason"].startswith("origin not verifiable from this account")
    with pytest.raises(AirflowFailException, match="cannot be verified \\(verify_origin='required'\\)"):
        sensor(options={"verify_origin": "required"}).poke({})
    trigger = JetStreamReplicationLagTrigger(
        cross_account["conn_id"], "aggregate-test-leaf-from-acc", domain="hub", options={"verify_origin": "required"}
    )
    event = asyncio.run(first_event(trigger, timeout=20))
    assert event.payload["reason"] == "replication_error" and "verify_origin='required'" in event.payload["message"]
