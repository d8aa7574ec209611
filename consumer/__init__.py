"""The consumer: RabbitMQ delivery -> claim -> run -> commit -> ack."""
