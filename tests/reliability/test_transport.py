"""Transport security against real nats-server processes (issue #10, part 1).

- TLS asked for (``tls://``, any TLS field, ``tls_required``) against a plain-text server is
  refused before a single byte goes out: the real server's trace log shows no CONNECT, and a
  recording listener receives nothing at all (while a ``nats://`` client does send it the password,
  which shows the recorder would have seen it).
- Missing creds and TLS files are named (field and path); ``test_connection()`` returns
  ``(False, reason)``.
- Websocket servers (``ws://``, ``wss://``) work with the ``[websocket]`` extra.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from airflow_provider_jetstream.core.errors import JetStreamConnectionError
from airflow_provider_jetstream.hooks.jetstream import JetStreamHook
from airflow_provider_jetstream.testing.ports import free_port
from airflow_provider_jetstream.testing.servers import USERS, NatsServer
from tests.support.auth import TlsFiles, make_tls
from tests.support.recorder import recording_server

SECRET = "Plain-Text-S3cret"


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_tls(tmp_path_factory.mktemp("transport-tls"))


def _js(workdir: Path, name: str) -> str:
    return f"jetstream {{ store_dir: {json.dumps(str(workdir / ('store_' + name)))}, domain: {name} }}\n"


@pytest.fixture
def plain_server(tmp_path: Path) -> Iterator[NatsServer]:
    """A plain-text server (no TLS) with user/password, tracing every protocol line it receives."""
    body = _js(tmp_path, "plain") + f"authorization {{ user: acc, password: {SECRET} }}\ntrace: true\ndebug: true\n"
    server = NatsServer(name="plain-server", workdir=tmp_path, body=body).start()
    yield server
    server.stop()


def _closed_clients(server: NatsServer, at_least: int = 0) -> list[dict]:
    """The server's closed client connections, once it has noticed ``at_least`` of them."""
    deadline = time.monotonic() + 10
    while True:
        closed = server.monitor("connz?state=closed&auth=true").get("connections", [])
        if len(closed) >= at_least or time.monotonic() > deadline:
            return closed
        time.sleep(0.02)


def _log(server: NatsServer) -> str:
    return server.log_path.read_text(errors="replace")


# -- TLS asked for, plain-text server: refused, nothing sent -------------------------------------


@pytest.mark.parametrize(
    ("scheme", "extra"),
    [
        ("tls", {"tls_ca_file": "CA"}),  # the case of the issue
        ("tls", {}),
        ("nats", {"tls_ca_file": "CA"}),
        ("nats", {"tls_required": True}),
        ("nats", {"tls_verify": False}),
        ("nats", {"tls_hostname": "localhost"}),
    ],
    ids=["tls-url-with-ca", "tls-url", "ca-file", "tls_required", "tls_verify-false", "tls_hostname"],
)
def test_tls_asked_for_plain_server_is_refused_before_connect(
    plain_server: NatsServer, jetstream_conn: Callable[..., str], tls_files: TlsFiles, scheme: str, extra: dict
) -> None:
    extra = {k: (str(tls_files.ca) if v == "CA" else v) for k, v in extra.items()}
    name = f"tls-refused-{uuid.uuid4().hex[:8]}"
    conn_id = jetstream_conn(
        f"{scheme}://127.0.0.1:{plain_server.port}", login="acc", password=SECRET, client_name=name, **extra
    )
    ok, message = JetStreamHook(conn_id).test_connection()

    assert not ok, message
    assert f"connection {conn_id!r}: TLS required (" in message
    assert f"the server at {scheme}://127.0.0.1:{plain_server.port} did not start TLS" in message
    assert "refused to connect in clear text, nothing was sent to it" in message
    assert SECRET not in message
    # The server saw a client come and go, unauthenticated and nameless: no CONNECT reached it.
    assert plain_server.monitor("varz")["total_connections"] == 1
    closed = _closed_clients(plain_server, at_least=1)
    assert len(closed) == 1, "the client never reached the server, or is still connected"
    assert all(not c.get("authorized_user") and c.get("name") != name for c in closed), closed
    log = _log(plain_server)
    assert "CONNECT" not in log and SECRET not in log


def test_tls_url_sends_no_byte_to_a_plain_server(jetstream_conn: Callable[..., str], tls_files: TlsFiles) -> None:
    """A listener that records every byte: the TLS-required client sends none, a plain one sends CONNECT."""
    with recording_server() as recorder:
        conn_id = jetstream_conn(
            f"tls://127.0.0.1:{recorder.port}", login="acc", password=SECRET, tls_ca_file=str(tls_files.ca)
        )
        ok, message = JetStreamHook(conn_id).test_connection()
        recorder.wait_closed()
        assert not ok and "did not start TLS" in message, message
        assert recorder.accepted == 1
        assert recorder.data == b""

    # The control: the same listener does see the password when clear text is what was asked for.
    with recording_server() as recorder:
        conn_id = jetstream_conn(f"nats://127.0.0.1:{recorder.port}", login="acc", password=SECRET, connect_timeout=1)
        ok, message = JetStreamHook(conn_id).test_connection()
        recorder.wait_closed()
        assert not ok
        assert recorder.data.startswith(b"CONNECT ") and SECRET.encode() in recorder.data


