"""Regression tests of issue #24: ordinary input never loses, redirects or widens anything.

Every case here failed on the code before the fix: a template that rendered empty sent an action to
the connection's domain or dropped deduplication; a reserved or oversized subject, a NaN, an
infinite or a 64-bit-overflowing value reached the server (or raised a raw Python error); a reply
that was not the target domain's ack counted as stored; a connection's bad port, seed or mixed
credentials were reported as something else.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import math
from collections.abc import Callable
from typing import Any

import nats
import pytest

from airflow_provider_jetstream.core.errors import JetStreamConfigError, JetStreamPublishError
from airflow_provider_jetstream.hooks.jetstream import JetStreamHook
from airflow_provider_jetstream.operators.consumers import JetStreamCreateConsumerOperator
from airflow_provider_jetstream.operators.kv import (
    JetStreamCreateKeyValueOperator,
    JetStreamKeyValueDeleteOperator,
    JetStreamKeyValuePutOperator,
)
from airflow_provider_jetstream.operators.publish import JetStreamPublishOperator
from airflow_provider_jetstream.operators.spark import JetStreamSparkSubmitOperator
from airflow_provider_jetstream.operators.streams import (
    JetStreamCreateStreamOperator,
    JetStreamPurgeStreamOperator,
)
from airflow_provider_jetstream.sensors.consumer_lag import JetStreamConsumerLagSensor
from airflow_provider_jetstream.testing.servers import USERS, LocalTopology
from tests.support.management import QuietServer, Raw, uid

# -- rendered values, refused before any connection ----------------------------------------------------

#: (what, operator class, its arguments; "{{ params.v }}" marks the templated one, the value it renders to)
RENDERED: list[tuple[str, type, dict[str, Any], Any]] = [
    ("create: domain ''", JetStreamCreateStreamOperator, {"stream": {"name": "s", "subjects": ["s"]}, "domain": 0}, ""),
    ("create: api_prefix ''", JetStreamCreateStreamOperator, {"stream": {"name": "s"}, "api_prefix": 0}, ""),
    ("kv put: domain ''", JetStreamKeyValuePutOperator, {"bucket": "b", "key": "k", "value": "v", "domain": 0}, ""),
    (
        "publish: domain ''",
        JetStreamPublishOperator,
        {"subject": "a.b", "messages": ["x"], "msg_id": "m", "domain": 0},
        "",
    ),
    ("publish: msg_id ''", JetStreamPublishOperator, {"subject": "a.b", "messages": ["x"], "msg_id": 0}, ""),
    (
        "publish: expected_stream ''",
        JetStreamPublishOperator,
        {"subject": "a.b", "messages": [1], "msg_id": "m", "expected_stream": 0},
        "",
    ),
    (
        "publish: 100,000-character subject",
        JetStreamPublishOperator,
        {"subject": 0, "messages": ["x"], "msg_id": "m"},
        "a" * 100_000,
    ),
    ("publish: NUL in subject", JetStreamPublishOperator, {"subject": 0, "messages": ["x"], "msg_id": "m"}, "a.\x00b"),
    (
        "publish: JS.acc@hub.API",
        JetStreamPublishOperator,
        {"subject": 0, "messages": ["x"], "msg_id": "m"},
        "JS.acc@hub.API.CONSUMER.CREATE.x",
    ),
    (
        "stream: subjects _INBOX.>",
        JetStreamCreateStreamOperator,
        {"stream": {"name": "s", "subjects": [0]}},
        "_INBOX.>",
    ),
    (
        "stream: subjects $JS.ACK.>",
        JetStreamCreateStreamOperator,
        {"stream": {"name": "s", "subjects": [0]}},
        "$JS.ACK.>",
    ),
    ("stream: subjects *.>", JetStreamCreateStreamOperator, {"stream": {"name": "s", "subjects": [0]}}, "*.>"),
    (
        "stream: source filter $SYS.>",
        JetStreamCreateStreamOperator,
        {"stream": {"name": "s", "sources": [{"name": "o", "filter_subject": 0}]}},
        "$SYS.>",
    ),
    (
        "consumer: filter $JSC.>",
        JetStreamCreateConsumerOperator,
        {"stream": "s", "consumer": {"name": "c", "filter_subject": 0}},
        "$JSC.>",
    ),
    (
        "kv: republish to $JS.hub.API.>",
        JetStreamCreateKeyValueOperator,
        {"bucket": {"bucket": "b", "republish": {"src": ">", "dest": 0}}},
        "$JS.hub.API.>",
    ),
    ("stream: max_age 'nan'", JetStreamCreateStreamOperator, {"stream": {"name": "s", "max_age": 0}}, "nan"),
    (
        "stream: max_age '9999999999h'",
        JetStreamCreateStreamOperator,
        {"stream": {"name": "s", "max_age": 0}},
        "9999999999h",
    ),
    ("stream: max_msgs 2**64", JetStreamCreateStreamOperator, {"stream": {"name": "s", "max_msgs": 0}}, str(2**64)),
    ("purge: keep ''", JetStreamPurgeStreamOperator, {"stream": "s", "keep": 0}, ""),
    ("purge: domain ''", JetStreamPurgeStreamOperator, {"stream": "s", "domain": 0}, ""),
]


def _templated(arguments: Any) -> Any:
    """``arguments`` with each 0 placeholder replaced by the template ``{{ params.v }}``."""
    if arguments == 0 and not isinstance(arguments, bool):
        return "{{ params.v }}"
    if isinstance(arguments, dict):
        return {k: _templated(v) for k, v in arguments.items()}
    if isinstance(arguments, list):
        return [_templated(v) for v in arguments]
    return arguments


@pytest.mark.parametrize(("what", "cls", "arguments", "rendered"), RENDERED, ids=[r[0] for r in RENDERED])
def test_a_rendered_value_that_would_widen_redirect_or_overflow_is_refused_before_connecting(
    what: str, cls: type, arguments: dict[str, Any], rendered: Any, quiet_conn: str, quiet_server: QuietServer
) -> None:
    op = cls(task_id=uid("t"), jetstream_conn_id=quiet_conn, **_templated(arguments))
    # A native-rendering DAG gives the value as it is; the placeholder renders it exactly.
    op.render_template_fields({"params": {"v": rendered}}, jinja_env=_native_env())
    before = quiet_server.traffic()
    with pytest.raises(JetStreamConfigError, match=r"=.* is not (allowed|a JetStream)"):
        op.execute({})
    assert quiet_server.traffic() == before, f"{what}: nothing reached the server"


def _native_env() -> Any:
    from airflow.sdk.definitions._internal.templater import NativeEnvironment

    return NativeEnvironment()


def test_a_sensor_with_a_domain_rendered_empty_fails_without_asking_another_domain(
    quiet_conn: str, quiet_server: QuietServer
) -> None:
    sensor = JetStreamConsumerLagSensor(
        task_id=uid("lag"), jetstream_conn_id=quiet_conn, stream="s", consumer="c", domain="{{ params.v }}"
    )
    sensor.render_template_fields({"params": {"v": ""}})
    before = quiet_server.traffic()
    with pytest.raises(Exception, match=r"domain='' is not a JetStream domain name"):
        sensor.poke({})
    assert quiet_server.traffic() == before


# -- literal values, refused when the DAG is parsed ------------------------------------------------------

LITERAL: list[tuple[str, Callable[[], Any], str]] = [
    (
        "msg_id ''",
        lambda: JetStreamPublishOperator(task_id="p", subject="a.b", messages=["x"], msg_id=""),
        r"msg_id='' is not allowed",
    ),
    (
        "purge 'yes'",
        lambda: JetStreamKeyValueDeleteOperator(task_id="d", bucket="b", key="k", purge="yes"),
        "purge='yes'",
    ),
    (
        "a set payload",
        lambda: JetStreamPublishOperator(task_id="p", subject="a.b", messages=[{1, 2}]),
        r"messages\[0\]=\{1, 2\} is not allowed: a set has no JSON form",
    ),
    (
        "a NaN payload",
        lambda: JetStreamPublishOperator(task_id="p", subject="a.b", messages=["ok", math.nan]),
        r"messages\[1\]=nan is not allowed: JSON has no NaN",
    ),
    (
        "a naive datetime payload",
        lambda: JetStreamPublishOperator(task_id="p", subject="a.b", messages=[dt.datetime(2026, 1, 1)]),
        r"messages\[0\]=datetime.datetime\(2026, 1, 1, 0, 0\) is not allowed",
    ),
    (
        "opt_start_seq named as given",
        lambda: JetStreamCreateConsumerOperator(task_id="c", stream="s", consumer={"name": "c", "opt_start_seq": -1}),
        r"consumer\.opt_start_seq=-1 is not allowed",
    ),
    (
        "ack_wait inf",
        lambda: JetStreamCreateConsumerOperator(task_id="c", stream="s", consumer={"name": "c", "ack_wait": math.inf}),
        r"consumer\.ack_wait=inf is not allowed",
    ),
    (
        "KV ttl nan",
        lambda: JetStreamCreateKeyValueOperator(task_id="k", bucket={"bucket": "b", "ttl": math.nan}),
        r"bucket\.ttl=nan is not allowed",
    ),
    (
        "duplicate_window 1e30",
        lambda: JetStreamCreateStreamOperator(task_id="s", stream={"name": "s", "duplicate_window": 1e30}),
        r"stream\.duplicate_window=1e\+30 is not allowed: use a duration of at most 292 years",
    ),
    (
        "spark job: start_seq after end_seq",
        lambda: JetStreamSparkSubmitOperator(
            task_id="j", stream="s", output_path="/tmp/o", checkpoint_bucket="b", start_seq=10, end_seq=5
        ),
        r"start_seq='10' is not allowed: use at most end_seq=5",
    ),
]


@pytest.mark.parametrize(("what", "make", "message"), LITERAL, ids=[c[0] for c in LITERAL])
def test_a_literal_bad_value_is_refused_when_the_dag_is_parsed(
    what: str, make: Callable[[], Any], message: str
) -> None:
    with pytest.raises(JetStreamConfigError, match=message):
        make()


# -- effects on real servers ---------------------------------------------------------------------------


def test_a_create_meant_for_a_leaf_never_lands_in_the_hub(hub_conn: str, raw: Raw) -> None:
    name = uid("redirect")
    op = JetStreamCreateStreamOperator(
        task_id=uid("c"), jetstream_conn_id=hub_conn, stream={"name": name, "subjects": [name]}, domain="{{ params.d }}"
    )
    op.render_template_fields({"params": {"d": ""}})
    with pytest.raises(JetStreamConfigError, match="domain=''"):
        op.execute({})
    assert raw.info("hub", name) is None and raw.info("leaf", name) is None
    op = JetStreamCreateStreamOperator(
        task_id=uid("c"), jetstream_conn_id=hub_conn, stream={"name": name, "subjects": [name]}, domain="{{ params.d }}"
    )
    op.render_template_fields({"params": {"d": "leaf"}})
    assert op.execute({})["action"] == "created"
    assert raw.info("leaf", name) is not None and raw.info("hub", name) is None


def test_only_the_target_domains_ack_counts_as_stored(hub_leaf: LocalTopology, hub_conn: str) -> None:
    """A plain subscriber answering like an ack is not JetStream: neither ``{"ok": true}`` nor a forged
    ``{"stream", "seq"}`` without the target's domain counts as stored."""
    subject = f"{uid('forged')}.x"
    user, password = USERS["ACC"]
    replies = iter([b'{"ok": true}', b'{"stream": "orders", "seq": 42}'])

    async def run() -> list[str]:
        nc = await nats.connect(hub_leaf.hub.url, user=user, password=password)
        errors = []
        try:

            async def answer(msg: Any) -> None:
                await msg.respond(next(replies))

            await nc.subscribe(subject, cb=answer)
            await nc.flush()
            hook = JetStreamHook(hub_conn, domain="hub")
            for _ in range(2):
                with pytest.raises(JetStreamPublishError) as refused:
                    await hook.apublish(subject, [b"x"], expected_stream="orders")
                errors.append(str(refused.value))
        finally:
            await nc.close()
        return errors

    not_an_ack, wrong_domain = asyncio.run(run())
    assert "not a JetStream publish ack" in not_an_ack
    assert "stored outside domain 'hub'" in wrong_domain and "in domain None" in wrong_domain


