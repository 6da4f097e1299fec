"""Scheduled edge-to-hub replication: aggregate every leaf's readings into the hub, wait until
replication has caught up, then turn the new readings into Parquet exactly once.

The leaves are read when a run starts (the Airflow Variable ``jetstream_leaf_domains``, else
``JETSTREAM_LEAF_DOMAINS``), and the per-leaf steps are mapped over them: the DAG has the same tasks
for 2 leaves or 1,000. A leaf that is away (link down, server off) never fails a run: its mapped
steps are skipped with a log line and an XCom record, and the hub processes what has arrived. The
Spark job is exactly-once by stream sequence, so the leaf's readings are processed by the first run
after they reach the hub.
"""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.sdk import DAG, Param, task
from edge_pipeline_config import (
    AGGREGATE_OVERRIDES,
    AGGREGATE_STREAM,
    CHECKPOINT_KEY,
    COMMANDS_STREAM,
    HUB_DOMAIN,
    LAST_RUN_KEY,
    LEAF_DOMAINS_VARIABLE,
    LEAF_STREAM,
    LEAF_STREAM_MODE,
    NATS_CONN_ID,
    OUTPUT_DIR,
    PIPELINE_BUCKET,
    PROBE_TIMEOUT_SECONDS,
    RETRIES,
    RETRY_DELAY_SECONDS,
    SPARK_CONN_ID,
    aggregate_sources,
    leaf_domains_of_run,
    leaf_stream_spec,
    leaf_subject_transforms,
)

from airflow_provider_jetstream.compat import AirflowSkipException
from airflow_provider_jetstream.core.errors import JetStreamDomainUnavailableError
from airflow_provider_jetstream.operators.kv import JetStreamCreateKeyValueOperator, JetStreamKeyValuePutOperator
from airflow_provider_jetstream.operators.spark import JetStreamSparkSubmitOperator
from airflow_provider_jetstream.operators.streams import (
    JetStreamCreateDurableSourceOperator,
    JetStreamCreateMirrorOperator,
    JetStreamCreateSourcedStreamOperator,
    JetStreamCreateStreamOperator,
)
from airflow_provider_jetstream.sensors.replication_lag import JetStreamReplicationLagSensor
from airflow_provider_jetstream.sensors.retention_headroom import JetStreamRetentionHeadroomSensor

PROBE_TASK = "find_reachable_leaves"
HEADROOM_TASK = "check_retention_headroom"

