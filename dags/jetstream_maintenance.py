"""Maintenance of the hub: purge aggregate readings the Spark job has already processed (up to its
checkpoint, never past it) and report every consumer's lag."""

from __future__ import annotations

import json

import pendulum
from airflow.sdk import DAG, task
from edge_pipeline_config import AGGREGATE_STREAM, CHECKPOINT_KEY, HUB_DOMAIN, NATS_CONN_ID, PIPELINE_BUCKET

from airflow_provider_jetstream.compat import AirflowSkipException
from airflow_provider_jetstream.operators.streams import JetStreamPurgeStreamOperator

DOC = f"""
### Maintenance

1. **read** the Spark job's checkpoint `{PIPELINE_BUCKET}/{CHECKPOINT_KEY}` in the hub: the last sequence
   of `{AGGREGATE_STREAM}` already written to Parquet (skips when there is none yet).
2. **purge** `{AGGREGATE_STREAM}` below that sequence + 1: only processed data goes.
3. **report** every consumer of the hub's streams: unprocessed and outstanding-ack counts.
"""

with DAG(
    dag_id="jetstream_maintenance",
    schedule="@daily",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    doc_md=DOC,
    tags=["jetstream", "example"],
    render_template_as_native_obj=True,
    default_args={"jetstream_conn_id": NATS_CONN_ID},
) as dag:

    @task
    def read_checkpoint() -> int:
        """The first sequence not yet processed (the checkpoint + 1)."""
        from airflow_provider_jetstream.core.errors import JetStreamNotFoundError
        from airflow_provider_jetstream.hooks.jetstream import JetStreamHook

        try:
            entry = JetStreamHook(NATS_CONN_ID, domain=HUB_DOMAIN).kv_get(PIPELINE_BUCKET, CHECKPOINT_KEY)
        except JetStreamNotFoundError:  # no bucket yet: nothing processed yet
            entry = None
        checkpoint = json.loads(entry.value) if entry else None
        if not checkpoint or not checkpoint.get("seq"):
            raise AirflowSkipException("no checkpoint yet: nothing has been processed, nothing to purge")
        return int(checkpoint["seq"]) + 1

    purge = JetStreamPurgeStreamOperator(
        task_id="purge_processed",
        domain=HUB_DOMAIN,
        stream=AGGREGATE_STREAM,
        up_to_seq="{{ ti.xcom_pull(task_ids='read_checkpoint') }}",
    )

    @task(trigger_rule="none_failed")
    def report_consumer_lag() -> dict:
        """Every consumer of the hub's streams with its unprocessed and outstanding-ack counts."""
        from airflow_provider_jetstream.core.api import JetStreamApi
        from airflow_provider_jetstream.hooks.jetstream import JetStreamHook

        hook = JetStreamHook(NATS_CONN_ID, domain=HUB_DOMAIN)

        async def collect() -> dict:
            report = {}
            async with hook.aconnect() as nc:
                api = JetStreamApi(nc, hook.resolve_api_prefix())
                for stream in (await api.request("STREAM.NAMES", {})).get("streams") or []:
                    for info in (await api.request(f"CONSUMER.LIST.{stream}", {})).get("consumers") or []:
                        report[f"{stream}/{info['name']}"] = {
                            "unprocessed": info["num_pending"],
                            "outstanding_acks": info["num_ack_pending"],
                            "redelivered": info["num_redelivered"],
                        }
            return report

        report = hook.run(collect())
        for name, counts in sorted(report.items()):
            print(f"{name}: {counts}")
        return report

    read_checkpoint() >> purge >> report_consumer_lag()
