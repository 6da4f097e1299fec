"""The JetStream page in Airflow's UI, as a person sees it, across a leaf cut; its links to the DAG runs that
touched a stream; and that nobody else sees it.

A real ``airflow api-server`` runs the provider as its wheel installs it (the session's wheel built from the
working tree, installed beside the test venv's packages: the page is found through the wheel's
``airflow.plugins`` entry point, nothing else), with the simple auth manager in multi-team mode: ``admin``;
``ops`` (role op, team ``orders``, which owns the test DAGs' bundle); ``outsider`` (role op, team ``others``:
may read the connection, not the DAG); ``viewer`` (may not read connections). The NATS side is the suite's
hub + leaf topology (its own, since the test cuts the leaf): a leaf stream, the hub's mirror of it with a
consumer. The page's JSON says caught up, then (leaf cut, more messages on the leaf) unreachable with an
unknown lag, then caught up again; Chromium shows the page inside Airflow's UI at each step (screenshots in
test-output/jetstream-page-{before,during,after}.png) and the test reads its text. A DAG run (``dag.test()``)
declares a hub stream and publishes to it: the page links that stream to the run, for those who may read the
DAG, and the link opens the run in Airflow's UI (test-output/jetstream-page-{links,run}.png). Issue #36: each team's
connection in Airflow's database is listed and opened for its team only; no route of the app (read from the app)
answers without a login, and FastAPI's docs and schema are not served; a GET writes no Variable.
The same page across ``make stack``'s leaf cut is asserted in ``tests/deployment/test_real_deployment.py``;
here, the suite's topology lets the test cut its own leaf and add users and teams.
"""

from __future__ import annotations

import json
import re
import secrets
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_jetstream.hooks.jetstream import JetStreamHook
from airflow_provider_jetstream.testing.servers import USERS, LocalTopology
from tests.support.airflow_ui import OUTPUT, api_server, chromium, get, login_token, open_jetstream_page
from tests.support.packaging import BuiltWheel, run
from tests.support.waiting import wait_until

CONN_ID = "js_page"
LEAF_STREAM = "page_readings"
MIRROR = "page_readings_hub"
#: The simple auth manager's users (``name:role[:team]``): the test DAGs' bundle belongs to team ``orders``.
USERS_CONFIG = "admin:admin,viewer:viewer:others,ops:op:orders,outsider:op:others"
TEAMS = ("orders", "others")


@pytest.fixture(scope="module")
def topology(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalTopology]:
    with LocalTopology(tmp_path_factory.mktemp("page"), leaf_domains=["leaf"]) as started:
        yield started


@pytest.fixture(scope="module")
def conn_json(topology: LocalTopology) -> str:
    user, password = USERS["ACC"]
    return json.dumps(
        {"conn_type": "jetstream", "host": f"127.0.0.1:{topology.hub.port}", "login": user, "password": password}
    )


@pytest.fixture(scope="module")
def streams(topology: LocalTopology, conn_json: str) -> Iterator[JetStreamHook]:
    """The leaf's stream and the hub's mirror of it (with a consumer), declared through the hook."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", conn_json)
        hook = JetStreamHook(jetstream_conn_id=CONN_ID)
        hook.ensure_stream({"name": LEAF_STREAM, "subjects": ["page.readings.>"]}, domain="leaf")
        hook.ensure_stream({"name": MIRROR, "mirror": {"name": LEAF_STREAM, "domain": "leaf"}}, domain="hub")
        hook.ensure_consumer(MIRROR, {"durable_name": "reporting", "ack_policy": "explicit"}, domain="hub")
        yield hook


@pytest.fixture(scope="module")
def mirror_asset(airflow_db: Path, topology: LocalTopology) -> str:
    """The hub mirror's asset in Airflow's database, as a DAG that names it registers it; its URI."""
    from airflow.models.asset import AssetModel
    from airflow.utils.session import create_session

    uri = f"jetstream://127.0.0.1:{topology.hub.port}/hub/{MIRROR}"
    with create_session() as session:
        session.add(AssetModel(name="hub mirror of the leaf's readings", uri=uri, group="asset"))
    return uri


@pytest.fixture(scope="module")
def installed(built_wheel: BuiltWheel, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of the working tree installed (without dependencies) into a directory of its own."""
    target = tmp_path_factory.mktemp("page-wheel") / "site"
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-compile", "--target", str(target)]
    run("installing the wheel", [*pip, str(built_wheel.path)], timeout=300)
    return target


