"""docs/settings.md is the settings as the code has them: every setting is described, shown in one section,
and the page is what `outbox_bridge.core.reference` renders today."""

from __future__ import annotations

from pathlib import Path

from outbox_bridge.core import reference
from outbox_bridge.core.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "settings.md"
REGENERATE = "make settings-doc (or: python -m outbox_bridge.core.reference > docs/settings.md)"


def test_every_setting_has_a_description() -> None:
    missing = [name.upper() for name, field in Settings.model_fields.items() if not field.description]
    assert not missing, f"settings without a docstring in outbox_bridge/core/settings.py: {missing}"


def test_every_setting_is_shown_in_exactly_one_section() -> None:
    shown = [name for _, _, names in reference.SECTIONS for name in names]
    assert sorted(shown) == sorted(Settings.model_fields), "add the setting to one of reference.SECTIONS"


def test_the_settings_page_is_up_to_date() -> None:
    assert PAGE.read_text() == reference.render(), f"docs/settings.md is out of date: run {REGENERATE}"


def test_a_default_reads_as_a_user_writes_it() -> None:
    fields = Settings.model_fields
    assert reference.describe_default("lease_seconds", fields["lease_seconds"]) == "`30`"
    assert reference.describe_default("job_retention_seconds", fields["job_retention_seconds"]) == (
        "`604800` (7 days)"
    )
    assert reference.describe_default("metrics_port", fields["metrics_port"]) == "unset"
    assert reference.describe_default("results_dir", fields["results_dir"]) == "`./data/results`"
    assert reference.describe_bounds(fields["result_link_seconds"]) == "more than 0, at most 2592000"


def test_the_secrets_name_their_file_variants() -> None:
    page = reference.render()
    for name in ("AUTH_SECRET_FILE", "DATABASE_URL_FILE", "RABBITMQ_URL_FILE"):
        assert f"`{name}`" in page
