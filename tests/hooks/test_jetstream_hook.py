"""``JetStreamHook`` against real nats-server processes: topology, every auth method, every failure."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from nats.js.api import StreamConfig

from airflow_provider_jetstream.core.errors import (
    JetStreamConfigError,
    JetStreamConnectionError,
    JetStreamDomainUnavailableError,
)
from airflow_provider_jetstream.core.sync import run_sync
from airflow_provider_jetstream.hooks.jetstream import JetStreamHook


def client_count(server, name: str) -> int:
    connz = server.monitor("connz")
    return sum(1 for c in connz.get("connections", []) if c.get("name") == name)


# -- connection forms ----------------------------------------------------------------------------


def test_uri_form_connection(hub_leaf, monkeypatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_NATS_HUB", f"jetstream://acc:acc@127.0.0.1:{hub_leaf.hub.port}?domain=hub")
    ok, message = JetStreamHook("nats_hub").test_connection()
    assert ok, message
    assert "'hub-server'" in message and "JetStream domain 'hub'" in message


def test_json_form_connection_with_server_list(hub_leaf, jetstream_conn, unused_url) -> None:
    conn_id = jetstream_conn(
        f"{unused_url},nats://127.0.0.1:{hub_leaf.hub.port}",
        login="acc",
        password="acc",
        domain="hub",
        client_name="json-form",
    )
    ok, message = JetStreamHook(conn_id).test_connection()
    assert ok, message
    assert f"at nats://127.0.0.1:{hub_leaf.hub.port}" in message


def test_domain_and_api_prefix_in_connection_is_refused_before_connecting(jetstream_conn, unused_url) -> None:
    conn_id = jetstream_conn(unused_url, domain="hub", api_prefix="JS.acc@hub.API")
    ok, message = JetStreamHook(conn_id).test_connection()
    assert not ok
    assert f"connection {conn_id!r}" in message and "were both given" in message


def test_hook_domain_and_api_prefix_exclude_each_other() -> None:
    with pytest.raises(JetStreamConfigError, match="both given"):
        JetStreamHook("x", domain="leaf", api_prefix="JS.acc@hub.API")


# -- domains -------------------------------------------------------------------------------------


def test_test_connection_reports_server_and_target_domain(hub_leaf, hub_conn) -> None:
    ok, message = JetStreamHook(hub_conn, domain="leaf").test_connection()
    assert ok, message
    assert "NATS server 'hub-server' version 2." in message
    assert "JetStream domain 'leaf'" in message
    assert "API level " in message


def test_one_connection_serves_several_domains(hub_leaf, jetstream_conn) -> None:
    conn_id = jetstream_conn(
        f"127.0.0.1:{hub_leaf.hub.port}", login="acc", password="acc", client_name="several-domains"
    )
    hook = JetStreamHook(conn_id)

    async def create_in_both() -> tuple[str, str, int]:
        async with hook.ajetstream(domain="hub") as js_hub, hook.ajetstream(domain="leaf") as js_leaf:
            assert js_hub._nc is js_leaf._nc
            await js_hub.add_stream(StreamConfig(name="hook_two_domains", subjects=["hook.two.hub"]))
            await js_leaf.add_stream(StreamConfig(name="hook_two_domains", subjects=["hook.two.leaf"]))
            hub_info = await js_hub.stream_info("hook_two_domains")
            leaf_info = await js_leaf.stream_info("hook_two_domains")
            return (
                hub_info.config.subjects[0],
                leaf_info.config.subjects[0],
                client_count(hub_leaf.hub, "several-domains"),
            )

    hub_subject, leaf_subject, clients = run_sync(create_in_both())
    assert (hub_subject, leaf_subject) == ("hook.two.hub", "hook.two.leaf")
    assert clients == 1


def test_missing_domain_fails_fast_with_hint(hub_conn) -> None:
    hook = JetStreamHook(hub_conn, domain="nowhere")
    started = time.monotonic()
    ok, message = hook.test_connection()
    assert not ok
    assert message.startswith(f"connection {hub_conn!r}: no JetStream responded in domain 'nowhere'")
    assert "is the leaf connected, is the name right?" in message
    # "no JetStream responded" is the server's no-responders answer, not a timeout that was waited
    # out ("did not answer within"); the bound only catches a hang, not a slow machine.
    assert "did not answer" not in message and time.monotonic() - started < 60

    async def use_missing_domain() -> None:
        async with hook.ajetstream() as js:
            await js.stream_info("anything")

    with pytest.raises(JetStreamDomainUnavailableError, match="domain 'nowhere'"):
        run_sync(use_missing_domain())


def test_cut_off_leaf_domain_is_reported(make_topology, jetstream_conn) -> None:
    topology = make_topology()
    conn_id = jetstream_conn(f"127.0.0.1:{topology.hub.port}", login="acc", password="acc", connect_timeout=1)
    assert JetStreamHook(conn_id, domain="leaf").test_connection()[0]
    topology.disconnect_leaf("leaf")
    deadline = time.monotonic() + 30  # the hub drops the cut leaf's interest asynchronously
    while topology.hub.monitor("leafz")["leafnodes"] and time.monotonic() < deadline:
        time.sleep(0.05)
    ok, message = JetStreamHook(conn_id, domain="leaf").test_connection()
    assert not ok and "no JetStream responded in domain 'leaf'" in message


def test_probe_domains_tells_reachable_from_cut_off_leaves_at_once(make_topology, jetstream_conn) -> None:
    topology = make_topology(leaf_domains=["leaf-a", "leaf-b"])
    conn_id = jetstream_conn(f"127.0.0.1:{topology.hub.port}", login="acc", password="acc")
    hook = JetStreamHook(conn_id)
    assert run_sync(hook.aprobe_domains(["hub", "leaf-a", "leaf-b"])) == {"hub": None, "leaf-a": None, "leaf-b": None}
    topology.disconnect_leaf("leaf-b")
    started = time.monotonic()
    reasons = run_sync(hook.aprobe_domains(["leaf-a", "leaf-b", "nowhere"], request_timeout=4))
    assert reasons["leaf-a"] is None
    assert "no JetStream responded in domain 'leaf-b'" in reasons["leaf-b"]
    assert "domain 'nowhere'" in reasons["nowhere"]
    assert time.monotonic() - started < 4  # no responders comes back at once: no waiting for the timeout


def test_cross_account_api_prefix(hub_leaf, jetstream_conn) -> None:
    """IMPORT_CLIENT reaches ACC's hub consumer only through the imported JS.acc@hub.API prefix."""
    conn_id = jetstream_conn(
        f"127.0.0.1:{hub_leaf.hub.port}", login="import_client", password="import_client", api_prefix="JS.acc@hub.API"
    )
    hook = JetStreamHook(conn_id)
    assert hook.resolve_api_prefix() == "JS.acc@hub.API"
    assert hook.describe_target() == "API prefix 'JS.acc@hub.API'"
    ok, message = hook.test_connection()  # INFO is not exported, so JetStream does not answer there
    assert not ok and "API prefix 'JS.acc@hub.API'" in message and "exported and imported" in message