@pytest.fixture(scope="module")
def teams(airflow_db: Path) -> tuple[str, ...]:
    """The auth manager's teams in Airflow's database (multi-team mode refuses to start without them)."""
    from airflow.models.team import Team
    from airflow.utils.session import create_session

    with create_session() as session:
        for name in TEAMS:
            session.merge(Team(name=name))
    return TEAMS


#: A ``jetstream`` connection in Airflow's database for each team (multi-team mode: only its team may read it).
TEAM_CONNECTIONS = {"orders": "js_page_orders", "others": "js_page_others"}


@pytest.fixture(scope="module")
def team_connections(airflow_db: Path, conn_json: str, teams: tuple[str, ...]) -> dict[str, str]:
    """The hub's connection once more per team, in Airflow's database with the team as its owner."""
    from airflow.models.connection import Connection
    from airflow.utils.session import create_session

    fields = json.loads(conn_json)
    with create_session() as session:
        for team, conn_id in TEAM_CONNECTIONS.items():
            session.merge(
                Connection(
                    conn_id=conn_id, conn_type="jetstream", host=fields["host"], login=fields["login"],
                    password=fields["password"], team_name=team,
                )
            )  # fmt: skip
    return TEAM_CONNECTIONS


@pytest.fixture(scope="module")
def server(
    airflow_db: Path,
    installed: Path,
    conn_json: str,
    streams: JetStreamHook,
    teams: tuple[str, ...],
    team_connections: dict[str, str],
) -> Iterator[dict[str, Any]]:
    passwords = {user.split(":")[0]: secrets.token_urlsafe(12) for user in USERS_CONFIG.split(",")}
    passwords_file = airflow_db / "page-passwords.json"
    passwords_file.write_text(json.dumps(passwords))
    env = {
        "PYTHONPATH": str(installed),
        f"AIRFLOW_CONN_{CONN_ID.upper()}": conn_json,
        "AIRFLOW__CORE__MULTI_TEAM": "True",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": USERS_CONFIG,
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords_file),
    }
    with api_server(airflow_db, env, "page-api-server.log") as url:
        yield {"url": url, "admin": login_token(url, "admin", passwords["admin"]), "passwords": passwords}


def token(server: dict[str, Any], user: str) -> str:
    return login_token(server["url"], user, server["passwords"][user])


def overview(server: dict[str, Any], as_user: str | None = None) -> dict[str, Any]:
    """The page's JSON, as ``admin`` or the user named."""
    user_token = token(server, as_user) if as_user else server["admin"]
    status, body = get(f"{server['url']}/jetstream/api/connections/{CONN_ID}", user_token)
    assert status == 200, body[-2000:]
    return json.loads(body)


def mirror_origin(found: dict[str, Any]) -> dict[str, Any]:
    (hub,) = [d for d in found["domains"] if d["domain"] == "hub"]
    (mirror,) = [s for s in hub["streams"] if s["name"] == MIRROR]
    (origin,) = mirror["replication"]["origins"]
    return origin


def hub_stream(found: dict[str, Any], name: str) -> dict[str, Any]:
    (hub,) = [d for d in found["domains"] if d["domain"] == "hub"]
    (stream,) = [s for s in hub["streams"] if s["name"] == name]
    return stream


def leaf(found: dict[str, Any]) -> dict[str, Any]:
    (domain,) = [d for d in found["domains"] if d["domain"] == "leaf"]
    return domain


