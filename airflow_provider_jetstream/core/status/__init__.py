"""Status checks: replication of mirrors and sources (``replication``: the rules and the check; what the stream
reports of each origin and what each origin holds, ``origins``; the verdicts and tables, ``report``),
consumer lag (``consumer_lag``), KV keys (``kv_key``), and the one wait loop of sensors and triggers
(``waiting``)."""
