"""The KV key check: a key is present when its latest entry is a value (equal to ``value``, above ``after_revision``).

A deleted or purged key (a delete or purge marker, or no entry at all) is absent. Gets go through
:func:`~airflow_provider_jetstream.core.manage.buckets.kv_get`; the KV trigger judges each revision its watch
(:func:`~airflow_provider_jetstream.core.consume.watch.watch_key`) delivers.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

from airflow_provider_jetstream.core.manage.buckets import REMOVED, KvEntry


@dataclass(frozen=True)
class KeyCheck:
    """One reading of a key: whether it satisfies the check, why not, and the entry read."""

    bucket: str
    key: str
    target: str
    done: bool
    reason: str
    #: The entry that satisfies the check (None while it does not).
    entry: KvEntry | None = None

    def to_xcom(self) -> dict[str, Any]:
        """The decoded value (UTF-8 text, else base64 with ``encoding: "base64"``) and revision."""
        raw, revision = (self.entry.value or b"", self.entry.revision) if self.entry is not None else (b"", None)
        try:
            value, encoding = raw.decode(), "utf-8"
        except UnicodeDecodeError:
            value, encoding = base64.b64encode(raw).decode(), "base64"
        return {
            "bucket": self.bucket,
            "key": self.key,
            "target": self.target,
            "value": value,
            "encoding": encoding,
            "revision": revision,
        }


def judge_entry(
    bucket: str,
    key: str,
    target: str,
    entry: KvEntry | None,
    value: str | None,
    after_revision: int | None,
) -> KeyCheck:
    """Judge the latest entry of a key (None: no entry, or deleted/purged): present, equal to ``value`` (when
    given), at a revision above ``after_revision`` (when given)."""
    if entry is None or entry.operation in REMOVED:
        what = "absent" if entry is None else f"{entry.operation.lower()}d at revision {entry.revision}"
        return KeyCheck(bucket, key, target, False, f"key {key!r} is {what}")
    raw = entry.value or b""
    if value is not None and raw != value.encode():
        return KeyCheck(
            bucket, key, target, False, f"key {key!r} is {raw[:80]!r} at revision {entry.revision}, not {value!r}"
        )
    if after_revision is not None and (entry.revision or 0) <= after_revision:
        return KeyCheck(
            bucket, key, target, False, f"key {key!r} is at revision {entry.revision}, not after {after_revision}"
        )
    return KeyCheck(bucket, key, target, True, f"key {key!r} present at revision {entry.revision}", entry)
