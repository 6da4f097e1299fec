"""``JetStreamBaseHook``: NATS connections and JetStream contexts from an Airflow ``jetstream`` connection.

What every role hook stands on (streams, consumers, KV, object stores, publishing, status checks,
messages: one class each, one level above this one; :class:`~airflow_provider_jetstream.hooks.jetstream.JetStreamHook`
combines them): settings, one shared NATS connection per event loop and connection id, JetStream contexts
and API clients for any domain, the double-store guard the declaring and publishing roles share, one
declaration on the reconcile ladder and one delete for the roles that declare, and the one sync bridge. How a
hook method takes its arguments and gets its blocking twin: :mod:`airflow_provider_jetstream.hooks.methods`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import nats.errors
import nats.js.errors
from airflow.sdk import BaseHook
from nats.aio.client import Client
from nats.js import JetStreamContext

from airflow_provider_jetstream.compat import AirflowNotFoundException
from airflow_provider_jetstream.core.api import JetStreamApi, describe_prefix, domain_of, is_imported_prefix
from airflow_provider_jetstream.core.connection.client import open_connection, refusal_since, release
from airflow_provider_jetstream.core.connection.settings import JetStreamConnectionConfig, api_prefix_for
from airflow_provider_jetstream.core.errors import (
    JetStreamConfigError,
    JetStreamDomainUnavailableError,
    JetStreamError,
    JetStreamImportMissingError,
    JetStreamPermissionError,
    SpecError,
)
from airflow_provider_jetstream.core.manage.double_store import guard_double_store
from airflow_provider_jetstream.core.manage.origin_check import check_origin_domains
from airflow_provider_jetstream.core.manage.specs import StreamSpec
from airflow_provider_jetstream.core.read.settle import Settler
from airflow_provider_jetstream.core.signatures.operations import ACCOUNT_INFO, API, HOOK, JETSTREAM, PROBE_DOMAINS
from airflow_provider_jetstream.core.sync import hold, run_sync
from airflow_provider_jetstream.hooks.methods import Declaring, Logger, Request, checked, request_of

if TYPE_CHECKING:
    from typing_extensions import Unpack

T = TypeVar("T")
H = TypeVar("H", bound="JetStreamBaseHook")
log = logging.getLogger(__name__)


# Open connections by event loop and connection id: every hook running in one event loop (the
# triggerer's, or one operator's) shares one NATS connection per Airflow connection.
_OPEN: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, _SharedConnection]] = weakref.WeakKeyDictionary()


class _SharedConnection:
    def __init__(self) -> None:
        self.nc: Client | None = None
        self.users = 0
        # Registered before connecting: users arriving while it connects wait for this connection
        # instead of opening their own (a triggerer starts many triggers at once).
        self.opening = asyncio.Lock()


class JetStreamBaseHook(BaseHook):
    """Connects to NATS and addresses JetStream in any domain, from a ``jetstream`` connection.

    :param jetstream_conn_id: Airflow connection id. Default ``jetstream_default``.
    :param domain: JetStream domain to address (``$JS.<domain>.API``). Default: the connection's.
    :param api_prefix: JetStream API prefix, e.g. an imported ``JS.acc@hub.API``. Default: the
        connection's. ``domain`` and ``api_prefix`` exclude each other.
    """

    conn_name_attr = "jetstream_conn_id"
    default_conn_name = "jetstream_default"
    conn_type = "jetstream"
    hook_name = "NATS JetStream"

    def __init__(
        self,
        jetstream_conn_id: str = default_conn_name,
        domain: str | None = None,
        api_prefix: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        args = HOOK.check({"jetstream_conn_id": jetstream_conn_id, "domain": domain, "api_prefix": api_prefix})
        self.jetstream_conn_id = args["jetstream_conn_id"]
        self.domain = args["domain"]
        self.api_prefix = args["api_prefix"]
        self._config: JetStreamConnectionConfig | None = None

    def role(self, hook_class: type[H]) -> H:
        """This hook in another role (``self.role(JetStreamConsumersHook)``): the same connection id, target
        and connection settings; in one event loop both use the one shared NATS connection. This hook itself
        when it has that role already (a :class:`~airflow_provider_jetstream.hooks.jetstream.JetStreamHook`)."""
        if isinstance(self, hook_class):
            return self
        other = hook_class(self.jetstream_conn_id, domain=self.domain, api_prefix=self.api_prefix)
        other._config = self._config
        return other

    @classmethod
    def on_connection(cls: type[H], conn: Any, **kwargs: Any) -> H:
        """This hook on a connection already read (an Airflow ``Connection``; its ``conn_id`` names it), where
        the hook's own lookup would not find it: Airflow's api-server reads a team's connection only with the team
        named (the JetStream page). ``kwargs``: the hook's other arguments (``domain``, ``api_prefix``)."""
        hook = cls(conn.conn_id, **kwargs)
        hook._config = cls._validated(conn)
        return hook

    # -- connection settings -------------------------------------------------------------------

    def get_conn_config(self) -> JetStreamConnectionConfig:
        """The validated connection settings (looked up once; secrets registered for masking)."""
        if self._config is None:
            with self._looking_up_connection():
                conn = self.get_connection(self.jetstream_conn_id)
            self._config = self._validated(conn)
        return self._config

    async def aget_conn_config(self) -> JetStreamConnectionConfig:
        """Like :meth:`get_conn_config`, without blocking the event loop (for triggers)."""
        if self._config is None:
            with self._looking_up_connection():
                conn = await self.aget_connection(self.jetstream_conn_id)
            self._config = self._validated(conn)
        return self._config

    @contextlib.contextmanager
    def _looking_up_connection(self) -> Iterator[None]:
        """Around Airflow's lookup of the connection: its ``AIRFLOW_CONN_<ID>`` port checked (found or not), and
        a connection not found reported with the reason Airflow could not read it, if any."""
        try:
            yield
        except AirflowNotFoundException:
            self._check_env_port()
            raise self._unreadable_env_connection() from None
        self._check_env_port()

    def _unreadable_env_connection(self) -> Exception:
        """Why Airflow found no connection: an ``AIRFLOW_CONN_<ID>`` Airflow could not read (a port that is
        not a number) is reported as Airflow's reason, without the value (it may hold a password)."""
        conn_id = self.jetstream_conn_id
        variable = f"AIRFLOW_CONN_{conn_id.upper()}"
        value = os.environ.get(variable)
        if value is None:
            return AirflowNotFoundException(f"The conn_id `{conn_id}` isn't defined")
        from airflow.sdk import Connection

        try:
            if value.lstrip().startswith("{"):
                Connection.from_json(value, conn_id=conn_id)
            else:
                Connection.from_uri(value, conn_id=conn_id)
        except Exception as err:
            return JetStreamConfigError(f"connection {conn_id!r}: ${variable} cannot be read: {err}")
        return AirflowNotFoundException(f"The conn_id `{conn_id}` isn't defined")

    def _check_env_port(self) -> None:
        """Refuse the ``port`` of an ``AIRFLOW_CONN_<ID>`` in JSON form that Airflow would change: it reads
        ``0`` as no port (4222) and ``1.5`` or ``true`` as port 1."""
        value = os.environ.get(f"AIRFLOW_CONN_{self.jetstream_conn_id.upper()}", "")
        if not value.lstrip().startswith("{"):
            return
        try:
            port = json.loads(value).get("port")
        except (ValueError, AttributeError):
            return  # Airflow reports what it cannot read
        if port is None or port == "":
            return
        number = int(port) if isinstance(port, str) and port.strip().isdigit() else port
        if isinstance(number, bool) or not isinstance(number, int) or not 0 < number < 65536:
            raise SpecError("port", port, "use a TCP port from 1 to 65535, or leave it out for 4222")

    @staticmethod
    def _validated(conn: Any) -> JetStreamConnectionConfig:
        config = JetStreamConnectionConfig.from_connection(conn)
        from airflow.sdk.log import mask_secret

        for secret in config.secrets:
            mask_secret(secret)
        return config

    def resolve_api_prefix(self, domain: str | None = None, api_prefix: str | None = None) -> str:
        """The JetStream API prefix to use: the arguments', else the hook's, else the connection's."""
        if domain or api_prefix:
            return api_prefix_for(domain, api_prefix)
        if self.domain or self.api_prefix:
            return api_prefix_for(self.domain, self.api_prefix)
        config = self._config or self.get_conn_config()
        return api_prefix_for(config.domain, config.api_prefix)

    def describe_target(self, domain: str | None = None, api_prefix: str | None = None) -> str:
        """Human words for a JetStream target: ``domain 'leaf'`` or ``API prefix 'JS.acc@hub.API'``."""
        return describe_prefix(self.resolve_api_prefix(domain, api_prefix))

    # -- async core ----------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def aconnect(self) -> AsyncIterator[Client]:
        """A connected nats-py client; drained on normal exit, closed on error or cancellation.

        Nested or concurrent uses in one event loop share one connection per connection id; it
        is closed when the last user leaves, once the settles sent on it are confirmed.
        """
        config = await self.aget_conn_config()
        loop = asyncio.get_running_loop()
        shared_by_id = _OPEN.setdefault(loop, {})
        shared = shared_by_id.get(config.conn_id)
        if shared is None or (shared.nc is not None and shared.nc.is_closed):
            shared = shared_by_id[config.conn_id] = _SharedConnection()
        shared.users += 1
        failed = False
        try:
            async with shared.opening:
                if shared.nc is None or shared.nc.is_closed:
                    shared.nc = await open_connection(config)
            yield shared.nc
        except BaseException:
            failed = True
            raise
        finally:
            shared.users -= 1
            if shared.users == 0:
                if shared_by_id.get(config.conn_id) is shared:
                    del shared_by_id[config.conn_id]
                if shared.nc is not None:
                    try:
                        if not failed:  # the settles sent on it are confirmed before it closes
                            await Settler.confirm_all(shared.nc)
                    finally:
                        await asyncio.shield(release(shared.nc, drain=not failed))

    @checked(JETSTREAM)
    @contextlib.asynccontextmanager
    async def ajetstream(
        self, domain: str | None = None, api_prefix: str | None = None
    ) -> AsyncIterator[JetStreamContext]:
        """A JetStream context for a domain or API prefix (default: the hook's, then the connection's).

        Several contexts, for several domains, share one NATS connection. A JetStream API call
        that no server answers raises :class:`JetStreamDomainUnavailableError` naming the target.
        """
        async with self.aconnect() as nc:  # loads the connection's config without blocking first
            prefix = self.resolve_api_prefix(domain, api_prefix)
            started = time.monotonic()
            try:
                yield nc.jetstream(prefix=prefix)
            except (nats.errors.NoRespondersError, nats.js.errors.ServiceUnavailableError) as err:
                raise self._no_jetstream(domain, api_prefix) from err
            except nats.errors.TimeoutError as err:
                # The server drops a request the user may not publish, so a refusal looks like a timeout.
                refusal = refusal_since(nc, started, prefix=prefix)
                if refusal:
                    raise JetStreamPermissionError(
                        f"JetStream in {self.describe_target(domain, api_prefix)}: {refusal}"
                    ) from err
                raise

    @checked(API)
    @contextlib.asynccontextmanager
    async def aapi(
        self, domain: str | None = None, api_prefix: str | None = None, *, request_timeout: float | None = None
    ) -> AsyncIterator[JetStreamApi]:
        """The JetStream JSON API of a domain or API prefix (default: the hook's, then the connection's)
        on the shared connection. Each request waits up to ``request_timeout`` seconds (default: the
        connection's ``connect_timeout``). The target is checked before connecting.
        """
        config = await self.aget_conn_config()
        prefix = self.resolve_api_prefix(domain, api_prefix)
        wait = config.connect_timeout if request_timeout is None else request_timeout
        async with self.aconnect() as nc:
            yield JetStreamApi(nc, prefix, timeout=wait, target=describe_prefix(prefix))

    @checked(ACCOUNT_INFO)
    async def aaccount_info(
        self, nc: Client, domain: str | None = None, api_prefix: str | None = None
    ) -> dict[str, Any]:
        """The raw JetStream account info of a domain (with ``domain`` and ``api.level``).

        nats-py's ``account_info()`` drops the API level, which tells what the server supports.
        """
        config = await self.aget_conn_config()
        prefix = self.resolve_api_prefix(domain, api_prefix)
        try:
            return await JetStreamApi(nc, prefix, timeout=config.connect_timeout).account_info()
        except (JetStreamDomainUnavailableError, JetStreamImportMissingError) as err:
            raise self._no_jetstream(domain, api_prefix) from err

    @checked(PROBE_DOMAINS)
    async def aprobe_domains(
        self, domains: Sequence[str], request_timeout: float | None = None
    ) -> dict[str, str | None]:
        """Which of these JetStream domains answer through this connection right now.

        Asks every domain's JetStream for its account info at once and returns ``{domain: None}``
        for each that answered within ``request_timeout`` seconds (default: the connection's
        ``connect_timeout``) and ``{domain: reason}`` for each that did not. A leaf cut off from the
        hub gets "no responders" at once, so the check is short. An unreachable domain is a result,
        not an error; a failure to reach the connection's own servers still raises.
        """
        config = await self.aget_conn_config()
        wait = config.connect_timeout if request_timeout is None else request_timeout

        async def probe(nc: Client, domain: str) -> str | None:
            try:
                await JetStreamApi(nc, api_prefix_for(domain), timeout=wait, target=f"domain {domain!r}").account_info()
            except JetStreamDomainUnavailableError as err:
                return str(err)
            except JetStreamError as err:  # it answered, with an error (e.g. JetStream off for the account)
                return f"JetStream in domain {domain!r} answered with an error: {err}"
            return None

        async with self.aconnect() as nc:
            reasons = await asyncio.gather(*(probe(nc, domain) for domain in domains))
        return dict(zip(domains, reasons, strict=True))

    async def _double_store_guard(
        self,
        api: JetStreamApi,
        subjects: list[str],
        what: str,
        allow: bool,
        logger: Logger,
        peers: Sequence[str],
        stream: StreamSpec | None = None,
        bucket: str | None = None,
    ) -> Callable[[], Awaitable[Any]]:
        """The double-store check run before a write or a create (every role that writes uses this one): no
        other known domain (the connection's, those the spec's mirror and sources name, ``peers``) stores these
        subjects too. Returns the check, to run once the write is decided."""
        config = await self.aget_conn_config()
        named = stream.origin_domains() if stream is not None else []
        domains = [d for d in dict.fromkeys([config.domain, *named, *peers]) if d]

        async def guard() -> Any:
            return await guard_double_store(
                api.nc,
                target_prefix=api.prefix,
                subjects=subjects,
                what=what,
                bucket=bucket,
                peer_domains=domains,
                allow=allow,
                timeout=api.timeout,
                logger=logger,
            )

        return guard

    async def _reconcile(
        self,
        reconcile: Callable[..., Awaitable[Any]],
        spec: Any,
        stream: StreamSpec,
        subjects: list[str],
        what: str,
        declaring: Declaring,
        bucket: str | None = None,
    ) -> dict[str, Any]:
        """Declare ``spec`` on ``reconcile``, the reconcile ladder of its kind (``reconcile_stream``...), as
        ``declaring`` asks (where, the ladder's choices, the guards), the checks of ``stream`` run once a write is
        decided: its origin domains answer or are known (or ``allow_unreachable_origins``), and the double-store
        check (what stores the spec's messages: ``subjects``; ``what`` in messages, ``bucket`` for a KV bucket);
        the result's XCom dict."""
        ladder = dict(declaring)
        logger = ladder.pop("logger") or self.log
        allow, peers = ladder.pop("allow_double_store"), ladder.pop("peer_domains")
        unreachable = ladder.pop("allow_unreachable_origins")
        async with self.aapi(**request_of(ladder)) as api:
            guard = await self._double_store_guard(api, subjects, what, allow, logger, peers, stream, bucket=bucket)

            async def origin_check() -> list[str]:
                notes = await check_origin_domains(
                    api.nc,
                    target_prefix=api.prefix,
                    domains=stream.origin_domains(),
                    what=what,
                    peer_domains=peers or (),
                    allow=unreachable,
                    timeout=api.timeout,
                )
                for note in notes:
                    logger.warning("%s", note)
                return notes

            result = await reconcile(api, spec, guard=guard, origin_check=origin_check, logger=logger, **ladder)
        return result.as_xcom()

    async def _delete(
        self,
        what: str,
        delete: Callable[[JetStreamApi], Awaitable[bool]],
        logger: Logger | None,
        **request: Unpack[Request],
    ) -> tuple[bool, str | None]:
        """Delete ``what`` (``stream 'test'``...) in the target with ``delete(api)`` and log what happened: whether it
        was deleted (False: there was nothing to delete) and the target's domain."""
        async with self.aapi(**request) as api:
            deleted = await delete(api)
        if deleted:
            (logger or self.log).info("deleted %s in %s", what, api.target)
        else:
            (logger or self.log).info("%s does not exist in %s: nothing to delete", what, api.target)
        return deleted, domain_of(api.prefix)

    def _no_jetstream(
        self, domain: str | None, api_prefix: str | None
    ) -> JetStreamDomainUnavailableError | JetStreamImportMissingError:
        """No JetStream answered: for a domain, keep waiting (a leaf offline, or a typo); for an
        imported prefix, the account lacks the import (:class:`JetStreamImportMissingError`)."""
        config = self._config
        conn_id = config.conn_id if config else self.jetstream_conn_id
        timeout = config.connect_timeout if config else None
        prefix = self.resolve_api_prefix(domain, api_prefix)
        target = self.describe_target(domain, api_prefix)
        if is_imported_prefix(prefix):
            return JetStreamImportMissingError(
                f"connection {conn_id!r}: nothing answers the JetStream API at {target} ({prefix}) in this "
                "account: is the API exported and imported into this account (and the exporting JetStream "
                "up)? Waiting cannot help"
            )
        hint = (
            "is the leaf connected, is the name right? (a leaf that is offline, or a wrong domain name)"
            if target.startswith("domain")
            else "is JetStream enabled for this account?"
        )
        return JetStreamDomainUnavailableError(
            f"connection {conn_id!r}: no JetStream responded in {target} ({prefix}) within {timeout}s: {hint}"
        )

    # -- sync edge -----------------------------------------------------------------------------

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine of this hook's to completion from synchronous code (operators, pokes); inside
        :meth:`connected` or a blocking ``consume``, on its connection."""
        return run_sync(coro)

    @contextlib.contextmanager
    def connected(self) -> Iterator[Client]:
        """One connection for the blocking calls inside the block, from synchronous code: this hook's methods
        (``fetch``, ``publish``...) and the ``ack()``, ``nak()``... of its messages share it, where each would
        open a connection of its own outside. Yields the nats-py client; drained when the block ends.
        (A blocking ``consume`` shares its own connection with the settles of its messages already.)"""
        with hold(self.aconnect()) as nc:
            yield nc

    def test_connection(self) -> tuple[bool, str]:
        """Connect and ask the target domain's JetStream for its account info.

        Returns ``(True, "<server, version, url; domain, API level, streams>")`` or
        ``(False, reason)``; the reason never holds a secret.
        """
        try:
            message = self.run(self._atest_connection())
        except (JetStreamError, ValueError) as err:
            return False, str(err)
        except Exception as err:  # the form's Test button shows a reason, never a traceback
            return False, f"connection {self.jetstream_conn_id!r}: {type(err).__name__}: {err}"
        self.log.info("%s", message)  # `airflow connections test` prints only success, so log what was found
        return True, message

    async def _atest_connection(self) -> str:
        async with self.aconnect() as nc:
            server_info = getattr(nc, "_server_info", {})  # nats-py keeps the INFO it got privately
            url = nc.connected_url
            connected = f"{url.scheme}://{url.hostname}:{url.port}" if url else "?"
            account = await self.aaccount_info(nc)
        return (
            f"Connected to NATS server {server_info.get('server_name', '?')!r} "
            f"version {server_info.get('version', '?')} at {connected}; "
            f"JetStream domain {account.get('domain') or '(none)'!r}, "
            f"API level {account.get('api', {}).get('level', 0)}, "
            f"{account.get('streams', 0)} streams, {account.get('consumers', 0)} consumers"
        )
