"""`bench` stays outside the runtime: no runtime module imports it, it imports numpy and matplotlib (its
optional extra) only where it uses them, and `outbox-bridge bench` without that extra says how to get it."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from outbox_bridge.cli import app

RUNTIME_PACKAGES = (
    "core",
    "broker",
    "jobstore",
    "api",
    "relay",
    "consumer",
    "handlers",
    "baseline",
    "outbox_bridge",
)

IMPORT_EVERYTHING = f"""
import importlib, pkgutil, sys
for package in {RUNTIME_PACKAGES!r}:
    for info in pkgutil.walk_packages(importlib.import_module(package).__path__, package + "."):
        if ".migrations" not in info.name and not info.name.endswith("__main__"):
            importlib.import_module(info.name)
loaded = lambda *tops: sorted(n for n in sys.modules if n.split(".")[0] in tops)
print("runtime:", loaded("bench", "numpy", "matplotlib"))
import bench.runner
print("bench:", loaded("numpy", "matplotlib"))
"""


def test_no_runtime_module_imports_bench_and_bench_imports_no_extra_at_import_time() -> None:
    """In a fresh interpreter: every runtime module (alembic's migration scripts and `__main__` aside, which
    run rather than import), then the benchmark's entry point."""
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_EVERYTHING], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.splitlines() == ["runtime: []", "bench: []"], done.stderr


def test_bench_without_its_extra_says_in_one_line_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    real_find_spec = importlib.util.find_spec

    def without_the_extra(name: str, package: str | None = None) -> object:
        return None if name in {"numpy", "matplotlib"} else real_find_spec(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", without_the_extra)
    result = CliRunner().invoke(app, ["bench", "--mode", "both"])
    assert result.exit_code == 1
    assert result.output.splitlines() == [
        "outbox-bridge: bench needs numpy and matplotlib, from the bench extra: "
        "pip install 'outbox-bridge[bench]'"
    ]
