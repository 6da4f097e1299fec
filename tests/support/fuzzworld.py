"""A hub + leaf topology of the generated-input tests' own, seeded with known objects: traffic, snapshots, reset.

Every stream of the leaf (the domain the entry points act in) has a same-named decoy in the hub (the
connection's own ``$JS.API``), so an action sent to the wrong domain changes a decoy and is seen.
:meth:`FuzzWorld.traffic` reads the hub's and the leaf's ``varz`` (connections accepted, messages
received): unchanged across a call means nothing reached a server. :meth:`FuzzWorld.snapshot` is every
stream (config, state, per-subject counts) and durable consumer of both domains; :meth:`FuzzWorld.reset`
puts the seeded objects back after a call changed them.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import re
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import nats
import nats.errors

from airflow_provider_jetstream.core.arguments.names import subjects_collide
from airflow_provider_jetstream.testing.servers import USERS, LocalTopology
from tests.support.waiting import wait_until

DOMAINS = ("hub", "leaf")
#: The domain every entry point is aimed at; the hub (the connection's default) holds the decoys.
TARGET = "leaf"

#: Seeded streams: name -> (subjects, messages as (subject, payload), durable consumers). In both domains.
STREAMS: dict[str, tuple[list[str], list[tuple[str, bytes]], list[str]]] = {
    "fz_target": (
        ["fz.target.>"],
        [("fz.target.a", b"a1"), ("fz.target.a", b"a2"), ("fz.target.b", b"b1"), ("fz.target.b", b"b2")],
        ["fz_dur"],
    ),
    "fz_other": (["fz.other.>"], [("fz.other.a", b"o1"), ("fz.other.b", b"o2")], ["fz_dur"]),
    "fz_doomed": (["fz.doomed.>"], [("fz.doomed.a", b"d1")], ["fz_dur"]),
    "fz_origin": (["fz.origin.>"], [("fz.origin.a", b"r1"), ("fz.origin.b", b"r2")], []),
}
#: Seeded KV buckets: bucket -> keys and values. In the leaf only.
BUCKETS: dict[str, dict[str, bytes]] = {"fzkv": {"k1": b"v1", "k2": b"v2"}, "fzother": {"k1": b"x1"}}
#: Seeded object store buckets: bucket -> objects (name -> content). In the leaf only.
OBJECT_STORES: dict[str, dict[str, bytes]] = {"fzobj": {"o1": b"object one"}}
#: A local file the object store puts read, and the file gets write (made by :meth:`FuzzWorld.start`).
OBJECT_SOURCE = "fz-object-source.bin"
OBJECT_DESTINATION = "fz-object-destination.bin"
#: The leaf's mirror of ``fz_origin`` (what the replication sensor and trigger watch).
MIRROR = "fz_copy"

#: Subject spaces no stream may listen on (a KV bucket's stream on its own ``$KV.<bucket>.>`` excepted).
RESERVED_SPACES = re.compile(r"^(\$JS\.|\$JSC\.|\$SYS\.|_INBOX\.|\$KV\.|\$O\.|\$NRG\.|JS\.[^.]*@)")


def reserved_subjects(name: str, config: dict[str, Any]) -> list[str]:
    """The subjects of a stream's config that lie in a reserved subject space."""
    bad = []
    for subject in config.get("subjects") or []:
        if name.startswith("KV_") and subject == f"$KV.{name[3:]}.>":
            continue
        if name.startswith("OBJ_") and subject in (f"$O.{name[4:]}.C.>", f"$O.{name[4:]}.M.>"):
            continue
        if RESERVED_SPACES.match(subject) or subject == ">":
            bad.append(subject)
    return bad


