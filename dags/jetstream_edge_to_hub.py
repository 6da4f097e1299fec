"""Scheduled edge-to-hub replication: aggregate every leaf's readings into the hub, wait until
replication has caught up, then turn the new readings into Parquet exactly once."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Param
from edge_pipeline_config import (
    AGGREGATE_STREAM,
    CHECKPOINT_KEY,
    COMMANDS_STREAM,
    HUB_DOMAIN,
    LAST_RUN_KEY,
    LEAF_DOMAINS,
    LEAF_STREAM,
    NATS_CONN_ID,
    OUTPUT_DIR,
    PIPELINE_BUCKET,
    SPARK_CONN_ID,
    aggregate_sources,
    leaf_stream_spec,
)

from airflow_provider_jetstream.operators.kv import JetStreamCreateKeyValueOperator, JetStreamKeyValuePutOperator
from airflow_provider_jetstream.operators.spark import JetStreamSparkSubmitOperator
from airflow_provider_jetstream.operators.streams import (
    JetStreamCreateMirrorOperator,
    JetStreamCreateSourcedStreamOperator,
    JetStreamCreateStreamOperator,
)
from airflow_provider_jetstream.sensors.replication_lag import JetStreamReplicationLagSensor

DOC = f"""
### Edge to hub

Every hour, for the leaves {", ".join(f"`{leaf}`" for leaf in LEAF_DOMAINS)} and the hub `{HUB_DOMAIN}`:

1. **ensure** each leaf's `{LEAF_STREAM}` stream (`sensors.<leaf>.>`), the hub's `{COMMANDS_STREAM}` stream and
   its mirror in every leaf (edges get commands even while the link is down), and the hub's
   `{AGGREGATE_STREAM}` stream sourcing every leaf, subjects rewritten to `edge.<leaf>.>`.
   All idempotent: an unchanged spec sends no update; nothing is ever deleted.
2. **wait** (deferrable) until every source of `{AGGREGATE_STREAM}` has no lag and has been heard from
   recently: a leaf that is cut off is never taken as caught up.
3. **process** the new readings with Spark: from the sequence after the checkpoint in KV
   `{PIPELINE_BUCKET}/{CHECKPOINT_KEY}` to Parquet under `{OUTPUT_DIR}`, then advance the checkpoint.
4. **mark** the run in KV `{PIPELINE_BUCKET}/{LAST_RUN_KEY}`.
"""

with DAG(
    dag_id="jetstream_edge_to_hub",
    schedule="@hourly",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    doc_md=DOC,
    tags=["jetstream", "example"],
    params={
        "max_inactive": Param("30s", type="string", description="A source silent longer is not caught up."),
        "output_dir": Param(OUTPUT_DIR, type="string", description="Where the Parquet output goes."),
    },
    default_args={"jetstream_conn_id": NATS_CONN_ID, "retries": 2, "retry_delay": pendulum.duration(minutes=1)},
) as dag:
    leaf_streams = [
        JetStreamCreateStreamOperator(
            task_id=f"ensure_{leaf.replace('-', '_')}_readings",
            domain=leaf,
            stream=leaf_stream_spec(leaf),
        )
        for leaf in LEAF_DOMAINS
    ]
    hub_commands = JetStreamCreateStreamOperator(
        task_id="ensure_hub_commands",
        domain=HUB_DOMAIN,
        stream={"name": COMMANDS_STREAM, "subjects": ["commands.>"], "max_age": "30d"},
    )
    commands_mirrors = [
        JetStreamCreateMirrorOperator(
            task_id=f"ensure_{leaf.replace('-', '_')}_commands_mirror",
            domain=leaf,
            name=COMMANDS_STREAM,
            source_stream=COMMANDS_STREAM,
            source_domain=HUB_DOMAIN,
        )
        for leaf in LEAF_DOMAINS
    ]
    aggregate = JetStreamCreateSourcedStreamOperator(
        task_id="ensure_hub_aggregate",
        domain=HUB_DOMAIN,
        name=AGGREGATE_STREAM,
        sources=aggregate_sources(),
        stream_overrides={"max_age": "30d", "storage": "file"},
    )
    pipeline_bucket = JetStreamCreateKeyValueOperator(
        task_id="ensure_pipeline_bucket",
        domain=HUB_DOMAIN,
        bucket={"bucket": PIPELINE_BUCKET, "history": 10},
    )
    wait_replicated = JetStreamReplicationLagSensor(
        task_id="wait_replicated",
        domain=HUB_DOMAIN,
        stream=AGGREGATE_STREAM,
        max_lag=0,
        max_inactive="{{ params.max_inactive }}",
        deferrable=True,
        poke_interval=2,
        timeout=60 * 30,
    )
    to_parquet = JetStreamSparkSubmitOperator(
        task_id="readings_to_parquet",
        conn_id=SPARK_CONN_ID,
        domain=HUB_DOMAIN,
        stream=AGGREGATE_STREAM,
        checkpoint_bucket=PIPELINE_BUCKET,
        checkpoint_key=CHECKPOINT_KEY,
        output_path="{{ params.output_dir }}/readings",
        partition_by=["subject", "date"],
    )
    mark_run = JetStreamKeyValuePutOperator(
        task_id="mark_run",
        domain=HUB_DOMAIN,
        bucket=PIPELINE_BUCKET,
        key=LAST_RUN_KEY,
        value={"run_id": "{{ run_id }}", "data_interval_end": "{{ data_interval_end }}"},
    )

    leaf_streams >> aggregate
    hub_commands >> commands_mirrors
    [aggregate, pipeline_bucket, *commands_mirrors] >> wait_replicated >> to_parquet >> mark_run
