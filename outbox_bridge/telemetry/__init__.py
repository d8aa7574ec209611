"""Prometheus metrics: the instruments every process records into (`instruments`), and how a registry of
them is served (`exposition`). It knows no store and no broker: what it reports about them is handed in."""
