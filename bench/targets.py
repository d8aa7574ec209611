"""The speed to reach (the "Benchmark" issue), checked against one run's figures, and the ratios that
compare the runs of one invocation."""

from __future__ import annotations

from typing import Any

Result = dict[str, Any]
STORE_JOBS_PER_SECOND = 3000
HTTP_JOBS_PER_SECOND = 1500


def figure(run: Result, *path: str) -> Any:
    """`run["phases"][path[0]][path[1]]...`, or None where a phase failed or was skipped."""
    value: Any = run.get("phases", {})
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


def find(runs: list[Result], mode: str, synchronous: str) -> Result | None:
    return next((r for r in runs if r["mode"] == mode and r["synchronous"] == synchronous), None)


def _check(name: str, measured: Any, met: bool | None) -> dict[str, Any]:
    return {"target": name, "measured": measured, "met": None if measured is None else met}


def targets(runs: list[Result]) -> list[dict[str, Any]]:
    """Each target of the issue for broker mode at FULL: what it asks, what was measured, whether met."""
    run = find(runs, "broker", "FULL")
    if run is None:
        return []
    store = figure(run, "burst_store", "jobs_per_second")
    http = figure(run, "burst_http", "jobs_per_second")
    p50 = figure(run, "latency", "accept_to_start_ms", "p50")
    p99 = figure(run, "latency", "accept_to_start_ms", "p99")
    waits = [
        figure(run, phase, "cost", "slow_lock_waits") for phase in ("burst_store", "burst_http", "latency")
    ]
    counted = [w for w in waits if w is not None]
    idle = figure(run, "idle", "per_process") or {}
    consumer_idle = [v["statements_per_second"] for k, v in idle.items() if k.startswith("consumer")]
    return [
        _check(
            f"store path >= {STORE_JOBS_PER_SECOND} jobs/s",
            store,
            store is not None and store >= STORE_JOBS_PER_SECOND,
        ),
        _check(
            f"HTTP path >= {HTTP_JOBS_PER_SECOND} jobs/s",
            http,
            http is not None and http >= HTTP_JOBS_PER_SECOND,
        ),
        _check("accept-to-start p50 < 3 ms", p50, p50 is not None and p50 < 3),
        _check("accept-to-start p99 < 10 ms", p99, p99 is not None and p99 < 10),
        _check("no slow lock waits (> 5 ms)", sum(counted) if counted else None, sum(counted) == 0),
        _check(
            "idle consumers never poll the store (statements/s)",
            max(consumer_idle) if consumer_idle else None,
            bool(consumer_idle) and max(consumer_idle) == 0,
        ),
    ]


def _ratio(a: Any, b: Any) -> float | None:
    return round(a / b, 2) if isinstance(a, int | float) and isinstance(b, int | float) and b else None


def ratios(runs: list[Result]) -> dict[str, float | None]:
    """Ratios between runs of this invocation (the machine is shared: absolute figures are noisy)."""
    found: dict[str, float | None] = {}
    for sync in ("FULL", "NORMAL"):
        broker, sqlite = find(runs, "broker", sync), find(runs, "sqlite", sync)
        if broker and sqlite:
            for path in ("store", "http"):
                found[f"broker/sqlite {path} throughput at {sync}"] = _ratio(
                    figure(broker, f"burst_{path}", "jobs_per_second"),
                    figure(sqlite, f"burst_{path}", "jobs_per_second"),
                )
    for run in runs:
        key = f"{run['mode']} {run['synchronous']} HTTP/store throughput"
        found[key] = _ratio(
            figure(run, "burst_http", "jobs_per_second"), figure(run, "burst_store", "jobs_per_second")
        )
    for mode in ("broker", "sqlite"):
        full, normal = find(runs, mode, "FULL"), find(runs, mode, "NORMAL")
        if full and normal:
            found[f"{mode} NORMAL/FULL store throughput"] = _ratio(
                figure(normal, "burst_store", "jobs_per_second"),
                figure(full, "burst_store", "jobs_per_second"),
            )
    return found
