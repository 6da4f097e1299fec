"""The NATS wire below nats-py's message objects: frames read by subscription id (:mod:`.intake`)."""
