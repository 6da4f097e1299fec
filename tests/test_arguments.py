"""The argument layer: each public argument declared once, one check per signature, one form of refusal.

Pure logic (core/arguments, utils/arguments), with Hypothesis-generated inputs where it is installed,
and one real Airflow run: templated arguments that render to refused values fail their task on the
first try, after rendering and before any connection.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

import pytest

from airflow_provider_jetstream.core.arguments import DEFAULT, REFUSE, REQUIRED, VALUE, Arg, Args, exclusive
from airflow_provider_jetstream.core.arguments.durations import duration_seconds, seconds_of
from airflow_provider_jetstream.core.arguments.names import (
    api_prefix,
    bucket_name,
    consumer_name,
    delivery_subject,
    domain_name,
    headers,
    is_name,
    kv_key,
    kv_key_pattern,
    stream_name,
    subject_filter,
    subject_text,
)
from airflow_provider_jetstream.core.arguments.values import (
    BOOLEAN_TEXTS,
    boolean,
    choice,
    count,
    fraction,
    integer,
    list_of,
    number,
    optional,
    seconds,
    text,
)
from airflow_provider_jetstream.core.errors import SpecError, SpecErrors, UnsafeSubjectError
from airflow_provider_jetstream.core.signatures.events import KV_EVENT_SETTINGS, MESSAGE_SETTINGS
from airflow_provider_jetstream.core.signatures.operations import PURGE
from airflow_provider_jetstream.core.signatures.shared import REQUEST
from airflow_provider_jetstream.hooks.jetstream import JetStreamHook
from airflow_provider_jetstream.operators import consumers, kv, publish, spark, streams
from airflow_provider_jetstream.sensors.consumer_lag import JetStreamConsumerLagSensor
from airflow_provider_jetstream.sensors.kv import JetStreamKeyValueSensor
from airflow_provider_jetstream.sensors.replication_lag import JetStreamReplicationLagSensor
from airflow_provider_jetstream.sensors.retention_headroom import JetStreamRetentionHeadroomSensor
from airflow_provider_jetstream.triggers.consumer_lag import JetStreamConsumerLagTrigger
from airflow_provider_jetstream.triggers.kv import JetStreamKeyValueTrigger
from airflow_provider_jetstream.triggers.kv_events import JetStreamKeyValueEventTrigger
from airflow_provider_jetstream.triggers.messages import JetStreamMessageTrigger
from airflow_provider_jetstream.triggers.replication_lag import JetStreamReplicationLagTrigger
from airflow_provider_jetstream.utils.templates import is_resolved_at_run_time
from tests.dags.arguments_rendered import REFUSED
from tests.dags.arguments_rendered import dag as rendered_dag
from tests.support.management import QuietServer

try:
    from hypothesis import given, settings
    from hypothesis import strategies as st
except ImportError:  # the test extra brings it; without it, the generated-input tests are skipped
    given = None

needs_hypothesis = pytest.mark.skipif(given is None, reason="hypothesis is not installed")

#: The one form of a refusal: ``field=value <problem>: <what is allowed>``.
FORMAT = re.compile(
    r"^(?P<field>\S+)=(?P<value>.+) (?P<problem>is not allowed|is not a JetStream domain name|"
    r"is not a JetStream API prefix): (?P<allowed>.+)$",
    re.DOTALL,
)


def refusal(parse: Any, value: Any, field: str = "f", **options: Any) -> SpecError:
    with pytest.raises(SpecError) as err:
        parse(value, field, **options)
    return err.value


# -- what a given empty value means ---------------------------------------------------------------


def _signature(empty: str, default: Any = None) -> Args:
    return Args("t", {"n": Arg(optional(integer(0)), default, empty)})


@pytest.mark.parametrize("empty", ["", None])
def test_a_given_empty_value_is_refused_not_given_or_a_value_as_declared(empty: Any) -> None:
    with pytest.raises(SpecErrors, match=r"^n=.* is not allowed: "):
        _signature(REFUSE).check({"n": empty}, rendered={"n"})
    assert _signature(DEFAULT, 5).check({"n": empty}, rendered={"n"}) == {"n": 5}
    value = _signature(VALUE, 5)
    if empty is None:
        assert value.check({"n": None}, rendered={"n"}) == {"n": None}  # meaningful: "none"
    else:
        with pytest.raises(SpecErrors, match="n='' is not allowed: use an integer >= 0"):
            value.check({"n": ""}, rendered={"n"})


def test_an_empty_value_equal_to_the_default_is_not_given_unless_rendered() -> None:
    refuse = _signature(REFUSE)
    assert refuse.check({}) == {"n": None} and refuse.check({"n": None}) == {"n": None}
    with pytest.raises(SpecErrors, match=r"n=None is not allowed: give a value"):
        refuse.check({"n": None}, rendered={"n"})  # a template rendered None: given
    with pytest.raises(SpecErrors, match=r"n='' is not allowed"):
        refuse.check({"n": ""})  # "" is not the default None: given


def test_a_required_argument_has_no_default() -> None:
    required = Args("t", {"name": Arg(stream_name, REQUIRED, VALUE)})
    with pytest.raises(SpecErrors, match="name=None is not allowed: give a value: it has no default"):
        required.check({})
    with pytest.raises(SpecErrors, match="name=None is not allowed: a stream name is"):
        required.check({"name": None})


def test_narrowing_arguments_of_a_purge_are_refused_empty() -> None:
    for name in ("subject", "keep", "up_to_seq"):
        with pytest.raises(SpecErrors, match=f"^{name}='' is not allowed"):
            PURGE.check({"stream": "s", name: ""})
        with pytest.raises(SpecErrors, match=f"^{name}=None is not allowed"):
            PURGE.check({"stream": "s", name: None}, rendered={name})
    with pytest.raises(SpecErrors, match="domain='' is not a JetStream domain name"):
        REQUEST.check({"domain": ""})
    assert PURGE.check({"stream": "s"}) == {"stream": "s", "subject": None, "keep": None, "up_to_seq": None}


# -- rules, skipping, all errors at once ----------------------------------------------------------


def test_rules_wait_for_every_value_they_involve() -> None:
    waiting = PURGE.check({"stream": "s", "keep": "{{ params.keep }}", "up_to_seq": 3}, skip=is_resolved_at_run_time)
    assert waiting["keep"] == "{{ params.keep }}" and waiting["up_to_seq"] == 3
    with pytest.raises(SpecErrors, match=r"^keep=1 and up_to_seq=3 were both given: give keep or up_to_seq"):
        PURGE.check({"stream": "s", "keep": 1, "up_to_seq": 3})
    with pytest.raises(SpecErrors) as err:  # a rule over a refused value is not checked: one error, not two
        PURGE.check({"stream": "s", "keep": -1, "up_to_seq": 3})
    assert [e.path for e in err.value.errors] == ["keep"]


def test_rules_can_derive_values() -> None:
    spec = MESSAGE_SETTINGS.check({"stream": "S", "consumer": "c"})["spec"]
    assert spec.name == "c" and spec.values["ack_policy"] == "explicit"


def test_every_refusal_is_reported_at_once() -> None:
    with pytest.raises(SpecErrors) as err:
        (PURGE + REQUEST).check({"stream": "a b", "subject": "a..b", "keep": -1, "request_timeout": 0, "domain": "x.y"})
    assert sorted(e.path for e in err.value.errors) == ["domain", "keep", "request_timeout", "stream", "subject"]
    assert str(err.value).startswith("5 invalid fields:\n  ")
    with pytest.raises(SpecErrors) as at_parse:
        streams.JetStreamPurgeStreamOperator(task_id="t", stream="a b", keep=-1, request_timeout=0)
    assert sorted(e.path for e in at_parse.value.errors) == ["keep", "request_timeout", "stream"]


def test_unknown_argument_names_are_a_programming_error() -> None:
    with pytest.raises(TypeError, match="no argument 'kep'"):
        PURGE.check({"stream": "s", "kep": 1})


def test_rules_must_name_declared_arguments() -> None:
    with pytest.raises(ValueError, match="does not declare"):
        Args("t", {"a": Arg(text)}, [exclusive("a", "b", "one")])


# -- one form of refusal --------------------------------------------------------------------------

REFUSALS: list[tuple[Any, Any, dict[str, Any]]] = [
    (boolean, "maybe", {"text": True}),
    (boolean, "true", {}),
    (integer(1), "1.5", {"text": True}),
    (integer(1, 5), 9, {}),
    (count, "3", {}),
    (number(0.1), "nan", {"text": True}),
    (seconds(), 0, {}),
    (seconds(allow_zero=True), -1, {}),
    (choice(("auto", "off")), "on", {}),
    (text, 3, {}),
    (list_of(stream_name), "a", {}),
    (stream_name, "a.b", {}),
    (consumer_name, "a b", {}),
    (domain_name, "a b", {}),
    (api_prefix, "a *", {}),
    (bucket_name, "a.b", {}),
    (kv_key, "a..b", {}),
    (kv_key_pattern, "a.>.b", {}),
    (subject_filter, "a.>.b", {}),
    (delivery_subject, "a.*", {}),
    (subject_text, "a b", {}),
    (headers, ["a"], {}),
    (seconds_of(positive=True), "soon", {}),
    (fraction, 1.5, {}),
    (fraction, "0", {"text": True}),
    (delivery_subject, "$JS.API.STREAM.DELETE.x", {}),
]


@pytest.mark.parametrize(("parse", "value", "options"), REFUSALS, ids=[repr(r[1]) for r in REFUSALS])
def test_every_refusal_names_the_field_the_value_and_what_is_allowed(parse: Any, value: Any, options: dict) -> None:
    err = refusal(parse, value, "field", **options)
    match = FORMAT.match(str(err))
    assert match, str(err)
    assert match["field"] == "field" and match["value"] == repr(value) and match["allowed"] == err.allowed
    assert (err.path, err.value) == ("field", value)


def test_an_unsafe_subject_is_one_of_those_refusals() -> None:
    err = refusal(delivery_subject, "_INBOX.x")
    assert isinstance(err, UnsafeSubjectError) and "reserved subject space" in err.allowed


def test_text_forms_are_accepted_only_where_the_value_may_be_text() -> None:
    assert boolean("yes", "f", text=True) is True and integer(1)(" 7 ", "f", text=True) == 7
    for parse, value in ((boolean, "true"), (integer(1), "7"), (number(0), "1.5")):
        refusal(parse, value)
    # A hook method is called from Python: a string is a mistake there, and so it is in an operator's
    # literal argument; only a value that came from a template is text.
    with pytest.raises(SpecErrors, match="dry_run='yes' is not allowed: use true or false"):
        JetStreamHook.aensure_stream.arguments.check({"stream": {"name": "s"}, "dry_run": "yes"})
    with pytest.raises(SpecErrors, match=r"options.dry_run='yes' is not allowed: use true or false"):
        streams.JetStreamCreateStreamOperator(task_id="t", stream={"name": "s"}, options={"dry_run": "yes"})
    with pytest.raises(SpecErrors, match="purge='yes' is not allowed: use true or false"):
        kv.JetStreamKeyValueDeleteOperator(task_id="t", bucket="b", key="k", purge="yes")
    op = streams.JetStreamCreateStreamOperator(
        task_id="t", stream={"name": "s"}, options={"dry_run": "{{ params.dry }}"}
    )
    op.render_template_fields({"params": {"dry": "yes"}})
    assert op.checked_arguments()["options"].dry_run is True


def test_typed_options_are_checked_when_parsed_and_their_templates_once_rendered() -> None:
    with pytest.raises(SpecErrors, match=r"deliver_prefix='a b' is not allowed"):
        streams.JetStreamCreateMirrorOperator(task_id="m", stream="c", origin="o", options={"deliver_prefix": "a b"})
    # A field of the class or of a dict holding Jinja waits for rendering, as a templated argument does.
    for options in (
        streams.MirrorOptions(deliver_prefix="{{ params.p }}", dry_run=True),
        {"deliver_prefix": "{{ params.p }}", "dry_run": True},
    ):
        op = streams.JetStreamCreateMirrorOperator(
            task_id="m", stream="c", origin="o", origin_api_prefix="JS.acc@hub.API", options=options
        )
        op.render_template_fields({"params": {"p": "deliver.acc.c"}})
        checked = op.checked_arguments()
        assert checked["options"].dry_run is True
        assert checked["spec"].values["mirror"]["external"] == {"api": "JS.acc@hub.API", "deliver": "deliver.acc.c"}
    op = streams.JetStreamCreateMirrorOperator(
        task_id="m", stream="c", origin="o", options={"deliver_prefix": "{{ p }}"}
    )
    op.render_template_fields({"p": "a b"})
    with pytest.raises(SpecErrors, match=r"deliver_prefix='a b' is not allowed"):
        op.checked_arguments()


# -- every public argument is declared ------------------------------------------------------------

OPERATORS = [
    streams.JetStreamCreateStreamOperator,
    streams.JetStreamCreateMirrorOperator,
    streams.JetStreamCreateSourcedStreamOperator,
    streams.JetStreamDeleteStreamOperator,
    streams.JetStreamPurgeStreamOperator,
    consumers.JetStreamCreateConsumerOperator,
    consumers.JetStreamDeleteConsumerOperator,
    kv.JetStreamCreateKeyValueOperator,
    kv.JetStreamKeyValuePutOperator,
    kv.JetStreamKeyValueDeleteOperator,
    publish.JetStreamPublishOperator,
    spark.JetStreamSparkSubmitOperator,
    JetStreamConsumerLagSensor,
    JetStreamKeyValueSensor,
    JetStreamReplicationLagSensor,
    JetStreamRetentionHeadroomSensor,
]
TRIGGERS = [
    JetStreamConsumerLagTrigger,
    JetStreamReplicationLagTrigger,
    JetStreamKeyValueTrigger,
    JetStreamMessageTrigger,
    JetStreamKeyValueEventTrigger,
]


def own_parameters(cls: type) -> dict[str, inspect.Parameter]:
    """The parameters of the ``__init__`` of ``cls`` and of its bases in this package (not Airflow's own)."""
    found: dict[str, inspect.Parameter] = {}
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None or not klass.__module__.startswith("airflow_provider_jetstream."):
            continue
        for name, parameter in inspect.signature(init).parameters.items():
            if name != "self" and parameter.kind not in (parameter.VAR_KEYWORD, parameter.VAR_POSITIONAL):
                found.setdefault(name, parameter)
    return found


def assert_defaults_agree(signature: Args, parameters: dict[str, inspect.Parameter], where: str) -> None:
    """A layer's own default means what the declaration's default means (both checked)."""
    for name, parameter in parameters.items():
        if parameter.default is inspect.Parameter.empty or signature.args[name].default is REQUIRED:
            continue
        arg = signature.args[name]
        theirs = arg.value(parameter.default, name, given=parameter.default is not arg.default, text=True)
        assert theirs == arg.default_value(name), (where, name)


@pytest.mark.parametrize("cls", OPERATORS, ids=lambda c: c.__name__)
def test_every_operator_and_sensor_argument_is_declared(cls: type) -> None:
    parameters = own_parameters(cls)
    assert set(parameters) == set(cls.arguments.args)
    # Declared templated exactly where the class renders it (besides what its Airflow base renders).
    airflow_base = next(k for k in cls.__mro__ if not k.__module__.startswith("airflow_provider_jetstream."))
    theirs = set(getattr(airflow_base, "template_fields", ()))
    assert set(cls.template_fields) - theirs == set(cls.arguments.template_fields()) - theirs
    assert_defaults_agree(cls.arguments, parameters, cls.__name__)


def hook_methods() -> list[tuple[str, Any]]:
    return [
        (name, method)
        for name, method in inspect.getmembers(JetStreamHook, inspect.isfunction)
        if name.startswith("a")
        and method.__module__.startswith("airflow_provider_jetstream.")
        and len(inspect.signature(method).parameters) > 1
    ]


def test_the_hook_methods_are_found() -> None:
    names = {name for name, _ in hook_methods()}
    assert {"apublish", "apurge_stream", "aensure_stream", "akv_put", "aconsumer_lag", "aapi"} <= names


@pytest.mark.parametrize(("name", "method"), hook_methods(), ids=[name for name, _ in hook_methods()])
def test_every_hook_method_argument_is_declared(name: str, method: Any) -> None:
    parameters = {n: p for n, p in inspect.signature(method).parameters.items() if n != "self"}
    assert set(parameters) == set(method.arguments.args), name
    assert_defaults_agree(method.arguments, parameters, name)


@pytest.mark.parametrize("cls", TRIGGERS, ids=lambda c: c.__name__)
def test_every_trigger_argument_is_declared(cls: type) -> None:
    parameters = {n: p for n, p in inspect.signature(cls.__init__).parameters.items() if n != "self"}
    assert set(parameters) == set(cls.arguments.args)
    assert_defaults_agree(cls.arguments, parameters, cls.__name__)


def test_a_sensor_and_its_trigger_share_the_declarations() -> None:
    assert (
        JetStreamConsumerLagSensor.arguments.args["max_unprocessed"]
        is JetStreamConsumerLagTrigger.arguments.args["max_unprocessed"]
    )
    assert JetStreamHook.aconsumer_lag.arguments.args["stream"] is JetStreamConsumerLagSensor.arguments.args["stream"]
    assert KV_EVENT_SETTINGS.args["ack_wait"] is MESSAGE_SETTINGS.args["ack_wait"]


# -- the Airflow binding: literal values when parsed, the rest once rendered -----------------------


def test_literal_values_are_checked_when_parsed_templated_ones_once_rendered() -> None:
    op = streams.JetStreamPurgeStreamOperator(task_id="p", stream="s", keep="{{ params.keep }}")
    op.render_template_fields({"params": {"keep": -1}})
    assert op.keep == "-1"  # rendering does not raise: the UI shows the refused value
    with pytest.raises(SpecErrors, match=re.escape(REFUSED["purge_negative_keep"])):
        op.checked_arguments()
    with pytest.raises(SpecErrors, match=re.escape(REFUSED["purge_negative_keep"])):
        op.execute({})  # before any hook or connection
    op.keep = "2"  # assigning an argument checks it again
    assert op.checked_arguments()["keep"] == 2


def test_checked_values_are_what_execute_passes_on() -> None:
    op = kv.JetStreamKeyValueDeleteOperator(task_id="d", bucket="b", key="k", purge="{{ params.p }}")
    op.render_template_fields({"params": {"p": "true"}})
    args = op.checked_arguments()
    assert args["purge"] is True and args["request_timeout"] is None and args["domain"] is None


@pytest.mark.usefixtures("airflow_db")
def test_a_rendered_refusal_fails_the_task_at_once_before_any_request(
    quiet_conn: str,
    quiet_server: QuietServer,
) -> None:
    before = quiet_server.traffic()
    run = rendered_dag.test(run_conf={"conn_id": quiet_conn})
    assert run.state == "failed"
    for task_id in REFUSED:
        ti = run.get_task_instance(task_id)
        assert (ti.state, ti.try_number) == ("failed", 1), task_id  # a refusal: no retries spent
    assert quiet_server.traffic() == before  # no connection, no message


# -- generated inputs ------------------------------------------------------------------------------

if given is not None:
    ANY_VALUE = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=True),
        st.text(max_size=20),
        st.lists(st.text(max_size=5), max_size=3),
        st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
    )

    @needs_hypothesis
    @given(st.integers(), st.integers(-5, 5), st.integers(-5, 5))
    def test_integers_in_any_form_within_bounds(n: int, low: int, span: int) -> None:
        high = low + abs(span)
        parse = integer(low, high)
        inside = low <= n <= high
        for value, options in ((n, {}), (str(n), {"text": True}), (f" {n} ", {"text": True})):
            if inside:
                assert parse(value, "n", **options) == n
            else:
                assert FORMAT.match(str(refusal(parse, value, "n", **options)))
        refusal(parse, str(n))  # text only where the value may be text

    @needs_hypothesis
    @given(st.sampled_from(sorted(BOOLEAN_TEXTS)), st.booleans(), st.text(" ", max_size=2))
    def test_boolean_spellings(spelling: str, upper: bool, pad: str) -> None:
        value = pad + (spelling.upper() if upper else spelling) + pad
        assert boolean(value, "b", text=True) is BOOLEAN_TEXTS[spelling]
        refusal(boolean, value)

    @needs_hypothesis
    @given(st.text(max_size=300))
    def test_a_name_parses_exactly_when_the_server_would_take_it(value: str) -> None:
        if is_name(value):
            assert stream_name(value, "name") == value
        else:
            assert FORMAT.match(str(refusal(stream_name, value, "name")))

    @needs_hypothesis
    @given(st.integers(0, 10**6))
    def test_durations_in_seconds(n: int) -> None:
        assert duration_seconds(f"{n}s", "d") == n == duration_seconds(n, "d") == duration_seconds(str(n), "d")

    @needs_hypothesis
    @settings(max_examples=200)
    @given(st.dictionaries(st.sampled_from(sorted(PURGE.args)), ANY_VALUE, max_size=4), st.booleans())
    def test_any_values_are_checked_or_refused_in_the_one_form(values: dict[str, Any], text_forms: bool) -> None:
        signature = PURGE + REQUEST
        try:
            checked = signature.check(values, text=text_forms)
        except SpecErrors as err:
            for error in err.errors:
                assert FORMAT.match(str(error)) or " were both given: " in str(error), str(error)
        else:
            assert set(checked) == set(signature.args)
            assert checked == signature.check(checked, text=text_forms)  # checked values pass again unchanged


# -- a list of stream names (the Spark source's ``stream``) ---------------------------------------


@needs_hypothesis
def test_a_stream_list_reads_back_the_names_and_refuses_empty_or_repeated_ones() -> None:
    from airflow_provider_jetstream.core.arguments.names import is_name, stream_names_text

    name = st.text(st.characters(codec="ascii", exclude_characters=" \t\n\r\x0b\x0c.*>/\\,"), min_size=1, max_size=12)
    spaces = st.text(" ", max_size=2)

    @settings(max_examples=200, deadline=None)
    @given(names=st.lists(name.filter(is_name), min_size=1, max_size=5), pad=spaces, hole=st.integers(0, 5))
    def check(names: list[str], pad: str, hole: int) -> None:
        text = ",".join(f"{pad}{n}{pad}" for n in names)
        if len(set(names)) == len(names):
            assert stream_names_text(text, "stream") == tuple(names)
        else:
            assert "is named twice" in str(refusal(stream_names_text, text, "stream"))
        gapped = [*names[:hole], pad, *names[hole:]]  # an empty name somewhere (a leading or trailing comma too)
        err = refusal(stream_names_text, ",".join(gapped), "stream")
        assert FORMAT.match(str(err)) and "an empty name is not one" in str(err)

    check()
