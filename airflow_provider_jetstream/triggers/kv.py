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
from collections.abc import AsyncIterator
from typing import Any

import nats.errors
import nats.js.errors
from airflow.triggers.base import TriggerEvent

from airflow_provider_jetstream.core.api import JetStreamApi, is_imported_prefix
from airflow_provider_jetstream.core.connection.client import refusal_since, wait_task
from airflow_provider_jetstream.core.errors import JetStreamPermissionError
from airflow_provider_jetstream.core.status.checks import KeyCheck, judge_entry, open_bucket
from airflow_provider_jetstream.triggers.base import (
    FINAL_ERRORS,
    TRANSIENT_ERRORS,
    JetStreamWaitTrigger,
    error_event,
    transient_reason,
)


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
        super().__init__(jetstream_conn_id, domain, api_prefix, unreachable_timeout, state)
        self.bucket = bucket
        self.key = key
        self.value = value
        self.min_revision = min_revision
        self.rewatch_interval = float(rewatch_interval)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        hook = self.new_hook()
        unanswered = self.unreachable_clock()
        try:
            async with hook.aapi() as api:
                target = api.target
                while True:
                    started = time.monotonic()
                    try:
                        # In a task of its own: a cancellation arriving with a reply is not lost.
                        check = await wait_task(self._watch_once(api))
                    except TRANSIENT_ERRORS as err:
                        # The server drops a request this user may not publish: a refusal looks like a timeout.
                        refusal = refusal_since(api.nc, started, prefix=api.prefix)
                        if refusal:
                            raise JetStreamPermissionError(f"KV {self.bucket!r} in {target}: {refusal}") from None
                        if is_imported_prefix(api.prefix) and isinstance(
                            err, (nats.errors.NoRespondersError, nats.js.errors.ServiceUnavailableError)
                        ):
                            raise hook._no_jetstream(None, None) from None  # no import: waiting cannot help
                        what = f"KV {self.bucket!r} key {self.key!r}"
                        event = unanswered.on_no_answer(what, transient_reason(hook, err), self.log)
                        if event:
                            yield event
                            return
                        await asyncio.sleep(self.rewatch_interval)
                        continue
                    unanswered.clear()
                    if check is not None:
                        self.log.info("KV %r in %s: %s", self.bucket, target, check.reason)
                        yield TriggerEvent({"status": "success", "entry": check.to_xcom()})
                        return
        except FINAL_ERRORS as err:
            yield error_event(err, self.jetstream_conn_id)

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
