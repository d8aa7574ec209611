"""The figures of one invocation: a table in the terminal (and the same table as Markdown), the JSON,
and the machine they were measured on."""

from __future__ import annotations

import json
import os
import platform
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from outbox_bridge.bench.targets import figure

Result = dict[str, Any]


def machine(rabbitmq_version: str | None) -> dict[str, Any]:
    """The CPU, cores, memory and versions; the load average says how busy the shared machine was."""
    return {
        "cpu": _cpuinfo("model name"),
        "cores": os.cpu_count(),
        "memory_gib": _meminfo_gib(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "rabbitmq": rabbitmq_version,
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }


def code_version() -> dict[str, Any]:
    """The commit the processes ran, and how many files in the work tree differed from it (the processes
    run the work tree as it is)."""
    import subprocess

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], capture_output=True, text=True, timeout=10, check=True)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip()

    changed = git("status", "--porcelain", "--untracked-files=no")
    return {
        "commit": git("rev-parse", "HEAD"),
        "changed_files": None if changed is None else len(changed.splitlines()),
    }


def _cpuinfo(field: str) -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(field):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _meminfo_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return None


def _num(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def _percentiles(run: Result, phase: str, which: str) -> str:
    return _percentiles_of(figure(run, phase, which), "p50", "p95", "p99")


def _percentiles_of(found: dict[str, Any] | None, *keys: str) -> str:
    return " / ".join(_num(found.get(k), 2) for k in keys) if found else "-"


def _offered(run: Result, phase: str) -> str:
    offered, achieved = figure(run, phase, "offered_rate"), figure(run, phase, "achieved", "jobs_per_second")
    return "-" if offered is None else f"{_num(offered)} / {_num(achieved)}"


def _per_process(run: Result, *path: str, key: str | None = None, digits: int = 2) -> str:
    values = figure(run, *path) or {}
    shown = {name: (v.get(key) if key else v) for name, v in values.items()}
    return ", ".join(f"{name} {_num(v, digits)}" for name, v in shown.items()) or "-"


def _machine(run: Result, phase: str) -> str:
    """All the machine's CPU per 1,000 jobs (with the store's and the broker's servers' part of it) and
    how busy its cores were (`bench.machine`)."""
    found = figure(run, phase, "machine")
    if not found:
        return "-"
    cpu = found["cpu_seconds_per_1000_jobs"]
    servers = ", ".join(f"{name} {_num(cpu[name], 2)}" for name in cpu if name != "all")
    return f"{_num(cpu['all'], 2)} ({servers}); {_num(found['busy_percent'])} % of {found['cores']} cores"


PHASES_BY_LOAD = ("burst_store", "burst_http", "latency")


def _slow_waits(run: Result) -> str:
    found = [figure(run, p, "cost", "slow_lock_waits") for p in PHASES_BY_LOAD]
    return " / ".join(_num(w) for w in found)


def _wrk(run: Result, phase: str) -> str:
    found = figure(run, phase) or {}
    if "skipped" in found or "accepted_per_second" not in found:
        return "-"
    latency = found["latency_ms"]
    return f"{_num(found['accepted_per_second'])} ({_num(latency['50'], 2)} / {_num(latency['99'], 2)})"


def _of_healthz(run: Result) -> str:
    found = figure(run, "http_api") or {}
    if "of_healthz" not in found:
        return "-"
    return f"{_num(found['healthz']['accepted_per_second'])} ({_num(found['of_healthz'], 2)})"


def _wrk_cpu(run: Result) -> str:
    api = figure(run, "http_api", "api_cpu_ms_per_job")
    everything = figure(run, "http_api", "machine", "cpu_seconds_per_1000_jobs", "all")
    if api is None and everything is None:
        return "-"
    return f"{_num(api, 3)} / {_num(everything, 3)}"


def _group_commit(run: Result) -> str:
    """The api's group commit under wrk: jobs a transaction, ms each, and the share of the time one ran,
    beside how busy the machine's cores were (`bench.loadgen.group_commit`)."""
    found = figure(run, "http_api", "group_commit") or {}
    if found.get("jobs_per_transaction") is None:
        return "-"
    busy = figure(run, "http_api", "machine", "busy_percent")
    return (
        f"{_num(found['jobs_per_transaction'], 1)} jobs; {_num(found['ms_per_transaction'], 2)} ms; "
        f"{_num(100 * found['writing_share'])} % of the time; cores {_num(busy)} % busy"
    )


def _outage(run: Result) -> str:
    if run["mode"] != "broker" or figure(run, "outage") is None:
        return "-"
    o = run["phases"]["outage"]
    if "error" in o:
        return "failed"
    accepted, seconds = o["accepted_during_outage"], o["outage_seconds"]
    return f"{accepted} accepted in {seconds:.0f} s, drained {o['drain_seconds']:.2f} s"


def _webhook_costs(run: Result) -> str:
    """What the relay's sender spends per delivery (`bench.webhooks`)."""
    found = figure(run, "webhooks", "sending", "per_delivery")
    if not found:
        return "-"
    store = " / ".join(_num(found[k], 2) for k in ("write_transactions", "read_transactions", "statements"))
    return f"{store}; {_num(found['wal_bytes'] / 1024, 1)} KiB WAL; {_num(found['cpu_ms'], 2)} ms CPU"


def _floor(run: Result) -> str:
    """The broker's floor (`bench.calibrate.broker_floor`): its rate, and the machine's CPU per message
    with RabbitMQ's and the two clients' parts."""
    found = run.get("broker_floor") or {}
    cpu = found.get("cpu_ms_per_message")
    if not cpu:
        return "-"
    parts = ", ".join(f"{name} {_num(cpu[name], 3)}" for name in ("rabbitmq", "publisher", "consumer"))
    return f"{_num(found['messages_per_second'])}; {_num(cpu['machine'], 3)} ({parts})"


def _kib(value: float | None) -> float | None:
    return None if value is None else value / 1024


ROWS: list[tuple[str, Callable[[Result], str]]] = [
    (
        "SQLite single-row commits/s (calibration)",
        lambda r: _num((r.get("calibration") or {}).get("commits_per_second")),
    ),
    (
        "RabbitMQ quorum queue, publish-to-delivery p50 / p99 ms, 20 messages/s (calibration)",
        lambda r: _percentiles_of(
            (r.get("broker_calibration") or {}).get("publish_to_delivery_ms"), "p50", "p99"
        ),
    ),
    ("RabbitMQ alone, the broker path's use of it: messages/s; CPU ms per message (calibration)", _floor),
    (
        "store burst: jobs/s accepted-to-succeeded",
        lambda r: _num(figure(r, "burst_store", "jobs_per_second")),
    ),
    ("store burst: accepts/s", lambda r: _num(figure(r, "burst_store", "accepts_per_second"))),
    ("HTTP burst: jobs/s accepted-to-succeeded", lambda r: _num(figure(r, "burst_http", "jobs_per_second"))),
    ("HTTP burst: accepts/s (202s)", lambda r: _num(figure(r, "burst_http", "accepts_per_second"))),
    ("wrk, api alone: 202s/s (p50 / p99 ms)", lambda r: _wrk(r, "http_api")),
    ("wrk, api alone: GET /healthz answers/s (the 202s' share of it)", _of_healthz),
    ("wrk, api alone: CPU ms per job, api / whole machine (wrk's part too)", _wrk_cpu),
    (
        "wrk, api alone: a write transaction's jobs; how long it held the store; the share of the time one "
        "was writing; the cores' busy share",
        _group_commit,
    ),
    ("wrk, whole deployment: 202s/s (p50 / p99 ms)", lambda r: _wrk(r, "http_whole")),
    (
        "wrk, whole deployment: jobs/s accepted-to-succeeded",
        lambda r: _num(figure(r, "http_whole", "accepted_to_succeeded", "jobs_per_second")),
    ),
    ("fixed load: offered / achieved jobs/s", lambda r: _offered(r, "latency")),
    (
        "fixed load: accept-to-start p50/p95/p99 ms",
        lambda r: _percentiles(r, "latency", "accept_to_start_ms"),
    ),
    (
        "fixed load: accept-to-succeeded p50/p95/p99 ms",
        lambda r: _percentiles(r, "latency", "accept_to_succeeded_ms"),
    ),
    ("light load: offered / achieved jobs/s", lambda r: _offered(r, "latency_light")),
    (
        "light load: accept-to-start p50/p95/p99 ms",
        lambda r: _percentiles(r, "latency_light", "accept_to_start_ms"),
    ),
    (
        "light load: accept-to-succeeded p50/p95/p99 ms",
        lambda r: _percentiles(r, "latency_light", "accept_to_succeeded_ms"),
    ),
    (
        "write transactions/job (store burst)",
        lambda r: _num(figure(r, "burst_store", "cost", "write_transactions_per_job"), 2),
    ),
    (
        "write transactions/job (HTTP burst)",
        lambda r: _num(figure(r, "burst_http", "cost", "write_transactions_per_job"), 2),
    ),
    (
        "write transactions/job (at fixed load)",
        lambda r: _num(figure(r, "latency", "cost", "write_transactions_per_job"), 2),
    ),
    (
        "statements/job (store burst)",
        lambda r: _num(figure(r, "burst_store", "cost", "statements_per_job"), 2),
    ),
    (
        "write slot held, ms/job (store burst / HTTP burst / fixed load)",
        lambda r: " / ".join(_num(figure(r, p, "cost", "write_ms_per_job"), 2) for p in PHASES_BY_LOAD),
    ),
    (
        "write slot held at fixed load, ms/job by process",
        lambda r: _per_process(r, "latency", "cost", "write_ms_per_job_by_process"),
    ),
    ("fsyncs/job (strace, store path)", lambda r: _num(figure(r, "fsync", "fsyncs_per_job"), 2)),
    (
        "webhooks: deliveries/s, the relay's sender to a local receiver answering 204",
        lambda r: _num(figure(r, "webhooks", "sending", "deliveries_per_second")),
    ),
    (
        "webhooks, per delivery sent: write / read transactions / statements; WAL; sender CPU",
        _webhook_costs,
    ),
    (
        "webhooks: WAL KiB a matching endpoint adds to a finished job's completion",
        lambda r: _num(_kib(figure(r, "webhooks", "job_writes", "wal_bytes_added_per_job")), 2),
    ),
    ("slow lock waits > 5 ms (store/HTTP/fixed load)", _slow_waits),
    (
        "CPU s per 1,000 jobs (store burst)",
        lambda r: _per_process(r, "burst_store", "cost", "cpu_seconds_per_1000_jobs"),
    ),
    (
        "CPU s per 1,000 jobs (HTTP burst)",
        lambda r: _per_process(r, "burst_http", "cost", "cpu_seconds_per_1000_jobs"),
    ),
    ("whole machine, store burst: CPU s per 1,000 jobs; cores busy", lambda r: _machine(r, "burst_store")),
    ("whole machine, fixed load: CPU s per 1,000 jobs; cores busy", lambda r: _machine(r, "latency")),
    ("idle: statements/s", lambda r: _per_process(r, "idle", "per_process", key="statements_per_second")),
    ("broker outage", _outage),
    (
        "priority: high job behind 5,000 normal, accept-to-start p50/p95/p99 ms",
        lambda r: _percentiles(r, "priority", "probe_accept_to_start_ms"),
    ),
    (
        "fairness: tenant B behind A's 5,000, accept-to-start p50/p95/p99 ms",
        lambda r: _percentiles(r, "fairness", "probe_accept_to_start_ms"),
    ),
    (
        "delayed: noop 1 s ahead, run_at-to-start p50/p95/p99 ms",
        lambda r: _percentiles(r, "delayed", "probe_run_at_to_start_ms"),
    ),
]


def label(run: Result) -> str:
    return f"{run['mode']} {run['synchronous']}"


def table(runs: list[Result]) -> Table:
    t = Table(title="outbox-bridge bench", show_lines=True)
    t.add_column("figure")
    for run in runs:
        t.add_column(label(run), justify="right", overflow="fold")
    for name, cell in ROWS:
        t.add_row(name, *(cell(run) for run in runs))
    return t


def markdown(runs: list[Result]) -> str:
    head = "| figure | " + " | ".join(label(r) for r in runs) + " |"
    rule = "|---|" + "---:|" * len(runs)
    body = ["| " + name + " | " + " | ".join(cell(r) for r in runs) + " |" for name, cell in ROWS]
    return "\n".join([head, rule, *body]) + "\n"


def targets_table(checks: list[dict[str, Any]]) -> Table:
    t = Table(title="targets (broker mode, FULL)")
    for column in ("target", "measured", "met"):
        t.add_column(column)
    for c in checks:
        met = {True: "yes", False: "no", None: "not measured"}[c["met"]]
        t.add_row(c["target"], _num(c["measured"], 2), met)
    return t


def errors(runs: list[Result]) -> list[str]:
    return [
        f"{label(r)} {name}: {phase['error']}"
        for r in runs
        for name, phase in r.get("phases", {}).items()
        if isinstance(phase, dict) and "error" in phase
    ] + [f"{label(r)}: {r['error']}" for r in runs if "error" in r]


def write(results: Result, out: Path, suffix: str) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"results{suffix}.json"
    path.write_text(json.dumps(results, indent=1) + "\n")
    (out / f"table{suffix}.md").write_text(markdown(results["runs"]))
    return path


def show(results: Result, console: Console) -> None:
    console.print(table(results["runs"]))
    if results["targets"]:
        console.print(targets_table(results["targets"]))
    for name, value in results["ratios"].items():
        console.print(f"  {name}: {_num(value, 2)}")
    for line in errors(results["runs"]):
        console.print(f"[red]{line}[/red]")
