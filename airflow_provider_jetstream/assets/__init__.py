"""Airflow asset URIs of JetStream streams: ``jetstream://<server>/<domain>/<stream>``."""
