"""Test DAG: one task creates a stream in the domain given by params, through JetStreamHook."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Param, task

with DAG(
    "jetstream_hook_smoke",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1),
    catchup=False,
    params={"conn_id": Param("jetstream_default", type="string"), "domain": Param("leaf", type="string")},
) as dag:

    @task
    def create_stream(params: dict | None = None) -> dict:
        from nats.js.api import StreamConfig

        from airflow_provider_jetstream.hooks.jetstream import JetStreamHook

        hook = JetStreamHook(params["conn_id"], domain=params["domain"])

        async def create() -> dict:
            async with hook.ajetstream() as js:
                info = await js.add_stream(StreamConfig(name="dag_smoke", subjects=["dag.smoke"]))
                account = await hook.aaccount_info(js._nc)
                return {"name": info.config.name, "domain": account["domain"]}

        return hook.run(create())

    create_stream()
