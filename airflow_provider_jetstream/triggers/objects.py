"""``JetStreamObjectTrigger``: wait until an object store object is present, or has a new revision, in any domain."""

from __future__ import annotations

from typing import Any

from airflow_provider_jetstream.core.api import JetStreamApi
from airflow_provider_jetstream.core.consume.watch import watch_objects
from airflow_provider_jetstream.core.signatures.objects import OBJECT_TRIGGER
from airflow_provider_jetstream.core.status.object_check import ObjectCheck, judge_object
from airflow_provider_jetstream.hooks.objects import JetStreamObjectStoreHook
from airflow_provider_jetstream.triggers.base import JetStreamWatchTrigger, keeps_arguments


class JetStreamObjectTrigger(JetStreamWatchTrigger):
    """Fires when object ``object_name`` of ``bucket`` is present (not deleted) and, with ``after_revision``, its
    revision (the sequence of its meta message) is above it: a put after the one seen. Watches the object's meta
    (an ordered consumer, :func:`~airflow_provider_jetstream.core.consume.watch.watch_objects`) over the
    triggerer's one shared NATS connection, mirror buckets of other domains included: the server sends each change
    as it is stored, no polling. While the domain does not answer it watches again every ``poll_interval`` seconds,
    up to ``unreachable_timeout``.
    Fires ``{"status": "success", "object": {...}}`` (the object's info), or ``{"status": "error", ...}`` when the
    bucket does not exist or a request is refused.

    :param jetstream_conn_id: Airflow connection id (the connection is resolved in the triggerer).
    :param bucket: object store bucket name.
    :param object_name: the object's name.
    :param domain: JetStream domain of the bucket. Default: the connection's.
    :param api_prefix: JetStream API prefix instead of a domain. Default: the connection's.
    :param after_revision: revision the object must exceed; None (default): any revision.
    :param poll_interval: seconds between two watches while the domain does not answer. Default 5.
    """

    arguments = OBJECT_TRIGGER
    hook_class = JetStreamObjectStoreHook
    event_key = "object"
    what_format = "object store {bucket!r} object {object_name!r}"

    @keeps_arguments
    def __init__(
        self,
        jetstream_conn_id: str,
        bucket: str,
        object_name: str,
        domain: str | None = None,
        api_prefix: str | None = None,
        after_revision: int | None = None,
        poll_interval: float = 5.0,
        unreachable_timeout: float | str | None = None,
        state: dict[str, Any] | None = None,
    ) -> None: ...

    async def check(self, hook: JetStreamObjectStoreHook) -> ObjectCheck:
        check = await hook.acheck_object(self.bucket, self.object_name, after_revision=self.after_revision)
        state = "done" if check.done else "waiting"
        self.log.info("object store %r in %s: %s: %s", self.bucket, check.target, state, check.reason)
        return check

    async def watch(self, api: JetStreamApi) -> ObjectCheck:
        """Watch until the object satisfies the trigger (errors end the watch: the wait loop judges them)."""
        changes = watch_objects(api, self.bucket, object_name=self.object_name, after_revision=self.after_revision)
        info = None
        async for change in changes:
            info = change or info
            check = judge_object(self.bucket, self.object_name, api.target, info, self.after_revision)
            if change is None and info is None:
                self.log.info("object store %r in %s: %s; watching", self.bucket, api.target, check.reason)
            elif change is not None:
                state = "done" if check.done else "waiting"
                self.log.info("object store %r in %s: %s: %s", self.bucket, api.target, state, check.reason)
            if check.done:
                return check
        raise AssertionError("a watch ends only when its caller stops it")  # pragma: no cover
