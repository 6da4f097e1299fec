"""The connection options of the ``jetstream`` Spark data source and the environment variable that carries a
connection to a Spark driver.

Connection options become a :class:`JetStreamConnectionConfig` through ``JetStreamConnectionConfig.from_fields``
(the same validation as the Airflow connection); when ``servers`` is not given, the connection comes from the
environment variable ``JETSTREAM_CONNECTION_SECRET`` that :class:`JetStreamSparkSubmitOperator` sets (its
name ends in ``SECRET`` so Spark redacts it).

Airflow-free: Spark drivers and executors import it.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from airflow_provider_jetstream.core.arguments import DEFAULT, Arg, Args
from airflow_provider_jetstream.core.arguments.values import text
from airflow_provider_jetstream.core.connection.settings import JetStreamConnectionConfig
from airflow_provider_jetstream.core.errors import JetStreamConfigError

#: Environment variable holding the whole NATS connection as JSON (host, port, login, password,
#: extra); set by JetStreamSparkSubmitOperator for the driver. Spark redacts names with SECRET.
CONNECTION_ENV_VAR = "JETSTREAM_CONNECTION_SECRET"

#: Connection options: Spark option name -> (from_fields argument, extra key or None).
CONNECTION_OPTIONS: dict[str, str] = {
    "servers": "host",
    "user": "login",
    "password": "password",
    "token": "token",
    "nkeySeed": "nkey_seed",
    "credsFile": "creds_file",
    "creds": "creds",
    "tlsCaFile": "tls_ca_file",
    "tlsCertFile": "tls_cert_file",
    "tlsKeyFile": "tls_key_file",
    "tlsVerify": "tls_verify",
    "tlsHostname": "tls_hostname",
    "tlsHandshakeFirst": "tls_handshake_first",
    "connectTimeout": "connect_timeout",
}


def _text(doc: str) -> Arg:
    return Arg(text, None, DEFAULT, doc)


#: The connection options (checked by ``JetStreamConnectionConfig.from_fields``, as an Airflow connection).
CONNECTION = Args(
    "connection options",
    {
        "servers": _text("NATS servers: host[:port] or URLs, comma-separated"),
        "user": _text("user name"),
        "password": _text("password"),
        "token": _text("authentication token"),
        "nkeySeed": _text("user NKey seed"),
        "credsFile": _text("path of a .creds file"),
        "creds": _text("content of a .creds file"),
        "tlsCaFile": _text("PEM file of the CA"),
        "tlsCertFile": _text("PEM client certificate"),
        "tlsKeyFile": _text("PEM client key"),
        "tlsVerify": _text("verify the server certificate: true or false"),
        "tlsHostname": _text("hostname expected in the server certificate"),
        "tlsHandshakeFirst": _text("TLS before the NATS INFO: true or false"),
        "connectTimeout": _text("seconds to connect"),
        "connectionEnvVar": _text(f"environment variable with the connection JSON; default {CONNECTION_ENV_VAR}"),
    },
)


def connection_fields(config: JetStreamConnectionConfig) -> dict[str, Any]:
    """The ``from_fields`` arguments that rebuild ``config`` (secrets included: never log them)."""
    from airflow_provider_jetstream.core.connection.fields import EXTRA_FIELDS

    extra = {}
    for name, spec in EXTRA_FIELDS.items():
        value = getattr(config, name)
        if value is not None and value != spec.default:
            extra[name] = value
    return {
        "conn_id": config.conn_id,
        "host": ",".join(config.servers),
        "login": config.user,
        "password": config.password,
        "extra": extra,
    }


def connection_env(config: JetStreamConnectionConfig) -> dict[str, str]:
    """The environment (one variable, ``CONNECTION_ENV_VAR``, JSON) that hands ``config`` to a Spark driver."""
    return {CONNECTION_ENV_VAR: json.dumps(connection_fields(config))}


def connection_options(config: JetStreamConnectionConfig) -> dict[str, str]:
    """The connection options (``servers``, ``user``, ``password``, ``tlsCaFile``...) that rebuild ``config``
    where the data source runs: what a Spark Connect server needs, its environment not being the client's.
    Secrets included: never log them. Settings without an option (``client_name``, reconnects) take their defaults.
    """
    fields = connection_fields(config)
    by_target = {target: option for option, target in CONNECTION_OPTIONS.items()}
    given = {"host": fields["host"], "login": fields["login"], "password": fields["password"], **fields["extra"]}
    return {
        by_target[name]: (str(value).lower() if isinstance(value, bool) else str(value))
        for name, value in given.items()
        if name in by_target and value is not None
    }


def _fields_from_env(env_var: str) -> dict[str, Any] | None:
    raw = os.environ.get(env_var)
    if not raw:
        return None
    try:
        fields = json.loads(raw)
    except ValueError:
        raise JetStreamConfigError(f"environment variable {env_var} is not JSON connection fields") from None
    if not isinstance(fields, dict) or "host" not in fields:
        raise JetStreamConfigError(f"environment variable {env_var} must be a JSON object with at least 'host'")
    fields.setdefault("extra", {})
    fields.setdefault("conn_id", env_var)
    return fields


def connection_config(options: dict[str, str]) -> JetStreamConnectionConfig:
    """The connection: the environment variable's fields, overridden by connection options."""
    env_var = options.get("connectionEnvVar", CONNECTION_ENV_VAR)
    fields = _fields_from_env(env_var)
    if fields is None:
        if "servers" not in options:
            raise JetStreamConfigError(
                f"jetstream option servers is missing: give servers (e.g. nats://host:4222) or set the "
                f"environment variable {env_var} (JetStreamSparkSubmitOperator does)"
            )
        fields = {"conn_id": "spark-options", "host": None, "extra": {}}
    for option, target in CONNECTION_OPTIONS.items():
        if option not in options:
            continue
        if target in ("host", "login", "password"):
            fields[target] = options[option]
        else:
            fields["extra"][target] = options[option]
    if "servers" in options:
        fields["conn_id"] = "spark-options"
    try:
        return JetStreamConnectionConfig.from_fields(
            conn_id=fields["conn_id"],
            host=fields.get("host"),
            port=fields.get("port"),
            login=fields.get("login"),
            password=fields.get("password"),
            extra=dict(fields.get("extra") or {}),
        )
    except JetStreamConfigError as err:
        # The connection names its own fields (host, tls_verify): say which options set them.
        named = [
            f"{option} ({target})"
            for option, target in CONNECTION_OPTIONS.items()
            if option in options and re.search(rf"\b{target}\b", str(err))
        ]
        set_by = f" (set by jetstream option {', '.join(named)})" if named else ""
        raise JetStreamConfigError(f"jetstream connection options: {err}{set_by}") from None
