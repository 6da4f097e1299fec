"""``JetStreamKeyValueSensor``: wait until a key exists in a KV bucket (of any domain)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow_provider_jetstream.core.errors import JetStreamConfigError
from airflow_provider_jetstream.core.manage.specs.names import validate_bucket, validate_key
from airflow_provider_jetstream.core.values import validate_count
from airflow_provider_jetstream.sensors.base import BaseJetStreamSensor, templated
from airflow_provider_jetstream.triggers.kv import JetStreamKeyValueTrigger


class JetStreamKeyValueSensor(BaseJetStreamSensor):
    """Wait until a key of a KV bucket holds a value (equal to ``value``, or at ``min_revision``).

    A deleted or purged key does not count as present. With ``domain="leaf"`` a sensor connected to
    the hub reads the leaf's bucket: a key of the same name in another domain's bucket does not
    satisfy it. Returns (XCom) ``{"bucket", "key", "value", "encoding", "revision", "target"}``, the
    value decoded as UTF-8 text (``encoding: "utf-8"``) or else base64. A bucket that does not
    exist fails the task at once. In deferrable mode the trigger watches the key: no polling.

    :param bucket: KV bucket name (templated).
    :param key: key to wait for (templated).
    :param value: UTF-8 text the key must hold (templated); None (default) accepts any value.
    :param min_revision: revision (stream sequence) the key must reach; None (default) accepts any.

    Also takes :class:`BaseJetStreamSensor`'s ``jetstream_conn_id``, ``domain``, ``api_prefix``,
    ``deferrable``, ``unreachable_timeout`` and Airflow's sensor arguments (``poke_interval``, ``timeout``, ``mode``,
    ``soft_fail``...).
    """

    template_fields: Sequence[str] = (*BaseJetStreamSensor.template_fields, "bucket", "key", "value")
    event_key = "entry"

    def __init__(
        self,
        *,
        bucket: str,
        key: str,
        value: str | None = None,
        min_revision: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.bucket = bucket
        self.key = key
        self.value = value
        self.min_revision = validate_count(min_revision, "min_revision", allow_none=True)
        if not templated(bucket) and not templated(key):
            self.validate()

    def validate(self) -> None:
        validate_bucket(self.bucket, "bucket")
        validate_key(self.key, "key")
        if self.value is not None and not isinstance(self.value, str):
            raise JetStreamConfigError(f"value={self.value!r} is not allowed: use text (compared as UTF-8) or None")

    def trigger(self) -> JetStreamKeyValueTrigger:
        return JetStreamKeyValueTrigger(
            jetstream_conn_id=self.jetstream_conn_id,
            bucket=self.bucket,
            key=self.key,
            domain=self.domain,
            api_prefix=self.api_prefix,
            value=self.value,
            min_revision=self.min_revision,
            rewatch_interval=max(self.poke_interval, 5.0),
            unreachable_timeout=self.unreachable_timeout_seconds,
            state=dict(self._state),
        )
