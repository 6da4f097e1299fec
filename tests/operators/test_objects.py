"""Object stores: buckets in any domain, a hub mirror of a leaf bucket, files put and got whole (digests verified)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import tracemalloc
from pathlib import Path

import nats
import pytest

from airflow_provider_jetstream.core.api import JetStreamApi
from airflow_provider_jetstream.core.errors import (
    DoubleStoreError,
    JetStreamConfigError,
    JetStreamNotFoundError,
    ObjectDigestError,
    ReconcileError,
    SpecErrors,
)
from airflow_provider_jetstream.core.manage.objects import get_object, list_objects, put_object
from airflow_provider_jetstream.hooks.jetstream import JetStreamHook
from airflow_provider_jetstream.operators.objects import (
    JetStreamCreateObjectStoreOperator,
    JetStreamDeleteObjectOperator,
    JetStreamGetObjectOperator,
    JetStreamPutObjectOperator,
)
from airflow_provider_jetstream.sensors.objects import JetStreamObjectSensor
from airflow_provider_jetstream.testing.servers import USERS
from airflow_provider_jetstream.triggers.objects import JetStreamObjectTrigger
from tests.support.management import Raw, uid
from tests.support.triggers import first_event
from tests.support.waiting import wait_until


def store(conn: str, spec, domain: str = "leaf", **kwargs) -> dict:
    return JetStreamCreateObjectStoreOperator(
        task_id=uid("os"), jetstream_conn_id=conn, domain=domain, bucket=spec, **kwargs
    ).execute({})


def put(conn: str, bucket: str, name: str, source: Path, domain: str = "leaf", **kwargs) -> dict:
    return JetStreamPutObjectOperator(
        task_id=uid("put"),
        jetstream_conn_id=conn,
        domain=domain,
        bucket=bucket,
        object_name=name,
        local_path=str(source),
        **kwargs,
    ).execute({})


def get(conn: str, bucket: str, name: str, destination: Path, domain: str = "leaf") -> dict:
    return JetStreamGetObjectOperator(
        task_id=uid("get"),
        jetstream_conn_id=conn,
        domain=domain,
        bucket=bucket,
        object_name=name,
        local_path=str(destination),
    ).execute({})


def random_file(path: Path, size: int) -> str:
    """A file of ``size`` random bytes; its SHA-256 in the object store's digest form."""
    data = os.urandom(size)
    path.write_bytes(data)
    return "SHA-256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode()


