"""Generated inputs for every public entry point: the entry points, attack values, and one verdict per call.

An :class:`Entry` is an operator, sensor, hook method, trigger, connection or Spark option set; its
arguments come from its ``arguments`` signature (spec arguments add their spec's fields, ``stream.max_age``),
so a new argument is covered without editing this file. :func:`attempt` makes one call with one argument
replaced by a generated value (as given, or as a template rendering to it) against a
:class:`~tests.support.fuzzworld.FuzzWorld`, and returns what went wrong, in words (empty: nothing):
a raw exception, a hang, a refusal that does not name the argument, a change outside what was asked.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import json
import math
import os
import pkgutil
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_jetstream.core.errors import JetStreamConfigError, JetStreamError
from tests.support.fuzzworld import (
    OBJECT_DESTINATION,
    OBJECT_SOURCE,
    TARGET,
    FuzzWorld,
    changes,
    reserved_subjects,
    streams_listening,
)

#: Seconds any one call may take (its requests wait 2 s at most when their arguments are the baseline's).
BOUND = 20.0
CONN_ID = "fz_conn"
FUZZ_CONN_ID = "fz_fuzzed"

# -- attack values ----------------------------------------------------------------------------------

RESERVED = [
    "$JS.API.>",
    "$JS.hub.API.STREAM.DELETE.x",
    "JS.acc@hub.API.CONSUMER.CREATE.x",
    "$SYS.>",
    "_INBOX.>",
    "$JSC.>",
    "$KV.b.k",
]
WILDCARDS = ["*", ">", "a.*", "a.>", "leaf.fz.>", "leaf.fz.target.>", "a..b", ".a", "a."]
NUMBERS: list[Any] = [
    math.nan,
    math.inf,
    -math.inf,
    1e30,
    -1e30,
    2**64,
    -(2**64),
    2**63,
    -1,
    0,
    0.5,
    1.5,
    -0.5,
]
TEXTS = [
    "",
    " ",
    "\t",
    "\n",
    "None",
    "nan",
    "inf",
    "-1",
    "0",
    "1e30",
    "18446744073709551616",
    "9999999999h",
    "-5s",
    "true",
    "ü",
    "名前",
    "\u200b",
    "\x00",
    "a\x00b",
    "\x7f",
    "a b",
    "a\nb",
    "a" * 100_000,
    "hub",
    "leaf",
    "fz_other",
]
OTHERS: list[Any] = [None, True, False, [], {}, [""], ["a"], [None], {"a": 1}, b"bytes"]
#: Every fixed attack, tried before generated ones (see the test module's strategy).
FIXED: list[Any] = [*TEXTS, *NUMBERS, *OTHERS, *RESERVED, *WILDCARDS]

#: How a value reaches the entry point: as given, or as a template (``{{ params.v }}``) that renders to it
#: (text rendering, and Airflow's native rendering: ``render_template_as_native_obj=True``).
LITERAL, RENDERED, NATIVE = "literal", "rendered", "native"


def show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:40]}...<{len(text)} chars>"


# -- entry points -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """One public entry point: how to call it with its baseline values and one argument replaced."""

    kind: str
    name: str
    target: Any
    args: tuple[str, ...]
    templated: frozenset[str] = frozenset()
    baseline: Mapping[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        return self.name


def _spec_structs() -> dict[int, Any]:
    from airflow_provider_jetstream.core.manage.specs.consumer import CONSUMER
    from airflow_provider_jetstream.core.manage.specs.kv import KV
    from airflow_provider_jetstream.core.manage.specs.stream import STREAM
    from airflow_provider_jetstream.core.signatures.operations import BUCKET_SPEC, CONSUMER_SPEC, STREAM_SPEC

    return {id(STREAM_SPEC): STREAM, id(CONSUMER_SPEC): CONSUMER, id(BUCKET_SPEC): KV}


def _fuzzed_args(signature: Any) -> tuple[str, ...]:
    """The signature's arguments, for a spec argument each field of its spec (``stream.max_age``), and for
    typed options each of their fields (``options.max_in_flight``)."""
    structs = _spec_structs()
    names: list[str] = []
    for name, arg in signature.args.items():
        names.append(name)
        struct = structs.get(id(arg))
        if struct is not None:
            names += [f"{name}.{f.name}" for f in struct.fields if f.name not in ("name", "bucket")]
        options = getattr(arg.parse, "options_class", None)
        if options is not None:
            names += [f"{name}.{field}" for field in options.arguments.args]
    return tuple(names)


def _classes(package: str, base: type) -> list[type]:
    found: dict[str, type] = {}
    pkg = importlib.import_module(package)
    for info in pkgutil.iter_modules(pkg.__path__):
        module = importlib.import_module(f"{package}.{info.name}")
        for name, cls in vars(module).items():
            if (
                isinstance(cls, type)
                and issubclass(cls, base)
                and cls.__module__ == module.__name__
                and not name.startswith("_")
                and not inspect.isabstract(cls)
                and "arguments" in {k for c in cls.__mro__ for k in vars(c)}
            ):
                found[name] = cls
    return [found[n] for n in sorted(found)]


def entries() -> list[Entry]:
    """Every public entry point, from its declarations."""
    from airflow.sdk import BaseOperator
    from airflow.triggers.base import BaseTrigger

    from airflow_provider_jetstream.core.connection.fields import EXTRA_FIELDS
    from airflow_provider_jetstream.hooks.jetstream import JetStreamHook
    from airflow_provider_jetstream.sensors.base import BaseJetStreamSensor
    from airflow_provider_jetstream.spark.job_args import COMMAND_LINE
    from airflow_provider_jetstream.spark.options import READ, READ_STREAM, WRITE
    from airflow_provider_jetstream.utils.arguments import CheckedArguments

    out: list[Entry] = []
    for cls in _classes("airflow_provider_jetstream.operators", CheckedArguments):
        if cls.execute is BaseOperator.execute:
            continue  # a base class of operators (JetStreamBaseOperator, ReconcileOperator): nothing to run
        out.append(Entry("operator", cls.__name__, cls, _fuzzed_args(cls.arguments), frozenset(cls.template_fields)))
    for cls in _classes("airflow_provider_jetstream.sensors", BaseJetStreamSensor):
        out.append(Entry("sensor", cls.__name__, cls, _fuzzed_args(cls.arguments), frozenset(cls.template_fields)))
    from airflow_provider_jetstream.core.signatures.operations import HOOK

    out.append(Entry("hook", "JetStreamHook()", JetStreamHook, tuple(HOOK.args)))
    for name, member in sorted(inspect.getmembers(JetStreamHook)):
        signature = getattr(member, "arguments", None)
        if signature is not None and name.startswith("a"):
            out.append(Entry("hook", f"JetStreamHook.{name}", name, _fuzzed_args(signature)))
    for cls in _classes("airflow_provider_jetstream.triggers", BaseTrigger):
        out.append(Entry("trigger", cls.__name__, cls, tuple(cls.arguments.args)))
    out.append(
        Entry(
            "connection", "jetstream connection", None, ("host", "port", "login", "password", "schema", *EXTRA_FIELDS)
        )
    )
    for name, signature in (("spark read", READ), ("spark readStream", READ_STREAM), ("spark write", WRITE)):
        out.append(Entry("spark", name, signature, tuple(signature.args)))
    out.append(Entry("job", "stream_to_parquet command line", COMMAND_LINE, tuple(COMMAND_LINE.args)))
    return out


# -- baselines: valid values that act on the seeded objects of the leaf -----------------------------

#: The await-message and consume entries' function: every message matches.
MATCH_ANY = "tests.support.matchers.sequence_of"

OPERATOR_BASE: dict[str, dict[str, Any]] = {
    "JetStreamCreateStreamOperator": {"stream": {"name": "fz_new", "subjects": ["leaf.fz.new.>"]}},
    "JetStreamCreateMirrorOperator": {"stream": "fz_newmirror", "origin": "fz_origin", "origin_domain": TARGET},
    "JetStreamCreateSourcedStreamOperator": {"stream": "fz_newsourced", "sources": [{"name": "fz_origin"}]},
    "JetStreamDeleteStreamOperator": {"stream": "fz_doomed"},
    "JetStreamPurgeStreamOperator": {"stream": "fz_target", "subject": "leaf.fz.target.a"},
    "JetStreamCreateConsumerOperator": {"stream": "fz_target", "consumer": {"name": "fz_newdur"}},
    "JetStreamDeleteConsumerOperator": {"stream": "fz_target", "consumer": "fz_dur"},
    "JetStreamCreateKeyValueOperator": {"bucket": "fznewkv"},
    "JetStreamKeyValuePutOperator": {"bucket": "fzkv", "key": "k1", "value": "v9"},
    "JetStreamKeyValueDeleteOperator": {"bucket": "fzkv", "key": "k2"},
    "JetStreamCreateObjectStoreOperator": {"bucket": "fznewobj"},
    "JetStreamCreateDurableSourceOperator": {
        "stream": "fz_newdurcopy",
        "origin": {"name": "fz_newwq", "subjects": ["fzwq.>"]},
        "origin_domain": "hub",
    },
    "JetStreamPutObjectOperator": {"bucket": "fzobj", "object_name": "o2", "local_path": OBJECT_SOURCE},
    "JetStreamGetObjectOperator": {"bucket": "fzobj", "object_name": "o1", "local_path": OBJECT_DESTINATION},
    "JetStreamDeleteObjectOperator": {"bucket": "fzobj", "object_name": "o1"},
    "JetStreamPublishOperator": {"subject": "leaf.fz.target.p", "messages": ["m1", "m2"], "msg_id": "fz-{index}"},
    "JetStreamSparkSubmitOperator": {
        "stream": "fz_target",
        "output_path": "/tmp/fz-out",
        "checkpoint_bucket": "fzckpt",
    },
    "JetStreamConsumeOperator": {
        "stream": "fz_target",
        "consumer": "fz_dur",
        "apply_function": MATCH_ANY,
        "max_messages": 2,
        "max_wait": 1,
    },
    "JetStreamAwaitMessageSensor": {
        "stream": "fz_target",
        "apply_function": MATCH_ANY,
        "deliver_policy": "all",
        "max_wait": 1,
    },
    "JetStreamConsumerLagSensor": {
        "stream": "fz_target",
        "consumer": "fz_dur",
        "max_unprocessed": 100,
        "max_outstanding_acks": 100,
    },
    "JetStreamKeyValueSensor": {"bucket": "fzkv", "key": "k1"},
    "JetStreamObjectSensor": {"bucket": "fzobj", "object_name": "o1"},
    "JetStreamReplicationLagSensor": {"stream": "fz_copy", "options": {"max_inactive": "1h"}},
    "JetStreamRetentionHeadroomSensor": {
        "stream": "fz_copy",
        "options": {"max_inactive": "1h"},
        "min_time_to_loss": "1s",
    },
}
HOOK_BASE: dict[str, dict[str, Any]] = {
    "JetStreamHook()": {},
    "aapi": {},
    "ajetstream": {},
    "aaccount_info": {},
    "aensure_stream": {"stream": {"name": "fz_new", "subjects": ["leaf.fz.new.>"]}},
    "aensure_consumer": {"stream": "fz_target", "consumer": {"name": "fz_newdur"}},
    "aensure_key_value": {"bucket": {"bucket": "fznewkv"}},
    "astream_info": {"stream": "fz_target"},
    "adelete_stream": {"stream": "fz_doomed"},
    "apurge_stream": {"stream": "fz_target", "subject": "leaf.fz.target.a"},
    "adelete_consumer": {"stream": "fz_target", "consumer": "fz_dur"},
    "aconsumer_lag": {"stream": "fz_target", "consumer": "fz_dur"},
    "aevent_drift": {"stream": "fz_target", "consumer": "fz_dur", "stored_sequences": [1]},
    "areplication_status": {"stream": "fz_copy", "max_inactive": "1h"},
    "acheck_replication": {"watch": None},  # made per call (a ReplicationWatch)
    "aretention_headroom": {"stream": "fz_copy"},
    "akv_get": {"bucket": "fzkv", "key": "k1"},
    "acheck_key": {"bucket": "fzkv", "key": "k1"},
    "akv_put": {"bucket": "fzkv", "key": "k1", "value": "v9"},
    "akv_delete": {"bucket": "fzkv", "key": "k2"},
    "aensure_object_store": {"bucket": {"bucket": "fznewobj"}},
    "aensure_durable_source": {
        "stream": "fz_newdurcopy",
        "origin": {"name": "fz_newwq", "subjects": ["fzwq.>"]},
        "origin_domain": "hub",
    },
    "aput_object": {"bucket": "fzobj", "object_name": "o2", "local_path": OBJECT_SOURCE},
    "aget_object": {"bucket": "fzobj", "object_name": "o1", "local_path": OBJECT_DESTINATION},
    "aobject_info": {"bucket": "fzobj", "object_name": "o1"},
    "alist_objects": {"bucket": "fzobj"},
    "adelete_object": {"bucket": "fzobj", "object_name": "o1"},
    "acheck_object": {"bucket": "fzobj", "object_name": "o1"},
    "awatch_objects": {"bucket": "fzobj"},
    "apublish": {"subject": "leaf.fz.target.p", "messages": ["m1", "m2"], "msg_id": "fz-{index}"},
    "aprobe_domains": {"domains": [TARGET]},
    "afetch": {"stream": "fz_target", "consumer": "fz_dur", "batch_size": 2, "max_wait": 1},
    "aconsume": {"stream": "fz_target", "consumer": "fz_dur", "batch_size": 2, "max_wait": 1, "stop_when_empty": True},
}
#: Hook methods without a ``domain`` argument act where the hook does.
HOOK_WITHOUT_TARGET = ("aprobe_domains", "JetStreamHook()")
TRIGGER_BASE: dict[str, dict[str, Any]] = {
    "JetStreamConsumerLagTrigger": {
        "stream": "fz_target",
        "consumer": "fz_dur",
        "max_unprocessed": 100,
        "max_outstanding_acks": 100,
        "poll_interval": 1,
    },
    "JetStreamReplicationLagTrigger": {"stream": "fz_copy", "options": {"max_inactive": "1h"}, "poll_interval": 1},
    "JetStreamKeyValueTrigger": {"bucket": "fzkv", "key": "k1"},
    "JetStreamObjectTrigger": {"bucket": "fzobj", "object_name": "o1", "poll_interval": 1},
    "JetStreamMessageTrigger": {"stream": "fz_target", "consumer": "fz_evdur"},
    "JetStreamKeyValueEventTrigger": {"bucket": "fzkv", "consumer": "fz_kvdur"},
    "JetStreamAwaitMessageTrigger": {
        "stream": "fz_target",
        "apply_function": MATCH_ANY,
        "deliver_policy": "all",
        "max_wait": 1,
    },
}


def baseline(entry: Entry, world: FuzzWorld, arg: str = "") -> dict[str, Any]:
    """The entry point's valid values (every required argument), aimed at the leaf; without the partner
    an API prefix ``arg`` excludes. An object's ``local_path`` is a file of the world's directory."""
    base = _baseline(entry, world)
    if base.get("local_path") in (OBJECT_SOURCE, OBJECT_DESTINATION):
        base["local_path"] = str(world.workdir / base["local_path"])
    base.pop(PARTNERS.get(arg, ""), None)
    return base


def _baseline(entry: Entry, world: FuzzWorld) -> dict[str, Any]:
    if entry.kind in ("operator", "sensor"):
        base = dict(OPERATOR_BASE[entry.name])
        if entry.name != "JetStreamSparkSubmitOperator":
            base.update(jetstream_conn_id=CONN_ID, domain=TARGET, request_timeout=2)
        if entry.kind == "sensor":
            base.pop("request_timeout")
            base.update(poke_interval=1, timeout=5, mode="poke")
        if "request_timeout" not in entry.target.arguments.args:
            base.pop("request_timeout", None)
        return base
    if entry.kind == "hook":
        from airflow_provider_jetstream.hooks.jetstream import JetStreamHook

        method = entry.target if isinstance(entry.target, str) else "JetStreamHook()"
        base = dict(HOOK_BASE[method])
        if method not in HOOK_WITHOUT_TARGET:
            base["domain"] = TARGET
        if method == "JetStreamHook()":
            base.update(jetstream_conn_id=CONN_ID, domain=TARGET)
        if method != "JetStreamHook()" and "request_timeout" in getattr(JetStreamHook, method).arguments.args:
            base["request_timeout"] = 2
        return base
    if entry.kind == "trigger":
        return {**TRIGGER_BASE[entry.name], "jetstream_conn_id": CONN_ID, "domain": TARGET}
    if entry.kind == "connection":
        host, port = world.hub_address.split(":")
        return {"host": host, "port": int(port), "login": "acc", "password": "acc", "connect_timeout": 2}
    if entry.kind == "spark":
        base = {"servers": f"nats://{world.hub_address}", "user": "acc", "password": "acc", "domain": TARGET}
        if entry.name == "spark write":
            return {**base, "subject": "leaf.fz.target.s"}
        return {**base, "stream": "fz_target"}
    if entry.kind == "job":
        return {"--stream": "fz_target", "--output-path": "/tmp/fz-out", "--checkpoint-bucket": "fzckpt"}
    raise AssertionError(entry)


def with_value(base: dict[str, Any], arg: str, value: Any) -> dict[str, Any]:
    """``base`` with ``arg`` (``stream.max_age``: a field of the spec ``stream``) set to ``value``."""
    out = dict(base)
    if "." in arg:
        top, sub = arg.split(".", 1)
        spec = out.get(top)
        spec = dict(spec) if isinstance(spec, Mapping) else {"name": spec} if isinstance(spec, str) else {}
        if top == "bucket" or (top == "spec" and "bucket" in spec):
            spec.setdefault("bucket", spec.pop("name", "fznewkv"))
        spec[sub] = value
        out[top] = spec
    else:
        out[arg] = value
    return out


# -- calls ------------------------------------------------------------------------------------------


def _render(op: Any, value: Any, mode: str) -> None:
    """Render as the task runner does: text, or native objects (``render_template_as_native_obj=True``)."""
    op.render_template_as_native_obj = mode == NATIVE
    op.render_template_fields({"params": {"v": value}})


def _call_operator(entry: Entry, kw: dict[str, Any], arg: str, value: Any, mode: str) -> Any:
    given = with_value(kw, arg, "{{ params.v }}" if mode != LITERAL else value)
    op = entry.target(task_id="fz", **given)
    _render(op, value, mode)
    if entry.kind == "sensor":
        return op.poke({})
    if entry.name == "JetStreamSparkSubmitOperator":
        from airflow_provider_jetstream.spark.job_args import job_command_line
        from airflow_provider_jetstream.spark.jobs.stream_to_parquet import parse_args

        op.checked_arguments()
        if op._packaged:
            return parse_args(job_command_line(op.checked_arguments()))
        return None
    return op.execute({})


def _call_hook(entry: Entry, kw: dict[str, Any], world: FuzzWorld) -> Any:
    from airflow_provider_jetstream.core.signatures.operations import REPLICATION, replication_watch
    from airflow_provider_jetstream.hooks.jetstream import JetStreamHook

    if entry.name == "JetStreamHook()":
        return JetStreamHook(**kw).stream_info("fz_target", request_timeout=2)
    hook = JetStreamHook(CONN_ID)
    method = entry.target
    if method == "acheck_replication" and kw.get("watch") is None and "watch" in kw:
        kw["watch"] = replication_watch(REPLICATION.check({"stream": "fz_copy", "max_inactive": "1h"}))
    if method in ("awatch_objects", "aconsume"):

        async def first_change() -> Any:
            changes = getattr(hook, method)(**kw)
            try:
                return await asyncio.wait_for(anext(changes), 5)
            except TimeoutError:
                return None  # nothing after the revision asked: the watch waits, as asked
            finally:
                await changes.aclose()

        return asyncio.run(first_change())
    if method == "aapi":

        async def use_api() -> Any:
            async with hook.aapi(**kw) as api:
                return await api.account_info()

        return asyncio.run(use_api())
    if method == "ajetstream":

        async def use_context() -> Any:
            async with hook.ajetstream(**kw) as js:
                return await js.account_info()

        return asyncio.run(use_context())
    if method == "aaccount_info":

        async def with_nc() -> Any:
            async with hook.aconnect() as nc:
                return await hook.aaccount_info(**{"nc": nc, **kw})

        return asyncio.run(with_nc())
    sync = getattr(hook, method[1:], None)
    if callable(sync) and not inspect.iscoroutinefunction(sync):
        return sync(**kw)
    return asyncio.run(getattr(hook, method)(**kw))


def _call_trigger(entry: Entry, kw: dict[str, Any]) -> Any:
    from airflow_provider_jetstream.hooks.jetstream import JetStreamHook
    from airflow_provider_jetstream.triggers.base import JetStreamWaitTrigger

    trigger = entry.target(**kw)
    _, kwargs = trigger.serialize()
    rebuilt = entry.target(**kwargs)  # what the triggerer does with the serialized kwargs
    if isinstance(trigger, JetStreamWaitTrigger):

        async def one_step() -> Any:
            hook = rebuilt.new_hook()
            return await rebuilt.step(hook)

        return asyncio.run(one_step())
    # An event trigger's consumer, created as its producer creates it on start.
    message = rebuilt.kwargs
    hook = JetStreamHook(message["jetstream_conn_id"], domain=message["domain"], api_prefix=message["api_prefix"])
    return hook.ensure_consumer(message["stream"], rebuilt.spec, request_timeout=2)


def _call_connection(kw: dict[str, Any]) -> Any:
    from airflow_provider_jetstream.hooks.jetstream import JetStreamHook

    top = {"conn_type": "jetstream"}
    extra = {}
    for name, value in kw.items():
        if name in ("host", "port", "login", "password", "schema"):
            top[name] = value
        else:
            extra[name] = value
    top["extra"] = extra
    try:
        text = json.dumps(top)
    except TypeError:
        return None  # bytes cannot be a connection field: nothing to try
    os.environ[f"AIRFLOW_CONN_{FUZZ_CONN_ID.upper()}"] = text
    hook = JetStreamHook(FUZZ_CONN_ID, domain=TARGET)
    _servers_as_given(hook.get_conn_config().servers, kw.get("port"))
    return hook.stream_info("fz_target", request_timeout=2)


class NotAsked(Exception):
    """A value was accepted, but what the call uses is not what was given."""


def _servers_as_given(servers: list[str], port: Any) -> None:
    """Each server URL has a valid port, the connection's ``port`` when one is given."""
    from urllib.parse import urlsplit

    for url in servers:
        try:
            used = urlsplit(url).port
        except ValueError as err:
            raise NotAsked(f"the connection uses the server {url!r} ({err})") from None
        if port not in (None, "") and str(used) != str(port).strip():
            raise NotAsked(f"port={port!r} was accepted, but the connection uses {url!r}")


