"""The layout docs/architecture.md draws: every package imports only packages on floors below its own, so
shared pieces live in a room both sides import and nothing is borrowed sideways or from above."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FLOORS = {
    "outbox_bridge": 5,
    "bench": 4,
    "relay": 4,
    "consumer": 4,
    "baseline": 4,
    "api": 3,
    "worker": 3,
    "launch": 2,
    "broker": 2,
    "jobstore": 2,
    "handlers": 2,
    "core": 1,
    "telemetry": 1,
}


def imported_packages(path: Path) -> set[str]:
    """The project's top-level packages `path` imports, anywhere in the file (lazy imports included)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found & FLOORS.keys()


@pytest.mark.parametrize("package", sorted(FLOORS))
def test_a_package_imports_only_packages_on_lower_floors(package: str) -> None:
    wrong = [
        f"{path.relative_to(ROOT)} imports {other} (floor {FLOORS[other]})"
        for path in sorted((ROOT / package).rglob("*.py"))
        for other in sorted(imported_packages(path))
        if other != package and FLOORS[other] >= FLOORS[package]
    ]
    assert not wrong, f"{package} is on floor {FLOORS[package]}: " + "; ".join(wrong)


def test_every_package_of_the_project_has_a_floor() -> None:
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"tests"}
    assert packages == FLOORS.keys()
