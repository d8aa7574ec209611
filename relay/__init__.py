"""The outbox relay: outbox rows -> RabbitMQ under publisher confirms; the lease sweeper."""
