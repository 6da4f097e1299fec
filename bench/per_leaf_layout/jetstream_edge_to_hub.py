"""The edge-to-hub DAG as it was before its per-leaf steps were mapped (commit 2b75831), kept as the
"before" of ``bench/scale.py``'s parse figures: three tasks per leaf, written out when the file is parsed
from ``JETSTREAM_LEAF_DOMAINS``. Not an example to deploy: ``dags/jetstream_edge_to_hub.py`` is.

Scheduled edge-to-hub replication: aggregate every leaf's readings into the hub, wait until
replication has caught up, then turn the new readings into Parquet exactly once.

A leaf that is away (link down, server off) never fails a run: its own steps are skipped with a log
line and an XCom record, and the hub processes what has arrived. The Spark job is exactly-once by
stream sequence, so the leaf's readings are processed by the first run after they reach the hub.
"""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.sdk import DAG, Param, task
from airflow.sdk.exceptions import AirflowSkipException
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
    PROBE_TIMEOUT_SECONDS,
    RETRIES,
    RETRY_DELAY_SECONDS,
    SPARK_CONN_ID,
    aggregate_sources,
    leaf_stream_spec,
)

from airflow_provider_jetstream.core.errors import JetStreamDomainUnavailableError
from airflow_provider_jetstream.operators.kv import JetStreamCreateKeyValueOperator, JetStreamKeyValuePutOperator
from airflow_provider_jetstream.operators.spark import JetStreamSparkSubmitOperator
from airflow_provider_jetstream.operators.streams import (
    JetStreamCreateMirrorOperator,
    JetStreamCreateSourcedStreamOperator,
    JetStreamCreateStreamOperator,
)
from airflow_provider_jetstream.sensors.replication_lag import JetStreamReplicationLagSensor

PROBE_TASK = "find_reachable_leaves"

DOC = f"""
### Edge to hub

Every hour, for the leaves {", ".join(f"`{leaf}`" for leaf in LEAF_DOMAINS)} and the hub `{HUB_DOMAIN}`:

1. **check** which leaves answer through the hub (`{PROBE_TASK}`: one JetStream request per leaf, a
   few seconds at most). XCom: `reachable`, and `unreachable` with each leaf's reason and `since`
   (the hub's last contact with its readings, when known).
2. **ensure**, for each reachable leaf, its `{LEAF_STREAM}` stream (`sensors.<leaf>.>`) and its mirror of
   the hub's `{COMMANDS_STREAM}` stream (edges get commands even while the link is down); in the hub,
   `{COMMANDS_STREAM}`, the KV bucket `{PIPELINE_BUCKET}` and `{AGGREGATE_STREAM}`, which sources every leaf,
   subjects rewritten to `edge.<leaf>.>`. All idempotent: an unchanged spec sends no update; nothing
   is ever deleted. **A leaf that is away has its steps skipped**, not retried into a failure (also
   when it drops between the check and its step); the hub steps run all the same.
3. **wait** (deferrable) until every source of `{AGGREGATE_STREAM}` that can be reached has exactly caught
   up with its origin: lag alone cannot tell a cut-off leaf from a caught-up one.
4. **process** the new readings with Spark: from the sequence after the checkpoint in KV
   `{PIPELINE_BUCKET}/{CHECKPOINT_KEY}` to Parquet under the `output_dir` param, then advance the checkpoint.
   The job reads only the hub, so a leaf that is away cannot fail it.
5. **mark** the run in KV `{PIPELINE_BUCKET}/{LAST_RUN_KEY}`: run id and type, when it ran, its logical date
   if it has one, and the leaves whose new data it went on without (`proceeded_without`).

#### A leaf that is away: `unreachable_origins`

The replication sensor's policy for an origin it cannot reach is a param of each run:

- **`proceed` (the default)**: succeed once every *reachable* origin has exactly caught up, and list
  the unreachable ones (with reason and since when) in the sensor's XCom under `unreachable`. Edge
  links go down for hours; the hourly job should not stop the hub's processing for that. Nothing is
  lost or repeated: while the leaf is away its readings stay in its own stream (kept 7 days, its
  `max_age`); when the link is back the hub's source catches up, and the next run's Spark job,
  which is exactly-once by stream sequence, picks them up.
- **`wait`**: wait, deferred in the triggerer, until every origin is back and caught up (or the
  sensor's timeout). Trigger a run with `{{"unreachable_origins": "wait"}}` when it must hold every
  edge's data, e.g. a period close.

Works for scheduled, manual (`airflow dags trigger`, with no logical date), REST (`"logical_date":
null` or a date) and backfill runs: nothing here needs a logical date or data interval.
"""


