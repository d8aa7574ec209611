"""Which kinds a deployment accepts when ALLOWED_KINDS is not set: the useful ones; the test kinds (`sleep`
holds a worker up to an hour) only in a development setup or when named."""

from __future__ import annotations

import pytest

from outbox_bridge.core.settings import DEFAULT_KINDS, TEST_KINDS, Settings


@pytest.fixture(autouse=True)
def _no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ALLOWED_KINDS", "OUTBOX_BRIDGE_DEV"):
        monkeypatch.delenv(name, raising=False)


def test_unset_accepts_no_test_kind() -> None:
    assert Settings(_env_file=None).allowed_kinds == DEFAULT_KINDS  # type: ignore[call-arg]
    assert not set(TEST_KINDS) & set(DEFAULT_KINDS)


@pytest.mark.parametrize("dev", ["1", "true"])
def test_a_development_setup_also_accepts_the_test_kinds(monkeypatch: pytest.MonkeyPatch, dev: str) -> None:
    monkeypatch.setenv("OUTBOX_BRIDGE_DEV", dev)
    assert Settings(_env_file=None).allowed_kinds == DEFAULT_KINDS + TEST_KINDS  # type: ignore[call-arg]


def test_allowed_kinds_still_allowlists_either_way(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ALLOWED_KINDS", "export, sleep")
    assert Settings(_env_file=None).allowed_kinds == ("export", "sleep")  # type: ignore[call-arg]
    monkeypatch.setenv("OUTBOX_BRIDGE_DEV", "1")
    assert Settings(_env_file=None).allowed_kinds == ("export", "sleep")  # type: ignore[call-arg]
