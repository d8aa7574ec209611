"""The `outbox-bridge` command line."""
