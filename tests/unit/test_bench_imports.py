"""`bench` stays outside the runtime: no runtime module imports it, it imports numpy and matplotlib (its
optional extra) only where it uses them, and `outbox-bridge bench` without that extra says how to get it."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from outbox_bridge.cli import app

IMPORT_EVERYTHING = """
import importlib, pkgutil, sys
def walk(package):
    for info in pkgutil.iter_modules(importlib.import_module(package).__path__, package + "."):
        if info.name == "outbox_bridge.bench" or ".migrations" in info.name or info.name.endswith("__main__"):
            continue
        importlib.import_module(info.name)
        if info.ispkg:
            walk(info.name)
walk("outbox_bridge")
loaded = lambda *tops: sorted(n for n in sys.modules if any(n == t or n.startswith(t + ".") for t in tops))
print("runtime:", loaded("outbox_bridge.bench", "numpy", "matplotlib"))
import outbox_bridge.bench.runner
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


WORKER_SIDE = """
import sys
import outbox_bridge, outbox_bridge.consumer.main, outbox_bridge.baseline.worker, outbox_bridge.relay.main
print(sorted({m.split(".")[0] for m in sys.modules} & {"fastapi", "starlette", "uvicorn", "httpx", "jinja2"}))
"""


def test_the_worker_side_and_the_package_root_import_nothing_of_the_api_or_the_client() -> None:
    """`import outbox_bridge` (a team's kinds module does) and the relay, consumer and worker stay free of
    the api's and the client's libraries: `enqueue` and `Client` are imported on first use."""
    done = subprocess.run(
        [sys.executable, "-c", WORKER_SIDE], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]", done.stderr