def _spark_text(value: Any) -> Any:
    """What Spark hands a data source for ``.option(name, value)``: text (booleans lower-case)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _call_spark(entry: Entry, kw: dict[str, Any]) -> Any:
    from airflow_provider_jetstream.spark.options import ReadOptions, WriteOptions

    options = {name: _spark_text(value) for name, value in kw.items()}
    options = {k: v for k, v in options.items() if v is not None}
    if entry.name == "spark write":
        return WriteOptions.parse(options, ["data", "subject", "headers"])
    return ReadOptions.parse(options, streaming=entry.name == "spark readStream")


def _call_job(kw: dict[str, Any]) -> Any:
    from airflow_provider_jetstream.spark.jobs.stream_to_parquet import parse_args

    argv: list[str] = []
    for flag, value in kw.items():
        if value is not None:
            argv += [flag, _spark_text(value)]
    return parse_args(argv)


#: An API prefix excludes a domain: the baseline's domain is left out when its partner is generated.
PARTNERS = {
    "api_prefix": "domain",
    "origin_api_prefix": "origin_domain",
    "apiPrefix": "domain",
    "--api-prefix": "--domain",
}


def call(entry: Entry, world: FuzzWorld, arg: str, value: Any, mode: str) -> Any:
    """Call ``entry`` with its baseline values, ``arg`` replaced by ``value`` (reaching it as ``mode`` says)."""
    base = baseline(entry, world, arg)
    if entry.kind in ("operator", "sensor"):
        return _call_operator(entry, base, arg, value, mode)
    kw = with_value(base, arg, value)
    if entry.kind == "hook":
        return _call_hook(entry, kw, world)
    if entry.kind == "trigger":
        return _call_trigger(entry, kw)
    if entry.kind == "connection":
        return _call_connection(kw)
    if entry.kind == "spark":
        return _call_spark(entry, kw)
    return _call_job(kw)


# -- one verdict ------------------------------------------------------------------------------------


@dataclass
class Result:
    value: Any = None
    error: BaseException | None = None
    hung: bool = False
    #: The thread the call ran in (still alive when it hung).
    thread: threading.Thread | None = None


def bounded(fn: Callable[[], Any], seconds: float = BOUND) -> Result:
    """Run ``fn`` in a thread; a call still running after ``seconds`` is reported as hung (left behind)."""
    result = Result()

    def run() -> None:
        try:
            result.value = fn()
        except BaseException as err:  # every outcome is judged
            result.error = err

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    result.hung = thread.is_alive()
    result.thread = thread
    return result


def jetstream_error_in(err: BaseException) -> BaseException | None:
    """The provider's error behind ``err`` (itself, or what an Airflow failure was raised from)."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, JetStreamError):
            return err
        err = err.__cause__ or err.__context__
    return None


