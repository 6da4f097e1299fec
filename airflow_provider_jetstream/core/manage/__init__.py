"""Declaring JetStream objects: specs (``specs/``), the reconcile ladder (``reconcile``), KV buckets (``buckets``)
and the double-store check of connected domains (``double_store``)."""
