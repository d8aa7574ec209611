"""The job store: schema, states, guarded transitions, outbox, settings and clock. No HTTP, no AMQP."""