def test_server_offering_optional_tls_is_refused_with_a_hint(
    tmp_path: Path, jetstream_conn: Callable[..., str], tls_files: TlsFiles
) -> None:
    """``allow_non_tls``: the server offers TLS but does not require it; nats-py would not upgrade."""
    user, password = USERS["ACC"]
    body = (
        _js(tmp_path, "optional")
        + f"tls {{ cert_file: {json.dumps(str(tls_files.cert))}, key_file: {json.dumps(str(tls_files.key))} }}\n"
        + "allow_non_tls: true\n"
        + f"authorization {{ user: {user}, password: {password} }}\n"
    )
    server = NatsServer(name="optional-tls", workdir=tmp_path, body=body).start()
    try:
        conn_id = jetstream_conn(
            f"tls://127.0.0.1:{server.port}", login=user, password=password, tls_ca_file=str(tls_files.ca)
        )
        ok, message = JetStreamHook(conn_id).test_connection()
        assert not ok and "did not start TLS" in message
        assert "offers TLS only as an option (tls_available)" in message
        assert server.monitor("varz")["total_connections"] == 1
        assert [c.get("authorized_user") for c in _closed_clients(server, at_least=1)] == [None]
    finally:
        server.stop()


def test_tls_required_against_a_tls_server_connects(auth_servers, jetstream_conn: Callable[..., str]) -> None:
    """``tls_required`` with a nats:// URL upgrades in-band when the server requires TLS."""
    conn_id = jetstream_conn(
        f"nats://127.0.0.1:{auth_servers.tls.port}",
        login="acc",
        password="acc",
        tls_required=True,
        tls_ca_file=str(auth_servers.tls_files.ca),
    )
    ok, message = JetStreamHook(conn_id).test_connection()
    assert ok and "domain 'tls'" in message, message


def test_reconnect_to_a_server_turned_plain_sends_nothing(
    tmp_path: Path, jetstream_conn: Callable[..., str], tls_files: TlsFiles
) -> None:
    """Connected over TLS; the server comes back without TLS on the same port: no clear-text CONNECT."""
    tls = f"tls {{ cert_file: {json.dumps(str(tls_files.cert))}, key_file: {json.dumps(str(tls_files.key))} }}\n"
    auth = f"authorization {{ user: acc, password: {SECRET} }}\ntrace: true\n"
    server = NatsServer(name="turns-plain", workdir=tmp_path, body=_js(tmp_path, "turns") + tls + auth).start()
    try:
        conn_id = jetstream_conn(
            f"tls://127.0.0.1:{server.port}",
            login="acc",
            password=SECRET,
            tls_ca_file=str(tls_files.ca),
            reconnect_time_wait=0.1,
            max_reconnect_attempts=-1,
        )
        hook = JetStreamHook(conn_id)

        async def connect_then_watch() -> list[str]:
            import asyncio

            async with hook.aconnect() as nc:
                await nc.flush()
                server.restart(body=_js(tmp_path, "turns") + auth)  # same port, no TLS now
                deadline = time.monotonic() + 20
                while "did not start TLS" not in " ".join(map(str, _errors(nc))):
                    assert time.monotonic() < deadline, "no reconnect attempt was seen"
                    await asyncio.sleep(0.05)
                return [str(e) for e in _errors(nc)]

        errors = hook.run(connect_then_watch())
        assert any("did not start TLS" in e for e in errors)
        log = _log(server)
        assert "CONNECT" not in log.split("Server is ready")[-1] and SECRET not in log
    finally:
        server.stop()


def _errors(nc) -> list[BaseException]:
    err = nc.last_error
    return [err] if err is not None else []


# -- files named by the connection --------------------------------------------------------------


def test_missing_creds_file_is_named_not_an_authorization_violation(
    auth_servers, jetstream_conn: Callable[..., str], tmp_path: Path
) -> None:
    missing = tmp_path / "nowhere" / "edge.creds"
    conn_id = jetstream_conn(f"127.0.0.1:{auth_servers.password.port}", creds_file=str(missing))
    ok, message = JetStreamHook(conn_id).test_connection()
    assert not ok
    assert message == (
        f"connection {conn_id!r}: creds_file: creds file not found: {missing} "
        "(the path is read on the machine that connects)"
    )


