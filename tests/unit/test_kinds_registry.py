"""A team's own kinds: `outbox_bridge.kind` registers one as the built-in kinds are registered; a name used
twice or a module that does not import is one line naming it; which kinds a deployment accepts."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import BaseModel

import outbox_bridge
from outbox_bridge.core.settings import EXAMPLE_KINDS, TEST_KINDS, Settings
from outbox_bridge.handlers import base, registry


class Resize(BaseModel):
    width: int


@pytest.fixture
def known() -> Iterator[dict[str, base.Kind]]:
    """The registry, restored afterwards: kinds a test defines are forgotten."""
    before, defined_in = dict(base.KINDS), dict(base._DEFINED_IN)
    yield base.KINDS
    base.KINDS.clear()
    base.KINDS.update(before)
    base._DEFINED_IN.clear()
    base._DEFINED_IN.update(defined_in)


def test_a_decorated_function_becomes_a_kind_and_stays_a_function(known: dict[str, base.Kind]) -> None:
    @outbox_bridge.kind("resize_image", payload=Resize)
    def resize(ctx: outbox_bridge.JobContext, payload: Resize) -> dict[str, int]:
        return {"width": payload.width}

    assert known["resize_image"].run is resize and known["resize_image"].schema is Resize
    assert resize(None, Resize(width=3)) == {"width": 3}  # type: ignore[arg-type]


def test_the_built_in_kinds_are_registered_through_the_same_decorator() -> None:
    assert set(registry.BUILT_IN) == {"export", "document", "notify", "noop", "sleep", "flaky"}


def test_a_name_used_twice_names_both_places(known: dict[str, base.Kind]) -> None:
    with pytest.raises(outbox_bridge.KindError, match=r"kind 'export' is defined twice: in .*export and in "):
        outbox_bridge.kind("export", payload=Resize)(lambda ctx, payload: {})


@pytest.mark.parametrize("name", ["", "Resize", "9lives", "a b", "x" * 65])
def test_a_kind_name_outside_the_rule_is_refused(known: dict[str, base.Kind], name: str) -> None:
    with pytest.raises(outbox_bridge.KindError, match="must be 1 to 64 characters"):
        outbox_bridge.kind(name, payload=Resize)(lambda ctx, payload: {})


def test_a_payload_that_is_not_a_model_is_refused(known: dict[str, base.Kind]) -> None:
    with pytest.raises(outbox_bridge.KindError, match="payload must be a pydantic model class"):
        outbox_bridge.kind("odd", payload=dict)(lambda ctx, payload: {})  # type: ignore[arg-type]


def test_a_kinds_module_that_does_not_import_is_one_line_naming_it(
    known: dict[str, base.Kind], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "broken_kinds.py").write_text("import not_a_module_anywhere\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(outbox_bridge.KindError) as refused:
        registry.load(["broken_kinds"])
    said = str(refused.value)
    assert "\n" not in said and "'broken_kinds'" in said and "not_a_module_anywhere" in said


def test_loading_a_module_registers_its_kinds_once(
    known: dict[str, base.Kind], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "team_kinds.py").write_text(
        "import outbox_bridge\nfrom pydantic import BaseModel\n"
        "class P(BaseModel):\n    n: int\n"
        "@outbox_bridge.kind('team_double', payload=P)\n"
        "def double(ctx, payload):\n    return {'n': payload.n * 2}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "team_kinds", raising=False)
    assert "team_double" in registry.load(["team_kinds"])
    assert "team_double" in registry.load(["team_kinds"])  # again: nothing defined twice


def test_unset_allowed_kinds_accepts_every_loaded_kind_but_the_built_in_test_and_example_kinds(
    known: dict[str, base.Kind],
) -> None:
    outbox_bridge.kind("resize_image", payload=Resize)(lambda ctx, payload: {})
    production = registry.accepted(Settings(allowed_kinds=None))
    assert "resize_image" in production
    assert set(EXAMPLE_KINDS) == {"document", "export", "notify"}
    assert not {*TEST_KINDS, *EXAMPLE_KINDS} & set(production)
    development = registry.accepted(Settings(allowed_kinds=None, outbox_bridge_dev=True))
    assert {"resize_image", *TEST_KINDS, *EXAMPLE_KINDS} <= set(development)


def test_allowed_kinds_still_allowlists_either_way(known: dict[str, base.Kind]) -> None:
    for dev in (False, True):
        settings = Settings(allowed_kinds=("export", "sleep", "unknown"), outbox_bridge_dev=dev)
        assert registry.accepted(settings) == ("export", "sleep")
        assert registry.is_accepted(settings, "sleep") and not registry.is_accepted(settings, "notify")


def test_allowed_kinds_set_but_empty_is_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ALLOWED_KINDS", "")
    assert Settings(_env_file=None).allowed_kinds is None  # type: ignore[call-arg]
