"""Links from each stream on the JetStream page to the Airflow assets named by its ``jetstream://`` URI and the
DAG runs whose asset events touched it, read from Airflow's database, filtered by what the user may read."""

from __future__ import annotations

import urllib.parse
from typing import Any

#: Most DAG runs listed per stream, newest first (a run whose tasks made several events is listed once).
RUNS_PER_STREAM = 5


def _q(part: str) -> str:
    return urllib.parse.quote(part, safe="")


def link_streams(overview: dict[str, Any], user: Any) -> None:
    """Add ``links`` to each stream of ``overview``: ``{"asset": {"id", "name", "uri", "href"} or None,
    "runs": [{"dag_id", "run_id", "at", "href"}]}`` (``href`` relative to Airflow's base URL; each run once, ``at``
    its newest event on the stream). Without the right to read assets, no asset or run is listed; runs of DAGs
    the user may not read are left out."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import func, select

    streams = [s for d in overview["domains"] for s in d["streams"]]
    for stream in streams:
        stream["links"] = {"asset": None, "runs": []}
    auth = get_auth_manager()
    if not streams or not auth.is_authorized_asset(method="GET", user=user):
        return
    by_uri = {s["asset_uri"]: s for s in streams}
    with create_session() as session:
        dag_ids = auth.get_authorized_dag_ids(user=user, method="GET", session=session)
        assets = session.execute(
            select(AssetModel.id, AssetModel.name, AssetModel.uri).where(AssetModel.uri.in_(list(by_uri)))
        ).all()
        for asset_id, name, uri in assets:
            links = by_uri[uri]["links"]
            links["asset"] = {"id": asset_id, "name": name, "uri": uri, "href": f"assets/{asset_id}"}
            newest = func.max(AssetEvent.timestamp)
            events = session.execute(
                select(AssetEvent.source_dag_id, AssetEvent.source_run_id, newest)
                .where(AssetEvent.asset_id == asset_id, AssetEvent.source_dag_id.in_(dag_ids))
                .group_by(AssetEvent.source_dag_id, AssetEvent.source_run_id)
                .order_by(newest.desc())
                .limit(RUNS_PER_STREAM)
            ).all()
            links["runs"] = [
                {
                    "dag_id": dag_id,
                    "run_id": run_id,
                    "at": timestamp.isoformat() if timestamp else None,
                    "href": f"dags/{_q(dag_id)}/runs/{_q(run_id)}" if run_id else f"dags/{_q(dag_id)}",
                }
                for dag_id, run_id, timestamp in events
            ]
