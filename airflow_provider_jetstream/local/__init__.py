"""Local NATS servers for tests, benchmarks and the demo (never used by a deployed provider)."""
