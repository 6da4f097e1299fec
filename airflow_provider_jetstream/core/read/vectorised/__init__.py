"""The vectorised intake of the range reader: frames tapped from nats-py's read loop (``tap``), found in bulk
(``scan``), turned into Arrow columns (``columns``) and fed to the range reader (``reader``).

The one part of the core that needs numpy and pyarrow (the ``spark`` extra); nothing outside this package
imports them. Without them, importing it raises ``ImportError`` saying what to install; the range reader
then defaults to nats-py's (:func:`~airflow_provider_jetstream.core.read.settings.default_reader`).
"""

try:
    import numpy  # noqa: F401
    import pyarrow  # noqa: F401
except ImportError as err:  # the optional [spark] extra
    raise ImportError(
        f"the vectorised range reader needs numpy and pyarrow ({err}): install 'airflow-provider-jetstream[spark]', "
        "or read with reader='nats-py'",
        name=err.name,
    ) from err
