"""Reading streams: the one pull engine (``pull``), the exact-range reader on it (``range``, tuned by ``settings``),
the first sequence at a time (``seek``) and the optional vectorised intake (``vectorised/``: numpy and pyarrow)."""
