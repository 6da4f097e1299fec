"""The JetStream page in Airflow's UI, as a person sees it, across a leaf cut; and that nobody else sees it.

A real ``airflow api-server`` runs the provider as its wheel installs it (built from the working tree,
installed beside the test venv's packages: the page is found through the wheel's ``airflow.plugins``
entry point, nothing else), with the simple auth manager's users ``admin`` and ``viewer``. The NATS side
is the suite's hub + leaf topology (its own, since the test cuts the leaf): a leaf stream, the hub's mirror
of it with a consumer. The page's JSON says caught up, then (leaf cut, more messages on the leaf)
unreachable with an unknown lag, then caught up again; Chromium shows the page inside Airflow's UI at each
step (screenshots in test-output/jetstream-page-{before,during,after}.png) and the test reads its text.
Against the suite's topology rather than `make stack`: the stack's Spark cluster and scheduler add minutes
and nothing this page reads.
"""

from __future__ import annotations

import json
import secrets
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_jetstream.hooks.jetstream import JetStreamHook
from airflow_provider_jetstream.testing.servers import USERS, LocalTopology
from tests.support.airflow_ui import OUTPUT, api_server, chromium, get, login_token
from tests.support.packaging import build_wheel, run
from tests.support.waiting import wait_until

CONN_ID = "js_page"
LEAF_STREAM = "page_readings"
MIRROR = "page_readings_hub"


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
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of the working tree installed (without dependencies) into a directory of its own."""
    work = tmp_path_factory.mktemp("page-wheel")
    wheel = build_wheel(work).path
    target = work / "site"
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-compile", "--target", str(target)]
    run("installing the wheel", [*pip, str(wheel)], timeout=300)
    return target


@pytest.fixture(scope="module")
def server(airflow_db: Path, installed: Path, conn_json: str, streams: JetStreamHook) -> Iterator[dict[str, Any]]:
    passwords = {"admin": secrets.token_urlsafe(12), "viewer": secrets.token_urlsafe(12)}
    passwords_file = airflow_db / "page-passwords.json"
    passwords_file.write_text(json.dumps(passwords))
    env = {
        "PYTHONPATH": str(installed),
        f"AIRFLOW_CONN_{CONN_ID.upper()}": conn_json,
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin,viewer:viewer",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords_file),
    }
    with api_server(airflow_db, env, "page-api-server.log") as url:
        yield {"url": url, "admin": login_token(url, "admin", passwords["admin"]), "passwords": passwords}


def overview(server: dict[str, Any]) -> dict[str, Any]:
    status, body = get(f"{server['url']}/jetstream/api/connections/{CONN_ID}", server["admin"])
    assert status == 200, body[-2000:]
    return json.loads(body)


def mirror_origin(found: dict[str, Any]) -> dict[str, Any]:
    (hub,) = [d for d in found["domains"] if d["domain"] == "hub"]
    (mirror,) = [s for s in hub["streams"] if s["name"] == MIRROR]
    (origin,) = mirror["replication"]["origins"]
    return origin


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
    viewer = login_token(url, "viewer", server["passwords"]["viewer"])
    status, body = get(f"{url}/jetstream/api/connections/{CONN_ID}", viewer)
    assert status == 403 and MIRROR.encode() not in body, (status, body[:300])
    status, body = get(f"{url}/jetstream/api/connections/{CONN_ID}", server["admin"])
    assert status == 200 and MIRROR.encode() in body


def screenshot(server: dict[str, Any], name: str, expect: str) -> str:
    """The page inside Airflow's UI (its navigation entry, the page in its frame): a screenshot, and the
    frame's text once it shows ``expect``. Chromium runs only here: Playwright's loop would stop the hook's
    one sync bridge in the rest of the test."""
    with chromium() as browser:
        return _screenshot(browser, server, name, expect)


def _screenshot(browser: Any, server: dict[str, Any], name: str, expect: str) -> str:
    context = browser.new_context(viewport={"width": 1800, "height": 1400})
    context.add_cookies([{"name": "_token", "value": server["admin"], "url": server["url"]}])
    page = context.new_page()
    page.goto(f"{server['url']}/plugin/jetstream", wait_until="networkidle")
    frame = page.frame_locator("iframe").first
    # As a person does: choose the connection (the test DB may hold others) and check it.
    frame.locator("select[name=conn_id]").select_option(CONN_ID, timeout=30000)
    frame.get_by_role("button", name="Check").click()
    frame.locator("h2", has_text="Domains").wait_for(timeout=60000)
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
