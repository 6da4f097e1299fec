"""TaskFlow on JetStreamHook: declare streams, publish at the edge, wait for exact replication, checkpoint in KV."""

from __future__ import annotations

import json

import pendulum
from airflow.sdk import DAG, Param, PokeReturnValue, task

from airflow_provider_jetstream.hooks.jetstream import JetStreamHook

with DAG(
    "jetstream_taskflow",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1),
    catchup=False,
    params={"conn_id": Param("nats_hub", type="string")},
) as dag:

    @task
    def declare(params: dict | None = None) -> dict:
        # One connection reaches every domain; each call reconciles: created, updated or unchanged.
        hook = JetStreamHook(params["conn_id"])
        leaf = hook.ensure_stream({"name": "readings", "subjects": ["sensors.>"], "max_age": "7d"}, domain="leaf")
        hub = hook.ensure_stream(
            {"name": "readings-all", "sources": [{"name": "readings", "domain": "leaf"}]}, domain="hub"
        )
        hook.ensure_consumer(
            "readings-all", {"name": "reports", "ack_policy": "explicit", "ack_wait": "30s"}, domain="hub"
        )
        hook.ensure_key_value({"bucket": "pipeline", "history": 5}, domain="hub")
        return {"leaf": leaf["action"], "hub": hub["action"]}

    @task
    def publish(params: dict | None = None, run_id: str | None = None) -> dict:
        # Every ack checked; a retry stores nothing twice (each Nats-Msg-Id names the run and index).
        hook = JetStreamHook(params["conn_id"], domain="leaf")
        readings = [{"sensor": "t1", "n": i, "value": 20 + i / 10} for i in range(100)]
        return hook.publish("sensors.t1", readings, msg_id=f"{run_id}/t1/{{index}}")

    @task.sensor(poke_interval=1, timeout=300, mode="poke")
    def replicated(params: dict | None = None) -> PokeReturnValue:
        # Exact: the leaf's last sequence, asked in the leaf, against what the hub's copy holds.
        status = JetStreamHook(params["conn_id"]).replication_status("readings-all", domain="hub")
        return PokeReturnValue(is_done=status.done, xcom_value=status.to_xcom())

    @task
    def checkpoint(replication: dict, params: dict | None = None) -> dict:
        hook = JetStreamHook(params["conn_id"], domain="hub")
        lag = hook.consumer_lag("readings-all", "reports", max_unprocessed=1_000_000)
        revision = hook.kv_put("pipeline", "readings.checkpoint", {"last_seq": replication["last_seq"]})
        entry = hook.kv_get("pipeline", "readings.checkpoint")
        return {
            "revision": revision,
            "checkpoint": json.loads(entry.value),
            "unprocessed": lag.to_xcom()["num_pending"],
        }

    status = replicated()
    declare() >> publish() >> status
    checkpoint(status)
