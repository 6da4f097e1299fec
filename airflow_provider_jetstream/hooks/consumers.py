"""``JetStreamConsumersHook``: the consumers role: declare and delete durable pull consumers (sync and async).

The reconcile rules of the consumer operators, as hook methods; usable alone, or as part of
:class:`~airflow_provider_jetstream.hooks.jetstream.JetStreamHook`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_provider_jetstream.core.manage.reconcile import reconcile_consumer
from airflow_provider_jetstream.core.manage.specs import ConsumerSpec
from airflow_provider_jetstream.core.signatures.operations import DELETE_CONSUMER, ENSURE_CONSUMER
from airflow_provider_jetstream.core.signatures.shared import LOG, REQUEST
from airflow_provider_jetstream.hooks.base import JetStreamBaseHook
from airflow_provider_jetstream.hooks.methods import Logged, blocking, checked

if TYPE_CHECKING:
    from typing_extensions import Unpack


class JetStreamConsumersHook(JetStreamBaseHook):
    """Durable pull consumers declared and deleted as the consumer operators do, in any domain (see
    :class:`~airflow_provider_jetstream.hooks.base.JetStreamBaseHook` for the connection arguments)."""

    @checked(ENSURE_CONSUMER + REQUEST + LOG)
    async def aensure_consumer(
        self,
        stream: str,
        consumer: ConsumerSpec | Mapping[str, Any],
        *,
        if_exists: str = "update",
        dry_run: bool = False,
        **logged: Unpack[Logged],
    ) -> dict[str, Any]:
        """Create or update a durable pull consumer on ``stream``, as ``JetStreamCreateConsumerOperator``
        does; returns its XCom dict (``action``, ``changes``, ``state``..., and ``stream``).

        :param consumer: the consumer to declare: a :class:`ConsumerSpec` or its dict, e.g. ``{"name": "dur",
            "ack_wait": "30s"}``.
        :param if_exists: ``"update"`` (default) | ``"skip"`` | ``"fail"`` | ``"recreate"`` (only this
            deletes the consumer's delivery state).
        :param dry_run: plan only, change nothing. Default False.
        """
        spec: ConsumerSpec = consumer  # type: ignore[assignment]  # checked: a ConsumerSpec
        logger = logged.pop("logger") or self.log
        async with self.aapi(**logged) as api:
            result = await reconcile_consumer(api, stream, spec, if_exists=if_exists, dry_run=dry_run, logger=logger)
        return {**result.as_xcom(), "stream": stream}

    ensure_consumer = blocking(aensure_consumer)

    @checked(DELETE_CONSUMER + REQUEST + LOG)
    async def adelete_consumer(
        self,
        stream: str,
        consumer: str,
        *,
        ignore_missing: bool = True,
        **logged: Unpack[Logged],
    ) -> dict[str, Any]:
        """Delete ``consumer`` of ``stream``, as ``JetStreamDeleteConsumerOperator`` does; returns
        ``{"deleted": bool, "stream", "consumer", "domain"}``.

        :param ignore_missing: a missing consumer (or stream) is success. Default True; False raises the
            server's refusal (:class:`JetStreamApiError`).
        """
        deleted, domain = await self._delete(
            f"consumer {consumer!r} on stream {stream!r}",
            lambda api: api.delete_consumer(stream, consumer, missing_ok=ignore_missing),
            **logged,
        )
        return {"deleted": deleted, "stream": stream, "consumer": consumer, "domain": domain}

    delete_consumer = blocking(adelete_consumer)
