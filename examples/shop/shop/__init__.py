"""A small shop: orders in its own table, and a receipt e-mailed for each through outbox-bridge."""
