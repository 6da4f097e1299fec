"""NATS helpers: unique names, nats-py connections, streams and consumers made for a test, server monitoring counts."""

from __future__ import annotations

import json
import socket
import uuid
from typing import Any

import nats
from nats.aio.client import Client
from nats.js.api import AckPolicy, ConsumerConfig, ExternalStream, StreamConfig, StreamSource

from airflow_provider_jetstream.core.api import JetStreamApi

#: The leaf domain's JetStream API, as a hub stream names its mirror's or source's origin.
LEAF_API = ExternalStream(api="$JS.leaf.API")


def server_version(server: Any) -> tuple[int, ...]:
    """A running server's version as numbers, e.g. ``(2, 15, 1)`` (its monitoring endpoint's ``varz``)."""
    text = (server.monitor("varz") or {})["version"]
    return tuple(int(part) for part in text.split("-")[0].split("."))


def unique(area: str) -> str:
    """A stream / consumer / bucket name of this area, unique per test: ``sens_<area>_<hex>``."""
    return f"sens_{area}_{uuid.uuid4().hex[:8]}"


async def connect(url: str, name: str = "sens-test") -> Client:
    return await nats.connect(url, name=name, allow_reconnect=False, connect_timeout=5)


async def connect_cluster(topology: Any) -> Client:
    """User ``acc`` on every node of a topology's hub, reconnecting to another when one dies (a test kills them)."""
    from airflow_provider_jetstream.testing.servers import USERS

    user, password = USERS["ACC"]
    return await nats.connect(
        servers=topology.hub_urls.split(","),
        user=user,
        password=password,
        reconnect_time_wait=0.2,
        max_reconnect_attempts=-1,
    )


# -- what a server says of its clients (its monitoring endpoint) ------------------------------------------


def clients_named(server: Any, client_name: str, state: str = "open") -> list[dict[str, Any]]:
    """The server's ``connz`` entries of the client connections with this name: open ones, or with
    ``state="all"`` also the closed ones the server remembers."""
    connz = server.monitor(f"connz?limit=10000&state={state}")
    return [c for c in connz.get("connections", []) if c.get("name") == client_name]


def connection_count(server: Any, client_name: str) -> int:
    """How many client connections with this name the server has."""
    return len(clients_named(server, client_name))


def messages_sent(server: Any, client_name: str, state: str = "open") -> int:
    """How many messages the clients with this name have sent the server (its ``connz`` ``in_msgs``):
    one per JetStream request, so a count of checks made over that connection alone. With
    ``state="all"`` the closed connections of that name count too (a client that connects per check)."""
    return sum(c.get("in_msgs", 0) for c in clients_named(server, client_name, state))


# -- streams, consumers and messages ----------------------------------------------------------------------


async def leaf_stream(url: str, stream: str, *extra: str) -> None:
    """A stream on the leaf (domain ``leaf``) listening on ``<stream>.>``, plus any ``extra`` streams."""
    nc = await connect(url)
    js = nc.jetstream()
    for name in (stream, *extra):
        await js.add_stream(StreamConfig(name=name, subjects=[f"{name}.>"]))
    await nc.close()


async def leaf_stream_with_messages(url: str, stream: str, messages: int) -> None:
    """A stream on ``<stream>.in`` in the domain of the server at ``url``, holding ``messages`` messages (``m0``...)."""
    nc = await connect(url)
    js = nc.jetstream()
    await js.add_stream(StreamConfig(name=stream, subjects=[f"{stream}.in"]))
    for i in range(messages):
        await js.publish(f"{stream}.in", f"m{i}".encode())
    await nc.close()


async def leaf_stream_with_consumer(url: str, stream: str, messages: int) -> None:
    """A stream in the leaf's own domain with ``messages`` messages and a durable explicit-ack consumer ``worker``."""
    await leaf_stream_with_messages(url, stream, messages)
    nc = await connect(url)
    await nc.jetstream().add_consumer(stream, ConsumerConfig(durable_name="worker", ack_policy=AckPolicy.EXPLICIT))
    await nc.close()


async def leaf_origin_and_hub_copies(topology: Any, origin: str, messages: int) -> tuple[str, str]:
    """A leaf stream with messages, a hub aggregate sourcing it and a hub mirror of it."""
    await leaf_stream_with_messages(topology.url("leaf"), origin, messages)
    hub = await connect(topology.url("hub"))
    hjs = hub.jetstream()
    aggregate, mirror = f"{origin}_agg", f"{origin}_mirror"
    await hjs.add_stream(StreamConfig(name=aggregate, sources=[StreamSource(name=origin, external=LEAF_API)]))
    await hjs.add_stream(StreamConfig(name=mirror, mirror=StreamSource(name=origin, external=LEAF_API)))
    await hub.close()
    return aggregate, mirror