def test_nobody_without_a_login_or_the_right_to_read_connections_gets_anything(server: dict[str, Any]) -> None:
    url = server["url"]
    for path in ("/jetstream/", f"/jetstream/connections/{CONN_ID}", f"/jetstream/api/connections/{CONN_ID}"):
        status, body = get(url + path)
        assert status == 401 and MIRROR.encode() not in body, (path, status, body[:300])
        status, body = get(url + path, "not-a-token")
        assert status == 403 and MIRROR.encode() not in body, (path, status, body[:300])
    viewer = token(server, "viewer")
    status, body = get(f"{url}/jetstream/api/connections/{CONN_ID}", viewer)
    assert status == 403 and MIRROR.encode() not in body, (status, body[:300])
    status, body = get(f"{url}/jetstream/api/connections/{CONN_ID}", server["admin"])
    assert status == 200 and MIRROR.encode() in body


def app_requests() -> list[tuple[str, str]]:
    """Every route of the page's app (read from the app, so a route added later is covered) as (method, path under
    Airflow), ``CONN_ID`` in each path parameter; and the FastAPI docs and schema paths, which must not answer."""
    from airflow_provider_jetstream.ui.app import app

    found = [
        (method, "/jetstream" + re.sub(r"\{[^}]+\}", CONN_ID, route.path))
        for route in app.routes
        for method in sorted(getattr(route, "methods", None) or ["GET"])
    ]
    return found + [("GET", f"/jetstream/{path}") for path in ("docs", "redoc", "openapi.json", "docs/oauth2-redirect")]


def request(url: str, method: str, token: str | None = None) -> tuple[int, bytes]:
    """``method url`` with a bearer token (or none), redirects not followed: the status and the body."""

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.build_opener(NoRedirect).open(
            urllib.request.Request(url, headers=headers, method=method), timeout=60
        ) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def test_no_route_of_the_app_answers_without_a_login(server: dict[str, Any]) -> None:
    requests = app_requests()
    paths = {path for _, path in requests}
    assert {"/jetstream/", f"/jetstream/connections/{CONN_ID}", f"/jetstream/api/connections/{CONN_ID}"} <= paths
    for method, path in requests:
        for user_token in (None, "not-a-token"):
            status, body = request(server["url"] + path, method, user_token)
            assert status in (401, 403, 404), (method, path, user_token, status, body[:300])
            assert MIRROR.encode() not in body and b"openapi" not in body.lower(), (method, path, body[:300])
    # The docs and the schema are not served at all, even to an admin.
    for path in ("docs", "redoc", "openapi.json"):
        status, _ = request(f"{server['url']}/jetstream/{path}", "GET", server["admin"])
        assert status == 404, (path, status)


def test_a_team_lists_and_opens_its_own_connections_not_another_teams(server: dict[str, Any]) -> None:
    url = server["url"]
    for user, team, other in (("ops", "orders", "others"), ("outsider", "others", "orders")):
        user_token = token(server, user)
        status, body = request(f"{url}/jetstream/", "GET", user_token)
        assert status == 200, (user, status, body[-2000:])
        assert TEAM_CONNECTIONS[team].encode() in body and CONN_ID.encode() in body, (user, body[-2000:])
        assert TEAM_CONNECTIONS[other].encode() not in body, (user, body[-2000:])
        # Their team's connection opens (read with its team), page and JSON; the other team's is refused.
        status, body = request(f"{url}/jetstream/connections/{TEAM_CONNECTIONS[team]}", "GET", user_token)
        assert status == 200 and MIRROR.encode() in body, (user, status, body[-2000:])
        status, body = get(f"{url}/jetstream/api/connections/{TEAM_CONNECTIONS[team]}", user_token)
        assert status == 200 and json.loads(body)["connection"]["conn_id"] == TEAM_CONNECTIONS[team], (user, body)
        for path in ("connections", "api/connections"):
            status, body = request(f"{url}/jetstream/{path}/{TEAM_CONNECTIONS[other]}", "GET", user_token)
            assert status == 403 and MIRROR.encode() not in body, (user, path, status, body[:300])


def variables() -> dict[str, str | None]:
    from airflow.models.variable import Variable
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        return {row.key: row.val for row in session.scalars(select(Variable))}