# -- auth methods --------------------------------------------------------------------------------


def test_user_password(auth_servers, jetstream_conn) -> None:
    conn_id = jetstream_conn(f"127.0.0.1:{auth_servers.password.port}", login="acc", password="acc")
    ok, message = JetStreamHook(conn_id).test_connection()
    assert ok and "domain 'password'" in message, message


def test_wrong_password_is_an_authorization_violation_without_secret(auth_servers, jetstream_conn, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    conn_id = jetstream_conn(f"127.0.0.1:{auth_servers.password.port}", login="acc", password="Wr0ng-S3cret")
    hook = JetStreamHook(conn_id)
    with pytest.raises(JetStreamConnectionError) as err:
        hook.run(hook._atest_connection())
    assert f"connection {conn_id!r}: authorization violation" in str(err.value)
    assert "user 'acc'" in str(err.value)
    assert "Wr0ng-S3cret" not in str(err.value)
    assert "Wr0ng-S3cret" not in repr(err.value.__cause__) + repr(err.value.__context__)
    assert "Wr0ng-S3cret" not in caplog.text


def test_token(auth_servers, jetstream_conn) -> None:
    good = jetstream_conn(f"127.0.0.1:{auth_servers.token.port}", token=auth_servers.token_value)
    bad = jetstream_conn(f"127.0.0.1:{auth_servers.token.port}", token="not-the-token")
    ok, message = JetStreamHook(good).test_connection()
    assert ok and "domain 'token'" in message, message
    ok, message = JetStreamHook(bad).test_connection()
    assert not ok and "authorization violation" in message and "(token)" in message
    assert "not-the-token" not in message


def test_nkey_seed(auth_servers, jetstream_conn) -> None:
    conn_id = jetstream_conn(f"127.0.0.1:{auth_servers.nkey.port}", nkey_seed=auth_servers.nkey_seed)
    ok, message = JetStreamHook(conn_id).test_connection()
    assert ok and "domain 'nkey'" in message, message


def test_wrong_nkey_is_refused(auth_servers, jetstream_conn) -> None:
    import nkeys

    from tests.support.auth import NKey

    other = NKey.create(nkeys.PREFIX_BYTE_USER)
    conn_id = jetstream_conn(f"127.0.0.1:{auth_servers.nkey.port}", nkey_seed=other.seed)
    ok, message = JetStreamHook(conn_id).test_connection()
    assert not ok and "authorization violation" in message and other.seed not in message


def test_creds_file_and_creds_content(auth_servers, jetstream_conn, tmp_path) -> None:
    creds_file = tmp_path / "edge.creds"
    creds_file.write_text(auth_servers.operator.creds)
    by_file = jetstream_conn(f"127.0.0.1:{auth_servers.creds.port}", creds_file=str(creds_file))
    by_content = jetstream_conn(f"127.0.0.1:{auth_servers.creds.port}", creds=auth_servers.operator.creds)
    for conn_id in (by_file, by_content):
        ok, message = JetStreamHook(conn_id).test_connection()
        assert ok and "domain 'creds'" in message, message


def test_creds_of_unknown_account_is_refused(auth_servers, jetstream_conn, tmp_path) -> None:
    from tests.support.auth import operator_setup

    stranger = operator_setup(tmp_path / "unused").creds
    conn_id = jetstream_conn(f"127.0.0.1:{auth_servers.creds.port}", creds=stranger)
    ok, message = JetStreamHook(conn_id).test_connection()
    assert not ok and "authorization violation" in message
    assert stranger.split("SEED-----\n")[1][:20] not in message


def test_tls_with_ca(auth_servers, jetstream_conn) -> None:
    conn_id = jetstream_conn(
        f"tls://127.0.0.1:{auth_servers.tls.port}",
        login="acc",
        password="acc",
        tls_ca_file=str(auth_servers.tls_files.ca),
    )
    ok, message = JetStreamHook(conn_id).test_connection()
    assert ok and "domain 'tls'" in message, message


def test_tls_wrong_ca_fails_clearly(auth_servers, jetstream_conn) -> None:
    conn_id = jetstream_conn(
        f"tls://127.0.0.1:{auth_servers.tls.port}",
        login="acc",
        password="acc",
        tls_ca_file=str(auth_servers.other_ca.ca),
    )
    ok, message = JetStreamHook(conn_id).test_connection()
    assert not ok
    assert "TLS failure" in message and "unable to get local issuer certificate" in message


def test_tls_verify_off_accepts_unknown_ca(auth_servers, jetstream_conn) -> None:
    conn_id = jetstream_conn(f"tls://127.0.0.1:{auth_servers.tls.port}", login="acc", password="acc", tls_verify=False)
    ok, message = JetStreamHook(conn_id).test_connection()
    assert ok, message


def test_tls_hostname_mismatch_is_named(auth_servers, jetstream_conn) -> None:
    conn_id = jetstream_conn(
        f"tls://127.0.0.1:{auth_servers.tls.port}",
        login="acc",
        password="acc",
        tls_ca_file=str(auth_servers.tls_files.ca),
        tls_hostname="nats.example.com",
    )
    ok, message = JetStreamHook(conn_id).test_connection()
    assert not ok and "TLS failure" in message and "mismatch" in message.lower()


def test_mutual_tls(auth_servers, jetstream_conn) -> None:
    files = auth_servers.tls_files
    with_cert = jetstream_conn(
        f"tls://127.0.0.1:{auth_servers.mtls.port}",
        tls_ca_file=str(files.ca),
        tls_cert_file=str(files.client_cert),
        tls_key_file=str(files.client_key),
    )
    without_cert = jetstream_conn(f"tls://127.0.0.1:{auth_servers.mtls.port}", tls_ca_file=str(files.ca))
    ok, message = JetStreamHook(with_cert).test_connection()
    assert ok and "domain 'mtls'" in message, message
    ok, message = JetStreamHook(without_cert).test_connection()
    assert not ok and f"connection {without_cert!r}" in message


def test_tls_handshake_first(auth_servers, jetstream_conn) -> None:
    conn_id = jetstream_conn(
        f"tls://127.0.0.1:{auth_servers.tls_first.port}",
        login="acc",
        password="acc",
        tls_ca_file=str(auth_servers.tls_files.ca),
        tls_handshake_first=True,
    )
    ok, message = JetStreamHook(conn_id).test_connection()
    assert ok and "domain 'tlsfirst'" in message, message


# -- unreachable servers, lifecycle --------------------------------------------------------------


def test_no_server_reachable_lists_urls_without_password(jetstream_conn, unused_url) -> None:
    port = unused_url.rsplit(":", 1)[1]
    conn_id = jetstream_conn(f"nats://acc:pa55word@127.0.0.1:{port}", connect_timeout=2)
    started = time.monotonic()
    ok, message = JetStreamHook(conn_id).test_connection()
    assert not ok
    assert f"no NATS server reachable; tried nats://acc:***@127.0.0.1:{port}" in message
    assert "connection refused" in message and "pa55word" not in message
    # Refused, not timed out ("no NATS server answered within"); the bound only catches a hang.
    assert "answered within" not in message and time.monotonic() - started < 60


def test_secrets_are_registered_with_the_masker(jetstream_conn, unused_url) -> None:
    from airflow.sdk._shared.secrets_masker import redact

    conn_id = jetstream_conn(unused_url, token="tok-very-secret-123")
    JetStreamHook(conn_id).get_conn_config()
    assert redact("token is tok-very-secret-123") == "token is ***"


def test_connection_closes_on_error_and_on_cancellation(hub_conn) -> None:
    hook = JetStreamHook(hub_conn)
    seen = []

    async def fail_inside() -> None:
        async with hook.aconnect() as nc:
            seen.append(nc)
            raise KeyError("boom")

    with pytest.raises(KeyError):
        run_sync(fail_inside())
    assert seen[-1].is_closed

    async def cancelled_inside() -> None:
        started = asyncio.Event()

        async def user() -> None:
            async with hook.aconnect() as nc:
                seen.append(nc)
                started.set()
                await asyncio.Event().wait()  # in use until cancelled

        task = asyncio.create_task(user())
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run_sync(cancelled_inside())
    assert seen[-1].is_closed


def test_nested_uses_share_and_last_one_closes(hub_conn) -> None:
    async def nested() -> tuple[bool, bool, bool]:
        outer_hook, inner_hook = JetStreamHook(hub_conn), JetStreamHook(hub_conn)
        async with outer_hook.aconnect() as outer:
            async with inner_hook.aconnect() as inner:
                same = inner is outer
            still_open = outer.is_connected
        return same, still_open, outer.is_closed

    assert run_sync(nested()) == (True, True, True)


def test_run_sync_inside_event_loop_is_a_clear_error(hub_conn) -> None:
    async def misuse_run() -> None:
        JetStreamHook(hub_conn).run(asyncio.sleep(0))

    with pytest.raises(RuntimeError, match="inside a running event loop; await the coroutine instead"):
        asyncio.run(misuse_run())