def test_a_file_put_in_a_leaf_bucket_through_the_hub_is_read_back_whole(hub_conn, raw: Raw, tmp_path) -> None:
    bucket = uid("files")
    created = store(hub_conn, {"bucket": bucket, "description": "edge files"})
    assert created["action"] == "created"
    config = raw.info("leaf", f"OBJ_{bucket}")["config"]
    assert config["subjects"] == [f"$O.{bucket}.C.>", f"$O.{bucket}.M.>"]
    assert (config["allow_rollup_hdrs"], config["allow_direct"], config["discard"]) == (True, True, "new")
    assert raw.info("hub", f"OBJ_{bucket}") is None  # the leaf's, not the hub's

    digest = random_file(tmp_path / "day-1.csv", 300_000)
    info = put(hub_conn, bucket, "day/1.csv", tmp_path / "day-1.csv", description="day one")
    assert (info["size"], info["chunks"], info["digest"]) == (300_000, 3, digest)
    out = get(hub_conn, bucket, "day/1.csv", tmp_path / "copy.csv")
    assert (tmp_path / "copy.csv").read_bytes() == (tmp_path / "day-1.csv").read_bytes()
    assert out["digest"] == digest and out["path"] == str(tmp_path / "copy.csv")

    # The meta message is where ADR-20 puts it, with the fields every client reads.
    meta = raw.api("leaf", f"STREAM.MSG.GET.OBJ_{bucket}", {"last_by_subj": f"$O.{bucket}.M.ZGF5LzEuY3N2"})
    fields = json.loads(base64.b64decode(meta["message"]["data"]))
    assert fields["name"] == "day/1.csv" and fields["bucket"] == bucket and fields["digest"] == digest
    assert fields["options"] == {"max_chunk_size": 128 * 1024} and fields["description"] == "day one"

    # Replacing the object purges the old chunks: three chunks of the new one and its meta remain.
    random_file(tmp_path / "day-1.csv", 1000)
    again = put(hub_conn, bucket, "day/1.csv", tmp_path / "day-1.csv")
    assert again["revision"] > info["revision"]
    assert raw.info("leaf", f"OBJ_{bucket}")["state"]["messages"] == 2

    hook = JetStreamHook(hub_conn, domain="leaf")
    assert [o.name for o in hook.list_objects(bucket)] == ["day/1.csv"]
    deleted = JetStreamDeleteObjectOperator(
        task_id=uid("del"), jetstream_conn_id=hub_conn, domain="leaf", bucket=bucket, object_name="day/1.csv"
    ).execute({})
    assert deleted["name"] == "day/1.csv"
    assert hook.object_info(bucket, "day/1.csv") is None
    assert hook.object_info(bucket, "day/1.csv", show_deleted=True).deleted
    assert hook.list_objects(bucket) == []
    assert raw.info("leaf", f"OBJ_{bucket}")["state"]["messages"] == 1  # the deleted meta, no chunks
    with pytest.raises(JetStreamNotFoundError, match="does not exist in bucket"):
        get(hub_conn, bucket, "day/1.csv", tmp_path / "gone.csv")
    assert not (tmp_path / "gone.csv").exists()


def test_a_hub_mirror_of_a_leaf_bucket_holds_its_objects_and_serves_them_by_its_name(
    hub_conn, raw: Raw, tmp_path
) -> None:
    """The example flow: an edge writes files into its leaf bucket; the hub's mirror holds them; a task
    reads them there, digests verified."""
    origin, copy = uid("edge"), uid("edge-hub")
    store(hub_conn, origin)
    digest = random_file(tmp_path / "a.bin", 200_000)
    put(hub_conn, origin, "a.bin", tmp_path / "a.bin")
    (tmp_path / "empty.bin").write_bytes(b"")
    put(hub_conn, origin, "empty.bin", tmp_path / "empty.bin")

    created = store(hub_conn, {"bucket": copy, "mirror": {"bucket": origin, "domain": "leaf"}}, domain="hub")
    assert created["action"] == "created"
    mirror = raw.info("hub", f"OBJ_{copy}")["config"]["mirror"]
    assert mirror["name"] == f"OBJ_{origin}" and mirror["external"]["api"] == "$JS.leaf.API"
    assert mirror["subject_transforms"] == [{"src": f"$O.{origin}.>", "dest": f"$O.{copy}.>"}]

    hook = JetStreamHook(hub_conn, domain="hub")
    wait_until(lambda: [o.name for o in hook.list_objects(copy)], lambda names: len(names) == 2, what="mirror")
    out = get(hub_conn, copy, "a.bin", tmp_path / "hub-a.bin", domain="hub")
    assert out["digest"] == digest and out["bucket"] == copy
    assert (tmp_path / "hub-a.bin").read_bytes() == (tmp_path / "a.bin").read_bytes()
    get(hub_conn, copy, "empty.bin", tmp_path / "hub-empty.bin", domain="hub")
    assert (tmp_path / "hub-empty.bin").read_bytes() == b""

    with pytest.raises(JetStreamConfigError, match=r"is a mirror of .* it takes no writes"):
        put(hub_conn, copy, "b.bin", tmp_path / "a.bin", domain="hub")
    # A mirror cannot be changed in place: a new origin is refused, nothing deleted.
    with pytest.raises(ReconcileError, match="mirror"):
        store(hub_conn, {"bucket": copy, "mirror": {"bucket": uid("other"), "domain": "leaf"}}, domain="hub")
    assert hook.object_info(copy, "a.bin") is not None


