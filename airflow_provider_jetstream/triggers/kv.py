"""``JetStreamKeyValueTrigger``: a KV watch (no polling) until a key is present, in any domain.

Each entry the watch delivers is judged by :func:`airflow_provider_jetstream.core.status.checks.judge_entry`,
the key check the sensor's poke and :meth:`JetStreamHook.acheck_key` make: a key counts as present
when its latest entry is a value (a deleted or purged key is absent); optionally the value must
equal ``value`` or the revision reach ``min_revision``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import nats.errors
import nats.js.errors

from airflow_provider_jetstream.core.api import JetStreamApi, is_imported_prefix
from airflow_provider_jetstream.core.arguments.waits import KEY_TRIGGER
from airflow_provider_jetstream.core.connection.client import refusal_since
from airflow_provider_jetstream.core.errors import JetStreamPermissionError
from airflow_provider_jetstream.core.status.checks import KeyCheck, judge_entry, open_bucket
from airflow_provider_jetstream.core.status.waiting import WaitOutcome, wait_until_final
from airflow_provider_jetstream.hooks.jetstream import JetStreamHook
from airflow_provider_jetstream.triggers.base import SHARED, JetStreamWaitTrigger


class JetStreamKeyValueTrigger(JetStreamWaitTrigger):
    """Fires when a KV key is present (and equals ``value`` / reaches ``min_revision``), in any domain.

    Watches the key (an ordered consumer on the bucket's stream, starting with the key's latest
    entry) over the triggerer's one shared NATS connection: no polling. When the key stays silent
    for ``rewatch_interval`` the watch is re-armed, so a watch lost with a restarted leaf is
    replaced; while the domain does not answer (a leaf that is offline, or a wrong domain name) it
    retries at that interval too, up to ``unreachable_timeout``. Fires ``{"status": "success",
    "entry": {...}}``, or ``{"status": "error", "reason": ..., "message": ...}`` when the bucket does
    not exist, a request is refused (``Permissions Violation``, or an imported API prefix this
    account has no import for) or the connection cannot be made.

    :param jetstream_conn_id: Airflow connection id (the connection is resolved in the triggerer).
    :param bucket: KV bucket name.
    :param key: key to wait for.
    :param domain: JetStream domain of the bucket. Default: the connection's.
    :param api_prefix: JetStream API prefix instead of a domain. Default: the connection's.
    :param value: value (UTF-8 text) the key must hold; None (default) accepts any value.
    :param min_revision: revision the key must reach; None (default) accepts any.
    :param rewatch_interval: seconds of silence after which the watch is re-armed. Default 60.
    :param unreachable_timeout: how long (seconds, or text like ``"10m"``) the domain may go without
        answering before the trigger fails; None (default): no bound (the sensor's timeout applies).
    :param state: what the sensor's checks so far left (``{"unreachable_since": epoch seconds}``).

    What it opens (the shared connection, the watch) is held by ``run()``'s context managers and
    released when ``run()`` returns, is cancelled or is closed: ``cleanup()`` has nothing left to do.
    """

    fields = ("bucket", "key", "value", "min_revision", "rewatch_interval")
    arguments = KEY_TRIGGER
    event_key = "entry"

    def __init__(
        self,
        jetstream_conn_id: str,
        bucket: str,
        key: str,
        domain: str | None = None,
        api_prefix: str | None = None,
        value: str | None = None,
        min_revision: int | None = None,
        rewatch_interval: float = 60.0,
        unreachable_timeout: float | str | None = None,
        state: dict[str, Any] | None = None,
    ) -> None:
        args = self.checked(
            jetstream_conn_id=jetstream_conn_id,
            bucket=bucket,
            key=key,
            domain=domain,
            api_prefix=api_prefix,
            value=value,
            min_revision=min_revision,
            rewatch_interval=rewatch_interval,
            unreachable_timeout=unreachable_timeout,
            state=state,
        )
        super().__init__(*(args[name] for name in SHARED))
        self.bucket = args["bucket"]
        self.key = args["key"]
        self.value = args["value"]
        self.min_revision = args["min_revision"]
        self.rewatch_interval = args["rewatch_interval"]

    @property
    def what(self) -> str:
        return f"KV {self.bucket!r} key {self.key!r}"

    async def check(self, hook: JetStreamHook) -> KeyCheck:
        """One read of the key (a sensor's poke); the trigger itself watches instead (:meth:`wait`)."""
        check = await hook.acheck_key(self.bucket, self.key, value=self.value, min_revision=self.min_revision)
        state = "done" if check.done else "waiting"
        self.log.info("KV %r in %s: %s: %s", self.bucket, check.target, state, check.reason)
        return check

    async def wait(self, hook: JetStreamHook) -> WaitOutcome:
        """Watch the key (no polling), re-armed after ``rewatch_interval`` of silence, and after that long
        when the domain did not answer: the shared wait loop with the watch as its check."""
        async with hook.aapi() as api:
            return await wait_until_final(
                lambda: self.step(hook, lambda: self._watch(hook, api)), self.rewatch_interval
            )

    async def _watch(self, hook: JetStreamHook, api: JetStreamApi) -> KeyCheck:
        started = time.monotonic()
        try:
            check = await self._watch_once(api)
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError, nats.js.errors.ServiceUnavailableError) as err:
            # nats-py's watch asks the API itself: the server drops a request this user may not publish
            # (a refusal looks like a timeout), and an imported prefix without the import has no responders.
            refusal = refusal_since(api.nc, started, prefix=api.prefix)
            if refusal:
                raise JetStreamPermissionError(f"KV {self.bucket!r} in {api.target}: {refusal}") from None
            if is_imported_prefix(api.prefix) and not isinstance(err, nats.errors.TimeoutError):
                raise hook._no_jetstream(None, None) from None
            raise
        if check is not None:
            self.log.info("KV %r in %s: %s", self.bucket, api.target, check.reason)
            return check
        silent = f"key {self.key!r} unchanged for {self.rewatch_interval:g}s; watching again"
        return KeyCheck(self.bucket, self.key, api.target, False, silent)

    async def _watch_once(self, api: JetStreamApi) -> KeyCheck | None:
        """Watch until the key satisfies the trigger (its check) or stays silent (None: re-arm)."""
        target = api.target
        kv = await open_bucket(api, self.bucket)
        # A short inactive threshold lets the server drop the watch's consumer soon after it stops.
        watcher = await kv.watch(self.key, inactive_threshold=30.0)
        seen = False
        try:
            while True:
                try:
                    entry = await watcher.updates(timeout=self.rewatch_interval)
                except nats.errors.TimeoutError:
                    return None
                if entry is None:  # the watch has delivered what is stored
                    if not seen:
                        self.log.info("KV %r in %s: key %r is absent; watching", self.bucket, target, self.key)
                    continue
                seen = True
                check = judge_entry(self.bucket, self.key, target, entry, self.value, self.min_revision)
                if check.done:
                    return check
                self.log.info("KV %r in %s: waiting: %s", self.bucket, target, check.reason)
        finally:
            with contextlib.suppress(Exception):
                await asyncio.shield(watcher.stop())
