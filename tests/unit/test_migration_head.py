"""The revision every process checks its store against (`migrate.HEAD`) is the migrations' own head: a new
migration that forgets to move it fails here, not in a process refusing a store that `db upgrade` migrated."""

from outbox_bridge.jobstore import migrate


def test_the_codes_revision_is_the_newest_migration() -> None:
    assert migrate.head_revision() == migrate.migrations_head()
