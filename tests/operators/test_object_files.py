"""Objects and local files: destinations typed (special files, directories, long names), puts that fail cleaned up,
chunk sizes bounded; on a real server, each refusal shown to come before anything is sent or replaced."""

from __future__ import annotations

import asyncio
import os
import socket
import stat
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import nats
import pytest

from airflow_provider_jetstream.core.api import JetStreamApi
from airflow_provider_jetstream.core.errors import JetStreamConfigError, ObjectStoreError, SpecError, SpecErrors
from airflow_provider_jetstream.core.manage.objects import put_object
from airflow_provider_jetstream.hooks.jetstream import JetStreamHook
from airflow_provider_jetstream.operators.objects import (
    JetStreamCreateObjectStoreOperator,
    JetStreamGetObjectOperator,
    JetStreamPutObjectOperator,
)
from airflow_provider_jetstream.testing.servers import USERS
from tests.support.management import QuietServer, uid
from tests.support.waiting import eventually


def new_bucket(conn: str, **fields: Any) -> str:
    bucket = uid("files")
    JetStreamCreateObjectStoreOperator(
        task_id=uid("os"), jetstream_conn_id=conn, bucket={"bucket": bucket, **fields}
    ).execute({})
    return bucket


def put(conn: str, bucket: str, name: str, source: Path, **kwargs: Any) -> dict:
    return JetStreamPutObjectOperator(
        task_id=uid("put"), jetstream_conn_id=conn, bucket=bucket, object_name=name, local_path=str(source), **kwargs
    ).execute({})


def get_operator(conn: str, bucket: str, name: str, destination: str) -> JetStreamGetObjectOperator:
    return JetStreamGetObjectOperator(
        task_id=uid("get"), jetstream_conn_id=conn, bucket=bucket, object_name=name, local_path=destination
    )


def on_server(quiet: QuietServer, act: Callable[[JetStreamApi], Awaitable[Any]]) -> Any:
    """``act(api)`` with a connection of its own to the quiet server's JetStream."""

    async def go() -> Any:
        user, password = USERS["ACC"]
        nc = await nats.connect(f"nats://127.0.0.1:{quiet.server.port}", user=user, password=password)
        try:
            return await act(JetStreamApi(nc))
        finally:
            await nc.close()

    return asyncio.run(go())


def stored(quiet: QuietServer, bucket: str) -> int:
    """How many messages the bucket's stream holds (chunks and metas)."""

    async def count(api: JetStreamApi) -> int:
        return int((await api.stream_info(f"OBJ_{bucket}"))["state"]["messages"])

    return on_server(quiet, count)


def connections(quiet: QuietServer) -> int:
    return quiet.traffic()[0]


