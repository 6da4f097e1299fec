"""The arguments many operations share, declared once: names, where JetStream is, timeouts, reconcile options.

Each is an :class:`~airflow_provider_jetstream.core.arguments.Arg`; an operation's signature
(:mod:`.operations`) names them under its own argument names. ``TARGET`` is the target of a hook
method (``domain`` / ``api_prefix`` / ``request_timeout``), ``OPERATOR`` and ``SENSOR`` what every operator
and sensor of the provider takes besides its operation's arguments. Names follow docs/glossary.md.
"""

from __future__ import annotations

from typing import Any

from airflow_provider_jetstream.core.arguments import DEFAULT, REFUSE, REQUIRED, VALUE, Arg, Args, exclusive
from airflow_provider_jetstream.core.arguments.durations import seconds_of
from airflow_provider_jetstream.core.arguments.names import (
    api_prefix,
    bucket_name,
    connection_id,
    consumer_name,
    domain_name,
    kv_key,
    stream_name,
)
from airflow_provider_jetstream.core.arguments.values import (
    boolean,
    integer,
    list_of,
    optional,
    seconds,
)
from airflow_provider_jetstream.core.errors import SpecError
from airflow_provider_jetstream.core.manage.reconcile import parse_if_exists
from airflow_provider_jetstream.core.manage.specs.fields import Spec

# -- where JetStream is --------------------------------------------------------------------------

CONN_ID = Arg(
    connection_id,
    "jetstream_default",
    REFUSE,
    "the Airflow connection (type jetstream); default 'jetstream_default'",
    templated=True,
)
#: A rendered empty domain or API prefix is refused, never "not given": it would send the action to the
#: connection's domain (a purge meant for a leaf would purge the hub's stream).
DOMAIN = Arg(
    domain_name,
    None,
    REFUSE,
    "JetStream domain to act in ($JS.<domain>.API); default: the hook's, else the connection's",
    templated=True,
)
API_PREFIX = Arg(
    api_prefix,
    None,
    REFUSE,
    "JetStream API prefix instead of a domain (an imported JS.acc@hub.API); default: the connection's",
    templated=True,
)
#: ``domain`` and ``api_prefix`` name the same thing two ways.
ONE_TARGET = exclusive("domain", "api_prefix", "a domain means the API prefix '$JS.<domain>.API': give one of them")
#: One name, one default on every surface: None, the connection's ``connect_timeout``.
REQUEST_TIMEOUT = Arg(
    optional(seconds()),
    None,
    VALUE,
    "seconds to wait for each JetStream API answer; default None: the connection's connect_timeout",
)

#: Where a hook method acts: a domain or API prefix (default: the hook's, else the connection's).
TARGET = Args("target", {"domain": DOMAIN, "api_prefix": API_PREFIX}, [ONE_TARGET])
#: The target and the wait of a hook method that makes JetStream API requests.
REQUEST = TARGET + Args("request", {"request_timeout": REQUEST_TIMEOUT})


def logger_like(value: Any, field: str) -> Any:
    """A logger (``logging.Logger``, an adapter, or anything with ``info`` and ``warning`` methods)."""
    if not all(callable(getattr(value, method, None)) for method in ("info", "warning")):
        raise SpecError(field, value, "use a logging.Logger (or an object with info and warning methods)")
    return value


LOGGER = Arg(logger_like, None, DEFAULT, "the logger of progress lines; default: the hook's")
#: Where a hook method that changes something logs what it did.
LOG = Args("log", {"logger": LOGGER})

#: What every operator takes besides its operation's arguments.
OPERATOR = Args(
    "operator",
    {
        "jetstream_conn_id": CONN_ID,
        "domain": DOMAIN,
        "api_prefix": API_PREFIX,
        "request_timeout": REQUEST_TIMEOUT,
    },
    [ONE_TARGET],
)
UNREACHABLE_TIMEOUT = Arg(
    optional(seconds_of(positive=True)),
    None,
    VALUE,
    "how long the target may go without answering before the wait fails: seconds, timedelta or text like "
    "'10m'; default None: no bound (the sensor's timeout applies)",
    templated=True,
)

# -- names ---------------------------------------------------------------------------------------

