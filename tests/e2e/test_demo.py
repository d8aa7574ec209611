"""`outbox-bridge demo` runs its whole scenario on its own and prints the summary, on RabbitMQ and on the
SQLite-only baseline; with no broker it says how to get one."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import make_settings
from tests.support.procs import BIN, free_port

# What this file shows is about SQLite itself (or runs its own stores): once, on SQLite.
pytestmark = pytest.mark.databases("sqlite")


def _run_demo(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "OUTBOX_BRIDGE_FAULTS"}}
    environment.update(env)
    return subprocess.run(
        [str(BIN), "demo", *args],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=240,
    )


def _assert_summary(result: subprocess.CompletedProcess[str], worker: str) -> None:
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    for expected in (
        "final states",
        "accept -> start",
        "invalid payload -> 400",
        "same job id: True",
        "different payload -> 409",
        f"killed {worker} with SIGKILL",
        f"restarted {worker}",
        "send_email: rejected",
        "where to look next",
    ):
        assert expected in out, f"{expected!r} missing from the demo output:\n{out[-3000:]}"


@pytest.mark.slow
def test_demo_on_rabbitmq_finishes_and_prints_the_summary(tmp_path: Path, rabbitmq_url: str) -> None:
    names = make_settings(tmp_path)  # this test's own exchange and queue names
    result = _run_demo(
        tmp_path,
        RABBITMQ_URL=rabbitmq_url,
        EXCHANGE=names.exchange,
        QUEUE=names.queue,
        DEAD_LETTER_EXCHANGE=names.dead_letter_exchange,
        DEAD_LETTER_QUEUE=names.dead_letter_queue,
    )
    _assert_summary(result, "consumer-1")


@pytest.mark.slow
def test_demo_on_the_sqlite_baseline_finishes_and_prints_the_summary(tmp_path: Path) -> None:
    _assert_summary(_run_demo(tmp_path, "--broker", "none"), "worker-1")


def test_demo_without_a_broker_names_both_remedies(tmp_path: Path) -> None:
    result = _run_demo(tmp_path, RABBITMQ_URL=f"amqp://guest:guest@127.0.0.1:{free_port()}/%2F")
    assert result.returncode == 1
    assert "docker compose up -d rabbitmq" in result.stdout
    assert "RABBITMQ_URL" in result.stdout
    assert "--broker none" in result.stdout
    assert not (tmp_path / "data").exists()
