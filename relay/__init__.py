"""The outbox relay: outbox rows -> RabbitMQ under publisher confirms, and the leader's other chores, each a
service that `relay.relay.Relay` runs (`relay.services`)."""
