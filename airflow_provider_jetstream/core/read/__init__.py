"""Reading exact ranges of a stream: the pull engine (``pull``), the range reader on it (``range``) and the
optional vectorised intake (``vectorised/``: needs numpy and pyarrow)."""