DOC = f"""
### Edge to hub

Every hour, for each leaf of the run and the hub `{HUB_DOMAIN}`. The run's leaves are read when it starts:
the Airflow Variable `{LEAF_DOMAINS_VARIABLE}` (comma-separated or a JSON list of domains) if it is set,
else the `JETSTREAM_LEAF_DOMAINS` environment variable. A leaf added to the Variable is in the next run,
with no restart and no new tasks: the per-leaf steps are mapped over the list, one instance per leaf,
named by its domain.

1. **check** the run's leaves and which of them answer through the hub (`{PROBE_TASK}`: one JetStream
   request per leaf, a few seconds at most). A leaf list that is not usable (not a domain name, a leaf
   twice, the hub's domain, more leaves than `[core] max_map_length`) fails the run here, before
   anything is changed. XCom: `leaves`, `reachable`, and `unreachable` with each leaf's reason and
   `since` (the hub's last contact with its readings, when known).
2. **ensure**, for each reachable leaf, its `{LEAF_STREAM}` stream (`sensors.<leaf>.>`, mapped task
   `ensure_leaf_readings`) and its mirror of the hub's `{COMMANDS_STREAM}` stream (edges get commands even
   while the link is down; `ensure_leaf_commands_mirror`); in the hub,
   `{COMMANDS_STREAM}`, the KV bucket `{PIPELINE_BUCKET}` and `{AGGREGATE_STREAM}`, which sources every leaf,
   subjects rewritten to `edge.<leaf>.>`. All idempotent: an unchanged spec sends no update; nothing
   is ever deleted. **A leaf that is away has its mapped instances skipped**, not retried into a failure
   (also when it drops between the check and its step); the hub steps run all the same. The leaf list is
   this DAG's own declaration of its edge, so the aggregate takes a source of every listed leaf even if
   that leaf never answered yet (`allow_unreachable_origins`; otherwise a domain the hub never saw is
   refused as a wrong name, docs/management.md).
3. **wait** (deferrable) until every source of `{AGGREGATE_STREAM}` that can be reached has exactly caught
   up with its origin: lag alone cannot tell a cut-off leaf from a caught-up one.
4. **process** the new readings with Spark: from the sequence after the checkpoint in KV
   `{PIPELINE_BUCKET}/{CHECKPOINT_KEY}` to Parquet under the `output_dir` param, then advance the checkpoint.
   The job reads only the hub, so a leaf that is away cannot fail it.
5. **check the retention headroom** of every leaf (`{HEADROOM_TASK}`, beside the processing, never in its
   way): what the hub has not copied yet from each leaf (messages, bytes, the oldest one's age) against
   the leaf stream's limits and its account's storage, and the time until the first uncopied reading would be
   discarded at the current rate. Below the `min_time_to_loss` param the task fails (an alert: the
   processing goes on), or with `low_headroom="warn"` logs a warning. A leaf that is away does not fail it.
6. **mark** the run in KV `{PIPELINE_BUCKET}/{LAST_RUN_KEY}`: run id and type, when it ran, its logical date
   if it has one, and the leaves whose new data it went on without (`proceeded_without`).

#### The leaves' streams: `JETSTREAM_LEAF_STREAM_MODE` (now `{LEAF_STREAM_MODE}`)

- **`limits`** (the default): each leaf keeps its readings 7 days and the hub sources them; a leaf away
  longer than that loses what the hub had not copied.
- **`durable`** (nats-server 2.14+ everywhere): durable sourcing. Each leaf's `{LEAF_STREAM}` is a work queue
  the hub reads through a flow-control consumer (one task per leaf sets up the stream, the consumer and the
  hub's source of it); the leaf deletes a reading only once the hub stored it, so its disk holds just what
  the hub lacks, and nothing is lost however long the link is down. The sensor's "caught up" then means
  the hub stored everything and the leaf's stream is drained.

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
    """A per-leaf step, mapped over the run's leaves: ``leaf`` is its domain, ``unreachable`` why the
    reachability check could not reach it (None: it answered).

    A leaf that did not answer has the step skipped before anything is sent to it; one that went away
    after the check skips it too (with the reason) instead of failing it; the next run ensures it again.
    """

    def __init__(self, *, leaf: str, unreachable: str | None = None, **kwargs: Any) -> None:
        super().__init__(**{"domain": leaf, **self.leaf_arguments(leaf)}, **kwargs)  # type: ignore[call-arg]
        self.leaf = leaf
        self.unreachable = unreachable

    @staticmethod
    def leaf_arguments(leaf: str) -> dict[str, Any]:
        """The step's arguments that depend on the leaf (its ``domain`` unless given here)."""
        return {}

    def execute(self, context: Any) -> Any:
        if self.unreachable is not None:
            raise AirflowSkipException(
                f"leaf {self.leaf!r} is away ({self.unreachable}): its steps are skipped in this run; the hub "
                "steps go on, and a later run ensures it once the leaf is back"
            )
        try:
            return super().execute(context)  # type: ignore[misc]
        except JetStreamDomainUnavailableError as err:
            raise AirflowSkipException(
                f"leaf {self.leaf!r} went away after the reachability check: {err}. Skipped; a later run "
                "ensures it once the leaf is back"
            ) from None


