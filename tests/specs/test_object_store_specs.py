"""Object store bucket specs and layouts: the stream every client creates, copies renamed into their own subjects."""

from __future__ import annotations

import base64
import hashlib

import pytest

from airflow_provider_jetstream.core.errors import ObjectDigestError, SpecErrors
from airflow_provider_jetstream.core.manage.object_messages import encode_name, format_digest, parse_digest
from airflow_provider_jetstream.core.manage.objects import object_layout
from airflow_provider_jetstream.core.manage.specs.objects import ObjectStoreSpec


def test_a_bucket_is_the_stream_nats_go_creates() -> None:
    wire = ObjectStoreSpec.from_dict({"bucket": "files", "ttl": "1h", "compression": True}).stream_spec().wire()
    assert wire == {
        "name": "OBJ_files",
        "subjects": ["$O.files.C.>", "$O.files.M.>"],
        "max_age": 3600 * 10**9,
        "max_bytes": -1,
        "storage": "file",
        "num_replicas": 1,
        "discard": "new",
        "allow_rollup_hdrs": True,
        "allow_direct": True,
        "compression": "s2",
    }


def test_copies_rename_the_origin_subjects_unless_the_names_match() -> None:
    mirror = ObjectStoreSpec.from_dict({"bucket": "files-leaf", "mirror": {"bucket": "files", "domain": "leaf"}})
    wire = mirror.stream_spec().wire()
    assert "subjects" not in wire
    assert wire["mirror"] == {
        "name": "OBJ_files",
        "external": {"api": "$JS.leaf.API"},
        "subject_transforms": [{"src": "$O.files.>", "dest": "$O.files-leaf.>"}],
    }
    same = ObjectStoreSpec.from_dict({"bucket": "files", "mirror": {"bucket": "files", "domain": "leaf"}})
    assert "subject_transforms" not in same.stream_spec().wire()["mirror"]
    sourced = ObjectStoreSpec.from_dict({"bucket": "all", "sources": [{"bucket": "files", "domain": "leaf"}]})
    assert sourced.stream_spec().wire()["sources"][0]["subject_transforms"] == [
        {"src": "$O.files.>", "dest": "$O.all.>"}
    ]


def test_an_existing_bucket_is_compared_only_in_the_fields_named() -> None:
    assert ObjectStoreSpec.from_dict({"bucket": "files", "ttl": "1h"}).stream_spec().named_values() == {
        "name": "OBJ_files",
        "max_age": 3600 * 10**9,
    }


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"bucket": "a.b"}, "bucket.bucket='a.b' is not allowed"),
        ({"bucket": "x", "mirror": {"bucket": "y"}, "sources": [{"bucket": "z"}]}, "give mirror or sources"),
        ({"bucket": "x", "mirror": {"bucket": "y", "filter_subject": "$O.y.M.>"}}, "copy whole buckets"),
        ({"bucket": "x", "history": 5}, "bucket.history: unknown field"),
    ],
)
def test_bad_specs_are_refused_naming_the_field(spec: dict, message: str) -> None:
    with pytest.raises(SpecErrors, match=message.replace(".", r"\.").replace("(", r"\(")):
        ObjectStoreSpec.from_dict(spec)


def test_layouts_from_the_stream_config() -> None:
    assert object_layout("files", {"name": "OBJ_files", "subjects": ["$O.files.C.>", "$O.files.M.>"]}).subjects_of == (
        "files"
    )
    renamed = {
        "name": "OBJ_copy",
        "mirror": {"name": "OBJ_files", "subject_transforms": [{"src": "$O.files.>", "dest": "$O.copy.>"}]},
    }
    assert (object_layout("copy", renamed).subjects_of, object_layout("copy", renamed).mirror) == ("copy", "'files'")
    as_is = {"name": "OBJ_copy", "mirror": {"name": "OBJ_files", "external": {"api": "$JS.leaf.API"}}}
    assert (object_layout("copy", as_is).subjects_of, object_layout("copy", as_is).mirror) == (
        "files",
        "'files' in domain 'leaf'",
    )


def test_names_and_digests_are_encoded_as_every_client_encodes_them() -> None:
    assert encode_name("day/1.csv") == "ZGF5LzEuY3N2"
    assert encode_name("a") == "YQ=="  # padded, as nats.go's base64.URLEncoding and nats.js
    sha = hashlib.sha256(b"\xff" * 100).digest()
    assert format_digest(sha) == "SHA-256=" + base64.urlsafe_b64encode(sha).decode()
    for written in (format_digest(sha), "SHA-256=" + base64.b64encode(sha).decode(), format_digest(sha).rstrip("=")):
        assert parse_digest(written) == sha
    for bad in ("", "MD5=abc", "SHA-256=", "SHA-256=!!!!"):
        with pytest.raises(ObjectDigestError):
            parse_digest(bad)
