"""Provider metadata read by Airflow's ProvidersManager (``apache_airflow_provider`` entry point)."""

from __future__ import annotations

from typing import Any

from airflow_provider_jetstream import __version__

INTEGRATION = "NATS JetStream"


def _string(label: str, description: str, secret: bool = False) -> dict:
    schema: dict[str, Any] = {"type": ["string", "null"]}
    if secret:
        schema["format"] = "password"  # masked in the UI and by the secrets masker
    return {"label": label, "description": description, "schema": schema}


def _typed(kind: str, label: str, description: str, default: Any) -> dict:
    return {"label": label, "description": description, "schema": {"type": [kind, "null"], "default": default}}


CONN_FIELDS: dict[str, dict] = {
    "token": _string("Token", "Authentication token, instead of login/password.", secret=True),
    "nkey_seed": _string("NKey seed", "User NKey seed (starts with 'SU').", secret=True),
    "creds_file": _string("Creds file", "Path of a .creds file (user JWT and NKey seed) on the workers."),
    "creds": _string("Creds content", "Content of a .creds file, for secret backends.", secret=True),
    "tls_ca_file": _string("TLS CA file", "PEM file of the CA that signed the server certificate."),
    "tls_cert_file": _string("TLS client certificate", "PEM client certificate file, for mutual TLS."),
    "tls_key_file": _string("TLS client key", "PEM client key file, for mutual TLS."),
    "tls_verify": _typed("boolean", "TLS verify", "Verify the server certificate and hostname.", True),
    "tls_hostname": _string("TLS hostname", "Hostname expected in the server certificate."),
    "tls_handshake_first": _typed(
        "boolean", "TLS handshake first", "TLS before the NATS INFO (server handshake_first).", False
    ),
    "domain": _string("JetStream domain", "JetStream domain to address: API prefix $JS.<domain>.API."),
    "api_prefix": _string("JetStream API prefix", "Explicit API prefix, e.g. JS.acc@hub.API (not with domain)."),
    "client_name": _string("Client name", "Name shown for this client in the server's connection list."),
    "connect_timeout": _typed("number", "Connect timeout (s)", "Seconds to connect, all servers included.", 5),
    "allow_reconnect": _typed("boolean", "Reconnect", "Reconnect after a lost connection.", True),
    "max_reconnect_attempts": _typed(
        "integer", "Max reconnect attempts", "Reconnect attempts per server; -1 retries forever.", 60
    ),
    "reconnect_time_wait": _typed("number", "Reconnect wait (s)", "Seconds between reconnect attempts.", 2),
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
        "operators": [],
        "sensors": [],
        "triggers": [],
        "connection-types": [
            {
                "hook-class-name": "airflow_provider_jetstream.hooks.jetstream.JetStreamHook",
                "hook-name": "NATS JetStream",
                "connection-type": "jetstream",
                "conn-fields": CONN_FIELDS,
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
                        "token": "token (instead of user/password)",
                        "nkey_seed": "SUAM...",
                        "creds_file": "/opt/airflow/secrets/edge.creds",
                        "creds": "-----BEGIN NATS USER JWT-----...",
                        "tls_ca_file": "/opt/airflow/secrets/ca.pem",
                        "tls_cert_file": "/opt/airflow/secrets/client-cert.pem",
                        "tls_key_file": "/opt/airflow/secrets/client-key.pem",
                        "tls_hostname": "nats.example.com",
                        "domain": "hub",
                        "api_prefix": "JS.acc@hub.API",
                        "client_name": "airflow",
                        "connect_timeout": "5",
                    },
                },
            }
        ],
    }
