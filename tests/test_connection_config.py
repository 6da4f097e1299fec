"""The ``jetstream`` connection's fields: parsing and validation (pure logic, no server)."""

from __future__ import annotations

import ssl

import pytest

from airflow_provider_jetstream.core.arguments.names import domain_name as validate_domain
from airflow_provider_jetstream.core.connection.fields import api_prefix_for, redact_url
from airflow_provider_jetstream.core.connection.settings import JetStreamConnectionConfig
from airflow_provider_jetstream.core.errors import JetStreamConfigError


def build(host: str = "localhost", **kwargs) -> JetStreamConnectionConfig:
    extra = kwargs.pop("extra", {})
    return JetStreamConnectionConfig.from_fields(conn_id="nats_hub", host=host, extra=extra, **kwargs)


def test_host_list_becomes_server_urls_with_default_port() -> None:
    config = build("nats://hub-1:4222, hub-2, tls://hub-3:4443", port=5222)
    assert config.servers == ["nats://hub-1:4222", "nats://hub-2:5222", "tls://hub-3:4443"]
    assert build("wss://edge.example.com/nats, wss://edge-2:8443").servers == [
        "wss://edge.example.com/nats",
        "wss://edge-2:8443",
    ]
    assert build("ws://edge:8080").servers == ["ws://edge:8080"]


def test_default_port_is_4222() -> None:
    assert build("hub").servers == ["nats://hub:4222"]


@pytest.mark.parametrize("host", ["", "  ", "ftp://hub:21", "nats://:4222", "hub:notaport"])
def test_bad_host_names_the_field(host: str) -> None:
    with pytest.raises(JetStreamConfigError, match=r"connection 'nats_hub': (host|host entry)"):
        build(host)


def test_domain_and_api_prefix_together_is_an_error() -> None:
    with pytest.raises(JetStreamConfigError, match=r"domain='hub' and api_prefix='JS.acc@hub.API' were both given"):
        build(extra={"domain": "hub", "api_prefix": "JS.acc@hub.API"})


def test_unknown_extra_field_suggests_the_closest() -> None:
    with pytest.raises(JetStreamConfigError, match=r"unknown extra field 'domian' \(did you mean 'domain'\?\)"):
        build(extra={"domian": "hub"})


@pytest.mark.parametrize("domain", ["le af", "leaf.a", "leaf*", "hub>", "a/b"])
def test_bad_domain_names_value_and_rule(domain: str) -> None:
    with pytest.raises(JetStreamConfigError, match="is not a JetStream domain name"):
        build(extra={"domain": domain})


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"connect_timeout": "soon"}, "connect_timeout='soon' is not allowed: use a finite number >= 0.1"),
        ({"connect_timeout": 0}, "connect_timeout=0 is not allowed"),
        ({"max_reconnect_attempts": -5}, "max_reconnect_attempts=-5 is not allowed: use an integer >= -1"),
        ({"tls_verify": "maybe"}, "tls_verify='maybe' is not a boolean"),
        ({"creds": "x", "creds_file": "/a.creds"}, "creds and creds_file were both given"),
        ({"nkey_seed": "SUABC", "creds_file": "/a.creds"}, "nkey_seed and creds/creds_file were both given"),
        ({"nkey_seed": "UAXYZ"}, "nkey_seed is not a user NKey seed"),
        ({"tls_cert_file": "/c.pem"}, "tls_cert_file and tls_key_file go together"),
    ],
)
def test_invalid_extras_name_field_and_value(extra: dict, message: str) -> None:
    with pytest.raises(JetStreamConfigError, match="connection 'nats_hub': ") as err:
        build(extra=extra)
    assert message in str(err.value)


def test_token_with_password_is_refused() -> None:
    with pytest.raises(JetStreamConfigError, match="token and login/password were both given"):
        build(login="acc", password="pw", extra={"token": "t"})


def test_secret_values_are_not_in_messages_or_repr() -> None:
    config = build(login="acc", password="hunter2-pw", extra={"domain": "hub"})
    assert "hunter2-pw" not in repr(config)
    assert "hunter2-pw" not in config.describe()
    with pytest.raises(JetStreamConfigError) as err:
        build("nats://acc:hunter2-pw@hub:4222,ftp://acc:hunter2-pw@x", login=None)
    assert "hunter2-pw" not in str(err.value)
    assert "***" in str(err.value)


def test_ui_prefixed_extras_and_string_values_from_uri_form() -> None:
    config = build(extra={"extra__jetstream__domain": "leaf", "tls_verify": "false", "connect_timeout": "2.5"})
    assert (config.domain, config.tls_verify, config.connect_timeout) == ("leaf", False, 2.5)


def test_secrets_lists_every_secret_including_url_passwords() -> None:
    config = build("nats://u:in-url-pw@hub:4222", login="acc", password="pw")
    assert set(config.secrets) == {"pw", "in-url-pw"}
    assert set(build("nats://u:in-url-pw@hub:4222", extra={"creds": "C"}).secrets) == {"C", "in-url-pw"}


def test_connect_options_map_fields_to_nats_py() -> None:
    config = build(
        login="acc", password="pw", extra={"client_name": "airflow", "connect_timeout": 3, "max_reconnect_attempts": -1}
    )
    options = config.connect_options()
    assert options["user"] == "acc" and options["password"] == "pw"
    assert options["name"] == "airflow" and options["connect_timeout"] == 3
    assert options["max_reconnect_attempts"] == -1
    assert "tls" not in options


def test_tls_verify_off_gives_unverified_context() -> None:
    context = build("tls://hub:4222", extra={"tls_verify": False}).ssl_context()
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_NONE and not context.check_hostname


def test_api_prefix_for() -> None:
    assert api_prefix_for() == "$JS.API"
    assert api_prefix_for(domain="leaf") == "$JS.leaf.API"
    assert api_prefix_for(api_prefix="JS.acc@hub.API.") == "JS.acc@hub.API"
    with pytest.raises(JetStreamConfigError, match="both given"):
        api_prefix_for("leaf", "JS.acc@hub.API")
    with pytest.raises(JetStreamConfigError, match="not a JetStream API prefix"):
        api_prefix_for(api_prefix="$JS.*.API")


def test_redact_url() -> None:
    assert redact_url("nats://acc:secret@hub:4222") == "nats://acc:***@hub:4222"
    assert redact_url("nats://tokenvalue@hub:4222") == "nats://***@hub:4222"
    assert redact_url("nats://hub:4222") == "nats://hub:4222"


def test_validate_domain_accepts_hyphens() -> None:
    assert validate_domain("leaf-a") == "leaf-a"


def test_uri_form_with_several_servers_and_extras() -> None:
    from airflow.sdk import Connection

    conn = Connection.from_uri("jetstream://hub-1%3A4222%2Chub-2%3A4222?token=s3cret-tok&domain=leaf", conn_id="edge")
    config = JetStreamConnectionConfig.from_connection(conn)
    assert config.servers == ["nats://hub-1:4222", "nats://hub-2:4222"]
    assert (config.token, config.domain, config.auth_method) == ("s3cret-tok", "leaf", "token")


def test_the_connection_page_documents_every_extra_field() -> None:
    from pathlib import Path

    from airflow_provider_jetstream.core.connection.fields import EXTRA_FIELDS

    page = (Path(__file__).resolve().parents[1] / "docs" / "connection.md").read_text()
    assert [name for name in EXTRA_FIELDS if f"`{name}`" not in page] == []
