"""The Airflow-free core, on floors: each part imports only from the floors below it.

0. ``errors``: every exception, and the one classification (refuse / wait / retry);
1. ``arguments/`` (the one argument layer and its parsers), ``protocol`` (the wire protocol as data),
   ``sync`` (the one sync bridge);
2. ``connection/``: settings, fields, the nats-py client (TLS or refusal);
3. ``api``: the one speaker of the JetStream JSON API, in any domain or imported prefix;
4. ``manage/`` (specs, reconcile, KV buckets, the double-store guard), ``publish/`` (subjects, the
   publish engine), ``read/`` (the one pull engine, exact ranges, the optional vectorised intake);
5. ``consume/`` (the durable puller of the event triggers), ``status/`` (replication, consumer lag and
   KV key checks, the one wait loop);
6. ``signatures/``: every public argument declared once, one signature per operation.

Spark executors and any Python program use these modules without Airflow installed;
``tests/test_architecture.py`` fails if importing any of them imports ``airflow``, and enforces the
floors. The Airflow layers (``hooks``, ``operators``, ``sensors``, ``triggers``) build on this
package, never the other way round. ``docs/architecture.md`` names every module's concern.
"""
