"""The example application (examples/shop), installed beside outbox-bridge as a user installs it: its
own tests pass with outbox-bridge's testing helpers, and an order placed by its own code, in its own
transaction, sends its receipt through the api, relay and consumers, and through the baseline's workers;
the kinds come from its `outbox_bridge.kinds` entry point, with nothing else configured."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from outbox_bridge.api.auth import issue_token
from outbox_bridge.jobstore import db, migrate
from tests.conftest import make_settings
from tests.support import procs

pytestmark = pytest.mark.slow
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "shop"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example installed (a wheel built from a copy of it) into a directory of its own, which
    PYTHONPATH then adds to outbox-bridge's environment, entry points and all."""
    source = tmp_path_factory.mktemp("example") / "shop"
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    target = tmp_path_factory.mktemp("site")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            target,
            source,
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return target


@pytest.mark.databases("sqlite")
def test_the_examples_own_tests_pass_with_the_testing_helpers(site: Path, tmp_path: Path) -> None:
    tests = tmp_path / "tests"
    shutil.copytree(EXAMPLE / "tests", tests)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tests)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(site)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "4 passed" in done.stdout


@pytest.mark.parametrize(
    "workers",
    [
        pytest.param([["relay"], ["consumer", "--concurrency", "2"]], id="broker", marks=pytest.mark.broker),
        pytest.param(
            [["worker", "--concurrency", "2"]], id="baseline", marks=pytest.mark.databases("sqlite")
        ),
    ],
)
def test_an_order_placed_by_the_example_sends_its_receipt_once(
    site: Path, tmp_path: Path, started: list[procs.Proc], rabbitmq_url: str, workers: list[list[str]]
) -> None:
    settings = make_settings(tmp_path, allowed_kinds=None, rabbitmq_url=rabbitmq_url)
    engine = db.make_engine(settings)
    migrate.init_schema(settings, engine)
    engine.dispose()
    mailbox = tmp_path / "mailbox.jsonl"
    env = {"PYTHONPATH": str(site), "SHOP_MAILBOX": str(mailbox)}
    port = procs.free_port()
    for args in [["api", "--port", str(port)], *workers]:
        started.append(procs.start(args, settings, tmp_path / "logs", args[0], **env))
    procs.wait_http(f"http://127.0.0.1:{port}/healthz", started[0], timeout=30)

    shop = {
        **procs.settings_env(settings, **env),
        "SHOP_API": f"http://127.0.0.1:{port}",
        "SHOP_TOKEN": issue_token(settings.auth_secret, tenant="shop", user="clerk"),
    }
    placed = subprocess.run(
        [sys.executable, "-m", "shop", "place", "book", "ann@example.com", "1200"],
        env=shop, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert placed.returncode == 0, placed.stderr[-3000:]
    job_id = placed.stdout.split("receipt job ")[1].split()[0]
    waited = subprocess.run(
        [sys.executable, "-m", "shop", "wait", job_id], env=shop, capture_output=True, text=True, timeout=90
    )
    assert waited.returncode == 0, (
        waited.stdout + waited.stderr + "".join(p.output()[-1500:] for p in started)
    )
    assert waited.stdout.strip() == f"job {job_id} succeeded"
    sent = [json.loads(line) for line in mailbox.read_text().splitlines()]
    assert [(m["to"], m["order"]) for m in sent] == [("ann@example.com", 1)]
