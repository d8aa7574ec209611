"""`outbox-bridge demo` runs its whole scenario on its own and prints the summary, on RabbitMQ and, when no
broker answers and none can be started, on the SQLite-only baseline, saying so and how to get a broker."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import make_settings
from tests.support.procs import BIN, free_port, wait_for

# What this file shows is about SQLite itself (or runs its own stores): once, on SQLite.
pytestmark = pytest.mark.databases("sqlite")


def _run_demo(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "OUTBOX_BRIDGE_FAULTS"}}
    environment.update(env)
    # A port of its own: two demos that both find 8000 free would share one api.
    return subprocess.run(
        [str(BIN), "demo", "--port", str(free_port()), *args],
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
        "The stack has stopped",
    ):
        assert expected in out, f"{expected!r} missing from the demo output:\n{out[-3000:]}"
    token = out.split("operator token (valid for a day):\n", 1)[1].splitlines()[0].strip()
    assert re.fullmatch(r"[\w-]+\.[\w-]+\.[\w-]+", token), f"the whole token on one line: {token!r}"


@pytest.mark.slow
def test_demo_on_rabbitmq_finishes_and_prints_the_summary(tmp_path: Path, rabbitmq_url: str) -> None:
    names = make_settings(tmp_path)  # names the demo must not use: it picks its own for each run
    result = _run_demo(
        tmp_path,
        RABBITMQ_URL=rabbitmq_url,
        EXCHANGE=names.exchange,
        QUEUE=names.queue,
        DEAD_LETTER_EXCHANGE=names.dead_letter_exchange,
        DEAD_LETTER_QUEUE=names.dead_letter_queue,
    )
    _assert_summary(result, "consumer-1")
    queue = re.search(r"queue (demo-[0-9a-f]{8}) ", result.stdout)
    assert queue is not None, "the demo names the queue of its own it used"


def _processes_with(variable: str) -> list[int]:
    """The pids of this user's processes whose environment holds `variable` (NAME=value)."""
    found = []
    needle = variable.encode() + b"\0"
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if needle in environ and state != "Z":
            found.append(int(entry.name))
    return found


@pytest.fixture
def demo_under_test(tmp_path: Path, rabbitmq_url: str) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """`outbox-bridge demo` started in the background (its output in a file); whatever of it is still
    running at the end is killed, so a failure here leaves nothing behind."""
    output = tmp_path / "demo.out"
    environment = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "OUTBOX_BRIDGE_FAULTS"}}
    environment["RABBITMQ_URL"] = rabbitmq_url
    with output.open("wb") as sink:
        demo = subprocess.Popen(
            [str(BIN), "demo", "--port", str(free_port())],
            cwd=tmp_path,
            env=environment,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    yield demo, output
    if demo.poll() is None:
        demo.kill()
        demo.wait(10)
    queue = re.search(r"queue (demo-[0-9a-f]{8}) ", output.read_text(errors="replace"))
    for pid in _processes_with(f"QUEUE={queue.group(1)}") if queue else []:
        os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
def test_sigterm_to_the_demo_stops_every_process_it_started(
    demo_under_test: tuple[subprocess.Popen[bytes], Path],
) -> None:
    demo, output = demo_under_test
    started = re.compile(r"^\s+consumer-2\s+pid \d+.*\n\s+queue (demo-[0-9a-f]{8}) ", re.MULTILINE)
    wait_for(lambda: started.search(output.read_text(errors="replace")), timeout=90, what="the stack's pids")
    text = output.read_text(errors="replace")
    queue = started.search(text).group(1)  # type: ignore[union-attr]
    pids = [int(p) for p in re.findall(r"^\s+\S+\s+pid (\d+)", text, re.MULTILINE)]
    assert len(pids) == 4, text
    assert sorted(_processes_with(f"QUEUE={queue}")) == sorted(pids)

    demo.send_signal(signal.SIGTERM)

    assert demo.wait(60) != 0
    assert _processes_with(f"QUEUE={queue}") == [], "api, relay and consumers stopped with the demo"
    assert "Stopped by SIGTERM" in output.read_text(errors="replace")


@pytest.mark.slow
def test_with_no_broker_to_be_had_the_demo_runs_on_the_sqlite_baseline_and_says_so(tmp_path: Path) -> None:
    """Nothing listens at RABBITMQ_URL and no rabbitmq-server is on PATH: the scenario runs all the same,
    on baseline workers, and the demo says why."""
    url = f"amqp://guest:secret@127.0.0.1:{free_port()}/%2F"
    path = os.pathsep.join(
        d for d in os.environ["PATH"].split(os.pathsep) if d and not (Path(d) / "rabbitmq-server").exists()
    )
    result = _run_demo(tmp_path, RABBITMQ_URL=url, PATH=path)
    _assert_summary(result, "worker-1")
    said = " ".join(result.stdout.split())  # rich wraps long lines
    shown = url.replace(":secret@", ":***@")
    assert f"no broker answers at {shown}; running the demo on the SQLite-only baseline" in said
    assert "docker compose up -d rabbitmq" in said and "RABBITMQ_URL" in said
    assert "secret" not in result.stdout
    assert "SQLite-only baseline" in said.split("final states", 1)[0]
    assert re.search(r"^\s+worker-2\s+pid \d+", result.stdout, re.MULTILINE)
    assert not re.search(r"^\s+(relay|consumer-\d)\s+pid", result.stdout, re.MULTILINE)
