"""The packaged job's checkpoint: a KV entry read and written by compare-and-set, asked again across a failover.

:class:`CheckpointStore` is the part of :class:`~.stream_to_parquet.StreamToParquetJob` that keeps the
checkpoint (the bucket created when missing, every read and write asked again while nobody answers, a
write whose ack was lost recognised); the job's docstring tells the whole protocol.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import nats.errors

from airflow_provider_jetstream.core.api import NOT_CLUSTERED, JetStreamApi
from airflow_provider_jetstream.core.connection.client import open_connection, release
from airflow_provider_jetstream.core.errors import (
    WAIT,
    CheckpointConflictError,
    JetStreamApiError,
    JetStreamConfigError,
    JetStreamError,
    JetStreamTimeoutError,
    KeyValueConflictError,
    disposition,
)
from airflow_provider_jetstream.core.manage.buckets import kv_get, kv_put, reconcile_bucket
from airflow_provider_jetstream.core.manage.specs import KeyValueSpec
from airflow_provider_jetstream.core.read.identity import IDENTITY_KEY
from airflow_provider_jetstream.core.resend import FAILOVER_WAIT, retry_failover
from airflow_provider_jetstream.core.sync import run_sync

log = logging.getLogger("stream_to_parquet")

#: Replicas of a checkpoint bucket the job creates on a cluster when ``--checkpoint-replicas`` is not
#: given (a single server takes 1: it refuses more).
CLUSTER_REPLICAS = 3
#: Seconds a checkpoint read or write is asked again while nobody answers (a leader election).
CHECKPOINT_WAIT = FAILOVER_WAIT


@dataclass(frozen=True)
class Checkpoint:
    """The KV entry: last sequence written, the unfinished claim (if any), the key's revision, and the
    identity of the stream they belong to (``created``: None in a checkpoint of an earlier version;
    ``epoch``: how many times the job went on to a recreated stream, default 0)."""

    seq: int | None
    claim: dict[str, Any] | None
    revision: int | None  # None: the key does not exist
    created: str | None = None
    epoch: int = 0


class CheckpointStore:
    """The checkpoint of one job: KV bucket ``args.checkpoint_bucket``, key ``args.checkpoint_key``, in the
    domain of ``checkpoint_prefix``; each write records the stream's identity (``created``) and ``epoch``."""

    #: Seconds a checkpoint read or write is asked again while nobody answers (default :data:`CHECKPOINT_WAIT`).
    checkpoint_wait: float = CHECKPOINT_WAIT
    args: Any
    read_options: Any
    checkpoint_prefix: str
    created: str | None = None
    epoch: int = 0

    async def _bucket(self, nc: Any) -> JetStreamApi:
        """The checkpoint bucket's JetStream API (in its domain); the bucket is created when missing, with
        ``--checkpoint-replicas`` copies, by default :data:`CLUSTER_REPLICAS` on a cluster and 1 on a single
        server (the server's own answer: it refuses more than 1 replica outside a cluster)."""
        api = JetStreamApi(nc, self.checkpoint_prefix, timeout=self.read_options.pull.request_timeout)
        replicas = self.args.checkpoint_replicas or CLUSTER_REPLICAS

        async def ensure(replicas: int) -> Any:
            spec = KeyValueSpec.from_dict({"bucket": self.args.checkpoint_bucket, "history": 5, "replicas": replicas})
            return await reconcile_bucket(api, spec, if_exists="skip", logger=log)

        try:
            result = await ensure(replicas)
        except JetStreamApiError as err:
            if self.args.checkpoint_replicas is not None or err.err_code != NOT_CLUSTERED:
                raise
            replicas = 1  # one server: the cluster's size is 1
            result = await ensure(replicas)
        if result.action == "created":
            log.info(
                "created KV bucket %r for checkpoints in %s with %d replicas",
                self.args.checkpoint_bucket,
                api.target,
                replicas,
            )
        return api

    def _with_kv(self, work: Callable[[Any, JetStreamApi], Any]) -> Any:
        """``work(nc, api)`` on the checkpoint bucket, asked again while nobody answers now, for up to
        :attr:`checkpoint_wait` seconds; then a provider error naming the cause."""
        where = f"checkpoint {self.args.checkpoint_bucket}/{self.args.checkpoint_key}"

        async def run() -> Any:
            nc = await open_connection(self.read_options.connection)
            try:
                return await retry_failover(
                    lambda: self._in_bucket(nc, work), nc, within=self.checkpoint_wait, what=where, unanswered_too=True
                )
            except (JetStreamError, nats.errors.Error) as err:
                if disposition(err) != WAIT:
                    if isinstance(err, JetStreamError):
                        raise
                    raise JetStreamError(f"{where}: {type(err).__name__}: {err}") from None
                raise JetStreamTimeoutError(
                    f"{where}: no answer for {self.checkpoint_wait:g}s, asked again meanwhile (the bucket's cluster "
                    f"has no leader: nodes down; or its domain is unreachable): {type(err).__name__}: {err}"
                ) from None
            finally:
                await release(nc, drain=True)

        return run_sync(run())

    async def _in_bucket(self, nc: Any, work: Callable[[Any, JetStreamApi], Any]) -> Any:
        return await work(nc, await self._bucket(nc))

    def read_checkpoint(self) -> Checkpoint:
        key = self.args.checkpoint_key

        async def read(nc: Any, api: JetStreamApi) -> Checkpoint:
            entry = await kv_get(api, self.args.checkpoint_bucket, key)
            if entry is None:
                return Checkpoint(None, None, None)
            value = json.loads(entry.value or b"{}")
            owner = value.get("output")
            if owner not in (None, self.args.output) or value.get("stream") not in (None, self.args.stream):
                raise JetStreamConfigError(
                    f"checkpoint key {key!r} belongs to stream {value.get('stream')!r} -> {owner!r}, not "
                    f"{self.args.stream!r} -> {self.args.output!r}: give each job its own --checkpoint-key"
                )
            return Checkpoint(
                value.get("seq"),
                value.get("claim"),
                entry.revision,
                value.get(IDENTITY_KEY),
                int(value.get("epoch") or 0),
            )

        return self._with_kv(read)

    def _put(self, value: dict[str, Any], revision: int | None) -> int:
        key = self.args.checkpoint_key
        identity = {IDENTITY_KEY: self.created} if self.created else {}
        if self.epoch:
            identity["epoch"] = self.epoch
        body = json.dumps({"stream": self.args.stream, "output": self.args.output, **value, **identity}).encode()

        unanswered: list[BaseException] = []

        async def put(nc: Any, api: JetStreamApi) -> int:
            try:
                # revision None: the key must not exist yet (expected revision 0).
                return await kv_put(api, self.args.checkpoint_bucket, key, body, expected_revision=revision or 0)
            except KeyValueConflictError as err:
                if unanswered:
                    # An earlier attempt got no answer: if it was stored (its ack lost), the key holds this value.
                    entry = await kv_get(api, self.args.checkpoint_bucket, key)
                    if entry is not None and entry.value == body:
                        log.info("the checkpoint write was stored before its ack was lost: revision %d", entry.revision)
                        return entry.revision
                raise CheckpointConflictError(
                    f"checkpoint {self.args.checkpoint_bucket}/{key} changed since revision {revision} (another run "
                    f"advanced or took it over): this run does not advance it ({err})"
                ) from None
            except Exception as err:
                if disposition(err) == WAIT:
                    unanswered.append(err)
                raise

        return self._with_kv(put)
