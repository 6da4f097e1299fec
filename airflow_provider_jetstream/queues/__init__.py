"""common.messaging queue providers: the ``jetstream`` scheme of ``MessageQueueTrigger``."""