def test_expected_stream_is_enforced_by_the_server(hub_conn: str, raw: Raw) -> None:
    name = uid("expect")
    raw.create("hub", {"name": name, "subjects": [f"{name}.>"]})
    with pytest.raises(JetStreamPublishError, match="expected stream does not match"):
        JetStreamHook(hub_conn).publish(f"{name}.a", [b"x"], expected_stream="other")
    assert raw.info("hub", name)["state"]["messages"] == 0


# -- connections --------------------------------------------------------------------------------------


def test_connection_fields_that_were_misreported_are_named(
    hub_leaf: LocalTopology, jetstream_conn: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    user, password = USERS["ACC"]
    host = f"127.0.0.1:{hub_leaf.hub.port}"

    def refusal(conn_id: str) -> str:
        with pytest.raises(JetStreamConfigError) as refused:
            JetStreamHook(conn_id).get_conn_config()
        return str(refused.value)

    monkeypatch.setenv("AIRFLOW_CONN_PORT_ZERO", "jetstream://127.0.0.1:0")
    assert "port=0 is not allowed: use a TCP port from 1 to 65535" in refusal("port_zero")
    assert "port 0 is no server's" in refusal(jetstream_conn("nats://127.0.0.1:0,nats://127.0.0.1:4222"))
    monkeypatch.setenv("AIRFLOW_CONN_PORT_TEXT", f"jetstream://{user}:{password}@127.0.0.1:abc")
    text = refusal("port_text")
    assert "$AIRFLOW_CONN_PORT_TEXT cannot be read" in text and "'abc'" in text and password not in text
    seed = "SUAMLK2ZNL35WSMW37E7BD4VZ7ELPKW7DHC3BWBSD2GCZ7IUQQXZIORRBU"  # one character mistyped
    text = refusal(jetstream_conn(host, nkey_seed=seed))
    assert "nkey_seed is not a valid user NKey seed" in text and seed not in text
    text = refusal(jetstream_conn(host, login=user, password=password, creds="-----BEGIN NATS USER JWT-----"))
    assert "creds and login/password were both given" in text


def test_the_hook_refuses_the_same_empty_values_before_connecting(quiet_conn: str, quiet_server: QuietServer) -> None:
    hook = JetStreamHook(quiet_conn)
    before = quiet_server.traffic()
    for kwargs, message in (
        ({"msg_id": ""}, "msg_id='' is not allowed"),
        ({"expected_stream": ""}, "expected_stream='' is not allowed"),
        ({"domain": ""}, "domain='' is not a JetStream domain name"),
        ({"api_prefix": ""}, "api_prefix='' is not a JetStream API prefix"),
    ):
        with pytest.raises(JetStreamConfigError, match=message):
            hook.publish("a.b", [b"x"], **kwargs)
    with pytest.raises(JetStreamConfigError, match=r"stream\.subjects\[0\]='_INBOX\.>' is not allowed"):
        hook.ensure_stream({"name": "s", "subjects": ["_INBOX.>"]})
    assert quiet_server.traffic() == before
    # None stays "no id" for the hook: the publish goes ahead (and finds no stream on the subject).
    with pytest.raises(JetStreamPublishError, match="no stream listens on it"):
        hook.publish(f"{uid('none')}.x", [b"x"], msg_id=None)