async def publish(url: str, subject: str, payloads: list[bytes]) -> list[int]:
    """Publish each payload with JetStream acks; the stream sequences stored."""
    nc = await connect(url)
    js = nc.jetstream()
    seqs = [(await js.publish(subject, p)).seq for p in payloads]
    await nc.close()
    return seqs


def publish_raw_headers(
    host: str, port: int, user: str, password: str, subject: str, headers: list[tuple[str, str]], data: bytes
) -> None:
    """Publish one message with repeated header names (nats-py's dict headers cannot), over a plain socket."""
    block = ("NATS/1.0\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers) + "\r\n").encode()
    with socket.create_connection((host, port), timeout=5) as sock:
        reader = sock.makefile("rb")
        assert reader.readline().startswith(b"INFO ")
        connect = {"user": user, "pass": password, "headers": True, "verbose": False, "pedantic": False, "protocol": 1}
        sock.sendall(b"CONNECT " + json.dumps(connect).encode() + b"\r\n")
        command = f"HPUB {subject} {len(block)} {len(block) + len(data)}\r\n".encode()
        sock.sendall(command + block + data + b"\r\nPING\r\n")
        line = reader.readline()
        assert line.startswith(b"PONG"), line


async def consumer_state(url: str, stream: str, consumer: str, api_prefix: str = "$JS.leaf.API") -> dict:
    """The consumer's info (``{}`` when it does not exist), read through ``url``."""
    nc = await connect(url)
    try:
        info = await JetStreamApi(nc, api_prefix).consumer_info(stream, consumer)
    finally:
        await nc.close()
    return info or {}


def acked_through(info: dict) -> int:
    """The stream sequence of a consumer's ack floor (every message up to it is acked)."""
    return (info.get("ack_floor") or {}).get("stream_seq", 0)


async def ack_state(api: JetStreamApi, stream: str, consumer: str) -> tuple[int, int]:
    """A consumer's ``(ack floor's stream sequence, messages delivered and not acked)``; ``(-1, -1)`` while its
    JetStream does not answer (a server restarting, a leader being elected)."""
    try:
        info = await api.consumer_info(stream, consumer) or {}
    except Exception:
        return -1, -1
    return acked_through(info), info.get("num_ack_pending", -1)


async def origin_silence(topology: Any, streams: dict[str, str]) -> float:
    """Seconds since the hub last heard from the origins of the copies ``{stream: domain}`` (the ``active`` of
    their mirror or sources), the shortest of them: what a cut-off origin's silence has reached."""
    nc = await connect(topology.url("hub"))
    try:
        silences = []
        for stream, domain in streams.items():
            info = await JetStreamApi(nc, f"$JS.{domain}.API").stream_info(stream) or {}
            origins = ([info["mirror"]] if info.get("mirror") else []) + (info.get("sources") or [])
            silences += [origin.get("active", 0) / 1e9 for origin in origins]
        return min(silences, default=0.0)
    finally:
        await nc.close()


async def hub_mirror_bucket(topology: Any, copy: str, origin: str, legacy: bool) -> None:
    """A hub bucket mirroring the leaf's ``origin``: as nats.go / nats.js create it (the origin's
    subjects kept) or, ``legacy``, as this provider's earlier releases did (a transform to ``$KV.<copy>.>``)."""
    mirror: dict = {"name": f"KV_{origin}", "external": {"api": "$JS.leaf.API"}}
    if legacy:
        mirror["subject_transforms"] = [{"src": f"$KV.{origin}.>", "dest": f"$KV.{copy}.>"}]
    config = {
        "name": f"KV_{copy}",
        "max_msgs_per_subject": 5,
        "allow_rollup_hdrs": True,
        "deny_delete": True,
        "allow_direct": True,
        "mirror_direct": True,
        "discard": "new",
        "mirror": mirror,
    }
    nc = await connect(topology.url("hub"))
    try:
        reply = json.loads((await nc.request(f"$JS.hub.API.STREAM.CREATE.KV_{copy}", json.dumps(config).encode())).data)
        assert "error" not in reply, reply
    finally:
        await nc.close()
