"""The ``jetstream`` scheme of common.messaging: ``MessageQueueTrigger(scheme="jetstream", ...)`` is our trigger."""

from __future__ import annotations

from typing import Any

from airflow.exceptions import AirflowOptionalProviderFeatureException

from airflow_provider_jetstream.assets.jetstream import SCHEME, parse_stream_uri
from airflow_provider_jetstream.triggers.messages import JetStreamMessageTrigger

try:
    from airflow.providers.common.messaging.providers.base_provider import BaseMessageQueueProvider
except ImportError as err:  # the optional [messaging] extra
    raise AirflowOptionalProviderFeatureException(
        "the jetstream message-queue scheme needs apache-airflow-providers-common-messaging: "
        "install 'airflow-provider-jetstream[messaging]'"
    ) from err


class JetStreamMessageQueueProvider(BaseMessageQueueProvider):
    """``scheme="jetstream"``: ``MessageQueueTrigger(scheme="jetstream", jetstream_conn_id=..., stream=...,
    consumer=...)`` is a :class:`JetStreamMessageTrigger` with those kwargs (its classpath is what Airflow stores).

    The deprecated ``queue=`` form takes ``jetstream://<server>/<domain>/<stream>`` for the stream and
    domain; the server part is informational (the connection says where to connect).
    """

    scheme = SCHEME

    def queue_matches(self, queue: str) -> bool:
        return queue.startswith(f"{SCHEME}://")

    def trigger_class(self) -> type[JetStreamMessageTrigger]:
        return JetStreamMessageTrigger

    def trigger_kwargs(self, queue: str, **kwargs: Any) -> dict[str, Any]:
        parsed = parse_stream_uri(queue)
        derived: dict[str, Any] = {"stream": parsed.stream}
        if parsed.domain and not kwargs.get("api_prefix"):
            derived["domain"] = parsed.domain
        return {k: v for k, v in derived.items() if k not in kwargs}
