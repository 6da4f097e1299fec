"""The local nats-server harness itself: readiness, leaf cut-off, clean teardown, binary override."""

from __future__ import annotations

import socket
import stat
import time
from pathlib import Path

import pytest

from airflow_provider_jetstream.core.errors import NatsServerError
from airflow_provider_jetstream.testing.ports import free_port
from airflow_provider_jetstream.testing.servers import LocalTopology, NatsServer, nats_server_binary


def port_is_free(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


def test_listening_ports_are_ones_no_outgoing_connection_can_take() -> None:
    """A leaf's link to the hub took the port picked for the next leaf once: ports now come from
    below the kernel's ephemeral range, and one process never gets the same port twice."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = [free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)
    assert all(1024 <= port < low for port in ports)
    # A connection's local port comes from the ephemeral range.
    with socket.create_server(("127.0.0.1", ports[0])), socket.socket() as client:
        client.connect(("127.0.0.1", ports[0]))
        assert client.getsockname()[1] >= low


def test_topology_links_domains_and_stops_without_leaks(tmp_path) -> None:
    topology = LocalTopology(tmp_path, leaf_domains=["leaf-a", "leaf-b"])
    with topology:
        leafz = topology.hub.monitor("leafz")
        assert leafz["leafnodes"] == 4  # SYS and ACC remotes of each leaf
        jsz = {
            server.name: server.monitor("jsz")["config"]["domain"]
            for server in [topology.hub, *topology.leaves.values()]
        }
        assert jsz == {"hub-server": "hub", "leaf-a-server": "leaf-a", "leaf-b-server": "leaf-b"}
        processes = [s.process for s in [topology.hub, *topology.leaves.values()]]
        ports = [s.port for s in [topology.hub, *topology.leaves.values()]] + [topology.leafnode_port]
    assert all(p.poll() is not None for p in processes)
    assert all(port_is_free(port) for port in ports)


def test_leaf_links_keep_a_pinned_compression_mode(tmp_path) -> None:
    with LocalTopology(tmp_path, leaf_compression="off") as topology:
        links = topology.leaves["leaf"].monitor("leafz")["leafs"]
        assert sorted(link["compression"] for link in links) == ["off", "off"]


def test_teardown_happens_when_the_body_fails(tmp_path) -> None:
    topology = LocalTopology(tmp_path)
    with pytest.raises(ZeroDivisionError), topology:
        process = topology.hub.process
        1 / 0  # noqa: B018
    assert process.poll() is not None and port_is_free(topology.hub.port)


def test_disconnect_and_reconnect_leaf(tmp_path) -> None:
    with LocalTopology(tmp_path) as topology:
        topology.disconnect_leaf("leaf")
        # The hub notices the closed leaf connections asynchronously: poll, do not assume it is done.
        deadline = time.monotonic() + 30
        while topology.hub.monitor("leafz")["leafnodes"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert topology.hub.monitor("leafz")["leafnodes"] == 0
        assert topology.leaves["leaf"].monitor("jsz")["config"]["domain"] == "leaf"
        topology.reconnect_leaf("leaf")
        assert topology.hub.monitor("leafz")["leafnodes"] == 2


def test_bad_config_fails_with_the_servers_own_words(tmp_path) -> None:
    with pytest.raises(NatsServerError, match=r"nats-server 'broken' exited: .*Parse error"):
        NatsServer(name="broken", workdir=tmp_path, body="jetstream { nonsense\n").start()


def test_nats_server_bin_overrides_the_binary(tmp_path, monkeypatch) -> None:
    real = nats_server_binary()
    marker = tmp_path / "used"
    wrapper = tmp_path / "my-nats-server"
    wrapper.write_text(f'#!/bin/sh\necho used > "{marker}"\nexec "{real}" "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("NATS_SERVER_BIN", str(wrapper))
    assert nats_server_binary() == str(wrapper)
    server = NatsServer(name="custom", workdir=tmp_path, body="").start()
    try:
        assert marker.read_text().strip() == "used"
    finally:
        server.stop()


def test_reconnect_one_leaf_while_another_is_down(tmp_path) -> None:
    """Reconnecting leaf-a waits for leaf-a only: leaf-b, stopped, does not make it time out."""
    with LocalTopology(tmp_path, leaf_domains=["leaf-a", "leaf-b"]) as topology:
        topology.leaves["leaf-b"].stop()
        topology.disconnect_leaf("leaf-a")
        topology.reconnect_leaf("leaf-a", timeout=20)
        names = [leaf["name"] for leaf in topology.hub.monitor("leafz")["leafs"]]
        assert names.count("leaf-a-server") == 2 and "leaf-b-server" not in names