def test_a_big_object_is_streamed_one_chunk_at_a_time(hub_leaf, tmp_path) -> None:
    """Eight MiB through the hub into the leaf and back: the Python heap never holds more than a few chunks."""
    source, destination = tmp_path / "big.bin", tmp_path / "big-copy.bin"
    digest = random_file(source, 8 * 1024 * 1024)
    bucket = uid("big")

    async def go() -> tuple[int, int, str]:
        user, password = USERS["ACC"]
        nc = await nats.connect(hub_leaf.hub.url, user=user, password=password)
        try:
            api = JetStreamApi(nc, "$JS.leaf.API")
            await api.request(
                f"STREAM.CREATE.OBJ_{bucket}",
                {
                    "name": f"OBJ_{bucket}",
                    "subjects": [f"$O.{bucket}.C.>", f"$O.{bucket}.M.>"],
                    "allow_rollup_hdrs": True,
                },
            )
            tracemalloc.start()
            info = await put_object(api, bucket, "big.bin", source)
            put_peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.reset_peak()
            await get_object(api, bucket, "big.bin", destination)
            get_peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            return put_peak, get_peak, info.digest
        finally:
            await nc.close()

    put_peak, get_peak, stored = asyncio.run(go())
    assert stored == digest
    assert destination.read_bytes() == source.read_bytes()
    assert put_peak < 2 * 1024 * 1024, put_peak
    assert get_peak < 2 * 1024 * 1024, get_peak


def test_a_corrupt_object_is_refused_and_the_destination_left_alone(hub_conn, hub_leaf, tmp_path) -> None:
    bucket = uid("corrupt")
    store(hub_conn, bucket)
    random_file(tmp_path / "a.bin", 5000)
    info = put(hub_conn, bucket, "a.bin", tmp_path / "a.bin")
    (tmp_path / "out.bin").write_bytes(b"previous")

    async def tamper() -> None:
        user, password = USERS["ACC"]
        nc = await nats.connect(hub_leaf.leaves["leaf"].url, user=user, password=password)
        try:
            js = nc.jetstream()
            await js.publish(f"$O.{bucket}.C.{info['nuid']}", b"injected")
            meta = {**info, "chunks": 2, "size": 5008, "options": {"max_chunk_size": 131072}}
            await js.publish(f"$O.{bucket}.M.YS5iaW4=", json.dumps(meta).encode(), headers={"Nats-Rollup": "sub"})
        finally:
            await nc.close()

    asyncio.run(tamper())
    with pytest.raises(ObjectDigestError, match="is corrupt: read 5008 bytes"):
        get(hub_conn, bucket, "a.bin", tmp_path / "out.bin")
    assert (tmp_path / "out.bin").read_bytes() == b"previous"
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".part")] == []


def test_bad_names_and_empty_rendered_values_are_refused_before_anything_is_sent(hub_conn, raw: Raw, tmp_path) -> None:
    with pytest.raises(SpecErrors) as refused:
        JetStreamPutObjectOperator(task_id="bad", bucket="has.dot", object_name="", local_path="/data/x")
    assert "bucket='has.dot' is not allowed" in str(refused.value) and "name='' is not allowed" in str(refused.value)

    bucket = uid("render")
    op = JetStreamPutObjectOperator(
        task_id="rendered",
        jetstream_conn_id=hub_conn,
        domain="leaf",
        bucket=bucket,
        object_name="{{ params.name }}",
        local_path="{{ params.source }}",
    )
    op.render_template_fields({"params": {"name": "", "source": ""}})
    with pytest.raises(SpecErrors, match="object_name='' is not allowed"):
        op.execute({})
    with pytest.raises(SpecErrors, match=r"after_revision=.* is not allowed"):
        sensor = JetStreamObjectSensor(task_id="s", bucket=bucket, object_name="x", after_revision="{{ params.r }}")
        sensor.render_template_fields({"params": {"r": ""}})
        sensor.checked_arguments()
    with pytest.raises(SpecErrors, match=r"bucket\.ttl"):
        JetStreamCreateObjectStoreOperator(task_id="ttl", bucket={"bucket": bucket, "ttl": "soon"})
    assert raw.info("leaf", f"OBJ_{bucket}") is None