def _is_airflow_outcome(err: BaseException) -> bool:
    """Airflow's own outcomes: a failed or skipped task, a connection id that is not defined."""
    from airflow_provider_jetstream.compat import AirflowFailException, AirflowNotFoundException, AirflowSkipException

    return isinstance(err, (AirflowFailException, AirflowSkipException, AirflowNotFoundException))


def names_field(message: str, arg: str, entry: Entry) -> bool:
    """Whether a refusal's message names the argument."""
    names = {arg, arg.rsplit(".", 1)[-1]}
    if entry.kind == "job":
        names.add(arg.lstrip("-").replace("-", "_"))
    if entry.kind == "connection" and arg == "host":
        names.add("server")
    spaced = re.sub(r"(?<=[a-z])(?=[A-Z])", " ", arg).replace("_", " ")
    names.add(spaced)  # "the account's JetStream API prefix 'x'" (api_prefix, apiPrefix)
    return any(n.lower() in message.lower() for n in names)


def _bad_numbers(value: Any, path: str = "") -> list[str]:
    """Non-finite numbers and integers outside int64 in checked values (what would reach a server or job)."""
    found = []
    if isinstance(value, bool):
        return found
    non_finite = isinstance(value, float) and not math.isfinite(value)
    if non_finite or (isinstance(value, int) and not -(2**63) <= value < 2**63):
        found.append(f"{path or 'value'}={value!r}")
    elif isinstance(value, Mapping):
        for k, v in value.items():
            found += _bad_numbers(v, f"{path}.{k}" if path else str(k))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            found += _bad_numbers(v, f"{path}[{i}]")
    return found


