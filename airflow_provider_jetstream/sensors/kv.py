"""``JetStreamKeyValueSensor``: wait until a key exists in a KV bucket (of any domain)."""

from __future__ import annotations

from typing import Any

from airflow_provider_jetstream.core.arguments import Args
from airflow_provider_jetstream.core.signatures.operations import KEY_CHECK
from airflow_provider_jetstream.core.signatures.waits import SENSOR
from airflow_provider_jetstream.hooks.kv import JetStreamKeyValueHook
from airflow_provider_jetstream.sensors.base import BaseJetStreamSensor
from airflow_provider_jetstream.triggers.kv import JetStreamKeyValueTrigger


class JetStreamKeyValueSensor(BaseJetStreamSensor):
    """Wait until a key of a KV bucket holds a value (equal to ``value``, or at a revision above ``after_revision``).

    A deleted or purged key does not count as present. With ``domain="leaf"`` a sensor connected to
    the hub reads the leaf's bucket: a key of the same name in another domain's bucket does not
    satisfy it. Returns (XCom) ``{"bucket", "key", "value", "encoding", "revision", "target"}``, the
    value decoded as UTF-8 text (``encoding: "utf-8"``) or else base64. A bucket that does not
    exist fails the task at once. In deferrable mode the trigger watches the key: no polling.

    :param bucket: KV bucket name (templated).
    :param key: key to wait for (templated).
    :param value: UTF-8 text the key must hold (templated); None (default) accepts any value.
    :param after_revision: only a revision (stream sequence) above this one counts: a put after the one seen
        (templated); None (default) accepts any. A template that renders empty is refused.

    Also takes :class:`BaseJetStreamSensor`'s ``jetstream_conn_id``, ``domain``, ``api_prefix``,
    ``deferrable``, ``unreachable_timeout`` and Airflow's sensor arguments (``poke_interval``, ``timeout``, ``mode``,
    ``soft_fail``...).
    """

    hook_class = JetStreamKeyValueHook
    arguments: Args = SENSOR + KEY_CHECK
    event_key = "entry"

    def __init__(
        self,
        *,
        bucket: str,
        key: str,
        value: str | None = None,
        after_revision: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.bucket = bucket
        self.key = key
        self.value = value
        self.after_revision = after_revision

    def trigger(self) -> JetStreamKeyValueTrigger:
        return JetStreamKeyValueTrigger(
            **self.trigger_arguments(JetStreamKeyValueTrigger),
            poll_interval=max(self.poke_interval, 5.0),
            state=dict(self._state),
        )
