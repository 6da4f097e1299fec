"""Status checks: replication of mirrors and sources (``replication``, what the stream reports per origin in
``origins``, the verdicts and tables in ``report``), consumer lag and KV keys (``checks``)."""
