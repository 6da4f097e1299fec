"""Refuse declaring a copy (mirror or source) of an origin domain that does not answer and was never seen.

A mirror or source names its origin's domain (``{"name": "readings", "domain": "leaf"}``); the server takes
any name, and copies nothing until a JetStream of that domain answers. A wrong name (``"leaff"``) never
answers, and such a copy is not harmless: the double-store check asks every domain the target's streams copy
from before each publish there, and fails closed when one does not answer (``DoubleStoreUnreachableError``
after its settle time), so every later publish in the target domain is refused.

So, before a copy is created (or a source added), each origin domain is asked (``$JS.<domain>.API.INFO``,
once). One that does not answer is:

- **known**, when the target already holds a copy of it (a stream, KV bucket or object store whose mirror or
  sources name it) or ``peer_domains`` names it: a leaf away now, as leaves at the edge are. Declared, with a
  warning (logged, and in the result's ``notes``): the copy catches up once the leaf is linked;
- **never seen** otherwise: a wrong domain name, or a leaf that was never linked. Refused
  (:class:`~airflow_provider_jetstream.core.errors.UnknownOriginDomainError`), nothing created, unless the
  caller asks for it (``allow_unreachable_origins=True``: declared, with the warning).

A domain that answers with an error (JetStream off for the account, a permission refusal, no leader) exists:
not refused here. Imported API prefixes (another account) are not asked: they are not domains.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from nats.aio.client import Client

from airflow_provider_jetstream.core.api import JetStreamApi, describe_prefix
from airflow_provider_jetstream.core.arguments.names import domain_of
from airflow_provider_jetstream.core.connection.client import home_domain
from airflow_provider_jetstream.core.errors import (
    JetStreamDomainUnavailableError,
    JetStreamError,
    JetStreamNoLeaderError,
    UnknownOriginDomainError,
)
from airflow_provider_jetstream.core.manage.double_store import describe_copy, replication_domains

#: The argument that declares a copy of an origin domain never seen that does not answer.
OPT_IN = "allow_unreachable_origins=True"


async def unanswered_domains(nc: Client, domains: Iterable[str], timeout: float) -> dict[str, str]:
    """The domains of ``domains`` whose JetStream does not answer now (no responders, or no answer within
    ``timeout`` seconds; asked once each, all at once), with why."""

    async def ask(domain: str) -> str:
        try:
            await JetStreamApi(nc, f"$JS.{domain}.API", timeout=timeout, failover=0).account_info()
        except JetStreamNoLeaderError:
            return ""  # a cluster of that domain answered: it exists
        except JetStreamDomainUnavailableError as err:
            return str(err)
        except JetStreamError:
            return ""  # an answer, with an error: the domain exists
        return ""

    asked = list(dict.fromkeys(domains))
    reasons = await asyncio.gather(*(ask(domain) for domain in asked))
    return {domain: why for domain, why in zip(asked, reasons, strict=True) if why}


async def check_origin_domains(
    nc: Client,
    *,
    target_prefix: str,
    domains: Iterable[str],
    what: str,
    peer_domains: Iterable[str] = (),
    allow: bool = False,
    timeout: float = 2.0,
) -> list[str]:
    """Refuse a copy, in the target at ``target_prefix``, of an origin domain of ``domains`` that does not answer
    and was never seen (see the module doc): :class:`UnknownOriginDomainError` naming each such domain, unless
    ``allow``. Returns the warnings of the origin domains that do not answer and may be declared anyway (known,
    or allowed), for the caller to log; ``[]`` when every one answers. ``what`` names the copy (``"stream 'agg'"``);
    ``timeout`` is each request's (default 2 s)."""
    target = domain_of(target_prefix)
    own = {target, home_domain(nc)} if target else {home_domain(nc)}
    away = await unanswered_domains(nc, (d for d in domains if d and d not in own), timeout)
    if not away:
        return []
    copies, _ = await replication_domains(nc, target_prefix, timeout)
    peers = set(peer_domains)
    where = describe_prefix(target_prefix)
    notes: list[str] = []
    unknown: list[str] = []
    for domain, why in away.items():
        if domain in copies:
            named = ", ".join(describe_copy(stream) for stream in dict.fromkeys(copies[domain]))
            seen = f"it is known: {where} already copies from it ({named})"
        elif domain in peers:
            seen = "it is known: peer_domains names it"
        elif allow:
            seen = f"asked for by {OPT_IN}"
        else:
            unknown.append(f"origin domain {domain!r} does not answer ({why})")
            continue
        notes.append(
            f"origin domain {domain!r} of {what} does not answer now ({why}); declared anyway, since {seen}: the "
            "copy catches up once that domain is linked"
        )
    if unknown:
        raise UnknownOriginDomainError(
            f"{what} in {where}: {'; '.join(unknown)}, and {where} has no copy of it, nor does peer_domains name "
            f"it: a wrong domain name? A copy of a domain that never answers blocks every later write in {where} "
            "(the double-store check asks each domain its streams copy from, and refuses while one does not "
            f"answer). Check the domain name; if it is a leaf that is only away now, pass {OPT_IN} (or name it in "
            "peer_domains) to declare the copy anyway; nothing was changed"
        )
    return notes
