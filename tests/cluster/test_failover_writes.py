"""Writes on the 3-node hub cluster while a node dies: publishes, the Spark job's checkpoint, the
double-store check, and replicas as a durability setting (issue #25).

Every test kills a node at a chosen point (the stream's or the bucket's leader, or a node in the
middle of a check) and waits for conditions, never for a fixed time; the ``hub_cluster`` fixture
starts every node again afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_jetstream.core.errors import DoubleStoreUnreachableError, JetStreamTimeoutError, ReconcileError
from airflow_provider_jetstream.hooks.jetstream import JetStreamHook
from airflow_provider_jetstream.spark.jobs.stream_to_parquet import StreamToParquetJob, parse_args
from airflow_provider_jetstream.testing.servers import LocalTopology
from tests.support.management import uid
from tests.support.waiting import wait_until


def _r3_stream(hook: JetStreamHook, name: str) -> None:
    spec = {"name": name, "subjects": [f"{name}.>"], "num_replicas": 3}
    assert hook.ensure_stream(spec)["action"] == "created"


def test_a_publish_across_a_leader_change_stores_every_message_once(
    hub_cluster: LocalTopology, cluster_conn: str
) -> None:
    """On main, the first attempt waited its whole ack_timeout and failed ("874 of 50000 messages not
    acknowledged", error acks uncounted); the messages of the dead leader were never sent again."""
    name, total, kill_at = uid("failover-pub"), 20_000, 5_000
    hook = JetStreamHook(cluster_conn, domain="hub")
    _r3_stream(hook, name)
    leader = hub_cluster.stream_leader(name)
    killed: list[int] = []

    def payloads() -> Iterator[bytes]:
        for index in range(total):
            if index == kill_at:  # mid-publish: thousands sent, thousands in flight, the rest to come
                hub_cluster.kill_hub_node(leader)
                killed.append(leader)
            yield b"m%05d" % index

    result = hook.publish(f"{name}.x", payloads(), msg_id="failover/{index}", ack_timeout=20)
    assert killed == [leader]
    assert result["count"] == total
    assert result["stored"] + result["duplicates"] == total, result
    assert hub_cluster.stream_leader(name) != leader
    info = wait_until(lambda: hook.stream_info(name), lambda i: i["state"]["messages"] >= total, 30, "messages")
    assert info["state"]["messages"] == total  # each id stored once: no loss, no second copy


def test_lowering_replicas_is_refused_like_data_loss_unless_allowed(
    hub_cluster: LocalTopology, cluster_conn: str
) -> None:
    """On main, ``replicas: 3 -> 1`` was applied in place and reported as ``updated``."""
    hook = JetStreamHook(cluster_conn, domain="hub")
    name, bucket = uid("durable"), uid("durable-kv")
    _r3_stream(hook, name)
    assert hook.ensure_key_value({"bucket": bucket, "replicas": 3})["action"] == "created"
    lowered = {"name": name, "subjects": [f"{name}.>"], "num_replicas": 1}
    with pytest.raises(ReconcileError, match=r"(?s)lower its durability.*replicas: 3 -> 1 \(lowers durability"):
        hook.ensure_stream(lowered)
    with pytest.raises(ReconcileError, match=r"(?s)replicas: 3 -> 1 .*allow_data_loss=True"):
        hook.ensure_key_value({"bucket": bucket, "replicas": 1})
    assert hook.stream_info(name)["config"]["num_replicas"] == 3
    assert hook.ensure_stream({**lowered, "num_replicas": 5}, dry_run=True)["action"] == "planned"  # raising: no flag
    assert hook.ensure_stream(lowered, allow_data_loss=True)["action"] == "updated"
    assert hook.ensure_key_value({"bucket": bucket, "replicas": 1}, allow_data_loss=True)["action"] == "updated"
    assert hook.stream_info(name)["config"]["num_replicas"] == 1
    assert hook.stream_info(f"KV_{bucket}")["config"]["num_replicas"] == 1


def _meta_leader(topology: LocalTopology) -> int:
    """The hub node leading the JetStream meta group (which answers the account's API), once elected."""
    names = wait_until(
        lambda: [
            ((node.monitor("jsz", quiet=True) or {}).get("meta_cluster") or {}).get("leader")
            for node in topology.hubs
            if node.process is not None and node.process.poll() is None
        ],
        lambda found: bool(found) and all(found) and len(set(found)) == 1,
        30,
        "one meta leader",
    )
    return topology.hub_node_named(names[0])


def test_a_publish_at_a_leaf_passes_the_double_store_check_with_one_hub_node_down(
    hub_cluster: LocalTopology, cluster_conn: str
) -> None:
    """On main, the check asked once with the request timeout while the hub elected a leader, and refused
    with "the connection's own server: INFO: no answer within 5s (leaf link down, or no permission to ask?)"."""
    name = uid("leaf-pub")
    leaf = JetStreamHook(cluster_conn, domain="leaf")
    assert leaf.ensure_stream({"name": name, "subjects": [f"{name}.>"]})["action"] == "created"
    hub_cluster.kill_hub_node(_meta_leader(hub_cluster))
    # The hub domain (its new meta leader) and the leaf (its link to a surviving node) answer: it succeeds.
    assert leaf.publish(f"{name}.x", [b"1", b"2"], msg_id="one-down/{index}")["stored"] == 2


def test_without_a_quorum_the_double_store_check_refuses_naming_the_cause(
    hub_cluster: LocalTopology, cluster_conn: str
) -> None:
    """Fail closed, but say why: no leader answered (a node down, an election), not "leaf link down"."""
    name = uid("no-quorum")
    leaf = JetStreamHook(cluster_conn, domain="leaf")
    assert leaf.ensure_stream({"name": name, "subjects": [f"{name}.>"]})["action"] == "created"
    hub_cluster.kill_hub_node(1)
    hub_cluster.kill_hub_node(2)
    # The last node steps down once it hears from no follower: from then on no meta leader answers.
    wait_until(
        lambda: (hub_cluster.hubs[0].monitor("jsz", quiet=True) or {}).get("meta_cluster") or {},
        lambda meta: not meta.get("leader"),
        30,
        "the meta leader stepping down",
    )
    with pytest.raises(DoubleStoreUnreachableError) as refused:
        leaf.publish(f"{name}.x", [b"1"], msg_id="no-quorum/{index}")
    assert "no leader answered" in str(refused.value), refused.value
    assert "its JetStream cluster has no leader (nodes down, or an election under way)" in str(refused.value)
    assert "(leaf link down, or no permission to ask?)" not in str(refused.value)


class _KillAtCommit(StreamToParquetJob):
    """The packaged job, whose checkpoint bucket's leader is killed once the range is committed: the
    checkpoint is advanced across the election."""

    topology: LocalTopology
    killed: list[int]

    def commit(self, start: int, end: int, target: str) -> str:
        outcome = super().commit(start, end, target)
        leader = self.topology.stream_leader(f"KV_{self.args.checkpoint_bucket}")
        self.topology.kill_hub_node(leader)
        self.killed.append(leader)
        return outcome


def _job_args(topology: LocalTopology, stream: str, output: Path, bucket: str, *extra: str) -> Any:
    # The connection's credentials come from the environment (the spark fixture's, user acc as here);
    # --servers points the job and Spark's readers at every node of the cluster.
    return parse_args(
        [
            *("--stream", stream, "--domain", "hub", "--output-path", str(output), "--checkpoint-bucket", bucket),
            *("--checkpoint-domain", "hub", "--servers", topology.hub_urls, "--partition-by", "subject", *extra),
        ]
    )


def test_the_exactly_once_job_advances_its_checkpoint_across_the_buckets_leader_change(
    hub_cluster: LocalTopology, cluster_conn: str, spark: Any, tmp_path: Path
) -> None:
    """On main, the job created its checkpoint bucket with 1 replica and asked it once: its node killed at
    commit failed the run ("did not answer STREAM within 10s: a leaf that is offline...")."""
    name, bucket, output = uid("job"), uid("ckpt"), tmp_path / "out"
    hook = JetStreamHook(cluster_conn, domain="hub")
    _r3_stream(hook, name)
    hook.publish(f"{name}.a", [b"m%02d" % i for i in range(30)])
    job = _KillAtCommit(spark, _job_args(hub_cluster, name, output, bucket))
    job.topology, job.killed = hub_cluster, []
    result = job.run()
    assert job.killed and (result.outcome, result.start, result.end, result.checkpoint) == ("written", 1, 30, 30)
    assert hook.stream_info(f"KV_{bucket}")["config"]["num_replicas"] == 3  # the cluster's size
    assert sorted(r.seq for r in spark.read.parquet(str(output)).select("seq").collect()) == list(range(1, 31))
    assert StreamToParquetJob(spark, _job_args(hub_cluster, name, output, bucket)).read_checkpoint().seq == 30


def test_the_job_fails_with_its_own_error_when_the_checkpoint_never_answers(
    hub_cluster: LocalTopology, cluster_conn: str, spark: Any, tmp_path: Path
) -> None:
    """checkpoint_replicas=1 is honoured; with that one copy's node dead, the run fails naming the cause."""
    name, bucket = uid("job1"), uid("ckpt1")
    hook = JetStreamHook(cluster_conn, domain="hub")
    _r3_stream(hook, name)
    job = StreamToParquetJob(spark, _job_args(hub_cluster, name, tmp_path / "o", bucket, "--checkpoint-replicas", "1"))
    job.checkpoint_wait = 2.0  # the bucket's only copy is gone for good: no need to wait for an election
    assert job.read_checkpoint().seq is None
    assert hook.stream_info(f"KV_{bucket}")["config"]["num_replicas"] == 1
    hub_cluster.kill_hub_node(hub_cluster.stream_leader(f"KV_{bucket}"))
    with pytest.raises(JetStreamTimeoutError, match=rf"checkpoint {bucket}/stream_to_parquet\.{name}: no answer"):
        job.read_checkpoint()
