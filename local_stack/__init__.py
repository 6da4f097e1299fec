"""The Docker-free stack of ``make stack`` and the deployment tests: PostgreSQL, Airflow, Spark and NATS.

Part of the repository, not of the wheel (``pyproject.toml`` packages ``airflow_provider_jetstream``
only): it is run from a checkout, ``python -m local_stack.stack --dags-folder dags``. It starts the
NATS hub and leaves with the package's own testing utility,
:class:`airflow_provider_jetstream.testing.LocalTopology`, which is what users' tests get.

- :mod:`local_stack.stack`: :class:`~local_stack.stack.LocalStack` (everything) and ``make stack``;
- :mod:`local_stack.control`: ``make stack-cut`` / ``make stack-relink``, a leaf cut off the running stack's
  hub and linked again, through its control socket;
- :mod:`local_stack.airflow_stack`: Airflow's processes and a small client of its REST API;
- :mod:`local_stack.processes`: managed process groups, PostgreSQL, a Spark standalone cluster, and
  :class:`~local_stack.processes.StackError`.
"""
