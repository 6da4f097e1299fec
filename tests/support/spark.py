"""Spark test streams: one made for a test, the hub client, publishing and deleting, a streaming read run to its end."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, TypeVar

from airflow_provider_jetstream.testing.servers import USERS, LocalTopology

T = TypeVar("T")


def run(coro: Awaitable[T]) -> T:
    return asyncio.run(coro)  # type: ignore[arg-type]


@dataclass
class SparkStream:
    """A stream made for one test: name, domain, subject prefix, and the hub connection options."""

    name: str
    domain: str
    prefix: str
    topology: LocalTopology

    @property
    def api_prefix(self) -> str:
        return f"$JS.{self.domain}.API"

    def options(self, **extra: str) -> dict[str, str]:
        """Data source options: connect to the hub, read this stream in its domain."""
        user, password = USERS["ACC"]
        return {
            "servers": f"nats://127.0.0.1:{self.topology.hub.port}",
            "user": user,
            "password": password,
            "stream": self.name,
            "domain": self.domain,
            **extra,
        }

    def write_options(self, **extra: str) -> dict[str, str]:
        """Data source options of a write: connect to the hub, write what this stream must store, in its domain."""
        options = self.options(**extra)
        options["expectedStream"] = options.pop("stream")
        return options


async def hub_client(topology: LocalTopology) -> Any:
    import nats

    user, password = USERS["ACC"]
    return await nats.connect(f"nats://127.0.0.1:{topology.hub.port}", user=user, password=password)


def leaf_api(topology: LocalTopology, subject: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    """One request to the leaf domain's JetStream API through the hub (``STREAM.INFO.<name>``...): its answer."""

    async def go() -> dict[str, Any]:
        nc = await hub_client(topology)
        try:
            reply = await nc.request(f"$JS.leaf.API.{subject}", json.dumps(body or {}).encode(), 5)
            return json.loads(reply.data)
        finally:
            await nc.close()

    return run(go())


def publish(stream: SparkStream, messages: list[tuple[str, bytes] | tuple[str, bytes, dict[str, str]]]) -> list[int]:
    """Publish ``(subject suffix, data[, headers])`` to the stream; return the stored sequences."""

    async def go() -> list[int]:
        nc = await hub_client(stream.topology)
        try:
            js = nc.jetstream(domain=stream.domain)
            seqs = []
            for item in messages:
                suffix, data = item[0], item[1]
                headers = item[2] if len(item) > 2 else None  # type: ignore[misc]
                ack = await js.publish(f"{stream.prefix}.{suffix}", data, headers=headers)
                seqs.append(ack.seq)
            return seqs
        finally:
            await nc.close()

    return run(go())


def publish_many(stream: SparkStream, count: int, subjects: tuple[str, ...] = ("a", "b")) -> None:
    """Publish ``count`` messages ``i`` (payload ``b"m<i>"``) on subjects cycling through ``subjects``."""

    async def go() -> None:
        nc = await hub_client(stream.topology)
        try:
            js = nc.jetstream(domain=stream.domain)
            futures = []
            for i in range(1, count + 1):
                futures.append(await js.publish_async(f"{stream.prefix}.{subjects[i % len(subjects)]}", b"m%d" % i))
                if len(futures) >= 500:
                    await asyncio.gather(*futures)
                    futures = []
            await asyncio.gather(*futures)
        finally:
            await nc.close()

    run(go())


def secret_stream(url: str, password: str, stream: str, count: int) -> None:
    """On the ``secret_server`` fixture's server (user ``spark``): a stream ``stream`` on ``<stream>.>`` with
    ``count`` messages ``i`` (payload ``b"m<i>"``) on ``<stream>.a`` and ``<stream>.b`` in turn."""

    async def go() -> None:
        import nats
        from nats.js.api import StreamConfig

        nc = await nats.connect(url, user="spark", password=password)
        try:
            js = nc.jetstream()
            await js.add_stream(StreamConfig(name=stream, subjects=[f"{stream}.>"]))
            for i in range(1, count + 1):
                await js.publish(f"{stream}.{'ab'[i % 2]}", b"m%d" % i)
        finally:
            await nc.close()

    run(go())


def stored_messages(stream: SparkStream) -> list[tuple[str, bytes, dict[str, str]]]:
    """Every message of the stream, in order: ``(subject, data, headers)``."""

    async def go() -> list[tuple[str, bytes, dict[str, str]]]:
        nc = await hub_client(stream.topology)
        try:
            js = nc.jetstream(domain=stream.domain)
            info = await js.stream_info(stream.name)
            jsm = nc.jsm(prefix=stream.api_prefix)
            msgs = [await jsm.get_msg(stream.name, s) for s in range(1, info.state.last_seq + 1)]
            return [(m.subject, m.data, dict(m.headers or {})) for m in msgs]
        finally:
            await nc.close()

    return run(go())


def delete_messages(stream: SparkStream, seqs: list[int]) -> None:
    async def go() -> None:
        nc = await hub_client(stream.topology)
        try:
            jsm = nc.jsm(prefix=stream.api_prefix)
            for seq in seqs:
                await jsm.delete_msg(stream.name, seq)
        finally:
            await nc.close()

    run(go())


def stored_at(stream: SparkStream, seq: int, *, round_down: bool = False) -> dt.datetime:
    """When the stream stored message ``seq`` (the server's clock, UTC), rounded up to the microsecond (or down:
    a time at or before the stamp, so a window starting then holds the message and one ending then does not)."""

    async def go() -> str:
        nc = await hub_client(stream.topology)
        try:
            body = json.dumps({"seq": seq}).encode()
            msg = await nc.request(f"{stream.api_prefix}.STREAM.MSG.GET.{stream.name}", body, timeout=5)
            return json.loads(msg.data)["message"]["time"]
        finally:
            await nc.close()

    whole, _, fraction = run(go()).rstrip("Z").partition(".")
    nanoseconds = int((fraction or "0").ljust(9, "0")[:9])
    moment = dt.datetime.fromisoformat(whole).replace(tzinfo=dt.timezone.utc)
    micros = nanoseconds // 1000 if round_down else -(-nanoseconds // 1000)
    return moment + dt.timedelta(microseconds=micros)


def iso(moment: dt.datetime) -> str:
    """RFC 3339 text of an aware datetime, to the microsecond (a Spark option's or job argument's form)."""
    return moment.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def available_now(spark: Any, options: dict[str, str], output: Any, checkpoint: Any) -> Any:
    """A streaming read of the ``jetstream`` source written to Parquet with ``availableNow``, run to its end
    (a local or a Spark Connect session): the finished query."""
    query = (
        spark.readStream.format("jetstream")
        .options(**options)
        .load()
        .selectExpr("seq", "subject", "data")
        .writeStream.format("parquet")
        .option("path", str(output))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(180)
    assert query.exception() is None
    return query
