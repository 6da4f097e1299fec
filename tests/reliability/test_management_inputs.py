"""Regression tests of issue #10 for the management operators: bad inputs refused before anything
runs, refusals that fail a task at once, and a double-store guard that fails closed.

Every case here failed on the code before the fix: a bad input was accepted (or refused only at
run time), a refusal was retried, or the guard let a write through that it had not verified.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nats
import pytest

from airflow_provider_jetstream.core.api import JetStreamApi
from airflow_provider_jetstream.core.errors import (
    DoubleStoreError,
    DoubleStoreUnreachableError,
    DoubleStoreUnverifiedError,
    JetStreamAuthError,
    JetStreamConfigError,
    JetStreamDomainUnavailableError,
    SpecErrors,
    is_refusal,
)
from airflow_provider_jetstream.core.manage.double_store import reply_problem
from airflow_provider_jetstream.core.manage.specs import encode_kv_value
from airflow_provider_jetstream.operators.consumers import (
    JetStreamCreateConsumerOperator,
    JetStreamDeleteConsumerOperator,
)
from airflow_provider_jetstream.operators.kv import (
    JetStreamCreateKeyValueOperator,
    JetStreamKeyValueDeleteOperator,
    JetStreamKeyValuePutOperator,
)
from airflow_provider_jetstream.operators.streams import (
    JetStreamCreateMirrorOperator,
    JetStreamCreateSourcedStreamOperator,
    JetStreamCreateStreamOperator,
    JetStreamDeleteStreamOperator,
)
from airflow_provider_jetstream.testing.servers import USERS, LocalTopology
from airflow_provider_jetstream.utils.templates import is_resolved_at_run_time, is_templated
from tests.dags.management_refusals import REFUSALS
from tests.dags.management_refusals import dag as refusals_dag
from tests.support.management import QuietServer, Raw, uid

UTC = dt.timezone.utc

# -- the one template detector ----------------------------------------------------------------------


def test_is_templated_is_recursive_and_only_jinja_strings() -> None:
    assert is_templated("{{ params.x }}") and is_templated("{% if x %}a{% endif %}")
    assert is_templated({"name": "s", "sources": [{"name": "{{ params.o }}"}]})
    assert is_templated(("a", ["b", {"c": "{{ x }}"}]))
    for final in (
        "plain",
        {"name": "s", "max_age": dt.timedelta(hours=1)},
        {"sources": [{"name": "o", "start_time": dt.datetime(2026, 1, 1, tzinfo=UTC)}]},
        [1, 2.5, True, None, b"{{ bytes are not rendered }}"],
        {1, 2},
        object(),
    ):
        assert not is_templated(final), final
    loop: list[Any] = []
    loop.append(loop)
    assert not is_templated(loop)  # no endless recursion


def test_xcom_args_are_resolved_later_but_not_templates() -> None:
    class Resolvable:  # what Airflow's render_template resolves: anything with resolve(context)
        def resolve(self, context: Any) -> Any:
            return context

    assert is_resolved_at_run_time({"spec": [Resolvable()]}) and not is_templated({"spec": [Resolvable()]})
    assert not is_resolved_at_run_time(Path("some/dir"))  # a path's resolve() is not Airflow's


# -- bad inputs, refused when the DAG is parsed -----------------------------------------------------

NAIVE = "2026-01-01T00:00:00"

#: (case id, operator factory, what the message must say: field, value, and what is allowed)
PARSE_TIME_CASES: list[tuple[str, Callable[[], Any], tuple[str, ...]]] = [
    (
        "kv key with an empty token",
        lambda: JetStreamKeyValuePutOperator(task_id="t", bucket="b", key="a..b", value="v"),
        ("key='a..b'", "no leading, trailing or double '.'"),
    ),
    (
        "kv key ending in a dot",
        lambda: JetStreamKeyValueDeleteOperator(task_id="t", bucket="b", key="a."),
        ("key='a.'", "no leading, trailing or double '.'"),
    ),
    (
        "kv value that is a set",
        lambda: JetStreamKeyValuePutOperator(task_id="t", bucket="b", key="k", value={1, 2}),
        ("value={1, 2}", "a set has no JSON form", "dicts with string keys"),
    ),
    (
        "kv value holding a set",
        lambda: JetStreamKeyValuePutOperator(task_id="t", bucket="b", key="k", value={"a": [1, {2}]}),
        ("value['a'][1]={2}", "a set has no JSON form"),
    ),
    (
        "kv value that is a datetime",
        lambda: JetStreamKeyValuePutOperator(task_id="t", bucket="b", key="k", value=dt.datetime(2026, 1, 1)),
        ("value=datetime.datetime(2026, 1, 1, 0, 0)", "a datetime has no JSON form"),
    ),
    (
        "kv value with NaN",
        lambda: JetStreamKeyValuePutOperator(task_id="t", bucket="b", key="k", value={"x": float("nan")}),
        ("value['x']=nan", "finite number"),
    ),
    (
        "kv value with a non-string key",
        lambda: JetStreamKeyValuePutOperator(task_id="t", bucket="b", key="k", value={1: "a"}),
        ("value={1: 'a'}", "keys are strings"),
    ),
    (
        "kv value None",
        lambda: JetStreamKeyValuePutOperator(task_id="t", bucket="b", key="k", value=None),
        ("value=None", "give a value to store"),
    ),
    (
        "mirror start_time without a zone",
        lambda: JetStreamCreateMirrorOperator(
            task_id="t", stream="m", origin="o", origin_domain="leaf", start_time=NAIVE
        ),
        (f"start_time='{NAIVE}'", "a time zone is required"),
    ),
    (
        "source start_time naive datetime",
        lambda: JetStreamCreateSourcedStreamOperator(
            task_id="t", stream="a", sources=[{"name": "o", "domain": "leaf", "start_time": dt.datetime(2026, 1, 1)}]
        ),
        ("sources[0].start_time=datetime.datetime(2026, 1, 1, 0, 0)", "a time zone is required"),
    ),
    (
        "consumer start_time without a zone",
        lambda: JetStreamCreateConsumerOperator(task_id="t", stream="s", consumer={"name": "c", "start_time": NAIVE}),
        (f"consumer.start_time='{NAIVE}'", "a time zone is required"),
    ),
    (
        "dry_run maybe (stream)",
        lambda: JetStreamCreateStreamOperator(task_id="t", stream={"name": "s"}, options={"dry_run": "maybe"}),
        ("dry_run='maybe'", "use true or false"),
    ),
    (
        "dry_run maybe (consumer)",
        lambda: JetStreamCreateConsumerOperator(
            task_id="t", stream="s", consumer={"name": "c"}, options={"dry_run": "maybe"}
        ),
        ("dry_run='maybe'", "use true or false"),
    ),
    (
        "dry_run maybe (bucket)",
        lambda: JetStreamCreateKeyValueOperator(task_id="t", bucket="b", options={"dry_run": "maybe"}),
        ("dry_run='maybe'", "use true or false"),
    ),
    (
        "purge maybe",
        lambda: JetStreamKeyValueDeleteOperator(task_id="t", bucket="b", key="k", purge="maybe"),
        ("purge='maybe'", "use true or false"),
    ),
    (
        "prune_sources maybe",
        lambda: JetStreamCreateSourcedStreamOperator(
            task_id="t", stream="a", sources=[{"name": "o"}], options={"prune_sources": "maybe"}
        ),
        ("prune_sources='maybe'", "use true or false"),
    ),
    (
        "allow_double_store 2",
        lambda: JetStreamCreateStreamOperator(task_id="t", stream={"name": "s"}, options={"allow_double_store": 2}),
        ("allow_double_store=2", "use true or false"),
    ),
    (
        "ignore_missing maybe (stream delete)",
        lambda: JetStreamDeleteStreamOperator(task_id="t", stream="s", ignore_missing="maybe"),
        ("ignore_missing='maybe'", "use true or false"),
    ),
    (
        "ignore_missing maybe (consumer delete)",
        lambda: JetStreamDeleteConsumerOperator(task_id="t", stream="s", consumer="c", ignore_missing="maybe"),
        ("ignore_missing='maybe'", "use true or false"),
    ),
    (
        "peer_domains with a bad name",
        lambda: JetStreamCreateStreamOperator(task_id="t", stream={"name": "s"}, options={"peer_domains": ["a.b"]}),
        ("peer_domains[0]='a.b'", "domain name"),
    ),
    (
        "request_timeout 0",
        lambda: JetStreamCreateStreamOperator(task_id="t", stream={"name": "s"}, request_timeout=0),
        ("request_timeout=0", "> 0"),
    ),
    (
        "spec with a timedelta and a bad field",
        lambda: JetStreamCreateStreamOperator(
            task_id="t", stream={"name": "s", "max_age": dt.timedelta(hours=1), "max_msgs": -7}
        ),
        ("stream.max_msgs=-7", "-1: unlimited"),
    ),
    (
        "spec with a datetime and a typo",
        lambda: JetStreamCreateStreamOperator(
            task_id="t",
            stream={
                "name": "s",
                "sources": [{"name": "o", "start_time": dt.datetime(2026, 1, 1, tzinfo=UTC)}],
                "subjets": ["x"],
            },
        ),
        ("stream.subjets", "did you mean 'subjects'"),
    ),
    (
        "consumer with a timedelta and a bad field",
        lambda: JetStreamCreateConsumerOperator(
            task_id="t", stream="s", consumer={"name": "c", "ack_wait": dt.timedelta(seconds=30), "max_deliver": -5}
        ),
        ("consumer.max_deliver=-5",),
    ),
]


@pytest.mark.parametrize(("case", "build", "says"), PARSE_TIME_CASES, ids=[c[0] for c in PARSE_TIME_CASES])
def test_bad_input_is_refused_when_the_dag_is_parsed(
    case: str, build: Callable[[], Any], says: tuple[str, ...]
) -> None:
    with pytest.raises(JetStreamConfigError) as err:
        build()
    for text in says:
        assert text in str(err.value), (case, str(err.value))
    assert is_refusal(err.value)


@pytest.mark.parametrize(
    "value",
    ["text", b"\x00raw", bytearray(b"x"), {"rate": 5, "sites": ["a", "b"], "on": True, "none": None}, [1, 2.5], 7, 0.5],
)
def test_good_values_are_stored_exactly(value: Any) -> None:
    JetStreamKeyValuePutOperator(task_id="t", bucket="b", key="site.a", value=value)
    stored = encode_kv_value(value)
    if isinstance(value, (bytes, bytearray)):
        assert stored == bytes(value)
    elif isinstance(value, str):
        assert stored == value.encode()
    else:
        assert json.loads(stored) == value


def test_good_inputs_with_final_objects_are_accepted() -> None:
    JetStreamCreateStreamOperator(task_id="t", stream={"name": "s", "max_age": dt.timedelta(hours=1)})
    JetStreamCreateMirrorOperator(
        task_id="m",
        stream="m",
        origin="o",
        origin_domain="leaf",
        start_time=dt.datetime(2026, 1, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=1))),
    )
    JetStreamCreateStreamOperator(
        task_id="t2", stream={"name": "s"}, options={"dry_run": True, "allow_double_store": False}
    )
    JetStreamKeyValueDeleteOperator(task_id="d", bucket="b", key="a.b", purge="{{ params.purge }}")


# -- refusals fail the task at once; bad rendered inputs are refused before any connection ----------


def test_refusals_fail_at_once_and_transient_errors_are_retried(
    airflow_db: Path,
    hub_conn: str,
    raw: Raw,
    quiet_conn: str,
    quiet_server: QuietServer,
    jetstream_conn: Callable[..., str],
    hub_leaf: LocalTopology,
) -> None:
    name, existing, bucket, subject = uid("refusal"), uid("existing"), uid("cas"), uid("shared")
    raw.create("leaf", {"name": existing, "subjects": [existing]})  # file storage: memory is a replace
    raw.create("hub", {"name": uid("hub"), "subjects": [subject]})  # a hub stream already stores `subject`
    JetStreamCreateKeyValueOperator(task_id="b", jetstream_conn_id=hub_conn, domain="leaf", bucket=bucket).execute({})
    JetStreamKeyValuePutOperator(
        task_id="p", jetstream_conn_id=hub_conn, domain="leaf", bucket=bucket, key="k", value="first"
    ).execute({})
    bad_auth = jetstream_conn(host=f"127.0.0.1:{hub_leaf.hub.port}", login="acc", password="not-the-password")

    before = quiet_server.traffic()
    run = refusals_dag.test(
        run_conf={
            "conn_id": hub_conn,
            "quiet_conn_id": quiet_conn,
            "bad_auth_conn_id": bad_auth,
            "name": name,
            "existing": existing,
            "subject": subject,
            "bucket": bucket,
        }
    )
    assert run.state == "failed"
    tries = {task_id: run.get_task_instance(task_id) for task_id in REFUSALS}
    for task_id, refusal in REFUSALS.items():
        ti = tries[task_id]
        assert ti.state == "failed", (task_id, ti.state)
        assert ti.try_number == (1 if refusal else 3), (task_id, ti.try_number)
    # Bad rendered inputs were refused before any connection: the quiet server saw nothing.
    assert quiet_server.traffic() == before
    # Nothing was changed by the refused tasks.
    assert raw.info("leaf", existing)["config"]["storage"] == "file"
    assert raw.info("leaf", name) is None
    assert raw.info("leaf", f"KV_{bucket}")["state"]["messages"] == 1


def test_rejected_credentials_are_a_refusal(hub_leaf: LocalTopology, jetstream_conn: Callable[..., str]) -> None:
    conn = jetstream_conn(host=f"127.0.0.1:{hub_leaf.hub.port}", login="acc", password="wrong")
    with pytest.raises(JetStreamAuthError, match="authorization violation") as err:
        JetStreamCreateStreamOperator(task_id="t", jetstream_conn_id=conn, stream={"name": "x"}).execute({})
    assert is_refusal(err.value)
    assert not is_refusal(JetStreamDomainUnavailableError("no answer"))


# -- the double-store guard fails closed --------------------------------------------------------------


def test_error_replies_are_not_empty_answers() -> None:
    denied = json.dumps({"error": {"code": 403, "err_code": 10999, "description": "permission denied"}}).encode()
    assert reply_problem(denied) == (None, "an error: permission denied (code 403, err_code 10999)")
    assert reply_problem(b"not json")[0] is None
    not_enabled = json.dumps({"error": {"code": 503, "err_code": 10039, "description": "jetstream not enabled"}})
    assert reply_problem(not_enabled.encode())[0] == {"streams": [], "total": 0}  # an answer: no streams there
    assert reply_problem(b'{"streams": ["a"], "total": 1}') == ({"streams": ["a"], "total": 1}, "")


def _topology_with_limited_user(workdir: Path) -> LocalTopology:
    """Hub + leaf where user ``lim`` (account ACC, on the hub) may not list the leaf's streams."""
    topology = LocalTopology(workdir)
    accounts = topology.workdir / "accounts.conf"
    user, password = USERS["ACC"]
    limited = (
        f"users: [{{user: {user}, password: {password}}}, {{user: lim, password: lim, permissions: {{publish: "
        '{allow: ">", deny: ["$JS.leaf.API.STREAM.NAMES", "$JS.leaf.API.STREAM.LIST"]}}}]'
    )
    text = accounts.read_text()
    assert f"users: [{{user: {user}, password: {password}}}]" in text
    accounts.write_text(text.replace(f"users: [{{user: {user}, password: {password}}}]", limited, 1))
    return topology.start()