class FuzzWorld:
    """The topology, a monitoring connection on a private event loop, and the seeded objects."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.topology = LocalTopology(workdir, leaf_domains=[TARGET])
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._nc: Any = None
        #: A connection to each domain's own server: seeding and snapshots do not depend on the leaf link.
        self._direct: dict[str, Any] = {}
        self.baseline: dict[tuple, Any] = {}
        self.current: dict[tuple, Any] = {}

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> FuzzWorld:
        self.topology.start()
        self._thread.start()

        async def connect() -> None:
            user, password = USERS["ACC"]
            self._nc = await nats.connect(self.topology.hub.url, user=user, password=password)
            self._direct = {"hub": self._nc}
            self._direct[TARGET] = await nats.connect(self.topology.leaves[TARGET].url, user=user, password=password)

        self._call(connect())
        for domain in DOMAINS:
            for name in STREAMS:
                self._call(self._seed_stream(domain, name))
        for bucket in BUCKETS:  # in the leaf only: one bucket in two domains of one account is a double store
            self._call(self._seed_bucket(TARGET, bucket))
        for store in OBJECT_STORES:
            self._call(self._seed_object_store(TARGET, store))
        (self.workdir / OBJECT_SOURCE).write_bytes(b"a file to put")
        self._call(self._seed_mirror())
        self.baseline = self.current = self.snapshot()
        return self

    def stop(self) -> None:
        try:
            for nc in self._direct.values():
                self._call(nc.close())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self.topology.stop()

    def _call(self, coro: Any, timeout: float = 60) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=timeout)

    @property
    def hub_address(self) -> str:
        return f"127.0.0.1:{self.topology.hub.port}"

    # -- raw API -------------------------------------------------------------------------------

    async def _api(self, domain: str, suffix: str, body: Any = None) -> dict[str, Any]:
        payload = b"" if body is None else json.dumps(body).encode()
        msg = await self._direct[domain].request(f"$JS.{domain}.API.{suffix}", payload, timeout=5)
        return json.loads(msg.data) if msg.data else {}

    async def _create(self, domain: str, config: dict[str, Any]) -> None:
        reply = await self._api(domain, f"STREAM.CREATE.{config['name']}", config)
        assert "error" not in reply, (domain, config, reply)

    async def _publish(self, domain: str, subject: str, payload: bytes, headers: dict | None = None) -> None:
        for _ in range(100):  # a new stream's interest reaches the hub over the leaf link shortly after
            try:
                msg = await self._direct[domain].request(subject, payload, timeout=5, headers=headers)
                break
            except nats.errors.NoRespondersError:
                await asyncio.sleep(0.05)
        else:
            raise AssertionError(f"nothing stores {subject!r} in {domain}")
        ack = json.loads(msg.data)
        assert "error" not in ack and ack.get("domain") == domain, (domain, subject, ack)

    async def _delete(self, domain: str, name: str) -> None:
        await self._api(domain, f"STREAM.DELETE.{name}")

    async def _seed_stream(self, domain: str, name: str) -> None:
        subjects, messages, consumers = STREAMS[name]
        # The hub's decoy listens on the same names under hub.*: both domains of one account must not
        # store one subject (the double-store guard would refuse every write).
        own = [f"{domain}.{s}" for s in subjects]
        await self._delete(domain, name)
        await self._create(domain, {"name": name, "subjects": own, "storage": "file", "duplicate_window": 60 * 10**9})
        for subject, payload in messages:
            await self._publish(domain, f"{domain}.{subject}", payload)
        for consumer in consumers:
            config = {"durable_name": consumer, "ack_policy": "explicit", "deliver_policy": "all"}
            reply = await self._api(
                domain, f"CONSUMER.CREATE.{name}.{consumer}", {"stream_name": name, "config": config}
            )
            assert "error" not in reply, reply

    async def _seed_bucket(self, domain: str, bucket: str) -> None:
        name = f"KV_{bucket}"
        await self._delete(domain, name)
        await self._create(
            domain,
            {
                "name": name,
                "subjects": [f"$KV.{bucket}.>"],
                "max_msgs_per_subject": 5,
                "discard": "new",
                "allow_rollup_hdrs": True,
                "deny_delete": True,
                "allow_direct": True,
                "storage": "file",
                "duplicate_window": 120 * 10**9,
            },
        )
        for key, value in BUCKETS[bucket].items():
            await self._publish(domain, f"$KV.{bucket}.{key}", value)

    async def _seed_object_store(self, domain: str, bucket: str) -> None:
        """The bucket's stream as every client creates it, and its objects as they write them, with fixed nuids
        and times (a bucket put back is the same as the seeded one)."""
        name = f"OBJ_{bucket}"
        await self._delete(domain, name)
        await self._create(
            domain,
            {
                "name": name,
                "subjects": [f"$O.{bucket}.C.>", f"$O.{bucket}.M.>"],
                "discard": "new",
                "allow_rollup_hdrs": True,
                "allow_direct": True,
                "storage": "file",
            },
        )
        for index, (object_name, content) in enumerate(OBJECT_STORES[bucket].items()):
            nuid = f"fzseed{index:016d}"
            await self._publish(domain, f"$O.{bucket}.C.{nuid}", content)
            meta = {
                "name": object_name,
                "bucket": bucket,
                "nuid": nuid,
                "size": len(content),
                "chunks": 1,
                "mtime": "2026-01-01T00:00:00Z",
                "digest": "SHA-256=" + base64.urlsafe_b64encode(hashlib.sha256(content).digest()).decode(),
                "options": {"max_chunk_size": 131072},
            }
            encoded = base64.urlsafe_b64encode(object_name.encode()).decode()
            await self._publish(domain, f"$O.{bucket}.M.{encoded}", json.dumps(meta).encode(), {"Nats-Rollup": "sub"})

    async def _seed_mirror(self) -> None:
        await self._delete(TARGET, MIRROR)
        await self._create(TARGET, {"name": MIRROR, "mirror": {"name": "fz_origin"}, "storage": "file"})
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            info = await self._api(TARGET, f"STREAM.INFO.{MIRROR}")
            if (info.get("state") or {}).get("messages") == len(STREAMS["fz_origin"][1]):
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"the mirror {MIRROR} did not catch up")

    # -- what reached the servers --------------------------------------------------------------

    def traffic(self) -> tuple[int, ...]:
        """Client connections accepted by the hub and the leaf, and messages the hub received from clients."""
        counts: list[int] = []
        for server in (self.topology.hub, self.topology.leaves[TARGET]):
            varz = server.monitor("varz") or {}
            counts.append(int(varz.get("total_connections", 0)))
        return tuple(counts)

    def linked(self, timeout: float = 2.0) -> bool:
        """Whether the leaf's JetStream answers through the hub (the hub-leaf link carries the account)."""

        async def ask() -> bool:
            try:
                msg = await self._nc.request(f"$JS.{TARGET}.API.INFO", b"", timeout=timeout)
            except Exception:
                return False
            return "error" not in json.loads(msg.data or b"{}")

        return self._call(ask())

    # -- state ---------------------------------------------------------------------------------

    def snapshot(self) -> dict[tuple, Any]:
        """``(kind, domain, name...) -> state`` for every stream and durable consumer of both domains."""
        return self._call(self._snapshot())

    async def _snapshot(self) -> dict[tuple, Any]:
        state: dict[tuple, Any] = {}
        for domain in DOMAINS:
            names: list[str] = []
            offset = 0
            while True:
                page = await self._api(domain, "STREAM.NAMES", {"offset": offset})
                names += page.get("streams") or []
                offset = len(names)
                if offset >= int(page.get("total") or 0) or not page.get("streams"):
                    break
            for name in names:
                info = await self._api(domain, f"STREAM.INFO.{name}", {"subjects_filter": ">"})
                if "error" in info:
                    continue
                s = info.get("state") or {}
                state[("stream", domain, name)] = {
                    "config": info.get("config"),
                    "messages": s.get("messages"),
                    "bytes": s.get("bytes"),
                    "first_seq": s.get("first_seq"),
                    "last_seq": s.get("last_seq"),
                    "subjects": s.get("subjects") or {},
                }
                consumers = await self._api(domain, f"CONSUMER.LIST.{name}", {"offset": 0})
                for c in consumers.get("consumers") or []:
                    config = c.get("config") or {}
                    if not config.get("durable_name"):
                        continue  # a mirror's or an ephemeral reader's own
                    state[("consumer", domain, name, c["name"])] = {
                        "config": config,
                        "delivered": (c.get("delivered") or {}).get("stream_seq"),
                        "ack_floor": (c.get("ack_floor") or {}).get("stream_seq"),
                        "num_pending": c.get("num_pending"),
                        "num_ack_pending": c.get("num_ack_pending"),
                    }
        return state

    def reset(self, now: dict[tuple, Any], again: bool = False) -> None:
        """Put every seeded object that differs from the baseline back, and remove anything new."""
        changed_streams: set[tuple[str, str]] = set()
        for key in set(now) | set(self.baseline):
            if now.get(key) != self.baseline.get(key):
                changed_streams.add((key[1], key[2]))
        if not changed_streams:
            self.current = now
            return

        async def put_back() -> None:
            mirror_too = (TARGET, "fz_origin") in changed_streams or (TARGET, MIRROR) in changed_streams
            if mirror_too:
                await self._delete(TARGET, MIRROR)
            for domain, name in sorted(changed_streams):
                if name == MIRROR and domain == TARGET:
                    continue
                if name in STREAMS:
                    await self._seed_stream(domain, name)
                elif domain == TARGET and name.startswith("KV_") and name[3:] in BUCKETS:
                    await self._seed_bucket(domain, name[3:])
                elif domain == TARGET and name.startswith("OBJ_") and name[4:] in OBJECT_STORES:
                    await self._seed_object_store(domain, name[4:])
                else:
                    await self._delete(domain, name)
            if mirror_too:
                await self._seed_mirror()

        self._call(put_back())
        if not self.linked():
            self.topology.wait_linked(30, domains=[TARGET])
        self.current = self.snapshot()
        left = changes(self.baseline, self.current)
        if left and not again:  # a stream deleted a moment ago may still be going away: wait, then once more
            with contextlib.suppress(AssertionError):
                self.current = wait_until(self.snapshot, lambda now: not changes(self.baseline, now), 5.0, "put back")
                return
            self.reset(self.current, again=True)
            return
        assert not left, f"the seeded state could not be put back: {left}"


def changes(before: dict[tuple, Any], after: dict[tuple, Any]) -> list[tuple[tuple, str]]:
    """What differs: ``(key, "created" | "deleted" | "changed: <fields>")``."""
    out = []
    for key in sorted(set(before) | set(after), key=str):
        a, b = before.get(key), after.get(key)
        if a == b:
            continue
        if a is None:
            out.append((key, "created"))
        elif b is None:
            out.append((key, "deleted"))
        else:
            fields = sorted(f for f in set(a) | set(b) if a.get(f) != b.get(f))
            out.append((key, "changed: " + ", ".join(fields)))
    return out


def streams_listening(state: dict[tuple, Any], domain: str, subjects: Iterable[str]) -> set[str]:
    """The streams of ``domain`` whose subjects take any of ``subjects``."""
    found = set()
    for key, value in state.items():
        if key[0] != "stream" or key[1] != domain:
            continue
        for own in (value.get("config") or {}).get("subjects") or []:
            if any(_collide(own, s) for s in subjects):
                found.add(key[2])
    return found


def _collide(a: str, b: str) -> bool:
    try:
        return subjects_collide(a, b)
    except Exception:
        return False
