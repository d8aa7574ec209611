"""What installing outbox-bridge adds to a user's environment: one import package, `outbox_bridge`, holding
the folders of the repository as its subpackages, from the wheel and from an editable install alike."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.databases("sqlite")  # no store here: once is enough
UNSHIPPED = (".git", ".venv", "build", "data", "*.egg-info", "__pycache__", ".*_cache", "test-artifacts")
SUBPACKAGES = {"api", "relay", "consumer", "baseline", "jobstore", "handlers", "bench"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[zipfile.ZipFile]:
    # Built from a copy, so that the build's own files never land in the checkout the other tests run from.
    source = tmp_path_factory.mktemp("source") / "outbox-bridge"
    shutil.copytree(ROOT, source, symlinks=True, ignore=shutil.ignore_patterns(*UNSHIPPED))
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            out,
            source,
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    (built,) = out.glob("outbox_bridge-*.whl")
    with zipfile.ZipFile(built) as archive:
        yield archive


def test_the_wheel_adds_one_top_level_name(wheel: zipfile.ZipFile) -> None:
    tops = {name.split("/")[0] for name in wheel.namelist()}
    assert {top for top in tops if not top.endswith(".dist-info")} == {"outbox_bridge"}


def test_the_repositorys_folders_are_subpackages_with_their_files(
    wheel: zipfile.ZipFile,
) -> None:
    names = set(wheel.namelist())
    for package in SUBPACKAGES | {"core", "worker", "broker", "launch", "telemetry"}:
        assert f"outbox_bridge/{package}/__init__.py" in names, package
    # The files beside the modules: the store's migrations, the dashboard's templates, the api's static files.
    assert "outbox_bridge/jobstore/alembic.ini" in names or any(
        n.startswith("outbox_bridge/jobstore/") and n.endswith(".mako") for n in names
    )
    assert any(n.startswith("outbox_bridge/jobstore/migrations/versions/") for n in names)
    assert any(n.startswith("outbox_bridge/api/static/") for n in names)
    assert any(n.startswith("outbox_bridge/api/templates/") for n in names)
    # Each store driver's statements, which it reads from its folder.
    for driver in ("sqlite", "postgresql"):
        assert f"outbox_bridge/jobstore/drivers/{driver}/sessions.sql" in names, driver


def test_the_editable_install_adds_no_name_but_outbox_bridge(tmp_path: Path) -> None:
    # From a directory that is not the checkout, as an application would import it.
    probe = "import importlib.util as u, sys; print(sorted(n for n in sys.argv[1:] if u.find_spec(n)))"
    done = subprocess.run(
        [sys.executable, "-c", probe, "outbox_bridge", *SUBPACKAGES, "core", "worker", "tests"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert done.stdout.strip() == "['outbox_bridge']", done.stderr


def test_the_wheel_is_typed_and_describes_itself(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    assert "outbox_bridge/py.typed" in names  # PEP 561: type checkers read the package's own hints
    (metadata,) = [name for name in names if name.endswith(".dist-info/METADATA")]
    fields = wheel.read(metadata).decode().split("\n\n")[0].splitlines()
    assert "Classifier: Typing :: Typed" in fields
    assert "Classifier: Programming Language :: Python :: 3.11" in fields
    assert "Requires-Python: >=3.11" in fields
    assert "License-Expression: MIT" in fields
