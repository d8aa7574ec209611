pytest_plugins = ["outbox_bridge.testing"]
