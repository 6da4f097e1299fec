"""Every public argument declared once: what each operation takes, on the argument layer of :mod:`..arguments`.

The shared declarations (connection id, domain, API prefix, names, timeouts, reconcile options:
``shared``), one signature per hook operation (``operations``), what only the operators take
(``operator_only``), the sensors' and waiting triggers' (``waits``), the event triggers'
(``events``) and the typed options of each operator family (``options``). Every name is the one
docs/glossary.md gives. The hook methods, operators, sensors and triggers check their arguments with these
signatures; the Spark options and the packaged job declare theirs beside them (``spark/options.py``,
``spark/job_args.py``).
"""
