"""The JetStream page's FastAPI app, mounted by Airflow's api-server under ``/jetstream``: the page (HTML) and
its JSON, both behind Airflow's authentication and its permission to read the chosen connection.

- ``GET /jetstream/``: the ``jetstream`` connections the user may read, to choose one (``?conn_id=`` goes to its page).
- ``GET /jetstream/connections/{connection_id}``: the page of one connection (one check per load).
- ``GET /jetstream/api/connections/{connection_id}``: the same check as JSON.

Airflow's own dependencies decide who gets in (``requires_access_connection("GET")``: a logged-in user
allowed to read that connection; no token: 401; a bad one, or no permission: 403). The NATS work runs
through the hook's one sync bridge in FastAPI's worker threads; the history is an Airflow Variable.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from airflow.api_fastapi.auth.managers.models.resource_details import ConnectionDetails
from airflow.api_fastapi.core_api.security import GetUserDep, requires_access_connection
from fastapi import Depends, FastAPI, HTTPException
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse

from airflow_provider_jetstream.core.errors import JetStreamError
from airflow_provider_jetstream.hooks.status import JetStreamStatusHook
from airflow_provider_jetstream.ui.history import VariableStore, record_check
from airflow_provider_jetstream.ui.links import link_streams
from airflow_provider_jetstream.ui.overview import gather_overview
from airflow_provider_jetstream.ui.render import render_page

CONN_TYPE = "jetstream"
#: News entries the page and its JSON show (the Variable keeps more).
NEWS_SHOWN = 50

app = FastAPI(title="NATS JetStream", description="The JetStream page of airflow-provider-jetstream")


def jetstream_conn_ids(user: Any) -> list[str]:
    """The ids of ``jetstream`` connections in Airflow's database and in ``AIRFLOW_CONN_*`` variables that the
    user may read (other secrets backends cannot be listed: type the id in the URL)."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.models.connection import Connection
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        ids = set(session.scalars(select(Connection.conn_id).where(Connection.conn_type == CONN_TYPE)))
    for name, value in os.environ.items():
        if name.startswith("AIRFLOW_CONN_"):
            try:
                kind = json.loads(value).get("conn_type")
            except (ValueError, AttributeError):
                kind = value.partition("://")[0]
            if kind == CONN_TYPE:
                ids.add(name.removeprefix("AIRFLOW_CONN_").lower())
    auth = get_auth_manager()
    return sorted(
        i for i in ids if auth.is_authorized_connection(method="GET", details=ConnectionDetails(conn_id=i), user=user)
    )


def check_connection(conn_id: str, user: Any) -> dict[str, Any]:
    """One check of the connection (see :func:`.overview.gather_overview`), recorded in its history, linked."""
    hook = JetStreamStatusHook(jetstream_conn_id=conn_id)
    store = VariableStore()
    history = store.load(conn_id) or {}
    watches = dict(history.get("watches") or {})
    try:
        overview = hook.run(gather_overview(hook, watches))
    except (JetStreamError, ValueError) as err:
        raise HTTPException(status_code=502, detail=str(err)) from None
    except Exception as err:  # a connection that does not exist, or is not a jetstream one
        raise HTTPException(status_code=404, detail=f"connection {conn_id!r}: {type(err).__name__}: {err}") from None
    history = record_check(history, overview, time.time())
    history["watches"] = watches
    store.save(conn_id, history)
    overview["history"] = {"news": history["news"][-NEWS_SHOWN:], "last_checked": history["last_checked"]}
    link_streams(overview, user)
    return overview


@app.get("/", response_class=HTMLResponse, dependencies=[Depends(requires_access_connection("GET"))])
def index(user: GetUserDep, conn_id: str | None = None) -> Any:
    if conn_id:
        return RedirectResponse(f"connections/{conn_id}", status_code=303)
    ids = jetstream_conn_ids(user)
    if len(ids) == 1:
        return RedirectResponse(f"connections/{ids[0]}", status_code=303)
    note = None if ids else f"No {CONN_TYPE!r} connection to show: add one under Admin > Connections."
    return HTMLResponse(render_page(ids, None, None, note, root="../"))


@app.get(
    "/connections/{connection_id}",
    response_class=HTMLResponse,
    dependencies=[Depends(requires_access_connection("GET"))],
)
def connection_page(connection_id: str, user: GetUserDep) -> HTMLResponse:
    ids = jetstream_conn_ids(user)
    try:
        overview, error = check_connection(connection_id, user), None
    except HTTPException as err:
        overview, error = None, str(err.detail)
    ids = ids if connection_id in ids else [connection_id, *ids]
    return HTMLResponse(render_page(ids, connection_id, overview, error, root="../../"))


@app.get("/api/connections/{connection_id}", dependencies=[Depends(requires_access_connection("GET"))])
def connection_json(connection_id: str, user: GetUserDep) -> JSONResponse:
    return JSONResponse(check_connection(connection_id, user))
