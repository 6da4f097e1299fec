"""Provider registration: entry point, provider info that never drifts from the code, Airflow CLI."""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_provider_jetstream.core.connection.settings import EXTRA_FIELDS
from airflow_provider_jetstream.get_provider_info import get_provider_info

AIRFLOW = str(Path(sys.executable).parent / "airflow")


def test_entry_point_and_package_name_match_the_distribution() -> None:
    (entry_point,) = [
        ep
        for ep in importlib.metadata.entry_points(group="apache_airflow_provider")
        if ep.value.startswith("airflow_provider_jetstream")
    ]
    info = entry_point.load()()
    assert info["package-name"] == entry_point.dist.name == "airflow-provider-jetstream"
    assert info["versions"][0] == importlib.metadata.version("airflow-provider-jetstream")


def test_every_module_and_class_named_in_provider_info_imports() -> None:
    info = get_provider_info()
    modules = [
        module
        for section in ("hooks", "operators", "sensors", "triggers")
        for group in info.get(section, [])
        for module in group["python-modules"]
    ]
    for module in modules:
        importlib.import_module(module)
    for conn_type in info["connection-types"]:
        module, _, name = conn_type["hook-class-name"].rpartition(".")
        hook = getattr(importlib.import_module(module), name)
        assert hook.conn_type == conn_type["connection-type"] == "jetstream"
        assert hook.hook_name == conn_type["hook-name"] == "NATS JetStream"


def test_connection_form_declares_every_extra_field_and_masks_the_secrets() -> None:
    (conn_type,) = get_provider_info()["connection-types"]
    fields = conn_type["conn-fields"]
    assert set(fields) == set(EXTRA_FIELDS)
    assert list(fields)[:2] == ["domain", "api_prefix"]  # what this provider is about comes first in the form
    secret = {name for name, field in fields.items() if field["schema"].get("format") == "password"}
    assert secret == {"token", "nkey_seed", "creds"}
    placeholders = conn_type["ui-field-behaviour"]["placeholders"]
    assert placeholders["host"] == "nats://hub-1:4222,nats://hub-2:4222"
    assert placeholders["domain"] == "hub"


def test_airflow_sees_the_provider_and_the_connection_type(airflow_db) -> None:
    from airflow.providers_manager import ProvidersManager

    manager = ProvidersManager()
    assert "airflow-provider-jetstream" in manager.providers
    behaviour = manager.field_behaviours["jetstream"]
    assert behaviour["relabeling"]["host"] == "Servers"
    assert behaviour["placeholders"]["host"] == "nats://hub-1:4222,nats://hub-2:4222"
    widgets = manager.connection_form_widgets
    assert widgets["extra__jetstream__nkey_seed"].is_sensitive
    assert not widgets["extra__jetstream__domain"].is_sensitive
    listed = subprocess.run([AIRFLOW, "providers", "list"], capture_output=True, text=True, check=True)
    assert "airflow-provider-jetstream" in listed.stdout


#: What the api-server serves at ``/ui/connections/hook_meta`` for ``jetstream``, from a fresh interpreter (as the
#: api-server builds it once, in its own process: a ProvidersManager filled earlier with real WTForms fields
#: would not be what the api-server sees).
HOOK_META = """
import json
from airflow.api_fastapi.core_api.services.ui.connections import HookMetaService
(meta,) = [hook for hook in HookMetaService.hook_meta_data() if hook.connection_type == "jetstream"]
fields = {name: getattr(param, "dump", lambda p=param: p)() for name, param in meta.extra_fields.items()}
print("HOOK_META", json.dumps({"meta": meta.model_dump(mode="json", exclude={"extra_fields"}), "fields": fields}))
"""


def test_the_ui_gets_the_connection_form_from_provider_info_on_every_supported_airflow(airflow_db) -> None:
    """Airflow 3.2+ builds the form from provider info, 3.1 from the hook's ``get_connection_form_widgets`` /
    ``get_ui_field_behaviour``: both give the same form (3.1 and 3.2 give Params, 3.3 their dumped form)."""
    run = subprocess.run([sys.executable, "-c", HOOK_META], capture_output=True, text=True, env=os.environ.copy())
    assert run.returncode == 0, run.stderr[-3000:]
    (line,) = [line for line in run.stdout.splitlines() if line.startswith("HOOK_META ")]
    answer = json.loads(line.removeprefix("HOOK_META "))
    meta, fields = answer["meta"], answer["fields"]
    assert meta["hook_name"] == "NATS JetStream"
    standard = meta["standard_fields"]
    assert standard["host"]["title"] == "Servers"
    assert standard["host"]["placeholder"] == "nats://hub-1:4222,nats://hub-2:4222"
    assert standard["url_schema"]["hidden"]
    assert set(fields) == set(EXTRA_FIELDS)
    secret = {name for name, field in fields.items() if field["schema"].get("format") == "password"}
    assert secret == {"token", "nkey_seed", "creds"}
    assert fields["domain"]["schema"]["title"] == "JetStream domain"
    assert fields["tls_verify"]["value"] is True and fields["tls_verify"]["schema"]["type"][0] == "boolean"


# Six `airflow` CLI processes, each loading Airflow and its providers: minutes on a busy 2-core machine.
@pytest.mark.timeout(480)
def test_cli_connections_add_and_test(airflow_db, hub_leaf) -> None:
    env = {**os.environ, "AIRFLOW__CORE__TEST_CONNECTION": "Enabled"}
    uri = f"jetstream://acc:acc@127.0.0.1:{hub_leaf.hub.port}?domain=hub"
    subprocess.run([AIRFLOW, "connections", "delete", "nats_hub_cli"], capture_output=True, env=env)
    added = subprocess.run(
        [AIRFLOW, "connections", "add", "nats_hub_cli", "--conn-uri", uri], capture_output=True, text=True, env=env
    )
    assert added.returncode == 0, added.stderr
    tested = subprocess.run(
        [AIRFLOW, "connections", "test", "-v", "nats_hub_cli"], capture_output=True, text=True, env=env
    )
    assert tested.returncode == 0, tested.stderr
    assert "Connection success!" in tested.stdout
    output = tested.stdout + tested.stderr
    assert "NATS server 'hub-server'" in output and "JetStream domain 'hub'" in output

    missing = uri.replace("domain=hub", "domain=nowhere")
    subprocess.run([AIRFLOW, "connections", "delete", "nats_nowhere_cli"], capture_output=True, env=env)
    subprocess.run([AIRFLOW, "connections", "add", "nats_nowhere_cli", "--conn-uri", missing], check=True, env=env)
    failed = subprocess.run(
        [AIRFLOW, "connections", "test", "nats_nowhere_cli"], capture_output=True, text=True, env=env
    )
    assert "Connection failed!" in failed.stdout
    assert "no JetStream responded in domain 'nowhere'" in failed.stdout
