"""``JetStreamObjectSensor``: wait until an object of an object store bucket (of any domain) is present, or new."""

from __future__ import annotations

from typing import Any

from airflow_provider_jetstream.core.arguments import Args
from airflow_provider_jetstream.core.signatures.objects import OBJECT_CHECK
from airflow_provider_jetstream.core.signatures.waits import SENSOR
from airflow_provider_jetstream.hooks.objects import JetStreamObjectStoreHook
from airflow_provider_jetstream.sensors.base import BaseJetStreamSensor
from airflow_provider_jetstream.triggers.objects import JetStreamObjectTrigger


class JetStreamObjectSensor(BaseJetStreamSensor):
    """Wait until an object of an object store bucket is present (not deleted), or, with ``after_revision``, has a
    revision above it (a put after the one a previous run processed, e.g. ``"{{ ti.xcom_pull('get')['revision']
    }}"``). With ``domain="hub"`` and a hub mirror of a leaf's bucket, it waits for the object to reach the hub.
    Returns (XCom) the object's info: ``{"bucket", "name", "size", "chunks", "digest", "revision", "modified",
    "deleted", "nuid", "target"}``. A bucket that does not exist fails the task at once.

    :param bucket: object store bucket name (templated).
    :param object_name: the object's name (templated).
    :param after_revision: revision the object must exceed (templated); None (default): any revision. A template
        that renders empty is refused, never taken as "any revision".

    Also takes :class:`BaseJetStreamSensor`'s ``jetstream_conn_id``, ``domain``, ``api_prefix``, ``deferrable``,
    ``unreachable_timeout`` and Airflow's sensor arguments (``poke_interval``, ``timeout``, ``mode``...).
    """

    hook_class = JetStreamObjectStoreHook
    arguments: Args = SENSOR + OBJECT_CHECK
    event_key = "object"

    def __init__(self, *, bucket: str, object_name: str, after_revision: int | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.bucket = bucket
        self.object_name = object_name
        self.after_revision = after_revision

    def trigger(self) -> JetStreamObjectTrigger:
        return JetStreamObjectTrigger(
            **self.trigger_arguments(JetStreamObjectTrigger), poll_interval=self.poke_interval, state=dict(self._state)
        )
