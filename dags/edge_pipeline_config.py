"""Names shared by the example DAGs (the topology they run against), and their one read of a leaf's readings.

Defaults match `make demo`, `make stack` and docker-compose.yml (hub domain `hub`, leaves `leaf-a`
and `leaf-b`, Airflow connection `nats_hub`); environment variables override them for your deployment.

The `JETSTREAM_*` variables are read when a DAG file is parsed: they decide the DAGs' defaults and,
for `jetstream_kv_gate` and `jetstream_edge_events`, which leaves they offer or watch. Airflow parses
the files in the dag-processor and again in every worker that runs a task, so set them to the same
values in both (and in the scheduler and triggerer, which share the deployment's environment), and
restart those processes after changing them: a dag-processor that still has the old values keeps
serializing the old DAG.

`jetstream_edge_to_hub` takes its leaves at run time instead (:func:`leaf_domains_of_run`): the Airflow
Variable `jetstream_leaf_domains` when it is set, else `JETSTREAM_LEAF_DOMAINS`. Its tasks are the same
for any number of leaves (its per-leaf steps are mapped over that list), and a leaf added to the
Variable is in the next run without a restart.
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import Any

from airflow_provider_jetstream.core.arguments.names import domain_name
from airflow_provider_jetstream.core.manage.durable_source import default_consumer_name, default_deliver_subject

#: Airflow connection (type jetstream) to the hub; every domain is reached through it.
NATS_CONN_ID = os.environ.get("JETSTREAM_CONN_ID", "nats_hub")
#: Spark connection for spark-submit (`local[*]` by default; a cluster in docker-compose).
SPARK_CONN_ID = os.environ.get("JETSTREAM_SPARK_CONN_ID", "spark_local")
HUB_DOMAIN = os.environ.get("JETSTREAM_HUB_DOMAIN", "hub")
#: The Airflow Variable that lists `jetstream_edge_to_hub`'s leaves, read at the start of each run:
#: comma-separated (`leaf-a,leaf-b`) or a JSON list of domain names. Unset: `JETSTREAM_LEAF_DOMAINS`.
LEAF_DOMAINS_VARIABLE = "jetstream_leaf_domains"


def leaf_domains_from(text: str, source: str) -> list[str]:
    """The leaf domains listed in ``text`` (comma-separated, or a JSON list of names), in order.

    Refused with a ``ValueError`` naming ``source`` and the value: a name that is not a JetStream domain,
    one listed twice, the hub's domain, an empty list.
    """
    stripped = text.strip()
    if stripped.startswith("["):
        try:
            names = json.loads(stripped)
        except ValueError as err:
            raise ValueError(f"{source}={text!r} is not allowed: not a JSON list of domain names ({err})") from None
        if not isinstance(names, list):
            raise ValueError(f"{source}={text!r} is not allowed: give a JSON list of domain names")
    else:
        names = [name.strip() for name in stripped.split(",") if name.strip()]
    if not names:
        raise ValueError(f"{source}={text!r} is not allowed: list at least one leaf domain, e.g. 'leaf-a,leaf-b'")
    for name in names:
        domain_name(name, source)  # a SpecError (a ValueError) naming the source and the name
    if len(set(names)) != len(names):
        repeated = sorted({name for name in names if names.count(name) > 1})
        raise ValueError(f"{source}={text!r} is not allowed: each leaf once; listed more than once: {repeated}")
    if HUB_DOMAIN in names:
        raise ValueError(f"{source}={text!r} is not allowed: {HUB_DOMAIN!r} is the hub's domain, not a leaf's")
    return names


#: One JetStream domain per edge server (the environment's list, read when the DAG files are parsed).
LEAF_DOMAINS = leaf_domains_from(os.environ.get("JETSTREAM_LEAF_DOMAINS", "leaf-a,leaf-b"), "JETSTREAM_LEAF_DOMAINS")
#: Where the Spark job writes Parquet.
OUTPUT_DIR = os.environ.get("JETSTREAM_OUTPUT_DIR", "/opt/airflow/output")
#: Retries of each task, and the delay between them (seconds). A leaf that is away is not retried:
#: its steps are skipped (see jetstream_edge_to_hub), so these only cover passing hub failures.
RETRIES = int(os.environ.get("JETSTREAM_RETRIES", "2"))
RETRY_DELAY_SECONDS = float(os.environ.get("JETSTREAM_RETRY_DELAY", "60"))
#: How long the reachability check waits for a leaf's JetStream to answer through the hub (seconds).
PROBE_TIMEOUT_SECONDS = float(os.environ.get("JETSTREAM_PROBE_TIMEOUT", "5"))

#: How each leaf keeps its readings until the hub has them (docs/management.md, "Durable sourcing"):
#: - "limits" (default): a limits stream (kept 7 days) the hub sources; the leaf discards by age whether
#:   or not the hub has a copy, so a link down longer than that loses readings;
#: - "durable": durable sourcing (nats-server 2.14+ on the hub and every leaf): a work-queue stream the
#:   hub reads through a flow-control consumer; the leaf deletes a reading only once the hub stored it.
#: An existing leaf stream cannot change mode in place (its retention): the DAG refuses, naming it.
LEAF_STREAM_MODES = ("limits", "durable")
LEAF_STREAM_MODE = os.environ.get("JETSTREAM_LEAF_STREAM_MODE", "limits").strip()
if LEAF_STREAM_MODE not in LEAF_STREAM_MODES:
    raise ValueError(
        f"JETSTREAM_LEAF_STREAM_MODE={LEAF_STREAM_MODE!r} is not allowed: use one of {', '.join(LEAF_STREAM_MODES)}"
    )

#: Each leaf's stream of sensor readings. Subjects carry the site, so no two domains of the
#: account listen on the same subject (the NATS docs: both would store every message).
LEAF_STREAM = "readings"
#: The hub's aggregate of every leaf's readings, subjects rewritten to edge.<site>.>.
AGGREGATE_STREAM = "readings-all"
#: The hub aggregate's own settings besides its sources.
AGGREGATE_OVERRIDES = {"max_age": "30d", "storage": "file"}
#: Commands published in the hub, mirrored into every leaf so edges get them while offline.
COMMANDS_STREAM = "commands"
#: KV bucket in the hub: the Spark job's checkpoint and the run markers.
PIPELINE_BUCKET = "pipeline"
CHECKPOINT_KEY = "edge_to_hub.checkpoint"
LAST_RUN_KEY = "edge_to_hub.last_run"


def edge_status_bucket(leaf: str) -> str:
    """The KV bucket in ``leaf`` where its edge process announces a finished batch.

    One name per leaf: KV writes go to ``$KV.<bucket>.<key>`` whatever the writer's domain, so a
    bucket of one name in two linked leaves of one account would store both leaves' announcements
    (the double store the NATS docs warn about).
    """
    return f"edge-status-{leaf}"


def edge_status_bucket_spec(leaf: str) -> dict:
    """The spec of a leaf's announcement bucket: the gate DAG ensures it, an edge process may create it first."""
    return {"bucket": edge_status_bucket(leaf), "history": 5}


