"""Provider metadata read by Airflow's ProvidersManager (``apache_airflow_provider`` entry point)."""

from __future__ import annotations

from typing import Any

from airflow_provider_jetstream import __version__
from airflow_provider_jetstream.core.connection.fields import EXTRA_FIELDS

INTEGRATION = "NATS JetStream"
#: The jetstream://<server>/<domain>/<stream> asset URI scheme.
ASSET_URIS: dict[str, Any] = {
    "schemes": ["jetstream"],
    "handler": "airflow_provider_jetstream.assets.jetstream.sanitize_uri",
    "factory": "airflow_provider_jetstream.assets.jetstream.create_asset",
    "to_openlineage_converter": "airflow_provider_jetstream.assets.jetstream.convert_asset_to_openlineage",
}


def connection_form_fields() -> dict[str, dict[str, Any]]:
    """The ``conn-fields`` of the ``jetstream`` connection type, from the connection's field table."""
    fields = {}
    for name, spec in EXTRA_FIELDS.items():
        schema: dict[str, Any] = {"type": [spec.kind, "null"]}
        if spec.secret:
            schema["format"] = "password"  # masked in the form and by the secrets masker
        if spec.default is not None:
            schema["default"] = spec.default
        # Airflow 3's form shows no placeholder for extra fields, so the example joins the description.
        example = f" Example: {spec.placeholder}" if spec.placeholder else ""
        fields[name] = {"label": spec.label, "description": spec.description + example, "schema": schema}
    return fields


def connection_type_info() -> dict[str, Any]:
    """The ``jetstream`` connection type as provider info declares it (Airflow 3.1 reads the same through the
    hook's ``get_connection_form_widgets`` / ``get_ui_field_behaviour``)."""
    return {
        "hook-class-name": "airflow_provider_jetstream.hooks.jetstream.JetStreamHook",
        "hook-name": "NATS JetStream",
        "connection-type": "jetstream",
        "conn-fields": connection_form_fields(),
        "ui-field-behaviour": {
            "hidden-fields": ["schema", "extra"],
            "relabeling": {
                "host": "Servers",
                "port": "Default port",
                "login": "User",
                "password": "Password",
            },
            "placeholders": {
                "host": "nats://hub-1:4222,nats://hub-2:4222",
                "port": "4222",
                "login": "acc",
                "password": "password of the NATS user",
                **{name: spec.placeholder for name, spec in EXTRA_FIELDS.items() if spec.placeholder},
            },
        },
    }


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "airflow-provider-jetstream",
        "name": "NATS JetStream",
        "description": "Airflow provider for NATS JetStream across leaf-node domains, with PySpark I/O.",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": INTEGRATION,
                "external-doc-url": "https://docs.nats.io/nats-concepts/jetstream",
                "tags": ["service"],
            }
        ],
        "hooks": [{"integration-name": INTEGRATION, "python-modules": ["airflow_provider_jetstream.hooks.jetstream"]}],
        "operators": [
            {
                "integration-name": INTEGRATION,
                "python-modules": [
                    "airflow_provider_jetstream.operators.streams",
                    "airflow_provider_jetstream.operators.consumers",
                    "airflow_provider_jetstream.operators.kv",
                    "airflow_provider_jetstream.operators.objects",
                    "airflow_provider_jetstream.operators.publish",
                    "airflow_provider_jetstream.operators.consume",
                    "airflow_provider_jetstream.operators.spark",
                ],
            }
        ],
        "sensors": [
            {
                "integration-name": INTEGRATION,
                "python-modules": [
                    "airflow_provider_jetstream.sensors.consumer_lag",
                    "airflow_provider_jetstream.sensors.replication_lag",
                    "airflow_provider_jetstream.sensors.retention_headroom",
                    "airflow_provider_jetstream.sensors.kv",
                    "airflow_provider_jetstream.sensors.objects",
                ],
            }
        ],
        "triggers": [
            {
                "integration-name": INTEGRATION,
                "python-modules": [
                    "airflow_provider_jetstream.triggers.consumer_lag",
                    "airflow_provider_jetstream.triggers.replication_lag",
                    "airflow_provider_jetstream.triggers.kv",
                    "airflow_provider_jetstream.triggers.messages",
                    "airflow_provider_jetstream.triggers.kv_events",
                    "airflow_provider_jetstream.triggers.objects",
                ],
            }
        ],
        # common.messaging: MessageQueueTrigger(scheme="jetstream", ...). The module raises Airflow's
        # AirflowOptionalProviderFeatureException without the [messaging] extra; the manager skips it then.
        "queues": ["airflow_provider_jetstream.queues.jetstream.JetStreamMessageQueueProvider"],
        "asset-uris": [ASSET_URIS],
        "dataset-uris": [ASSET_URIS],  # the pre-3.0 name, as the Kafka provider declares both
        "connection-types": [connection_type_info()],
    }
