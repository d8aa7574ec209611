"""Lay the package out as the wheel installs it, for tools that know nothing of `package-dir`.

The folders users know (`api/`, `relay/`, `consumer/`, ...) live at the repository's top level and install as
subpackages of `outbox_bridge`. mypy reads a package from a directory tree, so `make lint` copies the mapped
folders into `<target>/outbox_bridge` (python scripts/package_tree.py build/typecheck) and checks that tree.
"""

from __future__ import annotations

import shutil
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def package_dirs() -> dict[str, str]:
    """pyproject.toml's mapping of package names to the folders that hold them."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    mapping: dict[str, str] = config["tool"]["setuptools"]["package-dir"]
    return mapping


def lay_out(target: Path) -> Path:
    """Copy every mapped folder to where its package installs, under `target`; the package's own folder."""
    shutil.rmtree(target, ignore_errors=True)
    ignored = shutil.ignore_patterns("__pycache__", "*.pyc")
    # Parents before their subpackages, so that a subpackage is copied into its parent's copy.
    for package, folder in sorted(package_dirs().items(), key=lambda item: item[0].count(".")):
        shutil.copytree(ROOT / folder, target.joinpath(*package.split(".")), ignore=ignored)
    return target / "outbox_bridge"


if __name__ == "__main__":
    print(lay_out(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "build" / "typecheck"))