class _LeafStep:
    """A per-leaf step: a leaf that went away after the reachability check skips the step (with the
    reason) instead of failing it; the next run ensures it again."""

    domain: str | None

    def execute(self, context: Any) -> Any:
        try:
            return super().execute(context)  # type: ignore[misc]
        except JetStreamDomainUnavailableError as err:
            raise AirflowSkipException(
                f"leaf {self.domain!r} went away after the reachability check: {err}. Skipped; a later run "
                "ensures it once the leaf is back"
            ) from None


class EnsureLeafStream(_LeafStep, JetStreamCreateStreamOperator):
    """``JetStreamCreateStreamOperator`` for a leaf's stream: skipped, not failed, when the leaf is away."""


class EnsureLeafMirror(_LeafStep, JetStreamCreateMirrorOperator):
    """``JetStreamCreateMirrorOperator`` for a leaf's mirror: skipped, not failed, when the leaf is away."""


def task_suffix(leaf: str) -> str:
    """A leaf domain as a task id part: ``leaf-a`` -> ``leaf_a``."""
    return leaf.replace("-", "_")


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
        "unreachable_origins": Param(
            "proceed",
            type="string",
            enum=["proceed", "wait"],
            description="A leaf the hub cannot reach: proceed without its new data (a later run gets it), "
            "or wait until it is back.",
        ),
    },
    default_args={
        "jetstream_conn_id": NATS_CONN_ID,
        "retries": RETRIES,
        "retry_delay": pendulum.duration(seconds=RETRY_DELAY_SECONDS),
    },
) as dag:

    @task(task_id=PROBE_TASK)
    def find_reachable_leaves() -> dict[str, Any]:
        """Which leaves answer through the hub now; for each that does not, why and since when."""
        import datetime as dt
        import logging

        from airflow_provider_jetstream.core.api import JetStreamApi
        from airflow_provider_jetstream.core.arguments.names import domain_of
        from airflow_provider_jetstream.core.connection.fields import api_prefix_for
        from airflow_provider_jetstream.core.errors import JetStreamError
        from airflow_provider_jetstream.hooks.jetstream import JetStreamHook

        log = logging.getLogger("airflow.task")
        hook = JetStreamHook(NATS_CONN_ID)
        checked_at = dt.datetime.now(dt.timezone.utc)

        async def check() -> tuple[dict[str, str | None], dict[str, float]]:
            reasons = await hook.aprobe_domains(LEAF_DOMAINS, request_timeout=PROBE_TIMEOUT_SECONDS)
            silent_for: dict[str, float] = {}
            if any(reasons.values()):
                # The hub's last contact with each leaf's readings: when the leaf went away, if known.
                async with hook.aconnect() as nc:
                    try:
                        info = await JetStreamApi(nc, api_prefix_for(HUB_DOMAIN)).stream_info(AGGREGATE_STREAM)
                    except JetStreamError:
                        info = None
                for source in (info or {}).get("sources") or []:
                    leaf = domain_of(((source.get("external") or {}).get("api")) or None)
                    active_ns = source.get("active")
                    if leaf and isinstance(active_ns, int) and active_ns >= 0:
                        silent_for[leaf] = active_ns / 1e9
            return reasons, silent_for

        reasons, silent_for = hook.run(check())
        unreachable = []
        for leaf, reason in reasons.items():
            if reason is None:
                continue
            since = checked_at - dt.timedelta(seconds=silent_for[leaf]) if leaf in silent_for else None
            record = {
                "leaf": leaf,
                "domain": leaf,
                "api_prefix": api_prefix_for(leaf),
                "reason": reason,
                "since": since.isoformat(timespec="seconds") if since else None,
            }
            unreachable.append(record)
            log.warning(
                "Leaf %r is unreachable (%s), since %s: its steps are skipped in this run; its readings stay in its "
                "own stream and are processed by the first run after the link is back.",
                leaf,
                reason,
                record["since"] or "an unknown time (the hub has no contact time for it)",
            )
        reachable = [leaf for leaf, reason in reasons.items() if reason is None]
        log.info("Reachable leaves: %s", ", ".join(reachable) or "none")
        return {
            "checked_at": checked_at.isoformat(timespec="seconds"),
            "reachable": reachable,
            "unreachable": unreachable,
        }

    @task.short_circuit(ignore_downstream_trigger_rules=False, retries=0)
    def leaf_reachable(reachability: dict[str, Any], leaf: str) -> bool:
        """Go on with this leaf's steps only if it answered; otherwise skip them (and only them)."""
        import logging

        if leaf in reachability["reachable"]:
            return True
        logging.getLogger("airflow.task").warning(
            "Leaf %r is away: its steps are skipped in this run; the hub steps go on.", leaf
        )
        return False

    probe = find_reachable_leaves()
    leaf_streams = []
    commands_mirrors = []
    for leaf in LEAF_DOMAINS:
        gate = leaf_reachable.override(task_id=f"{task_suffix(leaf)}_reachable")(probe, leaf)
        stream = EnsureLeafStream(
            task_id=f"ensure_{task_suffix(leaf)}_readings",
            domain=leaf,
            stream=leaf_stream_spec(leaf),
        )
        mirror = EnsureLeafMirror(
            task_id=f"ensure_{task_suffix(leaf)}_commands_mirror",
            domain=leaf,
            stream=COMMANDS_STREAM,
            origin=COMMANDS_STREAM,
            origin_domain=HUB_DOMAIN,
        )
        gate >> [stream, mirror]
        leaf_streams.append(stream)
        commands_mirrors.append(mirror)

    hub_commands = JetStreamCreateStreamOperator(
        task_id="ensure_hub_commands",
        domain=HUB_DOMAIN,
        stream={"name": COMMANDS_STREAM, "subjects": ["commands.>"], "max_age": "30d"},
    )
    # Runs when leaf streams were skipped (leaf away), not when one failed.
    aggregate = JetStreamCreateSourcedStreamOperator(
        task_id="ensure_hub_aggregate",
        domain=HUB_DOMAIN,
        stream=AGGREGATE_STREAM,
        sources=aggregate_sources(LEAF_DOMAINS),
        stream_overrides={"max_age": "30d", "storage": "file"},
        trigger_rule="none_failed",
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
        # Explicit: ask each origin for its last sequence (verify_origin), and go on without the leaves that are
        # away (or wait for them, per run): see "A leaf that is away" in the DAG docs.
        options={"max_lag": 0, "max_inactive": "{{ params.max_inactive }}", "verify_origin": "auto"},
        unreachable_origins="{{ params.unreachable_origins }}",
        deferrable=True,
        poke_interval=2,
        timeout=60 * 30,
    )
    to_parquet = JetStreamSparkSubmitOperator(
        task_id="readings_to_parquet",
        spark_conn_id=SPARK_CONN_ID,
        domain=HUB_DOMAIN,
        stream=AGGREGATE_STREAM,
        checkpoint_bucket=PIPELINE_BUCKET,
        options={"checkpoint_key": CHECKPOINT_KEY, "partition_by": ["subject", "date"]},
        output_path="{{ params.output_dir }}/readings",
    )
    # No logical date in manual and REST runs by default: only what every run has.
    mark_run = JetStreamKeyValuePutOperator(
        task_id="mark_run",
        domain=HUB_DOMAIN,
        bucket=PIPELINE_BUCKET,
        key=LAST_RUN_KEY,
        value={
            "run_id": "{{ run_id }}",
            "run_type": "{{ dag_run.run_type }}",
            "run_after": "{{ dag_run.run_after }}",
            "logical_date": "{{ dag_run.logical_date or '' }}",
            # Origins whose new data this run went on without (the sensor's record; empty when it waited).
            "proceeded_without": "{{ (ti.xcom_pull(task_ids='wait_replicated') or {}).get('unreachable', []) "
            "| map(attribute='domain') | join(',') }}",
        },
    )

    hub_commands >> commands_mirrors
    leaf_streams >> aggregate
    [aggregate, pipeline_bucket] >> wait_replicated >> to_parquet >> mark_run
