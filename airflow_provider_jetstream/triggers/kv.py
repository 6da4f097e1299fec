"""``JetStreamKeyValueTrigger``: a KV watch (no polling) until a key is present, in any domain.

Each entry the watch delivers is judged by :func:`airflow_provider_jetstream.core.status.kv_key.judge_entry`,
the key check the sensor's poke and :meth:`JetStreamKeyValueHook.acheck_key` make: a key counts as present
when its latest entry is a value (a deleted or purged key is absent); optionally the value must
equal ``value`` or the revision be above ``after_revision``.
"""

from __future__ import annotations

from typing import Any

from airflow_provider_jetstream.core.api import JetStreamApi
from airflow_provider_jetstream.core.consume.watch import watch_key
from airflow_provider_jetstream.core.signatures.waits import KEY_TRIGGER
from airflow_provider_jetstream.core.status.kv_key import KeyCheck, judge_entry
from airflow_provider_jetstream.hooks.kv import JetStreamKeyValueHook
from airflow_provider_jetstream.triggers.base import JetStreamWatchTrigger, keeps_arguments


class JetStreamKeyValueTrigger(JetStreamWatchTrigger):
    """Fires when a KV key is present (and equals ``value`` / is above ``after_revision``), in any domain.

    Watches the key (an ordered consumer of its own on the bucket's stream, starting with the key's latest
    entry, :func:`~airflow_provider_jetstream.core.consume.watch.watch_key`) over the triggerer's one shared
    NATS connection: the server sends each revision as it is stored, no polling; a watch lost with a restarted
    leaf or a killed stream leader goes on with a new consumer. While the domain does not answer (a leaf that is
    offline, or a wrong domain name) it watches again every ``poll_interval`` seconds, up to
    ``unreachable_timeout``. Fires ``{"status": "success",
    "entry": {...}}``, or ``{"status": "error", "reason": ..., "message": ...}`` when the bucket does
    not exist, a request is refused (``Permissions Violation``, or an imported API prefix this
    account has no import for) or the connection cannot be made.

    :param jetstream_conn_id: Airflow connection id (the connection is resolved in the triggerer).
    :param bucket: KV bucket name.
    :param key: key to wait for.
    :param domain: JetStream domain of the bucket. Default: the connection's.
    :param api_prefix: JetStream API prefix instead of a domain. Default: the connection's.
    :param value: value (UTF-8 text) the key must hold; None (default) accepts any value.
    :param after_revision: only a revision above this one counts; None (default) accepts any.
    :param poll_interval: seconds between two watches while the domain does not answer. Default 60.
    """

    arguments = KEY_TRIGGER
    hook_class = JetStreamKeyValueHook
    event_key = "entry"
    what_format = "KV {bucket!r} key {key!r}"

    @keeps_arguments
    def __init__(
        self,
        jetstream_conn_id: str,
        bucket: str,
        key: str,
        domain: str | None = None,
        api_prefix: str | None = None,
        value: str | None = None,
        after_revision: int | None = None,
        poll_interval: float = 60.0,
        unreachable_timeout: float | str | None = None,
        state: dict[str, Any] | None = None,
    ) -> None: ...

    async def check(self, hook: JetStreamKeyValueHook) -> KeyCheck:
        """One read of the key (a sensor's poke); the trigger itself watches instead (:meth:`wait`)."""
        check = await hook.acheck_key(self.bucket, self.key, value=self.value, after_revision=self.after_revision)
        state = "done" if check.done else "waiting"
        self.log.info("KV %r in %s: %s: %s", self.bucket, check.target, state, check.reason)
        return check

    async def watch(self, api: JetStreamApi) -> KeyCheck:
        """Watch until the key satisfies the trigger (errors end the watch: the wait loop judges them)."""
        target = api.target
        seen = False
        async for entry in watch_key(api, self.bucket, self.key):
            if entry is None:  # what is stored has been delivered
                if not seen:
                    self.log.info("KV %r in %s: key %r is absent; watching", self.bucket, target, self.key)
                continue
            seen = True
            check = judge_entry(self.bucket, self.key, target, entry, self.value, self.after_revision)
            self.log.info("KV %r in %s: %s: %s", self.bucket, target, "done" if check.done else "waiting", check.reason)
            if check.done:
                return check
        raise AssertionError("a watch ends only when its caller stops it")  # pragma: no cover
