"""What the relay and the consumers both say to RabbitMQ: the message, the topology, how to connect."""
