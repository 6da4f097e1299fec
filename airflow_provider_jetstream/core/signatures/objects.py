"""The object store operations' signatures: declare a bucket; put, get, list, delete and wait for objects.

Each is an :class:`~airflow_provider_jetstream.core.arguments.Args` the hook method, its operator and its
sensor share; file paths, names and revisions given empty (a template that rendered nothing) are refused,
never taken as "not given".
"""

from __future__ import annotations

import os
from typing import Any

from airflow_provider_jetstream.core.arguments import REFUSE, REQUIRED, VALUE, Arg, Args
from airflow_provider_jetstream.core.arguments.names import object_bucket_name, object_name
from airflow_provider_jetstream.core.arguments.values import boolean, integer, optional, string_map, text
from airflow_provider_jetstream.core.errors import SpecError
from airflow_provider_jetstream.core.manage.objects import CHUNK_SIZE
from airflow_provider_jetstream.core.manage.specs.objects import ObjectStoreSpec
from airflow_provider_jetstream.core.signatures.shared import (
    AFTER_REVISION,
    ALLOW_DATA_LOSS,
    ALLOW_DOUBLE_STORE,
    ALLOW_UNREACHABLE_ORIGINS,
    DRY_RUN,
    IF_EXISTS_ARG,
    PEER_DOMAINS,
    PRUNE_SOURCES,
    spec_arg,
)
from airflow_provider_jetstream.core.signatures.waits import POLL_INTERVAL, WAIT


def file_path(value: Any, field: str) -> str:
    """A local file path (text or ``os.PathLike``), as text."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str) or not value.strip() or "\x00" in value:
        raise SpecError(field, value, "a file path (text or a pathlib.Path), e.g. '/data/day-1.csv'")
    return value


OBJECT_STORE_SPEC = spec_arg(
    ObjectStoreSpec,
    "the object store bucket: a name, an ObjectStoreSpec or its dict, e.g. {'bucket': 'files', 'ttl': '7d'} or "
    "{'bucket': 'files-leaf', 'mirror': {'bucket': 'files', 'domain': 'leaf'}}",
)
OBJECT_BUCKET = Arg(object_bucket_name, REQUIRED, REFUSE, "the object store bucket's name", templated=True)
OBJECT_NAME = Arg(object_name, REQUIRED, REFUSE, "the object's name in its object store", templated=True)
#: A file on the machine the task runs on: the file an object is stored from, or written to.
LOCAL_PATH = Arg(file_path, REQUIRED, REFUSE, "a file on the machine the task runs on", templated=True)

ENSURE_OBJECT_STORE = Args(
    "ensure object store",
    {
        "bucket": OBJECT_STORE_SPEC,
        "if_exists": IF_EXISTS_ARG,
        "dry_run": DRY_RUN,
        "prune_sources": PRUNE_SOURCES,
        "allow_data_loss": ALLOW_DATA_LOSS,
        "allow_double_store": ALLOW_DOUBLE_STORE,
        "peer_domains": PEER_DOMAINS,
        "allow_unreachable_origins": ALLOW_UNREACHABLE_ORIGINS,
    },
)
OBJECT = Args("object", {"bucket": OBJECT_BUCKET, "object_name": OBJECT_NAME})
OBJECT_INFO = OBJECT + Args(
    "object info",
    {"show_deleted": Arg(boolean, False, VALUE, "also a deleted object's info; default False", templated=True)},
)
LIST_OBJECTS = Args(
    "list objects",
    {
        "bucket": OBJECT_BUCKET,
        "show_deleted": Arg(boolean, False, VALUE, "also deleted objects; default False", templated=True),
    },
)
PUT_OBJECT = OBJECT + Args(
    "put object",
    {
        "local_path": LOCAL_PATH.but(doc="the file to store, on the machine the task runs on"),
        "description": Arg(optional(text), None, VALUE, "the object's description; default None", templated=True),
        "headers": Arg(
            optional(string_map), None, VALUE, "headers recorded in the object's meta; default None", templated=True
        ),
        "chunk_size": Arg(
            integer(1, 8 * 1024 * 1024), CHUNK_SIZE, VALUE, f"bytes per chunk; default {CHUNK_SIZE} (128 KiB)"
        ),
    },
)
GET_OBJECT = OBJECT + Args(
    "get object",
    {"local_path": LOCAL_PATH.but(doc="the file to write the object to, on the machine the task runs on")},
)
DELETE_OBJECT = OBJECT + Args(
    "delete object",
    {
        "ignore_missing": Arg(
            boolean, False, VALUE, "a missing object is success; default False: refused", templated=True
        )
    },
)
WATCH_OBJECTS = Args(
    "watch objects",
    {
        "bucket": OBJECT_BUCKET,
        "after_revision": AFTER_REVISION.but(doc="only changes after this revision; default None: every change"),
    },
)
OBJECT_CHECK = OBJECT + Args(
    "object check",
    {"after_revision": AFTER_REVISION},
)

OBJECT_TRIGGER = OBJECT_CHECK + WAIT + Args("poll", {"poll_interval": POLL_INTERVAL})

__all__ = [
    "DELETE_OBJECT",
    "ENSURE_OBJECT_STORE",
    "GET_OBJECT",
    "LIST_OBJECTS",
    "LOCAL_PATH",
    "OBJECT",
    "OBJECT_BUCKET",
    "OBJECT_CHECK",
    "OBJECT_INFO",
    "OBJECT_NAME",
    "OBJECT_STORE_SPEC",
    "OBJECT_TRIGGER",
    "PUT_OBJECT",
    "WATCH_OBJECTS",
    "file_path",
]