def test_viewing_the_page_writes_no_variable(server: dict[str, Any]) -> None:
    """A GET writes no Airflow Variable: the page's history is kept in a file of the api-server's machine."""
    before = variables()
    for user in ("ops", "outsider"):
        user_token = token(server, user)
        for method, path in app_requests():
            if method == "GET":
                request(server["url"] + path, method, user_token)
        news = overview(server, user)["history"]["news"]
        assert news, news  # the history is still kept (in the api-server machine's file)
    assert variables() == before


def screenshot(server: dict[str, Any], name: str, expect: str) -> str:
    """The page inside Airflow's UI (its navigation entry, the page in its frame): a screenshot, and the
    frame's text once it shows ``expect``. Chromium runs only here: Playwright's loop would stop the hook's
    one sync bridge in the rest of the test."""
    with chromium() as browser:
        return _screenshot(browser, server, name, expect)


def _open_page(browser: Any, server: dict[str, Any], user_token: str) -> tuple[Any, Any, Any]:
    return open_jetstream_page(browser, server["url"], user_token, CONN_ID)


def _screenshot(browser: Any, server: dict[str, Any], name: str, expect: str) -> str:
    context, page, frame = _open_page(browser, server, server["admin"])
    text = frame.locator("body").inner_text()
    assert expect in text, text
    OUTPUT.mkdir(exist_ok=True)
    page.screenshot(path=str(OUTPUT / f"jetstream-page-{name}.png"), full_page=True)
    context.close()
    return text


def publish_on_leaf(topology: LocalTopology, count: int) -> None:
    """Publish to the leaf's stream on the leaf itself (its JetStream keeps taking messages while cut off)."""
    user, password = USERS["ACC"]
    conn = {"conn_type": "jetstream", "host": f"127.0.0.1:{topology.leaves['leaf'].port}", "login": user,
            "password": password, "extra": {"domain": "leaf"}}  # fmt: skip
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AIRFLOW_CONN_JS_PAGE_LEAF", json.dumps(conn))
        JetStreamHook(jetstream_conn_id="js_page_leaf").publish("page.readings.a", [{"n": i} for i in range(count)])


def test_the_page_shows_a_leaf_cut_and_its_catch_up(
    server: dict[str, Any], topology: LocalTopology, mirror_asset: str
) -> None:
    publish_on_leaf(topology, 20)
    found = wait_until(lambda: overview(server), lambda o: mirror_origin(o)["state"] == "caught up", 60, "caught up")
    assert mirror_origin(found)["behind"] == 0 and leaf(found)["reachable"]
    (hub,) = [d for d in found["domains"] if d["domain"] == "hub"]
    (mirror,) = [s for s in hub["streams"] if s["name"] == MIRROR]
    assert [c["consumer"] for c in mirror["consumers"]] == ["reporting"]
    assert mirror["consumers"][0]["num_pending"] == 20
    assert mirror["asset_uri"] == mirror_asset and mirror["links"]["asset"]["uri"] == mirror_asset
    assert found["connection"]["servers"] == [f"nats://127.0.0.1:{topology.hub.port}"]
    assert "password" not in json.dumps(found) and "login" not in found["connection"]
    text = screenshot(server, "before", "caught up")
    assert "Domain leaf" in text and MIRROR in text and "reporting: 20 pending" in text
    assert "asset hub mirror of the leaf's readings" in text

    topology.disconnect_leaf("leaf")
    publish_on_leaf(topology, 25)
    found = wait_until(lambda: overview(server), lambda o: not leaf(o)["reachable"], 60, "leaf unreachable")
    origin = mirror_origin(found)
    assert origin["state"] == "unreachable" and origin["behind"] is None, origin
    assert "lag unknown" in origin["summary"] and origin["unreachable_since"]
    text = screenshot(server, "during", "unreachable")
    assert "lag unknown" in text and "UNREACHABLE" in text  # the history's news

    topology.reconnect_leaf("leaf")
    found = wait_until(
        lambda: overview(server), lambda o: mirror_origin(o)["state"] == "caught up", 90, "caught up again"
    )
    assert leaf(found)["reachable"] and mirror_origin(found)["behind"] == 0
    news = [n["what"] for n in found["history"]["news"]]
    assert "domain leaf UNREACHABLE" in news and "domain leaf reachable" in news, news
    text = screenshot(server, "after", "caught up")
    assert "domain leaf UNREACHABLE" in text and "domain leaf reachable" in text
    assert "password" not in json.dumps(found)


