"""``JetStreamTarget``: where an operator or sensor finds JetStream, and the role hook it works with there."""

from __future__ import annotations

from typing import Any, ClassVar

from airflow.sdk import BaseOperator

from airflow_provider_jetstream.utils.arguments import CheckedArguments


class JetStreamTarget(CheckedArguments, BaseOperator):
    """What every JetStream operator and sensor takes to find JetStream (a base of both: Airflow applies
    ``default_args`` to these arguments too), its arguments checked (:class:`CheckedArguments`).

    :param jetstream_conn_id: Airflow connection (type ``jetstream``). Default ``jetstream_default``.
    :param domain: JetStream domain to act in (``$JS.<domain>.API``). Default: the connection's.
    :param api_prefix: a JetStream API prefix instead of ``domain`` (an imported ``JS.acc@hub.API``). Default: the
        connection's.
    """

    #: The role hook the task works with (a hook class of :mod:`airflow_provider_jetstream.hooks`).
    hook_class: ClassVar[type]

    def __init__(
        self,
        *,
        jetstream_conn_id: str = "jetstream_default",
        domain: str | None = None,
        api_prefix: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.jetstream_conn_id = jetstream_conn_id
        self.domain = domain
        self.api_prefix = api_prefix

    def get_hook(self) -> Any:
        """The task's role hook (``hook_class``) for the checked connection id, domain and API prefix."""
        args = self.checked_arguments()
        return self.hook_class(args["jetstream_conn_id"], domain=args["domain"], api_prefix=args["api_prefix"])
