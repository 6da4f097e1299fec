"""The names the public surfaces no longer take, once: each one refused, naming what replaced it.

The vocabulary (docs/glossary.md) names each concept once; the names it replaced are :data:`RETIRED`.
Every surface that checks its arguments with an :class:`~airflow_provider_jetstream.core.arguments.Args`
(hook methods, operators and sensors when the DAG is parsed, triggers, the Spark options, the packaged
job's flags) refuses a retired name it is given with ``old=value is not allowed: renamed <new>`` (or:
``removed: <why>``), through :meth:`Args.refuse_retired
<airflow_provider_jetstream.core.arguments.Args.refuse_retired>`. A name an operator took at the top and
now takes in its typed options is refused too (``moved into options=...``): that follows from the options
class, not from this table.

Where a retired name still names something else elsewhere (``sources``: a stream's sources, but no longer
the origins a replication check judges), its entry says where it was retired (:attr:`Retired.where`);
elsewhere an entry applies wherever its replacement is taken. The Spark options use the same table in
camelCase (``startingSequence`` -> ``startSeq``), the packaged job's flags in kebab-case
(``--filter-subject`` -> ``--filter-subjects``). The CHANGELOG's old -> new table and the glossary's
"Retired names" agree with it (``tests/test_glossary.py``).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from airflow_provider_jetstream.core.errors import SpecError

#: The forms a name takes: Python's (``start_seq``), Spark's option (``startSeq``), a command-line flag
#: (``--start-seq``).
SNAKE, CAMEL, FLAG = "snake", "camel", "flag"


def camel(name: str) -> str:
    """A snake_case name as Spark's camelCase option (``start_seq`` -> ``startSeq``)."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def flag(name: str) -> str:
    """A snake_case name as a command-line flag (``start_seq`` -> ``--start-seq``)."""
    return "--" + name.replace("_", "-")


def snake(name: str) -> str:
    """A camelCase option or a ``--kebab-case`` flag as the snake_case name it spells (``startSeq``,
    ``--start-seq`` -> ``start_seq``)."""
    if name.startswith("--"):
        return name[2:].replace("-", "_")
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


def spelled(name: str, form: str) -> str:
    """``name`` (snake_case) in ``form``."""
    return camel(name) if form == CAMEL else flag(name) if form == FLAG else name


@dataclass(frozen=True)
class Retired:
    """One retired name: what it named, what replaced it, and where it was taken.

    :param old: the retired name (snake_case; its camelCase and flag forms are retired with it).
    :param new: the name that replaced it, or None: removed (``why`` says why).
    :param meaning: what it named, in words (the glossary's and the CHANGELOG's "old" column).
    :param why: for a removal, why; for a rename, what changed besides the name (or nothing).
    :param where: the surfaces it was retired on, as patterns of their names (a hook method's qualified name,
        ``JetStream*Hook.*consumer_lag`` for one and its blocking twin; a class name; ``spark read``,
        ``spark write``; ``stream_to_parquet``), for a name that still names something else elsewhere.
        Empty: wherever ``new`` is taken (a removal: everywhere).
    :param output: a key of what the provider returns (XCom, events, messages): nothing takes it, so
        nothing refuses it; it is listed for the reader.
    """

    old: str
    new: str | None
    meaning: str
    why: str = ""
    where: tuple[str, ...] = ()
    output: bool = False

    def applies(self, surface: str, accepted: Collection[str], form: str = SNAKE) -> bool:
        """Whether this entry refuses its old name on ``surface``, which takes the names ``accepted``."""
        if self.output:
            return False
        if self.where:
            return any(fnmatch.fnmatchcase(surface, pattern) for pattern in self.where)
        return self.new is None or spelled(self.new, form).lower() in {name.lower() for name in accepted}

    def instead(self, form: str = SNAKE) -> str:
        """What to do instead, in words: ``renamed start_seq`` or ``removed: <why>``."""
        if self.new is None:
            return f"removed: {self.why}"
        return f"renamed {spelled(self.new, form)}" + (f" ({self.why})" if self.why else "")

    def refusal(self, given: str, value: Any, form: str = SNAKE) -> SpecError:
        """The refusal of ``given=value``: ``given=value is not allowed: renamed <new>``."""
        return SpecError(given, value, self.instead(form))


def _renamed(olds: str, news: str, meaning: str, why: str = "", where: tuple[str, ...] = ()) -> list[Retired]:
    """Entries renaming each of ``olds`` to the ``news`` at its place (or to the one new name)."""
    old_names, new_names = olds.split(), news.split()
    if len(new_names) == 1:
        new_names = new_names * len(old_names)
    return [Retired(o, n, meaning, why, where) for o, n in zip(old_names, new_names, strict=True)]