def test_reconcile_refuses_data_loss_and_a_double_store(hub_conn, raw: Raw) -> None:
    bucket = uid("limits")
    store(hub_conn, {"bucket": bucket, "max_bytes": 10_000_000})
    assert store(hub_conn, {"bucket": bucket, "max_bytes": 10_000_000})["action"] == "unchanged"
    with pytest.raises(ReconcileError, match=r"max_bytes: 10000000 -> 1000"):
        store(hub_conn, {"bucket": bucket, "max_bytes": 1000})
    assert raw.info("leaf", f"OBJ_{bucket}")["config"]["max_bytes"] == 10_000_000
    assert (
        store(hub_conn, {"bucket": bucket, "max_bytes": 1000}, options={"allow_data_loss": True})["action"] == "updated"
    )
    with pytest.raises(DoubleStoreError):
        store(hub_conn, bucket, domain="hub", options={"peer_domains": ["leaf"]})
    assert raw.info("hub", f"OBJ_{bucket}") is None


def test_the_sensor_waits_for_an_object_and_for_a_new_revision(hub_conn, hub_leaf, tmp_path) -> None:
    bucket = uid("sensed")
    store(hub_conn, bucket)
    sensor = JetStreamObjectSensor(
        task_id=uid("s"),
        jetstream_conn_id=hub_conn,
        domain="leaf",
        bucket=bucket,
        object_name="in.csv",
        poke_interval=0.2,
    )
    assert sensor.poke({}) is False
    (tmp_path / "in.csv").write_text("a,b\n")
    first = put(hub_conn, bucket, "in.csv", tmp_path / "in.csv")
    done = sensor.poke({})
    assert done.is_done and done.xcom_value["revision"] == first["revision"]

    trigger = JetStreamObjectTrigger(
        jetstream_conn_id=hub_conn, bucket=bucket, object_name="in.csv", domain="leaf", after_revision=first["revision"]
    )

    async def wait_for_next() -> dict:
        waiting = asyncio.ensure_future(first_event(trigger, timeout=60))
        await asyncio.to_thread(put, hub_conn, bucket, "in.csv", tmp_path / "in.csv")
        return (await waiting).payload

    event = asyncio.run(wait_for_next())
    assert event["status"] == "success" and event["object"]["revision"] > first["revision"]

    missing = JetStreamObjectSensor(
        task_id=uid("m"), jetstream_conn_id=hub_conn, domain="leaf", bucket=uid("nobucket"), object_name="x"
    )
    with pytest.raises(Exception, match="does not exist"):
        missing.poke({})


def test_watch_sees_puts_and_deletes_in_order(hub_conn, hub_leaf, tmp_path) -> None:
    bucket = uid("watched")
    store(hub_conn, bucket)
    (tmp_path / "f").write_text("x")
    for name in ("a", "b"):
        put(hub_conn, bucket, name, tmp_path / "f")
    JetStreamHook(hub_conn, domain="leaf").delete_object(bucket, "a")

    async def go() -> list[tuple[str, bool]]:
        seen = []
        async for info in JetStreamHook(hub_conn, domain="leaf").awatch_objects(bucket):
            seen.append((info.name, info.deleted))
            if len(seen) == 2:
                return seen
        return seen

    assert asyncio.run(go()) == [("b", False), ("a", True)]  # a's put was rolled up by its delete
    assert [o.name for o in asyncio.run(_listed(hub_leaf, bucket))] == ["b"]


async def _listed(hub_leaf, bucket: str):
    user, password = USERS["ACC"]
    nc = await nats.connect(hub_leaf.hub.url, user=user, password=password)
    try:
        return await list_objects(JetStreamApi(nc, "$JS.leaf.API"), bucket)
    finally:
        await nc.close()