def leaf_stream_spec(leaf: str) -> dict:
    """The spec of a leaf's readings stream (the DAG ensures it; edge processes may create it first): kept
    7 days ("limits" mode), or until the hub stored each reading ("durable" mode: a work queue).
    ``allow_batched``: edge processes publish readings in fast-ingest batches, one ack per flow window
    (nats-server 2.14+ leaves; drop it for older ones, which refuse the spec)."""
    retention = {"retention": "workqueue"} if LEAF_STREAM_MODE == "durable" else {"max_age": "7d"}
    return {
        "name": LEAF_STREAM,
        "subjects": [f"sensors.{leaf}.>"],
        **retention,
        "storage": "file",
        "allow_batched": True,
    }


def leaf_domains_of_run() -> list[str]:
    """The leaves of a `jetstream_edge_to_hub` run, read when it runs: the Airflow Variable
    `jetstream_leaf_domains` if set, else `JETSTREAM_LEAF_DOMAINS` (see :func:`leaf_domains_from`)."""
    from airflow.sdk import Variable

    text = Variable.get(LEAF_DOMAINS_VARIABLE, default=None)
    if text is None:
        return list(LEAF_DOMAINS)
    return leaf_domains_from(text, f"Airflow Variable {LEAF_DOMAINS_VARIABLE}")


def leaf_subject_transforms(leaf: str) -> list[dict]:
    """How a leaf's readings are named in the hub: ``sensors.<leaf>.>`` becomes ``edge.<leaf>.>``."""
    return [{"src": f"sensors.{leaf}.>", "dest": f"edge.{leaf}.>"}]


def aggregate_source(leaf: str) -> dict:
    """One source of the hub aggregate: the leaf's stream, with the origin kept in the subject; in "durable"
    mode read through the leaf's flow-control consumer (the names the durable source operator gives it)."""
    source = {"name": LEAF_STREAM, "domain": leaf, "subject_transforms": leaf_subject_transforms(leaf)}
    if LEAF_STREAM_MODE == "durable":
        source["consumer"] = {
            "name": default_consumer_name(AGGREGATE_STREAM),
            "deliver_subject": default_deliver_subject(AGGREGATE_STREAM, leaf, LEAF_STREAM),
        }
    return source


def aggregate_sources(leaves: list[str]) -> list[dict]:
    """The hub aggregate's sources: each leaf's stream (:func:`aggregate_source`)."""
    return [aggregate_source(leaf) for leaf in leaves]


async def leaf_readings(hook: Any, leaf: str, first: int, last: int) -> dict[str, list[float]]:
    """The readings of sequences ``first``-``last`` of a leaf's stream, read through the hub (an ephemeral
    read from ``first`` with the hook's ``aconsume``, its consumer deleted after), by sensor. Every one of
    them or an error: a range read short (a gap: data lost, or a read cut short) is not a batch to process."""
    totals: dict[str, list[float]] = {}
    count = 0
    messages = hook.aconsume(
        LEAF_STREAM, start_seq=first, batch_size=min(1000, last - first + 1), max_wait=2, stop_when_empty=True,
        domain=leaf,
    )  # fmt: skip
    async with contextlib.aclosing(messages):
        async for message in messages:
            if message.seq > last:
                break
            reading = json.loads(message.data)
            totals.setdefault(reading["sensor"], []).append(reading["value"])
            count += 1
            if message.seq == last:
                break
    if count != last - first + 1:
        raise RuntimeError(
            f"{leaf}: read {count} of the {last - first + 1} readings of sequences {first}-{last} in "
            f"{LEAF_STREAM!r}; the batch is not processed"
        )
    return totals
