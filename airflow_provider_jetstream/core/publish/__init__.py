"""Publishing: which subjects data may go to (``subjects``) and the bounded, ack-checked publish engine (``engine``)."""