def test_guard_refuses_what_it_cannot_verify(tmp_path: Path, jetstream_conn: Callable[..., str], capfd) -> None:
    topology = _topology_with_limited_user(tmp_path / "limited")
    try:
        direct = Raw(topology)
        subject = uid("both")
        direct.create("leaf", {"name": uid("leafside"), "subjects": [subject]})
        limited = jetstream_conn(host=f"127.0.0.1:{topology.hub.port}", login="lim", password="lim")
        name = uid("hubside")

        def create(**options: Any) -> dict:
            return JetStreamCreateStreamOperator(
                task_id=uid("t"),
                jetstream_conn_id=limited,
                domain="hub",
                stream={"name": name, "subjects": [subject]},
                options={"peer_domains": ["leaf"], **options},
                request_timeout=3,  # the denied request gets no reply: it waits this out
            ).execute({})

        # The leaf cannot be asked (permissions): before, that counted as "no overlap", unlogged.
        with pytest.raises(DoubleStoreUnverifiedError) as err:
            create()
        text = str(err.value)
        assert "cannot verify that stream" in text and "domain 'leaf': STREAM.NAMES: the server refused" in text
        assert 'permissions violation for publish to "$js.leaf.api.stream.names"' in text
        assert "allow_double_store=True" in text and is_refusal(err.value)
        assert direct.info("hub", name) is None
        # Opting out explicitly goes ahead, with a warning naming what was not checked.
        capfd.readouterr()
        assert create(allow_double_store=True)["action"] == "created"
        assert "not checked, allowed by allow_double_store=True" in capfd.readouterr().out
    finally:
        topology.stop()


