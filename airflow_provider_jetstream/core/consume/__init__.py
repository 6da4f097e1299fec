"""At-least-once consumption of a durable pull consumer: the puller (``durable``), the ack floor of
``ack_policy: all`` consumers (``ack_floor``), dead-letter copies (``dead_letter``) and deliveries as plain data
(``deliveries``)."""
