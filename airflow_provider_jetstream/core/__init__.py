"""The Airflow-free core: connections, JetStream API, pull reader, KV, specs, reconcile, replication, errors.

Spark executors and any Python program use these modules without Airflow installed;
``tests/test_architecture.py`` fails if importing any of them imports ``airflow``. The Airflow
layers (``hooks``, ``operators``, ``sensors``, ``triggers``) build on this package, never the
other way round.
"""
