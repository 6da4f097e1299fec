"""Object stores with nats.js (npm ``nats`` 2.29): it reads the objects the provider puts, and the other way round.

nats.js runs in Node, as user ACC, connected to the hub (reading a leaf's bucket through the hub, domain
``leaf``) or to the leaf itself (an edge application writing locally). Contents are compared by SHA-256,
and each client verifies the other's digest as it reads.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import replace
from pathlib import Path

import pytest

from airflow_provider_jetstream.hooks.jetstream import JetStreamHook
from airflow_provider_jetstream.operators.objects import (
    JetStreamCreateObjectStoreOperator,
    JetStreamGetObjectOperator,
    JetStreamPutObjectOperator,
)
from tests.support.management import uid
from tests.support.nats_js import NatsJs
from tests.support.waiting import wait_until


def store(conn: str, spec, domain: str) -> dict:
    return JetStreamCreateObjectStoreOperator(
        task_id=uid("os"), jetstream_conn_id=conn, domain=domain, bucket=spec
    ).execute({})


def test_nats_js_reads_objects_the_provider_put_in_a_leaf_bucket(hub_conn, nats_js: NatsJs, tmp_path: Path) -> None:
    bucket = uid("provider")
    store(hub_conn, bucket, "leaf")
    files = {"big.bin": os.urandom(700_000), "small.txt": b"hello edge", "empty": b""}
    written = {}
    for name, data in files.items():
        (tmp_path / "src").write_bytes(data)
        written[name] = JetStreamPutObjectOperator(
            task_id=uid("put"),
            jetstream_conn_id=hub_conn,
            domain="leaf",
            bucket=bucket,
            object_name=name,
            local_path=str(tmp_path / "src"),
        ).execute({})

    seen = nats_js.run("read-objects", domain="leaf", bucket=bucket, names=sorted(files))
    assert seen["list"] == sorted(files)
    for name, data in files.items():
        got = seen["objects"][name]
        assert got["sha256"] == hashlib.sha256(data).hexdigest(), name
        assert (got["size"], got["length"]) == (len(data), len(data))
        assert (got["digest"], got["chunks"], got["revision"]) == (
            written[name]["digest"],
            written[name]["chunks"],
            written[name]["revision"],
        )


def test_the_provider_reads_what_nats_js_put_at_the_edge_there_and_in_the_hub_mirror(
    hub_conn, node: str, hub_leaf, nats_js: NatsJs, tmp_path: Path
) -> None:
    """The example flow with an edge application in JavaScript: it writes into its leaf's bucket; the hub
    mirror holds the objects; the provider reads them in the leaf and in the hub, digests verified."""
    bucket, copy = uid("edge"), uid("edge-hub")
    store(hub_conn, bucket, "leaf")
    store(hub_conn, {"bucket": copy, "mirror": {"bucket": bucket, "domain": "leaf"}}, "hub")
    edge, nats_js_hub = replace(nats_js, server="leaf"), nats_js
    put = edge.run("put-object", bucket=bucket, name="readings/1.bin", size=1_000_000)
    text = edge.run("put-object", bucket=bucket, name="note.txt", text="from nats.js")

    hook = JetStreamHook(hub_conn)
    for domain, name in (("leaf", bucket), ("hub", copy)):
        wait_until(
            lambda d=domain, n=name: [o.name for o in hook.list_objects(n, domain=d)],
            lambda names: sorted(names) == ["note.txt", "readings/1.bin"],
            what=f"objects of {name} in {domain}",
        )
        out = JetStreamGetObjectOperator(
            task_id=uid("get"),
            jetstream_conn_id=hub_conn,
            domain=domain,
            bucket=name,
            object_name="readings/1.bin",
            local_path=str(tmp_path / f"{domain}.bin"),
        ).execute({})
        assert hashlib.sha256((tmp_path / f"{domain}.bin").read_bytes()).hexdigest() == put["sha256"]
        assert (out["size"], out["chunks"], out["digest"]) == (1_000_000, put["chunks"], put["digest"])
        hook.get_object(name, "note.txt", str(tmp_path / f"{domain}.txt"), domain=domain)
        assert (tmp_path / f"{domain}.txt").read_text() == "from nats.js"
    assert text["size"] == len("from nats.js")

    # nats.js reads an object's info in the hub copy by the copy's name; its get and list of a mirror fail:
    # nats.js 2.29 finds the stream of a subscription by subject, and a mirror listens on none (nats.go binds
    # the stream by name). Pinned, so that a nats.js that reads it shows up here.
    seen = nats_js_hub.run(
        "read-objects", domain="hub", bucket=copy, names=["readings/1.bin"], content=False, list=False
    )
    assert (seen["objects"]["readings/1.bin"]["digest"], seen["objects"]["readings/1.bin"]["size"]) == (
        put["digest"],
        1_000_000,
    )
    with pytest.raises(AssertionError, match="no stream matches subject"):
        nats_js_hub.run("read-objects", domain="hub", bucket=copy, names=["readings/1.bin"])
