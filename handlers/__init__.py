"""The job kinds, shared by the broker consumer and the SQLite-only baseline (which run them through
`worker/`)."""
