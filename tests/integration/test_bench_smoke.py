"""`outbox-bridge bench` run as a user runs it, small: it starts the real processes of each mode (two api
processes each), writes every figure to JSON with the plots, stops by itself, and leaves no process behind;
interrupted with Ctrl-C it still stops everything it started and keeps the figures measured so far."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from outbox_bridge.bench.calibrate import FLOOR_MESSAGES
from outbox_bridge.bench.tracing import strace_available
from tests.support.procs import BIN

# The benchmark makes stores of its own: once, whatever TEST_DATABASES says.
pytestmark = pytest.mark.databases("sqlite")

SMALL = [
    "--jobs", "200", "--consumers", "2", "--rate", "50", "--light-rate", "10", "--duration", "2",
    "--idle-seconds", "1", "--webhook-deliveries", "100",
    "--fsync-jobs", "50", "--outage-seconds", "1", "--synchronous", "FULL", "--profile", "never",
]  # fmt: skip
PROCESSES = {
    "broker": {"api", "relay", "consumer-1", "consumer-2"},
    "sqlite": {"api", "worker-1", "worker-2"},
}


def _bench(tmp_path: Path, args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(BIN), "bench", *args, "--out", str(tmp_path / "out")],
        cwd=tmp_path,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(proc: subprocess.Popen[str], timeout: float) -> tuple[int, str]:
    """Wait for the benchmark; past `timeout` stop it as Ctrl-C would (then kill) and fail."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        try:
            proc.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate(timeout=10)
        pytest.fail(f"bench did not stop by itself within {timeout:.0f}s")
    return proc.returncode, out + err


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie no one has reaped yet is gone for our purposes
    status = Path(f"/proc/{pid}/status")
    return status.exists() and "zombie" not in status.read_text()