STREAM = Arg(stream_name, REQUIRED, VALUE, "the stream's name", templated=True)
CONSUMER = Arg(consumer_name, REQUIRED, VALUE, "the consumer's name", templated=True)
BUCKET = Arg(bucket_name, REQUIRED, VALUE, "the KV bucket's name", templated=True)
KEY = Arg(kv_key, REQUIRED, VALUE, "the KV key", templated=True)


def spec_arg(kind: type[Spec], doc: str) -> Arg:
    """The required argument that declares an object: a spec of ``kind`` or its dict (a bucket's: its name too),
    checked as the spec checks it."""
    return Arg(kind.from_dict, REQUIRED, VALUE, doc, templated=True)


# -- reconcile and delete options ----------------------------------------------------------------

IF_EXISTS_ARG = Arg(
    parse_if_exists,
    "update",
    VALUE,
    "what to do when it exists: 'update' (default), 'skip', 'fail' or 'recreate' (only this deletes data)",
    templated=True,
)
DRY_RUN = Arg(boolean, False, VALUE, "plan only, change nothing; default False", templated=True)
PRUNE_SOURCES = Arg(boolean, False, VALUE, "remove sources the spec does not name; default False: kept", templated=True)
ALLOW_DATA_LOSS = Arg(
    boolean,
    False,
    VALUE,
    "apply in place a change that discards stored data (max_msgs, max_bytes, max_age, max_msgs_per_subject, "
    "a bucket's history or ttl lowered, or set where there was none) or lowers its durability (replicas "
    "lowered); default False: refused",
    templated=True,
)
ALLOW_DOUBLE_STORE = Arg(
    boolean,
    False,
    VALUE,
    "write even if another connected domain of this account stores the same subjects, or a domain cannot "
    "be checked; default False: refused",
    templated=True,
)
ALLOW_UNREACHABLE_ORIGINS = Arg(
    boolean,
    False,
    VALUE,
    "declare a mirror or source of an origin domain that does not answer now and that the target has no copy "
    "of (nor peer_domains names); default False: refused (a wrong domain name?); a known domain that does not "
    "answer is declared with a warning",
    templated=True,
)
PEER_DOMAINS = Arg(
    list_of(domain_name, words="use a list of domain names, e.g. ['leaf']"),
    (),
    DEFAULT,
    "more domains for the double-store check, besides the connection's own; default none",
    templated=True,
)
IGNORE_MISSING = Arg(
    boolean, True, VALUE, "a missing object is success; default True (False: the server's refusal)", templated=True
)
#: A compare-and-set revision: a rendered empty one must not drop the condition and overwrite.
EXPECTED_REVISION = Arg(
    optional(integer(0, hint=" (0: only if the key does not exist)")),
    None,
    REFUSE,
    "compare-and-set: write only if the key's latest revision is this one (0: only if the key does not "
    "exist); default None: no condition",
    templated=True,
)
#: A count threshold that may be None: not checked.
OPTIONAL_COUNT = optional(integer(0, hint=" or None"))
#: The revision a KV key or an object must pass (strictly above); a rendered empty one is refused, never "any".
AFTER_REVISION = Arg(
    OPTIONAL_COUNT,
    None,
    REFUSE,
    "only a revision above this one counts (a put after the one seen); default None: any revision",
    templated=True,
)

__all__ = [
    "AFTER_REVISION",
    "ALLOW_DATA_LOSS",
    "ALLOW_DOUBLE_STORE",
    "ALLOW_UNREACHABLE_ORIGINS",
    "API_PREFIX",
    "BUCKET",
    "CONN_ID",
    "CONSUMER",
    "DOMAIN",
    "DRY_RUN",
    "EXPECTED_REVISION",
    "IF_EXISTS_ARG",
    "IGNORE_MISSING",
    "KEY",
    "LOG",
    "LOGGER",
    "ONE_TARGET",
    "OPERATOR",
    "OPTIONAL_COUNT",
    "PEER_DOMAINS",
    "PRUNE_SOURCES",
    "REQUEST",
    "REQUEST_TIMEOUT",
    "STREAM",
    "TARGET",
    "UNREACHABLE_TIMEOUT",
]