def test_guard_reads_every_page_of_the_stream_listing(make_topology, jetstream_conn: Callable[..., str]) -> None:
    topology = make_topology()
    direct = Raw(topology)
    subject = uid("paged")
    direct.create("leaf", {"name": "origin", "subjects": [subject]})

    async def fill() -> list[str]:
        """1030 hub streams sorted before the mirror: more than a page of STREAM.LIST (256) and of
        STREAM.NAMES (1024); then every name, as JetStreamApi.stream_names() lists them."""
        user, password = USERS["ACC"]
        nc = await nats.connect(topology.hub.url, user=user, password=password)
        try:
            for i in range(1030):
                config = {"name": f"a{i:04d}", "subjects": [f"filler.{i}"], "storage": "memory"}
                reply = json.loads(
                    (await nc.request(f"$JS.hub.API.STREAM.CREATE.a{i:04d}", json.dumps(config).encode(), 5)).data
                )
                assert "error" not in reply, reply
            return await JetStreamApi(nc, "$JS.hub.API").stream_names()
        finally:
            await nc.close()

    names = asyncio.run(fill())
    direct.create("hub", {"name": "zz-mirror", "mirror": {"name": "origin", "external": {"api": "$JS.leaf.API"}}})
    assert len(names) == 1030 and names[-1] == "a1029"  # all pages of STREAM.NAMES
    conn = jetstream_conn(host=f"127.0.0.1:{topology.hub.port}", login="acc", password="acc")
    # The hub's last stream (5th page of STREAM.LIST) mirrors the leaf: the only clue that the leaf
    # is a connected peer, whose `origin` stores `subject`.
    with pytest.raises(DoubleStoreError, match=f"stream 'origin' in domain 'leaf' listens on '{subject}'"):
        JetStreamCreateStreamOperator(
            task_id="t", jetstream_conn_id=conn, domain="hub", stream={"name": "new", "subjects": [subject]}
        ).execute({})
    assert direct.info("hub", "new") is None