def _assert_nothing_left(runs: list[dict[str, Any]]) -> None:
    pids = [int(pid) for run in runs for pid in run["pids"]]
    assert pids, "the results name no process"
    deadline = time.monotonic() + 5
    while (left := [p for p in pids if _alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, f"processes still running after the bench: {left}"


def _assert_burst(phase: dict[str, Any], processes: set[str]) -> None:
    assert phase["finished"] == {"succeeded": 200, "failed_or_dead": 0}
    assert phase["submitted"]["statuses"] == {"accepted": 200}
    assert phase["jobs_per_second"] > 0 and phase["accepts_per_second"] > 0
    cost = phase["cost"]
    assert cost["write_transactions_per_job"] > 0 and cost["statements_per_job"] > 0
    assert isinstance(cost["slow_lock_waits"], int)
    assert cost["write_ms_per_job"] > 0
    assert processes <= set(cost["write_ms_per_job_by_process"])
    assert processes <= set(cost["cpu_seconds_per_1000_jobs"])
    whole = phase["machine"]  # read from /proc: the tests run on Linux
    assert whole["cpu_seconds_per_1000_jobs"]["all"] > 0 and 0 < whole["busy_percent"] <= 100
    assert {"postgresql", "rabbitmq"} <= set(whole["cpu_seconds_per_1000_jobs"])
    start = phase["accept_to_start_ms"]
    assert 0 <= start["p50"] <= start["p95"] <= start["p99"] <= start["max"]


def _assert_run(run: dict[str, Any]) -> None:
    assert "error" not in run
    assert run["calibration"]["commits_per_second"] > 0
    if run["mode"] == "broker":  # the quorum queue's own hop, timed on a queue of its own
        hop = run["broker_calibration"]
        assert (
            hop["messages"] == 60
            and 0 < hop["publish_to_delivery_ms"]["p50"] <= hop["publish_to_delivery_ms"]["p99"]
        )
        floor = run["broker_floor"]  # RabbitMQ alone, as the broker path uses it
        assert floor["messages"] == FLOOR_MESSAGES and floor["messages_per_second"] > 0
        assert all(cpu > 0 for cpu in floor["cpu_ms_per_message"].values())
    phases = run["phases"]
    expected = {"warmup", "idle", "burst_store", "burst_http", "http_api", "http_whole", "latency"}
    expected |= {"latency_light"}
    expected |= {"fsync"} if strace_available() else set()
    expected |= {"outage", "webhooks"} if run["mode"] == "broker" else set()
    assert set(phases) == expected
    assert not [name for name, p in phases.items() if "error" in p]
    processes = PROCESSES[run["mode"]]
    idle = {name for name in phases["idle"]["per_process"] if not name.startswith("api-")}  # api workers
    assert idle == processes
    _assert_burst(phases["burst_store"], processes | {"bench"})
    _assert_burst(phases["burst_http"], processes)
    latency = phases["latency"]
    assert latency["due"] == 100 and latency["submitted"]["statuses"] == {"accepted": 100}
    assert len(latency["cdf_ms"]["accept_to_start"]) > 100
    assert latency["accept_to_succeeded_ms"]["p50"] >= latency["accept_to_start_ms"]["p50"]
    assert phases["latency_light"]["due"] == 20 and phases["latency_light"]["offered_rate"] == 10
    if "fsync" in phases:
        assert phases["fsync"]["fsyncs_per_job"] > 0  # synchronous=FULL syncs every commit
    if "webhooks" in phases:  # the relay's sender, to a local receiver
        sent = phases["webhooks"]["sending"]
        assert sent["deliveries"] == sent["attempts"] >= 100 and sent["deliveries_per_second"] > 0
        assert phases["webhooks"]["job_writes"]["wal_bytes_added_per_job"] > 0
    _assert_wrk(phases["http_api"], phases["http_whole"])
    if "skipped" not in phases["http_api"]:  # the api's own CPU, and the machine's with wrk's
        assert (
            0
            < phases["http_api"]["api_cpu_ms_per_job"]
            < phases["http_api"]["machine"]["cpu_seconds_per_1000_jobs"]["all"]
        )
        # The api's group commit: one transaction holds several clients' jobs; the store's one writer slot
        # is held for part of the phase, never for more than all of it.
        grouped = phases["http_api"]["group_commit"]
        assert grouped["jobs_per_transaction"] >= 1 and grouped["ms_per_transaction"] > 0, grouped
        assert 0 < grouped["writing_share"] <= 1.05, grouped


def _assert_wrk(*measured: dict[str, Any]) -> None:
    """wrk's phases ran where wrk is installed (CI installs it), and said why not elsewhere."""
    if shutil.which("wrk") is None and not os.environ.get("CI"):
        assert all("skipped" in phase for phase in measured)
        return
    for phase in measured:
        assert "skipped" not in phase, f"CI runs the HTTP load phases, but: {phase['skipped']}"
        assert phase["accepted"] > 0 and phase["non_2xx"] == 0, phase
        assert phase["stored"] >= phase["accepted"]  # wrk does not count answers still in flight at its end
        assert phase["finished"] == {"succeeded": phase["stored"], "failed_or_dead": 0}
        assert 0 < phase["latency_ms"]["50"] <= phase["latency_ms"]["99"]


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("mode", [pytest.param("broker", marks=pytest.mark.broker), "sqlite"])
def test_bench_of_one_mode_writes_every_figure_and_stops_by_itself(
    tmp_path: Path, mode: str, request: pytest.FixtureRequest
) -> None:
    """Each mode in a run of its own, so that the two run side by side; the ratios between modes, which
    only a run of both gives, are checked on figures of their own (tests/unit/test_bench_ratios.py)."""
    env = {"RABBITMQ_URL": request.getfixturevalue("rabbitmq_url")} if mode == "broker" else {}
    args = ["--mode", mode, *SMALL, "--api-workers", "2"]
    proc = _bench(tmp_path, args, env)
    code, output = _finish(proc, timeout=240)
    assert code == 0, output[-6000:]

    out = tmp_path / "out"
    results = json.loads((out / f"results-{mode}.json").read_text())
    runs = results["runs"]
    assert [(r["mode"], r["synchronous"]) for r in runs] == [(mode, "FULL")]
    (run,) = runs
    _assert_run(run)
    _assert_api_workers(run)
    pngs = ["latency-cdf", "latency-cdf-light", "throughput"]
    if mode == "broker":
        outage = run["phases"]["outage"]
        assert outage["accepted_during_outage"] > 0
        assert outage["submitted"]["statuses"] == {"accepted": outage["finished"]["succeeded"]}
        assert outage["drain_seconds"] is not None and outage["proxy"]["cut"] > 0
        pngs.append("outage")
        assert results["targets"] and all("met" in t for t in results["targets"])  # broker mode's targets
    else:
        assert results["targets"] == []
    assert results["ratios"][f"{mode} FULL HTTP/store throughput"] > 0
    for png in pngs:
        assert (out / f"{png}-{mode}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "store burst" in (out / f"table-{mode}.md").read_text()
    _assert_nothing_left(runs)


def _assert_api_workers(run: dict[str, Any]) -> None:
    """`--api-workers 2`: each api worker process writes its own counters beside its parent's, named
    api-<pid>, and is stopped with the rest."""
    assert run["api_workers"] == 2
    # Which api worker the kernel hands a phase's connections to is its own choice (under load one worker
    # may take them all, and one started late may have written nothing yet by the idle phase): each must
    # show up in some phase.
    named = set(run["phases"]["idle"]["per_process"])
    for phase in run["phases"].values():
        named |= set(phase.get("cost", {}).get("cpu_seconds_per_1000_jobs", {}))
    workers = sorted(name for name in named if name.startswith("api-"))
    assert len(workers) == 2, named
    if "skipped" not in run["phases"]["http_api"]:
        assert run["phases"]["http_api"]["api_cpu_ms_per_job"] > 0
    _assert_nothing_left([{"pids": [int(name.removeprefix("api-")) for name in workers]}])


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_bench_interrupted_stops_what_it_started_and_keeps_the_figures(tmp_path: Path) -> None:
    args = ["--mode", "sqlite", *SMALL, "--jobs", "100000"]
    proc = _bench(tmp_path, args, {})
    assert proc.stderr is not None
    deadline = time.monotonic() + 120
    for line in proc.stderr:  # bounded by the deadline and by the process ending
        if "burst_store ..." in line or time.monotonic() > deadline:
            break
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    code, output = _finish(proc, timeout=90)
    assert code == 130, output[-4000:]

    results = json.loads((tmp_path / "out" / "results-sqlite.json").read_text())
    (run,) = results["runs"]
    assert {"warmup", "idle"} <= set(run["phases"])
    assert "burst_store" not in run["phases"]
    _assert_nothing_left([run])
