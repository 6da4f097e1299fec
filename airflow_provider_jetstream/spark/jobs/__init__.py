"""Jobs that run under spark-submit."""
