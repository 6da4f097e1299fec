"""The vectorised intake of the range reader: frames tapped from nats-py's read loop (``tap``), found in bulk
(``scan``), turned into Arrow columns (``columns``) and fed to the range reader (``reader``).

The one part of the core that needs numpy and pyarrow (the ``spark`` extra); nothing outside this package
imports them.
"""
