"""``JetStreamPlugin``: the Airflow plugin of this provider, registered by the ``airflow.plugins`` entry point.

It mounts the page's FastAPI app at ``/jetstream`` in Airflow's api-server and puts "JetStream" in the
navigation's Browse menu, the page shown inside Airflow's UI (``/plugin/jetstream``); and it adds the
api-server middleware that makes the connection list's Test button and the Edit form work for ``jetstream``
connections (:class:`~airflow_provider_jetstream.ui.connection_form.ConnectionFormMiddleware`); and the
listener that turns the notes tasks leave into their notes in the grid (:mod:`airflow_provider_jetstream.utils.notes`).
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from airflow_provider_jetstream.ui.app import app
from airflow_provider_jetstream.ui.connection_form import ConnectionFormMiddleware
from airflow_provider_jetstream.utils import notes


class JetStreamPlugin(AirflowPlugin):
    """The JetStream page (domains, streams, replication, consumers and their history, per connection) and
    the connection form's middleware."""

    name = "jetstream"
    fastapi_apps = [{"app": app, "url_prefix": "/jetstream", "name": "NATS JetStream"}]
    # href without a leading slash: relative to Airflow's base URL, so a base path works too.
    external_views = [
        {
            "name": "JetStream",
            "href": "jetstream/",
            "destination": "nav",
            "category": "browse",
            "url_route": "jetstream",
        }
    ]
    # In the scheduler: the notes JetStream tasks left become their notes in the grid when the run ends.
    listeners = [notes]
    fastapi_root_middlewares = [
        {"middleware": ConnectionFormMiddleware, "args": [], "kwargs": {}, "name": "jetstream connection form"}
    ]