def _domains_asked(entry: Entry, arg: str, value: Any, mode: str, kw: dict[str, Any]) -> set[str]:
    """The domains a call may act in: the baseline's (its ``domain`` and any other ``*_domain``), one named
    by the argument, the connection's own when the argument is not given at all (None as given)."""
    domains = {TARGET}
    if entry.name in HOOK_WITHOUT_TARGET and entry.name != "JetStreamHook()":
        domains.add("hub")
    text = value if isinstance(value, str) else None
    if arg.endswith(("domain", "Domain")) and text and text.strip() == text:
        domains.add(text)
    if arg.endswith(("api_prefix", "apiPrefix")) and text:
        m = re.fullmatch(r"\$JS\.([^.]+)\.API", text)
        if m:
            domains.add(m.group(1))
        elif text == "$JS.API":
            domains.add("hub")
    if arg in ("domain", "api_prefix") and value is None and mode == LITERAL:
        domains.add("hub")  # not given: the connection's own (the hub)
    if arg in PARTNERS and value in (None, "", "None"):
        domains.add("hub")  # neither a domain nor an API prefix: the connection's own
    # A second domain the baseline names (a durable source's origin_domain).
    domains.update(v for k, v in kw.items() if k != arg and k.endswith("_domain") and isinstance(v, str))
    return domains