def test_a_task_failure_keeps_the_error_class_and_pickles() -> None:
    from airflow_provider_jetstream.compat import AirflowFailException
    from airflow_provider_jetstream.core.errors import SpecError
    from airflow_provider_jetstream.operators.base import as_task_failure

    error = SpecErrors([SpecError("stream.max_msgs", -7, "use an integer >= -1")])
    failure = as_task_failure(error)
    assert isinstance(failure, AirflowFailException) and isinstance(failure, SpecErrors)
    assert str(failure) == str(error) and failure.errors[0].path == "stream.max_msgs"
    copy = pickle.loads(pickle.dumps(failure))
    assert type(copy) is SpecErrors and str(copy) == str(error)


def test_spark_submit_refusals_fail_the_task_too(jetstream_conn: Callable[..., str]) -> None:
    from airflow_provider_jetstream.compat import AirflowFailException
    from airflow_provider_jetstream.operators.spark import JetStreamSparkSubmitOperator

    conn = jetstream_conn("127.0.0.1:4222", domain="leaf", api_prefix="JS.acc@hub.API")
    op = JetStreamSparkSubmitOperator(
        task_id="s", jetstream_conn_id=conn, stream="s", output_path="out", checkpoint_bucket="b"
    )
    with pytest.raises(AirflowFailException) as err:
        op.execute({})
    assert isinstance(err.value, JetStreamConfigError) and "domain" in str(err.value)


def test_guard_refuses_while_a_known_peer_is_cut_off(make_topology, jetstream_conn: Callable[..., str]) -> None:
    topology = make_topology()
    direct = Raw(topology)
    subject = uid("cut")
    direct.create("leaf", {"name": "origin", "subjects": [subject]})
    direct.create("hub", {"name": "copy", "mirror": {"name": "origin", "external": {"api": "$JS.leaf.API"}}})
    topology.disconnect_leaf("leaf")  # its `origin` still stores `subject`, and will again once relinked
    conn = jetstream_conn(host=f"127.0.0.1:{topology.hub.port}", login="acc", password="acc")
    with pytest.raises(DoubleStoreUnreachableError) as err:
        JetStreamCreateStreamOperator(
            task_id="t", jetstream_conn_id=conn, domain="hub", stream={"name": "new", "subjects": [subject]}
        ).execute({})
    assert "domain 'leaf': STREAM.NAMES: no JetStream answered (leaf link down" in str(err.value)
    assert not is_refusal(err.value)  # the link may come back: retries apply
    assert direct.info("hub", "new") is None
