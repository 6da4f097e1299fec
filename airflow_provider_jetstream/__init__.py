"""Apache Airflow provider for NATS JetStream: connections, hooks, operators, sensors, triggers."""

__version__ = "0.1.0"
