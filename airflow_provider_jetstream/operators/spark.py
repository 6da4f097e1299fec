"""``JetStreamSparkSubmitOperator``: spark-submit a JetStream job with the NATS connection kept secret.

By default it runs the packaged job :mod:`airflow_provider_jetstream.spark.jobs.stream_to_parquet`
(a stream copied to Parquet incrementally, exactly once). The NATS connection reaches the Spark
driver in one environment variable, ``JETSTREAM_CONNECTION_SECRET`` (JSON), set on the
spark-submit process only: never on its command line (visible in ``ps`` and in the logged
command), never in logs; Spark redacts variables whose names contain ``SECRET``. The driver
resolves the connection and ships it to the executors inside the data source's read tasks.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import re
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from airflow.exceptions import AirflowOptionalProviderFeatureException

from airflow_provider_jetstream.assets.lineage import OperatorLineageMixin, path_location
from airflow_provider_jetstream.core.arguments import Args
from airflow_provider_jetstream.core.errors import JetStreamConfigError, JetStreamError
from airflow_provider_jetstream.core.read.identity import IDENTITY_KEY, stream_created
from airflow_provider_jetstream.hooks.base import JetStreamBaseHook
from airflow_provider_jetstream.hooks.kv import JetStreamKeyValueHook
from airflow_provider_jetstream.hooks.streams import JetStreamStreamsHook
from airflow_provider_jetstream.operators.base import FailFastOnRefusal, stream_locations
from airflow_provider_jetstream.utils.arguments import CheckedArguments

try:
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    from airflow_provider_jetstream.spark.job_args import SUBMIT, SparkJobOptions, job_command_line
except ImportError as err:  # the optional [spark] extra: the Spark provider, pyspark and pyarrow
    raise AirflowOptionalProviderFeatureException(
        f"JetStreamSparkSubmitOperator needs the Spark provider, pyspark and pyarrow ({err}): "
        "install 'airflow-provider-jetstream[spark]'"
    ) from err

__all__ = ["JetStreamSparkSubmitHook", "JetStreamSparkSubmitOperator", "SparkJobOptions", "job_xcom"]

#: A line of spark-submit output that states an error: a log record at level ERROR (the packaged
#: job logs its failure so), a Python exception line (``pkg.SomeError: ...``) or a JVM one.
ERROR_LINE = re.compile(
    r"(?:^|\s)ERROR\s+[\w.$]+:\s"
    r"|^(?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception)(?::\s|$)"
    r"|^Exception in thread "
)

#: The packaged job's closing line: ``stream_to_parquet: result: {...}`` (its ``JobResult`` as JSON).
RESULT_LINE = re.compile(r"\bstream_to_parquet: result: (\{.*\})\s*$")

#: The packaged spark-submit job (its file, as spark-submit takes it).
PACKAGED_JOB = str(Path(__file__).resolve().parents[1] / "spark" / "jobs" / "stream_to_parquet.py")
DEFAULT_LOCAL_MASTER = "local[*]"
#: PySpark's mark of a process that opened a Spark Connect session (a ``PySparkOperator`` task before this one in
#: the same process): inherited, it would turn the job's SparkSession into a Spark Connect one without a URL.
SPARK_CONNECT_MARK = "SPARK_CONNECT_MODE_ENABLED"
#: The arguments ``SparkSubmitHook`` takes (``SparkSubmitOperator`` takes each of them too).
_HOOK_PARAMETERS = frozenset(inspect.signature(SparkSubmitHook.__init__).parameters) - {"self"}


def checkpoint_place(args: Mapping[str, Any]) -> tuple[str, str]:
    """The packaged job's checkpoint, from the checked arguments: KV bucket and key."""
    return args["checkpoint_bucket"], args["options"].checkpoint_key or f"stream_to_parquet.{args['stream']}"