@pytest.fixture(scope="module")
def orders_run(streams: JetStreamHook, teams: tuple[str, ...]) -> Any:
    """A run of ``jetstream_page_orders`` (``dag.test()``): the hub stream ``page_orders`` declared and published
    to, each task an asset event of its ``jetstream://`` asset; the DAG's bundle then given to team ``orders``."""
    from airflow.models.dag import DagModel
    from airflow.models.dagbundle import DagBundleModel
    from airflow.models.team import Team
    from airflow.utils.session import create_session

    from tests.dags.page_orders import DAG_ID, dag

    run = dag.test(run_conf={"conn_id": CONN_ID})
    assert run.state == "success"
    with create_session() as session:
        bundle = session.get(DagBundleModel, session.get(DagModel, DAG_ID).bundle_name)
        bundle.teams = [session.get(Team, "orders")]
    return run


def follow_run_link(server: dict[str, Any], user_token: str, text: str, expect: tuple[str, ...]) -> tuple[str, str]:
    """In Chromium, the page's link named ``text``: its address, and where clicking it leads Airflow's own window
    (once that shows each of ``expect`` outside the page's frame)."""
    with chromium() as browser:
        context, page, frame = _open_page(browser, server, user_token)
        found = frame.get_by_role("link", name=text, exact=True)
        found.wait_for(timeout=30000)
        OUTPUT.mkdir(exist_ok=True)
        page.screenshot(path=str(OUTPUT / "jetstream-page-links.png"), full_page=True)
        href = found.evaluate("a => a.href")
        found.click()
        page.wait_for_url(lambda url: "/runs/" in url, wait_until="commit", timeout=60000)
        for shown in expect:
            page.get_by_text(shown, exact=True).first.wait_for(timeout=60000)
        page.screenshot(path=str(OUTPUT / "jetstream-page-run.png"), full_page=True)
        landed = page.url
        context.close()
    return href, landed


def test_a_stream_links_to_the_dag_runs_that_touched_it_for_who_may_read_them(
    server: dict[str, Any], topology: LocalTopology, orders_run: Any
) -> None:
    from tests.dags.page_orders import DAG_ID, STREAM

    run_id = orders_run.run_id
    href = f"dags/{DAG_ID}/runs/{urllib.parse.quote(run_id, safe='')}"
    uri = f"jetstream://127.0.0.1:{topology.hub.port}/hub/{STREAM}"
    for user in ("admin", "ops"):
        links = hub_stream(overview(server, user), STREAM)["links"]
        assert links["asset"]["uri"] == uri, (user, links)
        # Two tasks of the run touched the stream (created it, published to it): the run is listed once.
        expected = {"dag_id": DAG_ID, "run_id": run_id, "at": links["runs"][0]["at"], "href": href}
        assert links["runs"] == [expected], (user, links)
    # An op of another team may read the connection and the asset, not the DAG: no run of it is shown.
    outsider = token(server, "outsider")
    links = hub_stream(overview(server, "outsider"), STREAM)["links"]
    assert links["asset"]["uri"] == uri and links["runs"] == [], links
    status, body = get(f"{server['url']}/jetstream/connections/{CONN_ID}", outsider)
    assert status == 200 and STREAM.encode() in body, body[-2000:]
    assert DAG_ID.encode() not in body and urllib.parse.quote(run_id, safe="").encode() not in body

    # What the team's op sees in Airflow's UI: the link, and clicking it opens the run (its id, its task) in Airflow's
    # own window, not inside the page's frame.
    address, landed = follow_run_link(server, token(server, "ops"), f"{DAG_ID} / {run_id}", (run_id, "publish_orders"))
    assert address == f"{server['url']}/{href}", address
    assert urllib.parse.unquote(landed) == urllib.parse.unquote(address), (address, landed)