def _names_asked(kw: Mapping[str, Any], value: Any) -> set[str]:
    """Every name the call's values hold (any of them may name a stream, a bucket's stream KV_<name> or
    OBJ_<name>)."""
    names: set[str] = set()

    def walk(v: Any) -> None:
        if not isinstance(v, (str, Mapping, list, tuple)):
            v = str(v)  # as a template renders it
        if isinstance(v, str) and len(v) < 300:
            names.update({v, f"KV_{v}", f"OBJ_{v}"})
        elif isinstance(v, Mapping):
            for item in v.values():
                walk(item)
        elif isinstance(v, (list, tuple)):
            for item in v:
                walk(item)

    walk(dict(kw))
    walk(value)
    walk(str(value))  # what a text template renders it to
    return names


def _subjects_asked(kw: Mapping[str, Any], value: Any) -> list[str]:
    subjects = [v for v in (kw.get("subject"), value) if isinstance(v, str) and v and len(v) < 300]
    return subjects


def attempt(entry: Entry, world: FuzzWorld, arg: str, value: Any, mode: str) -> list[str]:
    """One call; what went wrong (empty: it was refused naming the argument before any request, or it
    changed only what it was asked to)."""
    before = world.current
    traffic = world.traffic()
    result = bounded(lambda: call(entry, world, arg, value, mode))
    contacted = world.traffic() != traffic
    problems: list[str] = []
    if result.hung:
        problems.append(f"hang: still running after {BOUND:.0f} s")
    err = result.error
    if isinstance(err, NotAsked):
        problems.append(str(err))
    elif err is not None:
        core = jetstream_error_in(err)
        if core is None and not _is_airflow_outcome(err) and not (entry.kind == "job" and isinstance(err, SystemExit)):
            problems.append(f"raw {type(err).__name__}: {show(str(err))}")
        elif isinstance(core, JetStreamConfigError) and not contacted and not names_field(str(err), arg, entry):
            problems.append(f"refused without naming {arg!r}: {show(str(err))}")
    if err is None and not result.hung and entry.kind in ("spark", "job"):
        bad = _bad_numbers(getattr(result.value, "__dict__", {}))
        if bad:
            problems.append(f"accepted out-of-range numbers: {', '.join(bad)}")
    if contacted or result.hung:
        if result.hung and result.thread is not None:
            result.thread.join(BOUND)  # what the hung call goes on doing is seen too, once it ends
        after = world.snapshot()
        kw = with_value(baseline(entry, world, arg), arg, value)
        domains = _domains_asked(entry, arg, value, mode, kw)
        names = _names_asked(kw, value)
        for domain in domains:
            names |= streams_listening(before, domain, _subjects_asked(kw, value))
        for key, what in changes(before, after):
            domain, stream = key[1], key[2]
            if domain not in domains or stream not in names:
                problems.append(f"changed {'/'.join(key[1:])} ({what}), which it was not asked to")
        for key, state in after.items():
            if key[0] == "stream":
                bad = reserved_subjects(key[2], state.get("config") or {})
                if bad:
                    problems.append(f"{key[1]}/{key[2]} listens on reserved subjects {bad}")
        if not world.linked():
            problems.append("broke the hub-leaf link: the leaf's JetStream no longer answers through the hub")
        world.reset(after)
    return problems


def describe(entry: Entry, arg: str, value: Any, mode: str, problems: list[str]) -> str:
    how = "" if mode == LITERAL else f" (a template rendering to it, {mode})"
    return f"{entry.kind} {entry.name}: {arg}={show(value)}{how}: " + "; ".join(problems)
