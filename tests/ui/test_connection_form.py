"""The "NATS JetStream" connection form in Airflow's UI, used as a person would, in headless Chromium.

Starts `airflow api-server` on loopback with this package installed, adds a connection through the
form, and checks that the saved connection works through JetStreamHook against the real hub.
A screenshot of the filled form is saved to test-output/connection-form.png.
"""

from __future__ import annotations

import os
import subprocess

from tests.support.airflow_ui import AIRFLOW, OUTPUT


def test_add_connection_through_the_form(api_server, browser, hub_leaf) -> None:
    page = browser.new_page(viewport={"width": 1400, "height": 2600})
    page.goto(f"{api_server}/connections", wait_until="networkidle")
    page.get_by_role("button", name="Add Connection").click()
    page.locator("input[name=connection_id]").fill("nats_leaf_ui")
    page.get_by_role("combobox").first.focus()
    page.keyboard.type("NATS JetStream")
    page.keyboard.press("Enter")

    # Standard fields, relabelled, with placeholders that show what to type.
    host = page.locator("input[name=host]")
    assert host.get_attribute("placeholder") == "nats://hub-1:4222,nats://hub-2:4222"
    labels = {text.strip() for text in page.locator("label").all_inner_texts()}
    assert {"Servers", "User", "Password", "Default port"} <= labels
    assert page.locator("input[name=password]").get_attribute("type") == "password"
    host.fill(f"127.0.0.1:{hub_leaf.hub.port}")
    page.locator("input[name=login]").fill("acc")
    page.locator("input[name=password]").fill("acc")

    # Extra fields: every one with its label; the secrets masked.
    page.get_by_role("button", name="Extra Fields", exact=True).click()
    page.locator("input[name=element_domain]").wait_for()
    # The JetStream domain and API prefix come first among the extra fields, before TLS and credentials.
    extra_inputs = page.locator("input[name^=element_]").evaluate_all("els => els.map(e => e.name)")
    assert extra_inputs[:2] == ["element_domain", "element_api_prefix"], extra_inputs
    labels = {text.strip() for text in page.locator("label").all_inner_texts()}
    assert {"Token", "NKey seed", "Creds content", "TLS CA file", "JetStream domain", "JetStream API prefix"} <= labels
    for secret in ("token", "nkey_seed", "creds"):
        assert page.locator(f"input[name=element_{secret}]").get_attribute("type") == "password", secret
    assert page.get_by_text("Example: hub", exact=False).first.is_visible()
    page.locator("input[name=element_domain]").fill("leaf")
    page.locator("input[name=element_client_name]").fill("from-the-form")

    output = OUTPUT
    output.mkdir(exist_ok=True)
    page.screenshot(path=str(output / "connection-form.png"), full_page=True)
    page.get_by_role("button", name="Save").click()
    page.get_by_text("nats_leaf_ui").first.wait_for(timeout=15000)

    # The saved connection round-trips into JetStreamHook and reaches the leaf through the hub.
    env = {**os.environ, "AIRFLOW__CORE__TEST_CONNECTION": "Enabled"}
    tested = subprocess.run([AIRFLOW, "connections", "test", "-v", "nats_leaf_ui"], capture_output=True, text=True,
                            env=env)  # fmt: skip
    output_text = tested.stdout + tested.stderr
    assert tested.returncode == 0, output_text[-2000:]
    assert "JetStream domain 'leaf'" in output_text and "NATS server 'hub-server'" in output_text
    exported = subprocess.run([AIRFLOW, "connections", "get", "nats_leaf_ui", "-o", "json"], capture_output=True,
                              text=True, env=env, check=True)  # fmt: skip
    assert '"conn_type": "jetstream"' in exported.stdout
    assert '"domain": "leaf"' in exported.stdout.replace('\\"', '"')
