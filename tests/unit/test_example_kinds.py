"""The built-in example kinds (`document`, `export`, `notify`) run only where a deployment names them or in
development; the setups that show them off (the compose stack, the demo, the benchmark) each say so."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from outbox_bridge import demo
from outbox_bridge.core.settings import EXAMPLE_KINDS, Settings
from outbox_bridge.handlers import registry
from tests.unit.test_compose import ALL_APP_SERVICES, DEFAULTED

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", EXAMPLE_KINDS)
def test_an_example_kind_is_refused_unless_named_or_in_development(name: str) -> None:
    assert not registry.is_accepted(Settings(allowed_kinds=None), name)
    assert registry.is_accepted(Settings(allowed_kinds=(name,)), name)
    assert registry.is_accepted(Settings(allowed_kinds=None, outbox_bridge_dev=True), name)
    assert not registry.is_accepted(Settings(allowed_kinds=("other",), outbox_bridge_dev=True), name)


@pytest.mark.parametrize("service", ALL_APP_SERVICES)
def test_the_compose_stack_names_the_example_kinds_unless_env_names_others(service: str) -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    value = compose["services"][service]["environment"]["ALLOWED_KINDS"]
    match = DEFAULTED.match(value)
    assert match and match["name"] == "ALLOWED_KINDS"
    accepting = Settings(allowed_kinds=tuple(match["default"].split(",")))
    assert set(registry.accepted(accepting)) == set(EXAMPLE_KINDS)


def test_the_demo_is_a_development_run_that_accepts_every_kind_it_submits(tmp_path: Path) -> None:
    settings = Settings(allowed_kinds=None, database_url=f"sqlite:///{tmp_path / 'jobs.db'}")
    assert {*EXAMPLE_KINDS, "sleep", "flaky"} <= set(registry.accepted(demo._demo_settings(settings)))


def test_the_benchmark_accepts_the_kind_it_submits_under_any_allowed_kinds(tmp_path: Path) -> None:
    from outbox_bridge.bench import deploy

    for kinds in (None, ("export",)):
        base = Settings(allowed_kinds=kinds)
        made = deploy.run_settings(base, tmp_path, label="t", synchronous="FULL", database_url=None)
        assert registry.is_accepted(made, "noop")
