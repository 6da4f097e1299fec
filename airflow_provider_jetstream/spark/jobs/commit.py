"""The exactly-once commit of a range's Parquet files: staging directories, commit markers, renames.

Used by the packaged job (:mod:`.stream_to_parquet`, whose docstring tells the whole protocol): a
range is written to ``<output>/_staging/<range>-<attempt>``, the range's commit marker
``<output>/_commits/<range>`` names the one attempt that may publish it (created under a temporary
name, then linked or renamed to a name that must not exist), and that attempt's staging directory is
renamed to ``<output>/seq_range=<start>-<end>``. Local and mounted file systems go through ``os``,
others (HDFS, ABFS) through Hadoop's ``FileSystem`` in Spark's JVM.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from airflow_provider_jetstream.core.errors import JetStreamConfigError, JetStreamError

log = logging.getLogger("stream_to_parquet")

#: Directory of the commit markers, one file per committed range naming the attempt that wrote it.
COMMITS_DIR = "_commits"
#: Directory of the attempts' copies before they are committed (Spark ignores ``_`` directories).
STAGING_DIR = "_staging"


class RangeCommitter:
    """Commits ranges to ``output`` exactly once, as attempt ``attempt``.

    :param spark: the SparkSession (its JVM reaches Hadoop file systems).
    :param output: the output directory (a local path, ``file:`` or a Hadoop URI).
    :param attempt: this run's attempt id, named by the commit markers it wins.
    """

    #: How many times the job went on to a stream deleted and created again under the same name: the
    #: ranges of epoch ``n > 0`` are named ``<start>-<end>.<n>``, apart from the old stream's.
    epoch: int = 0

    def __init__(self, spark: Any, output: str, attempt: str) -> None:
        self.spark = spark
        self.output = output
        self.attempt = attempt

    def range_name(self, start: int, end: int) -> str:
        """The name of a range in the output: ``<start>-<end>`` (20 digits each), ``.<epoch>`` after a recreate."""
        return f"{start:020d}-{end:020d}" + (f".{self.epoch}" if self.epoch else "")

    def count_rows(self, path: str) -> int:
        """The rows of the committed range directory ``path`` (Spark counts them from the Parquet footers)."""
        return int(self.spark.read.parquet(path).count())

    def target_path(self, start: int, end: int) -> str:
        """Where the committed range lives."""
        return f"{self.output}/seq_range={self.range_name(start, end)}"

    def commit(self, start: int, end: int, target: str, write: Callable[[int, int, str], None]) -> str:
        """Make ``target`` hold the range exactly once: ``written`` (by this attempt, with
        ``write(start, end, staging)``) or ``already committed`` (by an earlier or concurrent one)."""
        marker = self._marker_path(start, end)
        winner = self._read_marker(marker)
        if self._exists(target) or winner is not None:
            self._finish_commit(start, end, winner or "", target)
            log.info("%s was committed by an earlier or concurrent attempt; not writing it again", target)
            return "already committed"
        staging = self._staging_path(start, end, self.attempt)
        write(start, end, staging)
        winner = self._create_marker(marker)
        if winner == self.attempt:
            self._finish_commit(start, end, winner, target)
            log.info("committed sequences %d-%d to %s", start, end, target)
            return "written"
        log.info("%s was committed by a concurrent attempt; dropping this attempt's copy", target)
        self._delete(staging)
        self._finish_commit(start, end, winner, target)
        return "already committed"

    def clean_staging(self, committed: int) -> None:
        """Remove what crashed or losing attempts left under ``_staging`` for ranges now committed."""
        root = f"{self.output}/{STAGING_DIR}"
        if self.is_local():
            names = os.listdir(self._local(root)) if os.path.isdir(self._local(root)) else []
        else:
            fs, jroot = self._fs(root)
            names = [status.getPath().getName() for status in fs.listStatus(jroot)] if fs.exists(jroot) else []
        for name in names:
            parts = name.split("-")
            end = parts[1].split(".")[0] if len(parts) == 3 else ""
            if end.isdigit() and int(end) <= committed:
                self._delete(f"{root}/{name}")

    def is_local(self) -> bool:
        """Whether the output is a local (or mounted) path, renamed with ``os`` rather than through Spark's JVM."""
        return urlsplit(self.output).scheme in ("", "file")

    def _local(self, path: str) -> str:
        return urlsplit(path).path if path.startswith("file:") else path

    def _fs(self, path: str) -> tuple[Any, Any]:
        jvm = self.spark._jvm
        jpath = jvm.org.apache.hadoop.fs.Path(path)
        return jpath.getFileSystem(self.spark._jsc.hadoopConfiguration()), jpath

    def _exists(self, path: str) -> bool:
        if self.is_local():
            return os.path.exists(self._local(path))
        fs, jpath = self._fs(path)
        return bool(fs.exists(jpath))

    def _delete(self, path: str) -> None:
        if self.is_local():
            shutil.rmtree(self._local(path), ignore_errors=True)
        else:
            fs, jpath = self._fs(path)
            fs.delete(jpath, True)

    def _rename(self, source: str, target: str) -> bool:
        """Rename the directory ``source`` to ``target``, which must not exist; False if ``source`` is gone.

        Called only for the staging directory of the attempt the commit marker names, so no other
        directory is ever renamed onto ``target``: on HDFS/ABFS a rename onto an existing directory
        would move ``source`` inside it instead of failing.
        """
        if self.is_local():
            try:
                os.rename(self._local(source), self._local(target))
                return True
            except FileNotFoundError:
                return False
            except OSError:
                if os.path.exists(self._local(target)):
                    return False
                raise
        if not self._exists(source) or self._exists(target):
            return False
        fs, src = self._fs(source)
        return bool(fs.rename(src, self._fs(target)[1]))

    def _marker_path(self, start: int, end: int) -> str:
        return f"{self.output}/{COMMITS_DIR}/{self.range_name(start, end)}"

    def _staging_path(self, start: int, end: int, attempt: str) -> str:
        return f"{self.output}/{STAGING_DIR}/{self.range_name(start, end)}-{attempt}"

    def _read_marker(self, marker: str) -> str | None:
        """The attempt a commit marker names, or None if there is no marker."""
        if self.is_local():
            try:
                with open(self._local(marker), encoding="ascii") as handle:
                    return handle.read().strip() or None
            except FileNotFoundError:
                return None
        fs, jpath = self._fs(marker)
        if not fs.exists(jpath):
            return None
        stream = fs.open(jpath)
        try:
            line = stream.readLine()
        finally:
            stream.close()
        return (line or "").strip() or None

    def _create_marker(self, marker: str) -> str:
        """Create the range's commit marker naming this attempt, unless one exists; the attempt it names.

        The marker appears complete or not at all: it is written under a temporary name, then
        linked (local) or renamed (Hadoop: HDFS and ABFS refuse to rename a file onto an existing
        one) to its final name, which only the first attempt gets.
        """
        temporary = f"{marker}.{self.attempt}.tmp"
        if self.is_local():
            path, tmp = self._local(marker), self._local(temporary)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(tmp, "w", encoding="ascii") as handle:
                handle.write(self.attempt + "\n")
                handle.flush()
                os.fsync(handle.fileno())
            try:
                os.link(tmp, path)
            except FileExistsError:
                pass
            except OSError as err:
                raise JetStreamConfigError(
                    f"cannot create the commit marker {path}: the output's file system refused a hard link "
                    f"({err.strerror}); the exactly-once commit needs one on local outputs: use a file system that "
                    "supports hard links, or HDFS / ABFS"
                ) from None
            finally:
                os.unlink(tmp)
        else:
            fs, jtmp = self._fs(temporary)
            jmarker = self._fs(marker)[1]
            fs.mkdirs(jmarker.getParent())
            out = fs.create(jtmp, True)
            try:
                out.writeBytes(self.attempt + "\n")
            finally:
                out.close()
            try:
                if not fs.exists(jmarker):
                    fs.rename(jtmp, jmarker)
            finally:
                if fs.exists(jtmp):
                    fs.delete(jtmp, False)
        winner = self._read_marker(marker)
        if winner is None:
            raise JetStreamError(f"commit marker {marker} could not be created")
        return winner

    def _finish_commit(self, start: int, end: int, winner: str, target: str) -> None:
        """Make ``target`` hold the range the marker's ``winner`` wrote (a crash may have stopped it
        between the marker and the rename)."""
        if self._exists(target):
            return
        self._rename(self._staging_path(start, end, winner), target)
        if not self._exists(target):
            raise JetStreamError(
                f"{target} is missing, but its commit marker names attempt {winner!r}, whose staging copy is gone: "
                f"remove {self._marker_path(start, end)} to write the range again"
            )
