"""The JetStream page's FastAPI app, mounted by Airflow's api-server under ``/jetstream``: the page (HTML) and
its JSON, both behind Airflow's authentication and its permission to read the chosen connection.

- ``GET /jetstream/``: the ``jetstream`` connections the user may read, to choose one (``?conn_id=`` goes to its page).
- ``GET /jetstream/connections/{connection_id}``: the page of one connection (one check per load).
- ``GET /jetstream/api/connections/{connection_id}``: the same check as JSON.

Nothing else: no OpenAPI schema or docs pages (they would answer without a login). Airflow's own dependencies
decide who gets in (``requires_access_connection("GET")``: a logged-in user allowed to read that connection, its
team's in multi-team mode; no token: 401; a bad one, or no permission: 403). A GET writes no Airflow Variable:
the history is kept in a private file per connection that the api-server's workers share (:mod:`.history`). The
NATS work runs through the hook's one sync bridge in FastAPI's worker threads.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from airflow.api_fastapi.auth.managers.models.resource_details import ConnectionDetails
from airflow.api_fastapi.core_api.security import GetUserDep, requires_access_connection
from airflow.configuration import AIRFLOW_HOME
from fastapi import Depends, FastAPI, HTTPException
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse

from airflow_provider_jetstream.core.errors import JetStreamError
from airflow_provider_jetstream.hooks.status import JetStreamStatusHook
from airflow_provider_jetstream.ui.history import PageMemory
from airflow_provider_jetstream.ui.links import link_streams
from airflow_provider_jetstream.ui.overview import gather_overview
from airflow_provider_jetstream.ui.render import render_page

CONN_TYPE = "jetstream"
#: News entries the page and its JSON show (the memory keeps more).
NEWS_SHOWN = 50

app = FastAPI(
    title="NATS JetStream",
    description="The JetStream page of airflow-provider-jetstream",
    docs_url=None,
    redoc_url=None,
    openapi_url=None,
)
#: The pages' history, per connection, shared by this machine's api-server workers.
MEMORY = PageMemory(Path(AIRFLOW_HOME) / "jetstream_page")


def _env_conn_ids() -> set[str]:
    """The ids of ``jetstream`` connections in ``AIRFLOW_CONN_<ID>`` variables (not a team's
    ``AIRFLOW_CONN__<TEAM>___<ID>``: Airflow gives those only to that team's tasks)."""
    ids = set()
    for name, value in os.environ.items():
        if name.startswith("AIRFLOW_CONN_") and not name.startswith("AIRFLOW_CONN__"):
            try:
                kind = json.loads(value).get("conn_type")
            except (ValueError, AttributeError):
                kind = value.partition("://")[0]
            if kind == CONN_TYPE:
                ids.add(name.removeprefix("AIRFLOW_CONN_").lower())
    return ids


def jetstream_conn_ids(user: Any) -> list[str]:
    """The ids of ``jetstream`` connections in Airflow's database and in ``AIRFLOW_CONN_*`` variables that the
    user may read, each asked of the auth manager with its team (other secrets backends cannot be listed: type
    the id in the URL)."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.models.connection import Connection
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        query = select(Connection.conn_id, Connection.team_name).where(Connection.conn_type == CONN_TYPE)
        teams: dict[str, str | None] = {conn_id: team for conn_id, team in session.execute(query)}
    for conn_id in _env_conn_ids():
        teams.setdefault(conn_id, None)  # a connection in the database shadows the variable, as in Airflow
    auth = get_auth_manager()

    def readable(conn_id: str, team: str | None) -> bool:
        details = ConnectionDetails(conn_id=conn_id, team_name=team)
        return auth.is_authorized_connection(method="GET", details=details, user=user)

    return sorted(conn_id for conn_id, team in teams.items() if readable(conn_id, team))


def status_hook(conn_id: str) -> JetStreamStatusHook:
    """The hook of a connection; a team's connection read with its team (Airflow's api-server finds a team's
    connection only with the team named; ``requires_access_connection`` let the user in for that team)."""
    from airflow.models.connection import Connection

    team = Connection.get_team_name(conn_id)
    if team is None:
        return JetStreamStatusHook(jetstream_conn_id=conn_id)
    return JetStreamStatusHook.on_connection(Connection.get_connection_from_secrets(conn_id, team_name=team))


def check_connection(conn_id: str, user: Any) -> dict[str, Any]:
    """One check of the connection (see :func:`.overview.gather_overview`), recorded in its history, linked."""
    watches = MEMORY.watches(conn_id)
    try:
        hook = status_hook(conn_id)
        overview = hook.run(gather_overview(hook, watches))
    except (JetStreamError, ValueError) as err:
        raise HTTPException(status_code=502, detail=str(err)) from None
    except Exception as err:  # a connection that does not exist, or is not a jetstream one
        raise HTTPException(status_code=404, detail=f"connection {conn_id!r}: {type(err).__name__}: {err}") from None
    history = MEMORY.record(conn_id, overview, time.time(), watches)
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
