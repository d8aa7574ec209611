"""Starting the project's processes on one host as a user would (`outbox-bridge api`, `relay`, ...): used by
the demo, the benchmark and the tests."""
