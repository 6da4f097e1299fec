"""Event-driven edge batches: an edge announces a finished batch, the hub fires an asset event, a run processes it."""

from __future__ import annotations

import json
import os
from typing import Any

import pendulum
from airflow.sdk import DAG, Asset, AssetWatcher, task
from edge_pipeline_config import HUB_DOMAIN, LEAF_DOMAINS, LEAF_STREAM, NATS_CONN_ID, PIPELINE_BUCKET, leaf_readings

from airflow_provider_jetstream.assets.jetstream import create_asset
from airflow_provider_jetstream.operators.kv import JetStreamCreateKeyValueOperator
from airflow_provider_jetstream.operators.streams import (
    JetStreamCreateSourcedStreamOperator,
    JetStreamCreateStreamOperator,
)
from airflow_provider_jetstream.triggers.messages import JetStreamMessageTrigger

#: Each leaf's announcements (subjects carry the leaf, so no two domains store the same subject).
LEAF_ANNOUNCEMENTS = "announcements"
#: The hub's stream sourcing every leaf's announcements: what the watcher consumes.
HUB_ANNOUNCEMENTS = "announcements-all"
#: The durable consumer of the watcher: its ack floor is where the DAG resumes after any restart.
CONSUMER = "af_edge_events"
#: The server part of the asset URI (informational: the connection says where to connect).
ASSET_SERVER = os.environ.get("JETSTREAM_ASSET_SERVER", "nats-hub")
#: KV keys (hub bucket PIPELINE_BUCKET) that mark an announcement as processed: dedup across redeliveries.
DONE_KEY = "edge_events.done.{sequence}"


def announcement_subject(leaf: str) -> str:
    """Where the edge process of ``leaf`` publishes ``{"batch", "first_seq", "last_seq"}`` on its own leaf."""
    return f"announce.{leaf}.batch"


_stream_asset = create_asset(server=ASSET_SERVER, domain=HUB_DOMAIN, stream=HUB_ANNOUNCEMENTS)
announcements = Asset(
    uri=_stream_asset.uri,
    name=_stream_asset.name,
    watchers=[
        AssetWatcher(
            name="edge_announcements",
            trigger=JetStreamMessageTrigger(
                jetstream_conn_id=NATS_CONN_ID,
                domain=HUB_DOMAIN,
                stream=HUB_ANNOUNCEMENTS,
                consumer=CONSUMER,
                decode="json",  # an announcement that is not JSON is rejected (and terminated), not fired
            ),
        )
    ],
)

DOC = f"""
### Edge events

An edge process on leaf `<leaf>` writes a batch of readings to its `{LEAF_STREAM}` stream, then publishes
`{{"batch": "...", "first_seq": N, "last_seq": M}}` on `{announcement_subject("<leaf>")}` into the leaf's
`{LEAF_ANNOUNCEMENTS}` stream. The hub's `{HUB_ANNOUNCEMENTS}` sources every leaf's announcements (a leaf
that is offline catches up when it relinks). The asset `{announcements.uri}` has a watcher,
`JetStreamMessageTrigger` on the durable consumer `{CONSUMER}`: each announcement becomes one asset
event, and the message is acknowledged only after Airflow stored that event (at-least-once).

1. **process** (on each asset event): for each announcement in `triggering_asset_events`, skip it if its
   hub sequence is marked done (a redelivery), else read `first_seq..last_seq` of the leaf's
   `{LEAF_STREAM}` through the hub, count and average per sensor, and mark the sequence done in the hub's
   `{PIPELINE_BUCKET}` bucket (`{DONE_KEY}`).

The DAG `jetstream_edge_events_setup` (run it once) creates the leaves' and the hub's announcement
streams and the bucket. Several announcements stored between two scheduler loops start one run with
all of them.
"""

with DAG(
    dag_id="jetstream_edge_events",
    schedule=[announcements],
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    doc_md=DOC,
    tags=["jetstream", "example", "events"],
    default_args={"jetstream_conn_id": NATS_CONN_ID},
) as dag:

    @task
    def process_announced_batches(triggering_asset_events: Any = None) -> list[dict]:
        """Process every announced batch once (dedup by the announcement's hub sequence)."""
        events = [event for evs in (triggering_asset_events or {}).values() for event in evs]
        return process_announcements([event.extra.get("payload") or {} for event in events])

    process_announced_batches()


def process_announcements(payloads: list[dict]) -> list[dict]:
    """Read each announced range from its leaf and record it done; announcements already done are skipped."""
    from airflow_provider_jetstream.core.errors import KeyValueConflictError
    from airflow_provider_jetstream.hooks.jetstream import JetStreamHook

    hook = JetStreamHook(NATS_CONN_ID)

    async def run() -> list[dict]:
        results = []
        async with hook.aconnect():
            for payload in sorted(payloads, key=lambda p: p.get("seq", 0)):
                announcement = payload.get("data") or {}
                leaf = payload.get("subject", "").split(".")[1] if payload.get("subject") else None
                key = DONE_KEY.format(sequence=payload.get("seq"))
                if leaf not in LEAF_DOMAINS or await hook.akv_get(PIPELINE_BUCKET, key, domain=HUB_DOMAIN):
                    continue
                first, last = int(announcement["first_seq"]), int(announcement["last_seq"])
                totals = await leaf_readings(hook, leaf, first, last)
                result = {
                    "leaf": leaf,
                    "batch": announcement.get("batch"),
                    "announcement": payload["seq"],
                    "readings": last - first + 1,
                    "mean_by_sensor": {s: round(sum(v) / len(v), 3) for s, v in sorted(totals.items())},
                }
                try:  # only if the key does not exist yet
                    await hook.akv_put(PIPELINE_BUCKET, key, json.dumps(result), expected_revision=0, domain=HUB_DOMAIN)
                except KeyValueConflictError:
                    continue  # processed concurrently by another run
                results.append(result)
        return results

    return hook.run(run())


with DAG(
    dag_id="jetstream_edge_events_setup",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    doc_md="Creates what `jetstream_edge_events` consumes: each leaf's announcements stream, the hub's "
    "stream sourcing them, and the hub bucket that marks processed announcements.",
    tags=["jetstream", "example", "events"],
    default_args={"jetstream_conn_id": NATS_CONN_ID},
) as setup_dag:
    leaf_streams = [
        JetStreamCreateStreamOperator(
            task_id=f"ensure_announcements_{leaf.replace('-', '_')}",
            domain=leaf,
            stream={"name": LEAF_ANNOUNCEMENTS, "subjects": [f"announce.{leaf}.>"], "max_age": "30d"},
        )
        for leaf in LEAF_DOMAINS
    ]
    hub_stream = JetStreamCreateSourcedStreamOperator(
        task_id="ensure_hub_announcements",
        domain=HUB_DOMAIN,
        stream=HUB_ANNOUNCEMENTS,
        sources=[{"name": LEAF_ANNOUNCEMENTS, "domain": leaf} for leaf in LEAF_DOMAINS],
        stream_overrides={"max_age": "30d"},
    )
    bucket = JetStreamCreateKeyValueOperator(
        task_id="ensure_pipeline_bucket", domain=HUB_DOMAIN, bucket={"bucket": PIPELINE_BUCKET, "history": 10}
    )
    leaf_streams >> hub_stream
