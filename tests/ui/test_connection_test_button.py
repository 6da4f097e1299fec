"""The connection list's Test button and the Edit form, in Airflow's UI in headless Chromium.

Every connection shape docs/connection.md shows (host and port, a servers list without a port, token, NKey,
creds file and content, TLS with a CA file) is created through the REST API as ``make stack`` does,
then tested by clicking its Test button: the page gets the hook's "Connected to NATS server ..." and
shows the green icon. The Edit form of a connection that stores one extra shows every field, secrets
masked; an edit saved from it keeps the secret. Screenshots: test-output/connection-test-button.png,
test-output/connection-edit-form.png.
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest

from airflow_provider_jetstream.core.connection.fields import EXTRA_FIELDS
from airflow_provider_jetstream.testing.servers import USERS
from tests.support.airflow_ui import OUTPUT
from tests.support.waiting import scaled

pytestmark = pytest.mark.timeout(300)


def _create(api_server: str, conn_id: str, **fields: Any) -> None:
    body = {"connection_id": conn_id, "conn_type": "jetstream", **fields}
    if "extra" in body:
        body["extra"] = json.dumps(body["extra"])
    request = urllib.request.Request(
        f"{api_server}/api/v2/connections", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        assert answer.status == 201, answer.read()


@pytest.fixture(scope="module")
def shapes(api_server: str, hub_leaf, auth_servers, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The connection shapes of docs/connection.md, stored through the REST API: connection id -> what its test says."""
    user, password = USERS["ACC"]
    hub, leaf = hub_leaf.hub.port, hub_leaf.leaves["leaf"].port
    creds_file = tmp_path_factory.mktemp("creds") / "user.creds"
    creds_file.write_text(auth_servers.operator.creds)
    cases: dict[str, tuple[dict[str, Any], str]] = {
        "ui_host_port": (
            {"host": "127.0.0.1", "port": hub, "login": user, "password": password, "extra": {"domain": "hub"}},
            "JetStream domain 'hub'",
        ),
        "ui_servers": (
            {
                "host": f"nats://127.0.0.1:{hub},nats://127.0.0.1:{leaf}",
                "login": user,
                "password": password,
                "extra": {"domain": "hub", "client_name": "airflow"},
            },
            "JetStream domain 'hub'",
        ),
        "ui_token": (
            {"host": f"127.0.0.1:{auth_servers.token.port}", "extra": {"token": auth_servers.token_value}},
            "domain 'token'",
        ),
        "ui_nkey": (
            {"host": f"127.0.0.1:{auth_servers.nkey.port}", "extra": {"nkey_seed": auth_servers.nkey_seed}},
            "domain 'nkey'",
        ),
        "ui_creds_file": (
            {"host": f"127.0.0.1:{auth_servers.creds.port}", "extra": {"creds_file": str(creds_file)}},
            "domain 'creds'",
        ),
        "ui_creds_content": (
            {"host": f"127.0.0.1:{auth_servers.creds.port}", "extra": {"creds": auth_servers.operator.creds}},
            "domain 'creds'",
        ),
        "ui_tls": (
            {
                "host": f"tls://127.0.0.1:{auth_servers.tls.port}",
                "login": user,
                "password": password,
                "extra": {"tls_ca_file": str(auth_servers.tls_files.ca)},
            },
            "domain 'tls'",
        ),
    }
    for conn_id, (fields, _) in cases.items():
        _create(api_server, conn_id, **fields)
    return {conn_id: expected for conn_id, (_, expected) in cases.items()}


def _row(page: Any, conn_id: str) -> Any:
    return page.locator("tr").filter(has=page.get_by_role("cell", name=conn_id, exact=True))


def _click_test(page: Any, conn_id: str) -> dict[str, Any]:
    """Click the row's Test button; the API's answer to the page."""
    from playwright.sync_api import expect

    # Pressed from the keyboard: a mouse click lands on whatever is on top at that point, and an earlier
    # button's tooltip or an answer's toast can stay there for seconds on a busy machine.
    button = _row(page, conn_id).get_by_role("button", name="Test Connection")
    # The list renders in the browser after the page loaded: on a busy machine that takes longer than 5 s.
    expect(button).to_be_enabled(timeout=scaled(30) * 1000)
    button.focus()
    with page.expect_response(lambda r: r.url.endswith("/api/v2/connections/test")) as answer:
        page.keyboard.press("Enter")
    response = answer.value
    return {"http": response.status, **response.json()}


def test_every_readme_shape_tests_green_from_the_list(api_server: str, browser, shapes, auth_servers) -> None:
    page = browser.new_page(viewport={"width": 1400, "height": 2000})
    page.goto(f"{api_server}/connections", wait_until="networkidle")
    for conn_id, expected in shapes.items():
        answer = _click_test(page, conn_id)
        assert answer["http"] == 200 and answer["status"] is True, (conn_id, answer)
        assert answer["message"].startswith("Connected to NATS server"), (conn_id, answer)
        assert expected in answer["message"], (conn_id, answer)
        icon = _row(page, conn_id).get_by_role("button", name="Test Connection").locator("svg")
        assert icon.get_attribute("color") == "green", conn_id
    page.mouse.move(0, 0)
    OUTPUT.mkdir(exist_ok=True)
    page.screenshot(path=str(OUTPUT / "connection-test-button.png"), full_page=True)
    html = page.content()
    for secret in (auth_servers.token_value, auth_servers.nkey_seed, auth_servers.operator.user_seed):
        assert secret not in html


def test_edit_form_shows_every_field_and_keeps_the_secret(api_server: str, browser, shapes, auth_servers) -> None:
    page = browser.new_page(viewport={"width": 1400, "height": 2600})
    page.goto(f"{api_server}/connections", wait_until="networkidle")
    _row(page, "ui_token").get_by_role("button", name="Edit Connection").click()
    page.get_by_role("button", name="Extra Fields", exact=True).click()
    page.locator("input[name=element_token]").wait_for()
    shown = page.locator("input[name^=element_]").evaluate_all("els => els.map(e => e.name)")
    assert [name.removeprefix("element_") for name in shown] == list(EXTRA_FIELDS)
    assert page.locator("input[name=element_token]").get_attribute("type") == "password"
    assert auth_servers.token_value not in page.content()
    page.locator("input[name=element_client_name]").fill("edited-in-the-form")
    OUTPUT.mkdir(exist_ok=True)
    page.screenshot(path=str(OUTPUT / "connection-edit-form.png"), full_page=True)
    with page.expect_response(
        lambda r: "/api/v2/connections/ui_token" in r.url and r.request.method == "PATCH"
    ) as saved:
        page.get_by_role("button", name="Save").click()
    assert saved.value.status == 200, saved.value.text()

    # Saved from the form (every field, the token masked as the form showed it): the token still works.
    with urllib.request.urlopen(f"{api_server}/api/v2/connections/ui_token", timeout=30) as answer:
        stored = json.loads(json.loads(answer.read())["extra"])
    assert stored["client_name"] == "edited-in-the-form"
    page.goto(f"{api_server}/connections", wait_until="networkidle")
    answer = _click_test(page, "ui_token")
    assert answer["http"] == 200 and answer["status"] is True and "domain 'token'" in answer["message"], answer
