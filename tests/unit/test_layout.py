"""The layout docs/architecture.md draws: every package imports only packages on floors below its own, so
shared pieces live in a room both sides import and nothing is borrowed sideways or from above."""

import ast
import os
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FLOORS = {
    "outbox_bridge": 6,
    "bench": 5,
    "relay": 4,
    "consumer": 4,
    "baseline": 4,
    "api": 3,
    "worker": 3,
    "launch": 2,
    "broker": 2,
    "jobstore": 2,
    "handlers": 2,
    "client": 2,
    "core": 1,
    "telemetry": 1,
}


PACKAGE = ROOT / "outbox_bridge"
SETUPTOOLS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def folder_of(package: str) -> Path:
    """Where the sources of `outbox_bridge.<package>` live: a folder of the package's own, or one at the
    repository's top level that pyproject.toml maps into it (`package-dir`)."""
    mapped = SETUPTOOLS["package-dir"].get(f"outbox_bridge.{package}")
    return ROOT / mapped if mapped else PACKAGE / package


def floor_of(module: str, names: list[str]) -> set[str]:
    """The parts of the project an import of `names` from `module` reaches: a subpackage's name, or
    "outbox_bridge" for the package's own root modules."""
    parts = module.split(".")
    if parts[0] != "outbox_bridge":
        return set()
    if len(parts) > 1:
        return {parts[1] if parts[1] in FLOORS else "outbox_bridge"}
    return {name if name in FLOORS else "outbox_bridge" for name in names}


def imported_packages(path: Path) -> set[str]:
    """The parts of the project `path` imports, anywhere in the file (lazy imports included)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found |= floor_of(alias.name, [])
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found |= floor_of(node.module, [alias.name for alias in node.names])
    return found


def sources(package: str) -> list[Path]:
    if package == "outbox_bridge":
        return sorted(PACKAGE.glob("*.py"))
    return sorted(folder_of(package).rglob("*.py"))


@pytest.mark.parametrize("package", sorted(FLOORS))
def test_a_package_imports_only_packages_on_lower_floors(package: str) -> None:
    wrong = [
        f"{path.relative_to(ROOT)} imports {other} (floor {FLOORS[other]})"
        for path in sources(package)
        for other in sorted(imported_packages(path))
        if other != package and FLOORS[other] >= FLOORS[package]
    ]
    assert not wrong, f"{package} is on floor {FLOORS[package]}: " + "; ".join(wrong)


def test_every_package_of_the_project_has_a_floor() -> None:
    mapped = {name.split(".")[1] for name in SETUPTOOLS["package-dir"] if name.count(".") == 1}
    packages = {p.parent.name for p in PACKAGE.glob("*/__init__.py")} | mapped | {"outbox_bridge"}
    assert packages == FLOORS.keys()


def test_every_source_file_has_one_path() -> None:
    """No symbolic link stands in for a second path: the mapped folders reach the package through
    pyproject.toml alone."""
    links = []
    for directory, folders, files in os.walk(ROOT):
        folders[:] = [name for name in folders if name not in {".venv", ".git", "build", "data"}]
        links += [os.path.join(directory, name) for name in folders + files]
    assert not [link for link in links if os.path.islink(link)]


def test_the_wheel_names_every_package_of_the_mapped_folders() -> None:
    """setuptools finds no package in a mapped folder by itself: pyproject.toml's `packages` names each."""
    found = {"outbox_bridge"}
    for package, folder in SETUPTOOLS["package-dir"].items():
        for init in (ROOT / folder).rglob("__init__.py"):
            parts = init.parent.relative_to(ROOT / folder).parts
            if (
                package == "outbox_bridge"
                and parts
                and f"outbox_bridge.{parts[0]}" in SETUPTOOLS["package-dir"]
            ):
                continue
            found.add(".".join((package, *parts)))
    assert found == set(SETUPTOOLS["packages"])
