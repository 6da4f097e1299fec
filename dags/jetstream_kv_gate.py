"""Gate on the edge: wait until an edge process announces a finished batch in its own domain's KV,
process exactly that batch of its readings (read in the leaf's domain, through the hub), then
consume the announcement so the next run waits for a new batch."""

from __future__ import annotations

import json

import pendulum
from airflow.sdk import DAG, Param, task
from edge_pipeline_config import (
    LEAF_DOMAINS,
    LEAF_STREAM,
    NATS_CONN_ID,
    edge_status_bucket,
    edge_status_bucket_spec,
    leaf_readings,
)

from airflow_provider_jetstream.operators.kv import (
    JetStreamCreateKeyValueOperator,
    JetStreamKeyValueDeleteOperator,
    JetStreamKeyValuePutOperator,
)
from airflow_provider_jetstream.sensors.kv import JetStreamKeyValueSensor

READY_KEY = "batch.ready"
PROCESSED_KEY = "batch.processed"
#: The leaf's announcement bucket, for the leaf chosen when the run is triggered.
BUCKET = edge_status_bucket("{{ params.leaf }}")

DOC = f"""
### KV gate

An edge process on leaf `<leaf>` writes `{edge_status_bucket("<leaf>")}/{READY_KEY}` =
`{{"batch": "...", "first_seq": N, "last_seq": M}}` when a batch of readings is complete, in its own
leaf's KV (one bucket name per leaf: a KV write goes to `$KV.<bucket>.<key>` whatever the domain, so
one name in two linked leaves would store every announcement twice). The edge does not have to
create the bucket: step 0 does, with the spec in `edge_pipeline_config.edge_status_bucket_spec`;
an edge that creates it first with the same spec is left unchanged.

0. **ensure** the bucket `{edge_status_bucket("<leaf>")}` in the leaf's domain: `{edge_status_bucket_spec("<leaf>")}`.
1. **wait** (deferrable: a KV watch in the triggerer, no polling) until the key exists in the leaf's
   domain; a key of the same name in the hub does not count.
2. **process** that batch: the leaf's `{LEAF_STREAM}` stream, sequences `first_seq..last_seq`,
   read through the hub connection with the hook's `consume` (an ephemeral read from `first_seq`, its
   consumer deleted after); per-sensor count and mean.
3. **record** the result in `{edge_status_bucket("<leaf>")}/{PROCESSED_KEY}` and **delete** `{READY_KEY}` with a
   compare-and-set on the revision that was processed, so a newer announcement is never lost.
"""

with DAG(
    dag_id="jetstream_kv_gate",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    doc_md=DOC,
    tags=["jetstream", "example"],
    render_template_as_native_obj=True,
    params={"leaf": Param(LEAF_DOMAINS[0], type="string", enum=LEAF_DOMAINS, description="Edge domain to gate on")},
    default_args={"jetstream_conn_id": NATS_CONN_ID},
) as dag:
    ensure_bucket = JetStreamCreateKeyValueOperator(
        task_id="ensure_edge_status_bucket",
        domain="{{ params.leaf }}",
        bucket=edge_status_bucket_spec("{{ params.leaf }}"),
    )
    wait_ready = JetStreamKeyValueSensor(
        task_id="wait_batch_ready",
        domain="{{ params.leaf }}",
        bucket=BUCKET,
        key=READY_KEY,
        deferrable=True,
        timeout=6 * 3600,
    )

    @task
    def process_batch(entry: dict, params: dict | None = None) -> dict:
        """Count and average the batch's readings per sensor, reading the leaf stream through the hub."""
        from airflow_provider_jetstream.hooks.jetstream import JetStreamHook

        batch = json.loads(entry["value"])
        leaf = params["leaf"]
        hook = JetStreamHook(NATS_CONN_ID, domain=leaf)
        first, last = batch["first_seq"], batch["last_seq"]
        totals = hook.run(leaf_readings(hook, leaf, first, last))
        return {
            "batch": batch["batch"],
            "leaf": leaf,
            "readings": last - first + 1,
            "revision": entry["revision"],
            "mean_by_sensor": {sensor: round(sum(v) / len(v), 3) for sensor, v in sorted(totals.items())},
        }

    result = process_batch(wait_ready.output)
    record = JetStreamKeyValuePutOperator(
        task_id="record_processed",
        domain="{{ params.leaf }}",
        bucket=BUCKET,
        key=PROCESSED_KEY,
        value=result,
    )
    consume = JetStreamKeyValueDeleteOperator(
        task_id="consume_announcement",
        domain="{{ params.leaf }}",
        bucket=BUCKET,
        key=READY_KEY,
        expected_revision="{{ ti.xcom_pull(task_ids='wait_batch_ready')['revision'] }}",
    )
    ensure_bucket >> wait_ready
    record >> consume