def test_a_special_file_or_link_at_the_destination_is_refused_before_connecting_and_left_alone(
    quiet_conn, quiet_server, tmp_path
) -> None:
    bucket = new_bucket(quiet_conn)
    (tmp_path / "a.txt").write_bytes(b"object")
    put(quiet_conn, bucket, "a.txt", tmp_path / "a.txt")

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "kept.txt").write_bytes(b"kept")
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "kept.txt")
    (tmp_path / "dir").mkdir()
    dir_link = tmp_path / "dir-link"
    dir_link.symlink_to(tmp_path / "dir", target_is_directory=True)
    listening = socket.socket(socket.AF_UNIX)
    listening.bind(str(tmp_path / "sock"))
    special: dict[str, Callable[[int], bool]] = {
        str(fifo): stat.S_ISFIFO,
        str(link): stat.S_ISLNK,
        f"{dir_link}/": stat.S_ISLNK,
        str(tmp_path / "sock"): stat.S_ISSOCK,
    }
    try:
        os.mknod(tmp_path / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        special[str(tmp_path / "null")] = stat.S_ISCHR
    except PermissionError:
        pass  # not root: no device node to try; the others stand for it
    try:
        before = connections(quiet_server)
        for destination, kind in special.items():
            with pytest.raises(
                JetStreamConfigError, match=r"local_path=.* not allowed: .*(device, FIFO|symbolic link)"
            ):
                get_operator(quiet_conn, bucket, "a.txt", destination).execute({})
            with pytest.raises(JetStreamConfigError, match=r"local_path=.* not allowed"):
                JetStreamHook(quiet_conn).get_object(bucket, "a.txt", destination)
            assert kind(os.lstat(destination.rstrip("/")).st_mode), destination
        assert connections(quiet_server) == before  # refused before connecting
    finally:
        listening.close()
    assert (tmp_path / "kept.txt").read_bytes() == b"kept" and list((tmp_path / "dir").iterdir()) == []

    # A put reads only a regular file: a FIFO would block it for ever.
    with pytest.raises(JetStreamConfigError, match=r"local_path=.* is not allowed: an existing regular file"):
        put(quiet_conn, bucket, "b.txt", fifo)
    assert connections(quiet_server) == before


def test_a_directory_destination_takes_the_objects_last_name_part_and_a_missing_one_is_refused(
    quiet_conn, quiet_server, tmp_path
) -> None:
    bucket = new_bucket(quiet_conn)
    (tmp_path / "day.csv").write_bytes(b"a,b\n1,2\n")
    put(quiet_conn, bucket, "reports/2026/day.csv", tmp_path / "day.csv")
    download = tmp_path / "dl"
    download.mkdir()

    into_dir = get_operator(quiet_conn, bucket, "reports/2026/day.csv", str(download)).execute({})
    assert into_dir["path"] == str(download / "day.csv")
    assert (download / "day.csv").read_bytes() == b"a,b\n1,2\n"
    (download / "day.csv").unlink()
    with_slash = get_operator(quiet_conn, bucket, "reports/2026/day.csv", f"{download}/").execute({})
    assert with_slash["path"] == str(download / "day.csv") and (download / "day.csv").exists()

    before = connections(quiet_server)
    with pytest.raises(JetStreamConfigError, match=r"the directory .*newdir/' does not exist: create it first"):
        get_operator(quiet_conn, bucket, "reports/2026/day.csv", f"{download}/newdir/").execute({})
    with pytest.raises(JetStreamConfigError, match=r"the directory .*missing' does not exist: create it first"):
        get_operator(quiet_conn, bucket, "reports/2026/day.csv", str(download / "missing" / "x.csv")).execute({})
    assert connections(quiet_server) == before
    assert sorted(p.name for p in download.iterdir()) == ["day.csv"]  # no file named newdir

    (download / "sub").mkdir()
    (download / "sub" / "day.csv").mkdir()
    with pytest.raises(JetStreamConfigError, match="is a directory: give a file path"):
        get_operator(quiet_conn, bucket, "reports/2026/day.csv", str(download / "sub")).execute({})


def test_a_name_too_long_for_the_file_system_is_refused_when_the_dag_is_parsed(
    quiet_conn, quiet_server, tmp_path
) -> None:
    before = connections(quiet_server)
    with pytest.raises(SpecErrors, match=r"local_path=.* is not allowed: each part of a path is at most \d+ bytes"):
        get_operator(quiet_conn, "files", "a.txt", str(tmp_path / ("d" * 300)))
    with pytest.raises(SpecErrors, match=r"local_path=.* is not allowed"):
        get_operator(quiet_conn, "files", "a.txt", "with\x00nul")

    # Rendered: refused once rendered, before the task connects.
    op = get_operator(quiet_conn, "files", "a.txt", "{{ params.where }}")
    op.render_template_fields({"params": {"where": str(tmp_path / ("d" * 300))}})
    with pytest.raises(SpecErrors, match="each part of a path is at most"):
        op.execute({})
    assert connections(quiet_server) == before
    assert list(tmp_path.iterdir()) == []


def test_a_put_refused_failing_or_cancelled_midway_leaves_no_chunks(quiet_conn, quiet_server, tmp_path) -> None:
    long_name = "n" * 5000
    (tmp_path / "small.bin").write_bytes(os.urandom(2048))
    with pytest.raises(SpecErrors, match=r"object_name=.* is not allowed: an object name is stored base64-encoded"):
        JetStreamPutObjectOperator(task_id="long", bucket="files", object_name=long_name, local_path="/data/x")

    bucket = new_bucket(quiet_conn, max_bytes=16 * 1024)
    hook = JetStreamHook(quiet_conn)
    with pytest.raises(SpecErrors, match=r"object_name=.* is not allowed"):
        hook.put_object(bucket, long_name, str(tmp_path / "small.bin"))
    with pytest.raises(SpecError, match=r"object_name=.* is not allowed"):
        on_server(quiet_server, lambda api: put_object(api, bucket, long_name, tmp_path / "small.bin"))
    assert stored(quiet_server, bucket) == 0

    # The bucket fills up midway (max_bytes 16 KiB, a 64 KiB file in 1 KiB chunks): the chunks stored go again,
    # and the object put before stays whole.
    put(quiet_conn, bucket, "data.bin", tmp_path / "small.bin", chunk_size=1024)
    kept = stored(quiet_server, bucket)
    (tmp_path / "big.bin").write_bytes(os.urandom(64 * 1024))
    with pytest.raises(ObjectStoreError, match="maximum bytes"):
        put(quiet_conn, bucket, "data.bin", tmp_path / "big.bin", chunk_size=1024)
    assert stored(quiet_server, bucket) == kept == 3  # two chunks and the meta
    got = get_operator(quiet_conn, bucket, "data.bin", str(tmp_path / "got.bin")).execute({})
    assert got["size"] == 2048 and (tmp_path / "got.bin").read_bytes() == (tmp_path / "small.bin").read_bytes()

    # Cancelled once chunks are stored (a task killed by its timeout): they are purged before it ends.
    roomy = new_bucket(quiet_conn)
    (tmp_path / "huge.bin").write_bytes(os.urandom(16 * 1024 * 1024))

    async def cancel_midway(api: JetStreamApi) -> int:
        putting = asyncio.ensure_future(put_object(api, roomy, "huge.bin", tmp_path / "huge.bin", chunk_size=1024))

        async def count() -> int:
            return int((await api.stream_info(f"OBJ_{roomy}"))["state"]["messages"])

        assert await eventually(count, lambda n: n >= 2) >= 2
        assert not putting.done()
        putting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await putting
        return await count()

    assert on_server(quiet_server, cancel_midway) == 0


def test_chunk_sizes_below_1_kib_or_over_8_mib_are_refused_and_big_ones_fit_the_server(
    quiet_conn, quiet_server, tmp_path
) -> None:
    for chunk_size in (1, 1023, 8 * 1024 * 1024 + 1):
        with pytest.raises(SpecErrors, match=rf"chunk_size={chunk_size} is not allowed: use an integer from 1024 to"):
            JetStreamPutObjectOperator(
                task_id="chunks", bucket="files", object_name="a", local_path="/data/x", chunk_size=chunk_size
            )
    with pytest.raises(SpecErrors, match="chunk_size=1 is not allowed"):
        JetStreamHook(quiet_conn).put_object("files", "a", str(tmp_path), chunk_size=1)

    # 8 MiB asked, the server's max_payload 1 MiB: each chunk is what a read gets back, (1 MiB - 1 KiB) * 3/4.
    bucket = new_bucket(quiet_conn)
    (tmp_path / "two.bin").write_bytes(os.urandom(2 * 1024 * 1024))
    info = put(quiet_conn, bucket, "two.bin", tmp_path / "two.bin", chunk_size=8 * 1024 * 1024)
    assert info["chunks"] == 3
    assert JetStreamHook(quiet_conn).object_info(bucket, "two.bin").chunk_size == (1024 * 1024 - 1024) * 3 // 4
    get_operator(quiet_conn, bucket, "two.bin", str(tmp_path / "back.bin")).execute({})
    assert (tmp_path / "back.bin").read_bytes() == (tmp_path / "two.bin").read_bytes()


def test_a_download_that_fails_midway_leaves_no_file_and_the_old_one_as_it_was(
    quiet_conn, quiet_server, tmp_path
) -> None:
    bucket = new_bucket(quiet_conn)
    (tmp_path / "five.bin").write_bytes(os.urandom(5 * 1024))
    info = put(quiet_conn, bucket, "five.bin", tmp_path / "five.bin", chunk_size=1024)
    assert info["chunks"] == 5

    async def lose_the_third_chunk(api: JetStreamApi) -> None:
        await api.request(f"STREAM.MSG.DELETE.OBJ_{bucket}", {"seq": 3})

    on_server(quiet_server, lose_the_third_chunk)
    download = tmp_path / "dl"
    download.mkdir()
    (download / "old.bin").write_bytes(b"previous")
    with pytest.raises(ObjectStoreError, match=r"chunk \d of 5 is missing"):
        get_operator(quiet_conn, bucket, "five.bin", str(download / "old.bin")).execute({})
    with pytest.raises(ObjectStoreError, match=r"chunk \d of 5 is missing"):
        get_operator(quiet_conn, bucket, "five.bin", str(download)).execute({})
    assert [(p.name, p.read_bytes()) for p in download.iterdir()] == [("old.bin", b"previous")]
