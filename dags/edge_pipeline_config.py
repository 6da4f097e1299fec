"""Names shared by the example DAGs: the edge-to-hub topology they run against.

Defaults match `make demo` and docker-compose.yml (hub domain `hub`, leaves `leaf-a` and
`leaf-b`, Airflow connection `nats_hub`); environment variables override them for your deployment.
"""

from __future__ import annotations

import os

#: Airflow connection (type jetstream) to the hub; every domain is reached through it.
NATS_CONN_ID = os.environ.get("JETSTREAM_CONN_ID", "nats_hub")
#: Spark connection for spark-submit (`local[*]` by default; a cluster in docker-compose).
SPARK_CONN_ID = os.environ.get("JETSTREAM_SPARK_CONN_ID", "spark_local")
HUB_DOMAIN = os.environ.get("JETSTREAM_HUB_DOMAIN", "hub")
#: One JetStream domain per edge server.
LEAF_DOMAINS = [d.strip() for d in os.environ.get("JETSTREAM_LEAF_DOMAINS", "leaf-a,leaf-b").split(",") if d.strip()]
#: Where the Spark job writes Parquet.
OUTPUT_DIR = os.environ.get("JETSTREAM_OUTPUT_DIR", "/opt/airflow/output")

#: Each leaf's stream of sensor readings. Subjects carry the site, so no two domains of the
#: account listen on the same subject (the NATS docs: both would store every message).
LEAF_STREAM = "readings"
#: The hub's aggregate of every leaf's readings, subjects rewritten to edge.<site>.>.
AGGREGATE_STREAM = "readings-all"
#: Commands published in the hub, mirrored into every leaf so edges get them while offline.
COMMANDS_STREAM = "commands"
#: KV bucket in the hub: the Spark job's checkpoint and the run markers.
PIPELINE_BUCKET = "pipeline"
CHECKPOINT_KEY = "edge_to_hub.checkpoint"
LAST_RUN_KEY = "edge_to_hub.last_run"
#: KV bucket in each leaf where an edge process announces a finished batch.
EDGE_STATUS_BUCKET = "edge-status"


def leaf_stream_spec(leaf: str) -> dict:
    """The spec of a leaf's readings stream (the DAG ensures it; edge processes may create it first)."""
    return {"name": LEAF_STREAM, "subjects": [f"sensors.{leaf}.>"], "max_age": "7d", "storage": "file"}


def aggregate_sources() -> list[dict]:
    """The hub aggregate's sources: each leaf's stream, with the origin kept in the subject."""
    return [
        {
            "name": LEAF_STREAM,
            "domain": leaf,
            "subject_transforms": [{"src": f"sensors.{leaf}.>", "dest": f"edge.{leaf}.>"}],
        }
        for leaf in LEAF_DOMAINS
    ]