class EnsureLeafStream(_LeafStep, JetStreamCreateStreamOperator):
    """``JetStreamCreateStreamOperator`` for a leaf's readings stream: skipped, not failed, when the leaf is away."""

    @staticmethod
    def leaf_arguments(leaf: str) -> dict[str, Any]:
        return {"stream": leaf_stream_spec(leaf)}


class EnsureLeafMirror(_LeafStep, JetStreamCreateMirrorOperator):
    """``JetStreamCreateMirrorOperator`` for a leaf's mirror: skipped, not failed, when the leaf is away."""


class EnsureLeafDurableSource(_LeafStep, JetStreamCreateDurableSourceOperator):
    """``JetStreamCreateDurableSourceOperator`` for a leaf's work queue, its consumer and the hub aggregate's
    source of it: skipped, not failed, when the leaf is away."""

    @staticmethod
    def leaf_arguments(leaf: str) -> dict[str, Any]:
        return {
            "domain": HUB_DOMAIN,
            "stream": AGGREGATE_STREAM,
            "origin": leaf_stream_spec(leaf),
            "origin_domain": leaf,
            "stream_overrides": AGGREGATE_OVERRIDES,
            "options": {"subject_transforms": leaf_subject_transforms(leaf)},
        }


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
        "min_time_to_loss": Param(
            "6h",
            type="string",
            description="Least time before a leaf's limits would discard a reading the hub has not copied yet.",
        ),
        "low_headroom": Param(
            "fail",
            type="string",
            enum=["fail", "warn"],
            description="Below min_time_to_loss: fail the headroom check (an alert), or log a warning.",
        ),
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
        """The run's leaves, which of them answer through the hub now, and for each that does not, why
        and since when. A leaf list that cannot be used fails here, before any step changes anything."""
        import datetime as dt
        import logging

        from airflow_provider_jetstream.compat import AirflowFailException, conf
        from airflow_provider_jetstream.core.api import JetStreamApi
        from airflow_provider_jetstream.core.connection.fields import api_prefix_for
        from airflow_provider_jetstream.core.errors import JetStreamError
        from airflow_provider_jetstream.core.status.origins import statuses_from_stream_info
        from airflow_provider_jetstream.core.status.report import iso_utc
        from airflow_provider_jetstream.hooks.jetstream import JetStreamHook

        log = logging.getLogger("airflow.task")
        try:
            leaves = leaf_domains_of_run()
        except ValueError as err:
            raise AirflowFailException(f"the run's leaf list is refused, nothing was changed: {err}") from None
        most = conf.getint("core", "max_map_length")
        if len(leaves) > most:
            raise AirflowFailException(
                f"{len(leaves)} leaves: more than Airflow maps one step over ([core] max_map_length={most}); "
                "raise it (AIRFLOW__CORE__MAX_MAP_LENGTH) on every Airflow process. Nothing was changed"
            )
        hook = JetStreamHook(NATS_CONN_ID)
        checked_at = dt.datetime.now(dt.timezone.utc)

        async def check() -> tuple[dict[str, str | None], dict[str, float]]:
            reasons = await hook.aprobe_domains(leaves, request_timeout=PROBE_TIMEOUT_SECONDS)
            last_contact: dict[str, float] = {}
            if any(reasons.values()):
                # The hub's last contact with each leaf's readings: when the leaf went away, if known (the
                # same instant the replication sensor's XCom gives for the same outage).
                async with hook.aconnect() as nc:
                    try:
                        info = await JetStreamApi(nc, api_prefix_for(HUB_DOMAIN)).stream_info(AGGREGATE_STREAM)
                    except JetStreamError:
                        info = None
                for status in statuses_from_stream_info(info or {}):
                    if status.domain and status.last_contact is not None:
                        last_contact[status.domain] = status.last_contact
            return reasons, last_contact

        reasons, last_contact = hook.run(check())
        unreachable = []
        for leaf, reason in reasons.items():
            if reason is None:
                continue
            record = {
                "leaf": leaf,
                "domain": leaf,
                "api_prefix": api_prefix_for(leaf),
                "reason": reason,
                "since": iso_utc(last_contact.get(leaf)),
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
        log.info("Leaves of this run: %d; reachable: %s", len(leaves), ", ".join(reachable) or "none")
        return {
            "checked_at": checked_at.isoformat(timespec="seconds"),
            "leaves": leaves,
            "reachable": reachable,
            "unreachable": unreachable,
        }

    @task(retries=0)
    def each_leaf(reachability: dict[str, Any]) -> list[dict[str, Any]]:
        """What the per-leaf steps are mapped over: one entry per leaf of the run, with why it is away (None:
        it answered). Every leaf has its mapped instances, so a leaf that is away shows as skipped ones."""
        reasons = {record["leaf"]: record["reason"] for record in reachability["unreachable"]}
        return [{"leaf": leaf, "unreachable": reasons.get(leaf)} for leaf in reachability["leaves"]]

    @task(retries=0)
    def hub_aggregate_sources(reachability: dict[str, Any]) -> list[dict[str, Any]]:
        """The hub aggregate's sources: every leaf of the run, reachable or not (the hub keeps the source of a
        leaf that is away, and catches up once it is back)."""
        return aggregate_sources(reachability["leaves"])

    probe = find_reachable_leaves()
    leaves = each_leaf(probe)
    # One task each, mapped at run time over the run's leaves: the DAG's size does not grow with them.
    # (A mapped task takes only BaseOperator's arguments from default_args: the connection is given.)
    if LEAF_STREAM_MODE == "durable":
        # One leaf at a time: each adds its source to the hub's aggregate, and two updates of one stream at
        # once could each keep only its own. A skipped leaf does not hold the next back.
        leaf_streams = EnsureLeafDurableSource.partial(
            task_id="ensure_leaf_readings",
            jetstream_conn_id=NATS_CONN_ID,
            map_index_template="{{ task.leaf }}",
            max_active_tis_per_dagrun=1,
        ).expand_kwargs(leaves)
    else:
        leaf_streams = EnsureLeafStream.partial(
            task_id="ensure_leaf_readings", jetstream_conn_id=NATS_CONN_ID, map_index_template="{{ task.leaf }}"
        ).expand_kwargs(leaves)
    commands_mirrors = EnsureLeafMirror.partial(
        task_id="ensure_leaf_commands_mirror",
        jetstream_conn_id=NATS_CONN_ID,
        map_index_template="{{ task.leaf }}",
        stream=COMMANDS_STREAM,
        origin=COMMANDS_STREAM,
        origin_domain=HUB_DOMAIN,
    ).expand_kwargs(leaves)

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
        sources=hub_aggregate_sources(probe),
        stream_overrides=AGGREGATE_OVERRIDES,
        # The listed leaves are the edge this DAG declares: one away on its first run is still sourced.
        options={"allow_unreachable_origins": True},
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
    # Every run: how close each leaf is to losing what the hub has not copied yet. Beside the processing, so a
    # low headroom alerts (this task fails) without holding back the hub's work; a leaf away does not fail it.
    check_headroom = JetStreamRetentionHeadroomSensor(
        task_id=HEADROOM_TASK,
        domain=HUB_DOMAIN,
        stream=AGGREGATE_STREAM,
        min_time_to_loss="{{ params.min_time_to_loss }}",
        low_headroom="{{ params.low_headroom }}",
        unreachable_origins="proceed",
        options={"max_inactive": "{{ params.max_inactive }}"},
        deferrable=True,
        poke_interval=2,
        timeout=60 * 30,
        retries=0,
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

    # Nothing is ensured before the run's leaf list is checked.
    probe >> [hub_commands, pipeline_bucket]
    hub_commands >> commands_mirrors
    leaf_streams >> aggregate
    [aggregate, pipeline_bucket] >> wait_replicated >> to_parquet >> mark_run
    aggregate >> check_headroom
