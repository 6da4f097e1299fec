"""Batch reads through a real local SparkSession: exact rows, ranges, filters, gaps, headers, domains."""

from __future__ import annotations

import datetime as dt
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.spark import delete_messages, publish, publish_many, stored_at
from tests.support.waiting import wait_until


def _load(spark, options):
    return spark.read.format("jetstream").options(**options).load()


def _seqs(df):
    return [r.seq for r in df.select("seq").orderBy("seq").collect()]


def test_pyspark_python_package_matches_the_spark_jars(spark) -> None:
    import pyspark

    assert spark.version == pyspark.__version__, (
        f"pyspark {pyspark.__version__} (Python) but Spark jars {spark.version}: pin pyspark and pyspark-client "
        "to the same version"
    )
    jars = Path(pyspark.__file__).parent / "jars"
    assert (jars / f"spark-core_2.13-{pyspark.__version__}.jar").exists()


def test_full_read_of_a_leaf_stream_through_the_hub_gives_every_message_once(spark, make_stream) -> None:
    stream = make_stream("leaf")
    publish_many(stream, 500)
    df = _load(spark, stream.options(minPartitions="3"))
    assert df.rdd.getNumPartitions() == 3
    rows = df.orderBy("seq").collect()
    assert [r.seq for r in rows] == list(range(1, 501))
    assert [bytes(r.data) for r in rows] == [b"m%d" % i for i in range(1, 501)]
    assert {r.stream for r in rows} == {stream.name}
    assert {r.domain for r in rows} == {"leaf"}
    assert rows[0].subject == f"{stream.prefix}.b" and rows[1].subject == f"{stream.prefix}.a"
    now = dt.datetime.now()
    assert all(abs((now - r.timestamp).total_seconds()) < 600 for r in rows[:5])
    # The same options over the same data give the same rows.
    assert _seqs(_load(spark, stream.options(minPartitions="2"))) == list(range(1, 501))


def test_bounded_and_filtered_ranges(spark, make_stream) -> None:
    stream = make_stream("leaf")
    publish_many(stream, 200, subjects=("a", "b", "c"))
    bounded = _load(spark, stream.options(startSeq="20", endSeq="120", minPartitions="4"))
    assert _seqs(bounded) == list(range(20, 121))
    filtered = _load(
        spark,
        stream.options(filterSubjects=f"{stream.prefix}.a, {stream.prefix}.c", startSeq="7", endSeq="30"),
    )
    assert _seqs(filtered) == [s for s in range(7, 31) if s % 3 in (0, 2)]
    wildcard = _load(spark, stream.options(filterSubjects=f"{stream.prefix}.*", maxMessagesPerPartition="64"))
    assert wildcard.rdd.getNumPartitions() == 4
    assert wildcard.count() == 200


def test_starting_time_reads_from_the_first_message_stored_at_or_after_it(spark, make_stream) -> None:
    stream = make_stream("leaf")
    publish_many(stream, 10)
    last = stored_at(stream, 10)
    # a time after the 10th message was stored (the clock has passed it), before the next two are
    now = wait_until(lambda: dt.datetime.now(dt.timezone.utc), lambda t: t > last, 10, "the clock passing it")
    middle = now.isoformat()
    publish(stream, [("late", b"x"), ("late", b"y")])
    assert _seqs(_load(spark, stream.options(startTime=middle))) == [11, 12]


def test_hub_stream_and_local_domain(spark, make_stream) -> None:
    stream = make_stream("hub")
    publish_many(stream, 20)
    options = stream.options()
    del options["domain"]  # the hub's own JetStream, addressed without a domain
    rows = _load(spark, options).collect()
    assert sorted(r.seq for r in rows) == list(range(1, 21))
    assert {r.domain for r in rows} == {"hub"}
    # The stream as the load path, like a file source's path.
    del options["stream"]
    assert spark.read.format("jetstream").options(**options).load(stream.name).count() == 20


def test_gaps_fail_the_read_by_default_and_are_skipped_with_fail_on_data_loss_false(spark, make_stream) -> None:
    stream = make_stream("leaf")
    publish_many(stream, 40)
    delete_messages(stream, [5, 6, 33])
    with pytest.raises(Exception, match="sequences 5-6 are no longer stored"):
        _load(spark, stream.options(minPartitions="1")).count()
    kept = _load(spark, stream.options(failOnDataLoss="false"))
    assert _seqs(kept) == [s for s in range(1, 41) if s not in (5, 6, 33)]
    # A start before the stream's first sequence is data loss too, caught on the driver.
    delete_messages(stream, [1, 2, 3, 4])
    with pytest.raises(Exception, match="startSeq=2 but the stream's first stored sequence is 7"):
        _load(spark, stream.options(startSeq="2")).count()


