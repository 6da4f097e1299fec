"""Helpers shared by the test modules, one module per concern; fixtures stay in the ``conftest.py`` files.

- :mod:`.natsutil`: unique names, nats-py connections, streams and consumers made for a test, what a
  server's monitoring endpoint says of its clients.
- :mod:`.waiting`: waiting on a condition with a deadline (never a fixed sleep).
- :mod:`.logs`: the log lines of the code under test, captured: a logged decision is the signal a test waits for.
- :mod:`.triggers`: trigger round trips (serialize -> rebuild -> run) and the message trigger of the event tests.
- :mod:`.triggerer`: Airflow 3.3's triggerer around a real ``SharedStreamManager``.
- :mod:`.management`: raw JetStream API access, the API request watch and the quiet server.
- :mod:`.auth`: credentials made per run (NKeys, JWTs and .creds, a TLS CA).
- :mod:`.recorder`: a fake NATS server that records what a client sends.
- :mod:`.spark`: streams for the Spark tests and publishing into them.
- :mod:`.lineage`: the metadata DB's DAG, queue and asset-event rows.
- :mod:`.nats_js`: nats.js (the official JavaScript client) run with Node.
- :mod:`.wire`: Hypothesis strategies for names and ack replies; MSG/HMSG frames as the server writes them.
- :mod:`.fakes`: a recording NATS client for the unit tests of pure logic.
- :mod:`.fast_publisher`: a fast-ingest publish in a process of its own, for a test to kill mid-batch.
- :mod:`.killpoints`: kill points for the packaged stream_to_parquet job (and its spark-submit application).
"""
