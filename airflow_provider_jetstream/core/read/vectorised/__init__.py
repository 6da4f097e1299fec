"""The vectorised intake of the range reader: frames tapped from nats-py's read loop (``tap``), found in bulk
(``scan``), turned into Arrow columns (``columns``) and fed to the range reader (``reader``).

The one part of the core that needs numpy and pyarrow (the ``spark`` extra); nothing outside this package
imports them. Without them, importing it raises ``ImportError`` saying what to install; the range reader
then defaults to nats-py's (:func:`~airflow_provider_jetstream.core.read.settings.default_reader`).
"""

from airflow_provider_jetstream.core.errors import require_extra

require_extra(("numpy", "pyarrow"), "the vectorised range reader", ", or read with reader='nats-py'")