def test_headers_map_and_include_headers_false(spark, make_stream) -> None:
    stream = make_stream("leaf")
    publish(stream, [("h", b"1", {"trace": "abc", "Nats-Msg-Id": "m1"}), ("h", b"2")])
    rows = _load(spark, stream.options()).orderBy("seq").collect()
    assert rows[0].headers == {"trace": ["abc"], "Nats-Msg-Id": ["m1"]}
    assert rows[1].headers is None
    rows = _load(spark, stream.options(includeHeaders="false")).collect()
    assert [r.headers for r in rows] == [None, None]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"startingOffsets": "earliest"}, "unknown option 'startingoffsets' (did you mean 'startSeq'?)"),
        ({"startSeq": "first"}, "startSeq='first' is not allowed"),
        ({"minPartitions": "0"}, "minPartitions='0' is not allowed: use an integer >= 1"),
        ({"minPartitions": "1.5"}, "minPartitions='1.5' is not allowed: use an integer >= 1"),
        ({"heartbeatSeconds": "nan"}, "heartbeatSeconds='nan' is not allowed: use a finite number >= 0.1"),
        ({"failOnDataLoss": "maybe"}, "failOnDataLoss='maybe' is not allowed: use true or false"),
        ({"filterSubjects": "a..b"}, "filterSubjects='a..b' is not allowed"),
        ({"apiPrefix": "$JS.x.API"}, "domain='leaf' and apiPrefix='$JS.x.API' were both given"),
        ({"startSeq": "9", "endSeq": "3"}, "the start is after the end"),
    ],
)
def test_bad_options_fail_on_the_driver_naming_option_and_value(spark, make_stream, options, message) -> None:
    stream = make_stream("leaf")
    with pytest.raises(Exception, match=re.escape(message)):
        _load(spark, stream.options(**options)).count()


def test_missing_servers_without_the_operator_environment(spark) -> None:
    reader = spark.read.format("jetstream").option("stream", "spark_x").option("connectionEnvVar", "NO_SUCH_VAR")
    with pytest.raises(Exception, match="option servers is missing"):
        reader.load().count()


def test_connection_from_the_environment_variable_the_operator_sets(spark, make_stream) -> None:
    """The session's JVM was started with JETSTREAM_CONNECTION_SECRET (hub, user acc): no servers option."""
    stream = make_stream("leaf")
    publish_many(stream, 3)
    df = spark.read.format("jetstream").option("stream", stream.name).option("domain", "leaf").load()
    assert _seqs(df) == [1, 2, 3]


def test_a_password_never_appears_in_errors(spark, make_stream) -> None:
    stream = make_stream("leaf")
    options = stream.options(password="s3cret-pw-not-shown", startSeq="bad")
    with pytest.raises(Exception) as info:
        _load(spark, options).count()
    assert "s3cret-pw-not-shown" not in str(info.value)


def test_executors_read_without_airflow_importable(make_stream, tmp_path) -> None:
    """A fresh Spark app (driver and Python workers) where any import of airflow fails reads the stream."""
    stream = make_stream("leaf")
    publish_many(stream, 30)
    blocker = tmp_path / "blocker" / "airflow"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text('raise ImportError("airflow must not be imported by Spark code")\n')
    script = tmp_path / "read.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import json, sys
            from pyspark.sql import SparkSession
            from airflow_provider_jetstream.spark import JetStreamDataSource
            spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
            spark.dataSource.register(JetStreamDataSource)
            df = spark.read.format("jetstream").options(**{stream.options(minPartitions="2")!r}).load()
            seqs = sorted(r.seq for r in df.select("seq").collect())
            def airflow_loaded(_):
                return ["airflow" in sys.modules]
            loaded = spark.sparkContext.parallelize([0, 1], 2).mapPartitions(airflow_loaded).collect()
            in_driver = "airflow" in sys.modules
            print(json.dumps({{"seqs": seqs, "airflow_in_workers": loaded, "airflow_in_driver": in_driver}}))
            """
        )
    )
    env = {**os.environ, "PYTHONPATH": f"{blocker.parent}{os.pathsep}{Path.cwd()}"}
    env.pop("AIRFLOW_HOME", None)
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    import json

    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["seqs"] == list(range(1, 31))
    assert out == {"seqs": list(range(1, 31)), "airflow_in_workers": [False, False], "airflow_in_driver": False}


def test_the_connections_domain_is_the_default_target(spark, make_stream) -> None:
    """Like JetStreamHook: without domain/apiPrefix options, the connection's domain extra is used."""
    import json as _json

    from airflow_provider_jetstream.spark.options import ReadOptions

    stream = make_stream("leaf")
    fields = {"host": "127.0.0.1:4222", "extra": {"domain": "leaf"}}
    os.environ["SPARK_TEST_CONN_SECRET"] = _json.dumps(fields)
    try:
        options = ReadOptions.parse({"stream": stream.name, "connectionEnvVar": "SPARK_TEST_CONN_SECRET"})
    finally:
        del os.environ["SPARK_TEST_CONN_SECRET"]
    assert options.api_prefix == "$JS.leaf.API"
    assert ReadOptions.parse({**stream.options(), "apiPrefix": None, "domain": "hub"}).api_prefix == "$JS.hub.API"
