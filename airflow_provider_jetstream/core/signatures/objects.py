"""The object store operations' signatures: declare a bucket; put, get, list, delete and wait for objects.

Each is an :class:`~airflow_provider_jetstream.core.arguments.Args` the hook method, its operator and its
sensor share; file paths, names and revisions given empty (a template that rendered nothing) are refused,
never taken as "not given". A put's ``local_path`` is a file read (:func:`~.paths.local_file`), a get's a
destination (:func:`~.paths.local_destination`: a directory or a path ending in ``/`` takes the object's last
name part); a put's object name must fit its meta subject.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_provider_jetstream.core.arguments import REFUSE, REQUIRED, VALUE, Arg, Args, Rule
from airflow_provider_jetstream.core.arguments.names import object_bucket_name, object_name
from airflow_provider_jetstream.core.arguments.paths import local_destination, local_file
from airflow_provider_jetstream.core.arguments.values import boolean, integer, optional, string_map, text
from airflow_provider_jetstream.core.manage.object_messages import (
    CHUNK_SIZE,
    MAX_CHUNK_SIZE,
    MIN_CHUNK_SIZE,
    put_meta_subject,
)
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


def _meta_subject_fits(values: Mapping[str, Any], prefix: str) -> None:
    put_meta_subject(values["bucket"], values["object_name"], f"{prefix}object_name")


OBJECT_STORE_SPEC = spec_arg(
    ObjectStoreSpec,
    "the object store bucket: a name, an ObjectStoreSpec or its dict, e.g. {'bucket': 'files', 'ttl': '7d'} or "
    "{'bucket': 'files-leaf', 'mirror': {'bucket': 'files', 'domain': 'leaf'}}",
)
OBJECT_BUCKET = Arg(object_bucket_name, REQUIRED, REFUSE, "the object store bucket's name", templated=True)
OBJECT_NAME = Arg(object_name, REQUIRED, REFUSE, "the object's name in its object store", templated=True)
#: ``local_path`` by role, on the machine the task runs on: the file an object is stored from (read) ...
LOCAL_FILE = Arg(
    local_file, REQUIRED, REFUSE, "the file to store, on the machine the task runs on: a regular file", templated=True
)
#: ... or the file it is written to (a destination).
LOCAL_DESTINATION = Arg(
    local_destination,
    REQUIRED,
    REFUSE,
    "the file to write the object to, on the machine the task runs on; a directory (or a path ending in '/') takes "
    "the object's last name part; a device, FIFO, socket or symbolic link is refused",
    templated=True,
)

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
PUT_OBJECT = (
    OBJECT
    + Args(
        "put object",
        {
            "local_path": LOCAL_FILE,
            "description": Arg(optional(text), None, VALUE, "the object's description; default None", templated=True),
            "headers": Arg(
                optional(string_map), None, VALUE, "headers recorded in the object's meta; default None", templated=True
            ),
            "chunk_size": Arg(
                integer(MIN_CHUNK_SIZE, MAX_CHUNK_SIZE, " (1 KiB to 8 MiB)"),
                CHUNK_SIZE,
                VALUE,
                f"bytes per chunk, at most what a read gets back through the connected server; default {CHUNK_SIZE} "
                "(128 KiB)",
            ),
        },
    )
).ruled(Rule(("bucket", "object_name"), _meta_subject_fits, "a put's object name fits its meta subject"))
GET_OBJECT = OBJECT + Args(
    "get object",
    {"local_path": LOCAL_DESTINATION},
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
    "LOCAL_DESTINATION",
    "LOCAL_FILE",
    "OBJECT",
    "OBJECT_BUCKET",
    "OBJECT_CHECK",
    "OBJECT_INFO",
    "OBJECT_NAME",
    "OBJECT_STORE_SPEC",
    "OBJECT_TRIGGER",
    "PUT_OBJECT",
    "WATCH_OBJECTS",
]
