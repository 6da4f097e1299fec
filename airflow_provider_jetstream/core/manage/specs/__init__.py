"""Declarative specs for JetStream streams, mirrors/sources, consumers and KV buckets.

Pure logic, no network: DAG authors write plain dicts (templatable, serializable); these modules
validate them with messages that name the field, the value and what is allowed (with the closest
known key for a typo), turn them into exactly the JetStream API config the user gave, say which
server version each field needs, and diff them against a server's config.
"""

from airflow_provider_jetstream.core.arguments.durations import format_duration, parse_duration, parse_instant
from airflow_provider_jetstream.core.manage.specs.consumer import CONSUMER, ConsumerSpec, consumer_server_view
from airflow_provider_jetstream.core.manage.specs.diff import Change, Diff, diff_config
from airflow_provider_jetstream.core.manage.specs.fields import API_LEVEL_VERSIONS, Requirement
from airflow_provider_jetstream.core.manage.specs.kv import KeyValueSpec, encode_kv_value, kv_stream_name
from airflow_provider_jetstream.core.manage.specs.sources import describe_source, parse_source, source_key
from airflow_provider_jetstream.core.manage.specs.stream import STREAM, StreamSpec

__all__ = [
    "API_LEVEL_VERSIONS",
    "CONSUMER",
    "STREAM",
    "Change",
    "ConsumerSpec",
    "Diff",
    "KeyValueSpec",
    "Requirement",
    "StreamSpec",
    "consumer_server_view",
    "describe_source",
    "diff_config",
    "encode_kv_value",
    "format_duration",
    "kv_stream_name",
    "parse_duration",
    "parse_instant",
    "parse_source",
    "source_key",
]