@pytest.mark.parametrize("field", ["tls_ca_file", "tls_cert_file", "tls_key_file"])
def test_missing_tls_file_names_field_and_path(
    auth_servers, jetstream_conn: Callable[..., str], tmp_path: Path, field: str
) -> None:
    files = auth_servers.tls_files
    extra = {
        "tls_ca_file": str(files.ca),
        "tls_cert_file": str(files.client_cert),
        "tls_key_file": str(files.client_key),
    }
    missing = tmp_path / f"missing-{field}.pem"
    extra[field] = str(missing)
    conn_id = jetstream_conn(f"tls://127.0.0.1:{auth_servers.mtls.port}", **extra)
    hook = JetStreamHook(conn_id)
    ok, message = hook.test_connection()  # returns, never raises
    assert not ok
    assert message.startswith(f"connection {conn_id!r}: {field}: ") and f"not found: {missing}" in message


def test_unreadable_tls_ca_file_names_field_and_path(
    auth_servers, jetstream_conn: Callable[..., str], tmp_path: Path
) -> None:
    garbage = tmp_path / "ca.pem"
    garbage.write_text("this is not a certificate\n")
    conn_id = jetstream_conn(
        f"tls://127.0.0.1:{auth_servers.tls.port}", login="acc", password="acc", tls_ca_file=str(garbage)
    )
    ok, message = JetStreamHook(conn_id).test_connection()
    assert not ok
    assert message.startswith(f"connection {conn_id!r}: tls_ca_file: {garbage} holds no usable PEM CA certificate")


def test_present_creds_file_still_connects(auth_servers, jetstream_conn: Callable[..., str], tmp_path: Path) -> None:
    creds = tmp_path / "edge.creds"
    creds.write_text(auth_servers.operator.creds)
    ok, message = JetStreamHook(
        jetstream_conn(f"127.0.0.1:{auth_servers.creds.port}", creds_file=str(creds))
    ).test_connection()
    assert ok and "domain 'creds'" in message, message


# -- websocket ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ws_server(tmp_path_factory: pytest.TempPathFactory, tls_files: TlsFiles) -> Iterator[tuple[NatsServer, int, int]]:
    """One server with a plain websocket listener and a TLS one (a second server: one websocket block each)."""
    work = tmp_path_factory.mktemp("websocket")
    user, password = USERS["ACC"]
    auth = f"authorization {{ user: {user}, password: {password} }}\n"
    ws_port, wss_port = free_port(), free_port()
    plain = NatsServer(
        name="ws-server",
        workdir=work,
        body=_js(work, "ws") + auth + f'websocket {{ listen: "127.0.0.1:{ws_port}", no_tls: true }}\n',
    ).start()
    secure = NatsServer(
        name="wss-server",
        workdir=work,
        body=_js(work, "wss")
        + auth
        + f'websocket {{ listen: "127.0.0.1:{wss_port}", tls {{ cert_file: {json.dumps(str(tls_files.cert))}, '
        f"key_file: {json.dumps(str(tls_files.key))} }} }}\n",
    ).start()
    yield plain, ws_port, wss_port
    plain.stop()
    secure.stop()


def test_websocket_plain(ws_server, jetstream_conn: Callable[..., str]) -> None:
    _, ws_port, _ = ws_server
    conn_id = jetstream_conn(f"ws://127.0.0.1:{ws_port}", login="acc", password="acc")
    ok, message = JetStreamHook(conn_id).test_connection()
    assert ok and "domain 'ws'" in message and f"at ws://127.0.0.1:{ws_port}" in message, message


def test_websocket_tls(ws_server, jetstream_conn: Callable[..., str], tls_files: TlsFiles) -> None:
    _, _, wss_port = ws_server
    conn_id = jetstream_conn(f"wss://127.0.0.1:{wss_port}", login="acc", password="acc", tls_ca_file=str(tls_files.ca))
    ok, message = JetStreamHook(conn_id).test_connection()
    assert ok and "domain 'wss'" in message and f"at wss://127.0.0.1:{wss_port}" in message, message


def test_websocket_plain_with_tls_asked_for_is_refused(
    ws_server, jetstream_conn: Callable[..., str], tls_files
) -> None:
    _, ws_port, _ = ws_server
    conn_id = jetstream_conn(f"ws://127.0.0.1:{ws_port}", login="acc", password="acc", tls_ca_file=str(tls_files.ca))
    ok, message = JetStreamHook(conn_id).test_connection()
    assert not ok and "ws:// is plain text and cannot be upgraded; use wss://" in message


def test_unreachable_error_is_still_a_connection_error(jetstream_conn: Callable[..., str]) -> None:
    conn_id = jetstream_conn(f"tls://127.0.0.1:{free_port()}", tls_required=True, connect_timeout=1)
    hook = JetStreamHook(conn_id)
    with pytest.raises(JetStreamConnectionError, match="no NATS server reachable"):
        hook.run(hook._atest_connection())