#: Hook methods (their qualified names: ``JetStreamStatusHook.aconsumer_lag``; ``*consumer_lag``: both twins).
HOOK_METHODS = ("JetStream*Hook.*",)
_CONSUMER_LAG = ("JetStream*Hook.*consumer_lag", "JetStreamConsumerLagSensor", "JetStreamConsumerLagTrigger")
_REPLICATION = (
    "JetStream*Hook.*replication_status",
    "JetStream*Hook.*retention_headroom",
    "JetStreamReplicationLagSensor",
    "JetStreamRetentionHeadroomSensor",
    "JetStreamReplicationLagTrigger",
)

#: Every retired name of the public surfaces, in the order the CHANGELOG and the glossary list them.
RETIRED: tuple[Retired, ...] = (
    Retired("name", "consumer", "a consumer", where=("JetStream*Hook.*delete_consumer", "JetStreamDeleteConsumer*")),
    Retired("name", "stream", "a stream"),
    Retired("name", "object_name", "an object"),
    Retired("spec", "stream", "what ensure_stream declares", where=("JetStream*Hook.*ensure_stream",)),
    Retired("spec", "consumer", "what ensure_consumer declares", where=("JetStream*Hook.*ensure_consumer",)),
    Retired(
        "spec",
        "bucket",
        "what ensure_key_value and ensure_object_store declare",
        where=("JetStream*Hook.*ensure_key_value", "JetStream*Hook.*ensure_object_store"),
    ),
    *_renamed(
        "source_stream source_domain source_api_prefix",
        "origin origin_domain origin_api_prefix",
        "the stream a mirror copies, and where it is",
    ),
    Retired("sources", "origins", "the origin streams a replication check judges", where=_REPLICATION),
    Retired("timeout", "request_timeout", "seconds to wait for each JetStream API answer", where=HOOK_METHODS),
    Retired("conn_id", "spark_conn_id", "the Spark connection", where=("JetStreamSparkSubmitOperator",)),
    *_renamed("batch max_batch_size", "batch_size", "the most messages handed over at once"),
    *_renamed("opt_start_seq starting_sequence", "start_seq", "the first stream sequence to read, deliver or copy"),
    *_renamed("opt_start_time starting_time", "start_time", "where a read, a delivery or a copy starts in time"),
    *_renamed("end_sequence ending_sequence", "end_seq", "the last stream sequence to read"),
    Retired("ending_time", "end_time", "where a read ends in time"),
    Retired("up_to_sequence", "up_to_seq", "a purge removes the messages below this sequence"),
    *(
        Retired(old, new, "a message's stream sequence, in XCom, events and deliveries", output=True)
        for old, new in (("sequence", "seq"), ("first_sequence", "first_seq"), ("last_sequence", "last_seq"))
    ),
    Retired(
        "min_revision",
        "after_revision",
        "the revision a KV key or an object must pass",
        "strictly above: min_revision=N is after_revision=N-1",
    ),
    Retired("rewatch_interval", "poll_interval", "seconds between two checks of a deferred wait"),
    Retired("ack", "ack_mode", "which messages the await-message sensor acknowledges"),
    *_renamed(
        "messages_callable op_kwargs",
        "messages_function messages_function_kwargs",
        "the function that returns the messages to publish, and its keyword arguments",
    ),
    Retired("max_pending", "max_unprocessed", "a consumer-lag threshold: messages not delivered yet"),
    Retired(
        "max_ack_pending",
        "max_outstanding_acks",
        "a consumer-lag threshold: messages delivered and not acknowledged",
        where=_CONSUMER_LAG,
    ),
    Retired("filter_subject", "filter_subjects", "subject filters of a read, a consumer or a copy"),
    Retired(
        "subjects",
        "event_subjects",
        "the subjects one asset watcher fires for",
        where=("JetStreamMessageTrigger", "JetStreamMessageQueueProvider"),
    ),
    *_renamed("source destination", "local_path", "a file on the machine the task runs on"),
    Retired("stream", "expected_stream", "the stream that must store what a Spark write sends", where=("spark write",)),
    Retired("output", "output_path", "the packaged Spark job's output directory"),
    Retired(
        "all_header_values",
        None,
        "read every value of repeated headers",
        "every header value is taken from the delivered message",
    ),
)


def retired_entry(name: str, accepted: Collection[str], surface: str, form: str = SNAKE) -> Retired | None:
    """The entry that refuses ``name`` (spelled in ``form``) on ``surface``, which takes ``accepted``; None
    when ``name`` is not retired there. Spark option names are compared without case (Spark lower-cases
    them). An entry for this very surface wins over one that applies wherever its replacement is taken."""

    def key(text: str) -> str:
        return text.lower() if form == CAMEL else text

    found = [e for e in RETIRED if key(spelled(e.old, form)) == key(name)]
    for entry in sorted(found, key=lambda e: not e.where):
        if entry.applies(surface, accepted, form):
            return entry
    return None


__all__ = ["CAMEL", "FLAG", "HOOK_METHODS", "RETIRED", "SNAKE", "Retired", "camel", "flag", "retired_entry", "snake"]
