"""``JetStreamHook``: every role in one object, for ``@task`` code that wants everything from one hook.

Each role is a hook of its own, one level above
:class:`~airflow_provider_jetstream.hooks.base.JetStreamBaseHook`, usable alone (the operators use the one
they need, as the Kafka provider's use ``KafkaProducerHook`` or ``KafkaAdminClientHook``):

- :class:`~airflow_provider_jetstream.hooks.streams.JetStreamStreamsHook`: declare streams, mirrors, sources and
  durable sources, stream info, delete, purge;
- :class:`~airflow_provider_jetstream.hooks.consumers.JetStreamConsumersHook`: declare and delete consumers;
- :class:`~airflow_provider_jetstream.hooks.kv.JetStreamKeyValueHook`: KV buckets, get, put, delete, key check;
- :class:`~airflow_provider_jetstream.hooks.objects.JetStreamObjectStoreHook`: object stores and objects;
- :class:`~airflow_provider_jetstream.hooks.publish.JetStreamPublishHook`: publishing;
- :class:`~airflow_provider_jetstream.hooks.status.JetStreamStatusHook`: replication, headroom, consumer lag;
- :class:`~airflow_provider_jetstream.hooks.messages.JetStreamMessagesHook`: fetch and consume messages.

``JetStreamHook`` combines them, as nats.go's ``JetStream`` interface embeds ``StreamManager``,
``Publisher``, ``KeyValueManager``...: one connection id, target and connection settings, and in one event
loop one shared NATS connection for every role. Each ``a``-prefixed method is the implementation (for
triggers and async code); its plain-named twin runs it through the hook's one sync bridge
(:meth:`~airflow_provider_jetstream.hooks.base.JetStreamBaseHook.run`). Every method takes ``domain`` /
``api_prefix`` (default: the hook's, else the connection's) and ``request_timeout`` (default: the
connection's ``connect_timeout``), checks its arguments before anything is sent, and refuses a retired name
naming its replacement (docs/glossary.md). Refusals raise the errors of
:mod:`airflow_provider_jetstream.core.errors`.
"""

from __future__ import annotations

from typing import Any

from airflow_provider_jetstream.hooks.consumers import JetStreamConsumersHook
from airflow_provider_jetstream.hooks.kv import JetStreamKeyValueHook
from airflow_provider_jetstream.hooks.messages import JetStreamMessagesHook
from airflow_provider_jetstream.hooks.objects import JetStreamObjectStoreHook
from airflow_provider_jetstream.hooks.publish import JetStreamPublishHook
from airflow_provider_jetstream.hooks.status import JetStreamStatusHook
from airflow_provider_jetstream.hooks.streams import JetStreamStreamsHook


class JetStreamHook(
    JetStreamStreamsHook,
    JetStreamConsumersHook,
    JetStreamKeyValueHook,
    JetStreamObjectStoreHook,
    JetStreamPublishHook,
    JetStreamStatusHook,
    JetStreamMessagesHook,
):
    """NATS JetStream in any domain, from a ``jetstream`` connection: every role's methods on one hook.

    Streams: ``ensure_stream``, ``ensure_durable_source``, ``stream_info``, ``delete_stream``, ``purge_stream``;
    consumers: ``ensure_consumer``, ``delete_consumer``; KV: ``ensure_key_value``, ``kv_get`` / ``kv_put`` /
    ``kv_delete``, ``check_key``; object stores: ``ensure_object_store``, ``put_object`` / ``get_object`` /
    ``object_info`` / ``list_objects`` / ``delete_object`` / ``check_object``, ``awatch_objects``; publishing:
    ``publish``; status: ``replication_status``, ``check_replication``, ``retention_headroom``,
    ``consumer_lag``, ``event_drift``; messages: ``fetch`` (a batch) and ``consume`` (batch after batch), each
    message with ``ack()`` / ``nak(delay)`` / ``term()`` / ``in_progress()``.

    :param jetstream_conn_id: Airflow connection id. Default ``jetstream_default``.
    :param domain: JetStream domain to address (``$JS.<domain>.API``). Default: the connection's.
    :param api_prefix: JetStream API prefix, e.g. an imported ``JS.acc@hub.API``. Default: the
        connection's. ``domain`` and ``api_prefix`` exclude each other.
    """

    # Airflow 3.1's ProvidersManager builds the connection form only from these two (3.2+ reads provider
    # info's conn-fields and ui-field-behaviour and skips them): both are made from provider info.

    @classmethod
    def get_connection_form_widgets(cls) -> dict[str, Any]:
        """The form's extra fields as WTForms fields (Airflow 3.1), from provider info's ``conn-fields``."""
        from wtforms import BooleanField, IntegerField, PasswordField, StringField

        from airflow_provider_jetstream.get_provider_info import connection_form_fields

        widgets: dict[str, Any] = {}
        for name, field in connection_form_fields().items():
            schema = field["schema"]
            kind = schema["type"][0]
            if schema.get("format") == "password":
                field_class = PasswordField
            else:  # 3.1 allows no float field: a number is typed as text, which the connection accepts
                field_class = {"boolean": BooleanField, "integer": IntegerField}.get(kind, StringField)
            widgets[name] = field_class(field["label"], description=field["description"], default=schema.get("default"))
        return widgets

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """Hidden, relabelled and placeholder fields (Airflow 3.1), from provider info's ``ui-field-behaviour``
        (whose keys the hook method spells with underscores: ``hidden_fields``)."""
        from airflow_provider_jetstream.get_provider_info import connection_type_info

        behaviour = connection_type_info()["ui-field-behaviour"]
        return {key.replace("-", "_"): value for key, value in behaviour.items()}


#: The role hooks, each usable alone: what :class:`JetStreamHook` combines.
ROLES: tuple[type, ...] = JetStreamHook.__bases__

__all__ = ["ROLES", "JetStreamHook"]