def job_xcom(args: Mapping[str, Any], result: Mapping[str, Any] | None) -> dict[str, Any]:
    """The XCom of a packaged job's run, from the checked arguments and the job's result: ``outcome`` (``written``,
    ``already committed``, ``nothing new``), the sequence range ``start``-``end``, ``rows`` written, the committed
    ``directory``, the ``checkpoint`` sequence after and where it is kept, ``skipped`` False."""
    found = dict(result or {"outcome": "unknown: the job printed no result line"})
    bucket, key = checkpoint_place(args)
    return {
        "stream": args["stream"],
        "outcome": found.get("outcome"),
        "start": found.get("start"),
        "end": found.get("end"),
        "rows": found.get("rows"),
        "directory": found.get("directory"),
        "checkpoint": found.get("checkpoint"),
        "checkpoint_bucket": bucket,
        "checkpoint_key": key,
        "skipped": False,
    }


class JetStreamSparkSubmitHook(SparkSubmitHook):
    """``SparkSubmitHook`` that adds secret environment variables to the spark-submit process only,
    runs the driver there (client mode), and never falls back to yarn silently.

    It overrides public methods only: ``get_connection`` (a local master for ``conn_id=None``; a
    named connection that cannot be loaded fails) and ``submit`` (the spark-submit process's
    environment, and the job's own error line in a failure's exception). The error line is read
    from the output the hook logs line by line, through ``log``.

    :param secret_env: variables for the spark-submit process (and so the driver); not logged.
    :param local_master: master used when ``conn_id`` is None. Default ``local[*]``.
    :param env_vars: variables for the spark-submit process too (in client mode, the driver's).
    :param kwargs: every other ``SparkSubmitHook`` argument.
    """

    def __init__(
        self,
        *,
        secret_env: dict[str, str],
        local_master: str = DEFAULT_LOCAL_MASTER,
        env_vars: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self._secret_env = dict(secret_env)
        self._local_master = local_master
        # The driver runs in the spark-submit process (cluster mode is refused below): every variable
        # goes to that process's environment, none to a --conf on the command line.
        self._process_env = {key: str(value) for key, value in (env_vars or {}).items()}
        self._spark_connection: Any = None
        self._output_watch: _ErrorLineWatch | None = None
        super().__init__(**kwargs)
        deploy_mode = (
            kwargs.get("deploy_mode")
            or (self._spark_connection.extra_dejson.get("deploy-mode") if self._spark_connection else None)
            or (kwargs.get("conf") or {}).get("spark.submit.deployMode")
        )
        if deploy_mode == "cluster":
            raise JetStreamConfigError(
                "JetStreamSparkSubmitOperator: deploy_mode 'cluster' is not supported: the driver would run "
                "elsewhere, without the connection's environment; use client mode"
            )

    def get_connection(self, conn_id: str | None) -> Any:  # type: ignore[override]
        from airflow.sdk import Connection

        if conn_id is None:
            connection = Connection(conn_id="jetstream_spark_local", conn_type="spark", host=self._local_master)
        else:
            try:
                connection = super().get_connection(conn_id)
            except Exception as err:
                # SparkSubmitHook would quietly submit to yarn instead: refuse.
                raise JetStreamConfigError(
                    f"Spark connection {conn_id!r} could not be loaded ({type(err).__name__}); define it, e.g. "
                    '{"conn_type": "spark", "host": "local[*]"}, or pass spark_conn_id=None for a local master'
                ) from None
        self._spark_connection = connection
        return connection

    @property
    def log(self) -> Any:  # type: ignore[override]
        """The hook's logger; while ``submit`` runs, one that also watches the spark-submit output."""
        return self._output_watch or super().log

    def submit(self, application: str = "", **kwargs: Any) -> str | None:
        """spark-submit ``application``; a failure's exception starts with the job's own error line."""
        inherited = {k: v for k, v in (kwargs.get("env") or os.environ).items() if k != SPARK_CONNECT_MARK}
        kwargs["env"] = {**inherited, **self._process_env, **self._secret_env}
        self._output_watch = watch = _ErrorLineWatch(super().log)
        self.job_result = None
        try:
            return super().submit(application, **kwargs)
        except Exception as err:
            if not watch.error_line:
                raise
            from airflow.sdk.log import redact

            raise type(err)(f"the Spark job failed: {redact(watch.error_line)}\n{err}") from None
        finally:
            self.job_result = watch.result
            self._output_watch = None


class _ErrorLineWatch:
    """A logger that passes everything on, remembering the last message that states an error and the packaged
    job's result."""

    def __init__(self, log: Any) -> None:
        self._log = log
        self.error_line: str | None = None
        self.result: dict[str, Any] | None = None

    def info(self, message: Any, *args: Any, **kwargs: Any) -> None:
        text = str(message).strip()
        if ERROR_LINE.search(text):
            self.error_line = text
        if found := RESULT_LINE.search(text):
            with contextlib.suppress(ValueError):  # a line cut short: no result
                self.result = json.loads(found[1])
        self._log.info(message, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._log, name)


class JetStreamSparkSubmitOperator(FailFastOnRefusal, CheckedArguments, OperatorLineageMixin, SparkSubmitOperator):
    """Run a Spark job on a JetStream stream; by default the packaged exactly-once Parquet copy.

    :param jetstream_conn_id: Airflow ``jetstream`` connection. Default ``jetstream_default``.
    :param stream: stream to read (packaged job). Templated.
    :param domain: JetStream domain of the stream. Default: the connection's.
    :param api_prefix: JetStream API prefix of the stream, instead of ``domain``.
    :param output_path: Parquet output directory (packaged job). Templated.
    :param checkpoint_bucket: KV bucket of the checkpoint (packaged job); created if missing.
    :param filter_subjects: subject or comma list of subjects to copy. Default: all.
    :param start_seq: first run only: ``earliest`` (default) or a sequence number.
    :param end_seq: last sequence to copy. Default: the stream's last at the start. Templated.
    :param start_time: first run only: start at the first message stored at or after this time (RFC 3339 with
        a zone, or a timezone-aware datetime), instead of ``start_seq``. Templated.
    :param end_time: copy only messages stored before this time, instead of ``end_seq``: with
        ``start_time``, exactly the window ``[start_time, end_time)``. While messages may still reach the window
        (nothing stored at or after ``end_time`` yet and the stream's clock not past it, or a mirror), the job
        copies what is stored and then fails, so the task's retries copy the rest. Templated, e.g.
        ``"{{ data_interval_end }}"``.
    :param application: another spark-submit application instead of the packaged job; it gets the
        same connection environment (``spark.read.format("jetstream")`` without ``servers``).
    :param spark_conn_id: Airflow Spark connection. Default None: a local master (``options.local_master``),
        without any connection. A named connection that cannot be loaded fails the task.
    :param options: :class:`~airflow_provider_jetstream.spark.job_args.SparkJobOptions` or a dict of its fields:
        ``checkpoint_key`` (default ``stream_to_parquet.<stream>``, templated), ``checkpoint_domain`` (default:
        the connection's), ``checkpoint_replicas`` (when the job creates the bucket; default the cluster's size
        up to 3), ``partition_by`` (among stream, domain, subject, date; default ``("date",)``),
        ``min_partitions`` (default: Spark's default parallelism), ``fail_on_data_loss`` (fail when sequences
        of the range are gone or the stream was recreated since the checkpoint; default True), ``local_master``
        (the master without ``spark_conn_id``; default ``local[*]``).
    :param kwargs: every other ``SparkSubmitOperator`` argument (conf, executor_memory, ...).
        ``env_vars`` reach the spark-submit process, where the driver runs (client mode), on every
        master: never a ``--conf`` on the command line. ``deploy_mode='cluster'`` is refused.

    Lineage (packaged job; :mod:`airflow_provider_jetstream.assets.lineage`): OpenLineage input the
    stream read (``jetstream://<server>``, ``<domain>/<stream>``), output the Parquet directory
    (``file`` + absolute path, ``hdfs://<namenode>`` + path...). Unless ``outlets`` are given, the
    ``AssetAlias`` outlet ``jetstream:<dag_id>.<task_id>`` gets an event for the Parquet asset
    (``file:///abs/path``, ``hdfs://nn:8020/path``) after each successful run, so a DAG scheduled on
    that asset runs after each copy. With ``application``, give ``inlets``/``outlets`` yourself.
    """

    arguments: Args = SUBMIT
    template_fields: Sequence[str] = (*SparkSubmitOperator.template_fields, *SUBMIT.template_fields())
    #: The job's arguments become its command line: their text forms are accepted.
    text_arguments = True
    #: SparkSubmitOperator keeps ``application`` itself (the packaged job's path when None).
    argument_attributes = {"application": "_custom_application"}
    #: What goes on to ``SparkSubmitOperator`` as it is (its ``conn_id`` is ``spark_conn_id`` here).
    other_arguments = frozenset(inspect.signature(SparkSubmitOperator.__init__).parameters) - {"self", "conn_id"}

    def __init__(
        self,
        *,
        jetstream_conn_id: str = JetStreamBaseHook.default_conn_name,
        stream: str | None = None,
        domain: str | None = None,
        api_prefix: str | None = None,
        output_path: str | None = None,
        checkpoint_bucket: str | None = None,
        filter_subjects: str | Sequence[str] | None = None,
        start_seq: int | str | None = None,
        end_seq: int | str | None = None,
        start_time: Any = None,
        end_time: Any = None,
        application: str | None = None,
        spark_conn_id: str | None = None,
        options: SparkJobOptions | dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(application=application or PACKAGED_JOB, conn_id=spark_conn_id, **kwargs)  # type: ignore[arg-type]
        self.jetstream_conn_id = jetstream_conn_id
        self.stream = stream
        self.domain = domain
        self.api_prefix = api_prefix
        self.output_path = output_path
        self.checkpoint_bucket = checkpoint_bucket
        self.filter_subjects = filter_subjects
        self.start_seq = start_seq
        self.end_seq = end_seq
        self.start_time = start_time
        self.end_time = end_time
        self.spark_conn_id = spark_conn_id
        self.options = options
        self._custom_application = application
        self._packaged = application is None
        self._secret_env: dict[str, str] = {}
        # For the hook: SparkSubmitOperator's arguments that are SparkSubmitHook's too, as given.
        self._spark_arguments = {
            name: value for name, value in {**kwargs, "conn_id": spark_conn_id}.items() if name in _HOOK_PARAMETERS
        }
        self._found_spark_binary: str | None = None
        if self._packaged:
            self.declare_lineage_outlet()

    def execute(self, context: Any) -> dict[str, Any] | None:
        """Run the job; with the packaged job, return (XCom) what it did (:meth:`job_result`), or skip
        spark-submit when the checkpoint already covers the stream's last sequence (:meth:`covered`)."""
        from airflow_provider_jetstream.spark.options import connection_env

        args = self.checked_arguments()  # once rendered, before any connection or process
        if self._packaged:
            job_arguments = job_command_line(args)
            covered = self.covered()
            if covered is not None:
                self.log.info(
                    "Spark job skipped: checkpoint %s/%s is at sequence %d, stream %r's last is %d: nothing new",
                    covered["checkpoint_bucket"],
                    covered["checkpoint_key"],
                    covered["checkpoint"],
                    covered["stream"],
                    covered["stream_last_seq"],
                )
                return covered
        config = JetStreamBaseHook(args["jetstream_conn_id"]).get_conn_config()  # registers secrets for masking
        env = connection_env(config)
        python = sys.executable
        user_env = self.env_vars or {}
        conf = self.conf or {}
        if "spark.pyspark.python" not in conf:
            env["PYSPARK_PYTHON"] = user_env.get("PYSPARK_PYTHON") or os.environ.get("PYSPARK_PYTHON") or python
        if "spark.pyspark.driver.python" not in conf:
            env["PYSPARK_DRIVER_PYTHON"] = (
                user_env.get("PYSPARK_DRIVER_PYTHON") or os.environ.get("PYSPARK_DRIVER_PYTHON") or python
            )
        if shutil.which(self._spark_arguments.get("spark_binary") or "spark-submit") is None:
            # pip's pyspark puts spark-submit beside the interpreter, maybe outside PATH.
            beside = Path(python).parent
            if (beside / "spark-submit").exists():
                env["PATH"] = f"{beside}{os.pathsep}{os.environ.get('PATH', '')}"
                self._found_spark_binary = str(beside / "spark-submit")
        self._secret_env = env
        if self._packaged:
            self.application_args = job_arguments + list(self.application_args or [])
        self.log.info(
            "NATS connection %s passed to the Spark driver in its environment (not on the command line)",
            config.describe(),
        )
        super().execute(context)
        if not self._packaged:
            return None
        self._record_copy_lineage(context)
        return self.job_result(getattr(self._hook, "job_result", None))

    def job_result(self, result: dict[str, Any] | None) -> dict[str, Any]:
        """The XCom of a packaged job's run (:func:`job_xcom`); the job's own result line, read from its output."""
        self.log.info("Spark job result: %s", json.dumps(result or {}))
        return job_xcom(self.checked_arguments(), result)

    def covered(self) -> dict[str, Any] | None:
        """The skip's XCom when the packaged job has nothing to do, else None (run it).

        Skips only when all of these hold: the checkpoint (KV ``checkpoint_bucket``/``options.checkpoint_key`` in
        ``options.checkpoint_domain``, else the connection's domain: where the job keeps it) names this stream and
        output, holds no unfinished claim, and records the identity (``created``) of the stream as it is now
        (a stream deleted and created again is not covered); and its sequence is at least the stream's last
        sequence. The range the job would read is then empty, whatever its ``filter_subjects`` or ``end_seq``.
        With ``end_time`` it never skips: only the job knows whether the window is closed (a checkpoint at the
        stream's last sequence may still lack messages the window has yet to receive). Skip relies on the
        stream as it is: messages still on their way into it (an aggregate catching up
        with a leaf) are not in it yet; waiting for them is the replication sensor's job. Any doubt (a read
        that fails, no checkpoint yet) runs the job, which decides.
        """
        args = self.checked_arguments()
        if args.get("end_time") is not None:
            return None
        bucket, key = checkpoint_place(args)
        hook = JetStreamKeyValueHook(args["jetstream_conn_id"])
        try:
            entry = hook.kv_get(bucket, key, domain=args["options"].checkpoint_domain)
            streams = hook.role(JetStreamStreamsHook)
            info = streams.stream_info(args["stream"], domain=args["domain"], api_prefix=args["api_prefix"])
            kept = json.loads(entry.value or b"{}") if entry is not None else {}
        except (JetStreamError, ValueError) as err:
            self.log.info("checkpoint not read before the job (%s): the job decides", err)
            return None
        seq, last = kept.get("seq"), int((info.get("state") or {}).get("last_seq") or 0)
        if (
            not isinstance(seq, int)
            or kept.get("claim")
            or kept.get("stream") != args["stream"]
            or kept.get("output") != str(args["output_path"]).rstrip("/")
            or kept.get(IDENTITY_KEY) is None
            or kept.get(IDENTITY_KEY) != stream_created(info)
            or seq < last
        ):
            return None
        return {
            "stream": args["stream"],
            "outcome": "skipped: the checkpoint covers the stream's last sequence",
            "start": None,
            "end": None,
            "rows": 0,
            "directory": None,
            "checkpoint": seq,
            "checkpoint_bucket": bucket,
            "checkpoint_key": key,
            "stream_last_seq": last,
            "skipped": True,
        }

    def _record_copy_lineage(self, context: Any) -> None:
        """Input: the stream read; output (and asset event): the Parquet directory. Logged if it fails."""
        try:
            args = self.checked_arguments()
            hook = JetStreamBaseHook(args["jetstream_conn_id"], domain=args["domain"], api_prefix=args["api_prefix"])
            config = hook.get_conn_config()
            inputs = stream_locations(hook, [(args["stream"], None)], config.connect_timeout)
            self.record_lineage(context, inputs, [path_location(args["output_path"])])
        except Exception as err:
            self.log.warning("lineage not recorded: %s: %s", type(err).__name__, err)

    def _get_hook(self) -> SparkSubmitHook:
        """The JetStream hook, with the arguments ``SparkSubmitOperator`` gives its hook: each
        templated one as rendered, the others as given to the constructor."""
        arguments = dict(self._spark_arguments)
        arguments.update({name: getattr(self, name) for name in self.template_fields if name in _HOOK_PARAMETERS})
        if self._found_spark_binary:
            arguments["spark_binary"] = self._found_spark_binary
        local_master = self.checked_arguments()["options"].local_master
        return JetStreamSparkSubmitHook(secret_env=self._secret_env, local_master=local_master, **arguments)
