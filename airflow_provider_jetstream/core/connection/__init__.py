"""Connecting: the checked settings of a ``jetstream`` connection (``settings``, its fields in ``fields``) and the
nats-py client they open (``client``: TLS or refusal, credentials never on a command line)."""