def test_a_link_is_refused_by_get_not_read_as_an_empty_object(hub_conn, hub_leaf, tmp_path) -> None:
    """nats.go's ``AddLink`` writes a meta whose ``options.link`` names another object, with no chunks."""
    bucket = uid("links")
    store(hub_conn, bucket)

    async def link() -> None:
        user, password = USERS["ACC"]
        nc = await nats.connect(hub_leaf.leaves["leaf"].url, user=user, password=password)
        try:
            meta = {"name": "alias", "bucket": bucket, "nuid": "", "size": 0, "chunks": 0, "options": {}}
            meta["options"]["link"] = {"bucket": bucket, "name": "target"}
            await nc.jetstream().publish(f"$O.{bucket}.M.YWxpYXM=", json.dumps(meta).encode())
        finally:
            await nc.close()

    asyncio.run(link())
    assert JetStreamHook(hub_conn, domain="leaf").object_info(bucket, "alias").link == {
        "bucket": bucket,
        "name": "target",
    }
    with pytest.raises(JetStreamConfigError, match="is a link to"):
        get(hub_conn, bucket, "alias", tmp_path / "alias")
    assert not (tmp_path / "alias").exists()


def test_a_hub_bucket_sourcing_a_leaf_bucket_serves_its_objects_under_its_own_name(hub_conn, tmp_path) -> None:
    origin, aggregate = uid("site"), uid("all-sites")
    store(hub_conn, origin)
    store(hub_conn, {"bucket": aggregate, "sources": [{"bucket": origin, "domain": "leaf"}]}, domain="hub")
    digest = random_file(tmp_path / "r.bin", 150_000)
    put(hub_conn, origin, "site/r.bin", tmp_path / "r.bin")
    hook = JetStreamHook(hub_conn, domain="hub")
    wait_until(lambda: hook.object_info(aggregate, "site/r.bin"), lambda info: info is not None, what="sourced")
    out = get(hub_conn, aggregate, "site/r.bin", tmp_path / "hub-r.bin", domain="hub")
    assert out["digest"] == digest and (tmp_path / "hub-r.bin").read_bytes() == (tmp_path / "r.bin").read_bytes()
    # A sourced bucket takes writes of its own, in the hub.
    own = put(hub_conn, aggregate, "hub-only.bin", tmp_path / "r.bin", domain="hub")
    assert own["bucket"] == aggregate
    assert sorted(o.name for o in hook.list_objects(aggregate)) == ["hub-only.bin", "site/r.bin"]


def test_a_hub_bucket_sourcing_two_leaves_gets_what_a_cut_leaf_stored_once_it_is_back(
    make_topology, jetstream_conn, tmp_path
) -> None:
    """Two edges write files into their leaf buckets, one of them while cut off from the hub: the hub's
    bucket has the other's at once, and the cut leaf's once its link is back, each whole (digest checked).
    Each leaf's bucket has its own name: object writes carry no domain, so every leaf with a bucket of
    that name would store them (as a stream's subjects, a bucket name belongs to one domain)."""
    topology = make_topology(leaf_domains=["leaf-a", "leaf-b"])
    user, password = USERS["ACC"]
    via_hub = jetstream_conn(f"127.0.0.1:{topology.hub.port}", login=user, password=password)
    on_leaf_b = jetstream_conn(f"127.0.0.1:{topology.leaves['leaf-b'].port}", login=user, password=password)
    sites = {leaf: uid(f"site-{leaf}") for leaf in ("leaf-a", "leaf-b")}
    aggregate = uid("all-sites")
    for leaf, bucket in sites.items():
        store(via_hub, bucket, domain=leaf)
    sources = [{"bucket": bucket, "domain": leaf} for leaf, bucket in sites.items()]
    store(via_hub, {"bucket": aggregate, "sources": sources}, domain="hub")
    digests = {name: random_file(tmp_path / name, 120_000) for name in ("a.bin", "b.bin")}
    put(via_hub, sites["leaf-a"], "a/a.bin", tmp_path / "a.bin", domain="leaf-a")

    topology.disconnect_leaf("leaf-b")
    # The edge keeps writing while cut off: to its own server, in its own domain.
    put(on_leaf_b, sites["leaf-b"], "b/b.bin", tmp_path / "b.bin", domain="leaf-b")
    hook = JetStreamHook(via_hub, domain="hub")
    wait_until(lambda: hook.object_info(aggregate, "a/a.bin"), lambda info: info is not None, what="leaf-a's file")
    assert hook.object_info(aggregate, "b/b.bin") is None  # not copied while the link is down

    topology.reconnect_leaf("leaf-b")
    wait_until(lambda: hook.object_info(aggregate, "b/b.bin"), lambda info: info is not None, what="leaf-b's file")
    for name, path in (("a.bin", "a/a.bin"), ("b.bin", "b/b.bin")):
        out = get(via_hub, aggregate, path, tmp_path / f"hub-{name}", domain="hub")
        assert out["digest"] == digests[name]
        assert (tmp_path / f"hub-{name}").read_bytes() == (tmp_path / name).read_bytes()
    assert sorted(o.name for o in hook.list_objects(aggregate)) == ["a/a.bin", "b/b.bin"]


