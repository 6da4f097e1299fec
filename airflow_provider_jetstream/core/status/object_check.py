"""The object check: whether an object of an object store bucket is present (or has a revision after one seen)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airflow_provider_jetstream.core.api import JetStreamApi
from airflow_provider_jetstream.core.manage.object_messages import ObjectInfo
from airflow_provider_jetstream.core.manage.objects import object_info


@dataclass(frozen=True)
class ObjectCheck:
    """One reading of an object: whether it satisfies the check, why not, and the object's info."""

    bucket: str
    name: str
    target: str
    done: bool
    reason: str
    info: ObjectInfo | None = None

    def to_xcom(self) -> dict[str, Any]:
        """The object's info (``size``, ``digest``, ``revision``...) and where it was read."""
        return {
            **(self.info.to_xcom() if self.info else {"bucket": self.bucket, "name": self.name}),
            "target": self.target,
        }


def judge_object(
    bucket: str, name: str, target: str, info: ObjectInfo | None, after_revision: int | None
) -> ObjectCheck:
    """``done`` when ``info`` is an object (not deleted) whose revision is above ``after_revision`` (when given)."""
    if info is None or info.deleted:
        return ObjectCheck(bucket, name, target, False, f"object {name!r} is absent from bucket {bucket!r}")
    if after_revision is not None and info.revision <= after_revision:
        return ObjectCheck(
            bucket,
            name,
            target,
            False,
            f"object {name!r} is at revision {info.revision}, not after {after_revision}",
            info,
        )
    return ObjectCheck(bucket, name, target, True, f"object {name!r} is present at revision {info.revision}", info)


async def check_object(api: JetStreamApi, bucket: str, name: str, after_revision: int | None = None) -> ObjectCheck:
    """The object check in ``api``'s domain (mirror buckets included): one meta read.
    :class:`~airflow_provider_jetstream.core.errors.JetStreamNotFoundError` if the bucket does not exist."""
    info = await object_info(api, bucket, name)
    return judge_object(bucket, name, api.target, info, after_revision)