def test_a_bucket_name_a_reachable_leaf_stores_is_refused_before_anything_is_written(
    make_topology, jetstream_conn, tmp_path
) -> None:
    """Object writes carry no domain: a bucket "files" in leaf-a and in leaf-b would store every put in both.
    A store probe (refused unstored by every stream listening there) finds leaf-a's bucket, so creating the
    name in leaf-b, and putting to a leaf-b bucket of that name made anyway, are refused before anything is
    written, naming both domains; leaf-a's bucket holds nothing new."""
    topology = make_topology(leaf_domains=["leaf-a", "leaf-b"])
    user, password = USERS["ACC"]
    via_hub = jetstream_conn(f"127.0.0.1:{topology.hub.port}", login=user, password=password)
    files, copy = uid("files"), uid("files-hub")
    store(via_hub, files, domain="leaf-a")
    store(via_hub, {"bucket": copy, "mirror": {"bucket": files, "domain": "leaf-a"}}, domain="hub")
    digest = random_file(tmp_path / "a.bin", 50_000)
    put(via_hub, files, "a.bin", tmp_path / "a.bin", domain="leaf-a")
    hook = JetStreamHook(via_hub)
    before = hook.stream_info(f"OBJ_{files}", domain="leaf-a")["state"]

    with pytest.raises(DoubleStoreError, match=rf"'leaf-b'.*OBJ_{files}' in domain 'leaf-a'.*nothing was stored"):
        store(via_hub, files, domain="leaf-b")
    assert hook.object_info(files, "a.bin", domain="leaf-a").digest == digest
    with pytest.raises(JetStreamNotFoundError):
        hook.stream_info(f"OBJ_{files}", domain="leaf-b")

    # Made anyway (the opt-in): every put to it is refused before its first chunk.
    assert store(via_hub, files, domain="leaf-b", options={"allow_double_store": True})["action"] == "created"
    random_file(tmp_path / "b.bin", 50_000)
    with pytest.raises(DoubleStoreError, match=rf"put to object store bucket '{files}' in domain 'leaf-b'.*'leaf-a'"):
        put(via_hub, files, "b.bin", tmp_path / "b.bin", domain="leaf-b")
    assert hook.stream_info(f"OBJ_{files}", domain="leaf-a")["state"] == before
    assert hook.stream_info(f"OBJ_{files}", domain="leaf-b")["state"]["messages"] == 0
    hook.delete_stream(f"OBJ_{files}", domain="leaf-b")
    # With one bucket of the name again, puts to it go on as before (the probe answers once: its own).
    assert put(via_hub, files, "a.bin", tmp_path / "b.bin", domain="leaf-a")["size"] == 50_000
