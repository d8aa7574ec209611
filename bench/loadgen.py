"""HTTP load from a C load generator (`wrk`), so the benchmark's own Python does not share the cores with
the api it measures.

Two phases, each `duration` seconds of `wrk -t2 -c<connections>` posting noop jobs, every request under a
fresh Idempotency-Key (a Lua script written next to the run's logs):
- `http_api`: the api alone. The relay and consumers (or baseline workers) are paused with SIGSTOP for the
  run, so only the api and the store work (stopped at a moment none of them holds the store's write lock,
  `bench.pausing`); the accepted jobs run after SIGCONT, and the phase ends when they have. Then as long a
  run of `GET /healthz` (the app's cheapest answer, through the same middleware; the other processes idle)
  gives the rate the api's framework and server allow: `POST /jobs`'s rate is stated as a share of it,
  beside how the api's group commit carried the posts (`group_commit`).
- `http_whole`: the whole deployment under the same load: 202s/s from wrk, and accepted-to-succeeded
  jobs/s from the store.

Without `wrk` on the PATH both phases are skipped with a note (`make bench` installs it with apt-get where
it can)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from typing import Any

from outbox_bridge.api.auth import issue_token
from outbox_bridge.bench.observe import throughput
from outbox_bridge.bench.pausing import paused
from outbox_bridge.bench.phases import Run, costs_since, start_costs
from outbox_bridge.bench.submit import OWNER

CONNECTIONS = 16
SETTLE_SECONDS = 0.5
THREADS = 2

SCRIPT = """-- Each request posts a noop job under a fresh Idempotency-Key, so every 202 is a new job.
local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("thread_number", threads)
end
local prefix
local counter = 0
function init(args)
  prefix = string.format("wrk-%d-%d", os.time(), thread_number or 0)
  wrk.method = "POST"
  wrk.body = '{"kind":"noop","payload":{}}'
  wrk.headers["Content-Type"] = "application/json"
  wrk.headers["Authorization"] = "Bearer " .. os.getenv("OUTBOX_BRIDGE_TOKEN")
end
function request()
  counter = counter + 1
  wrk.headers["Idempotency-Key"] = prefix .. "-" .. counter
  return wrk.format()
end
"""


def available() -> bool:
    return shutil.which("wrk") is not None


def skipped() -> dict[str, Any]:
    return {"skipped": "wrk is not installed (Debian: apt-get install wrk; `make bench` tries)"}


def http_api(run: Run) -> dict[str, Any]:
    """202s/s and latency of the api alone, the workers paused."""
    if not available():
        return skipped()
    tenant = run.tenant("http-api")
    others = [s for name, s in run.deployment.stack.services.items() if name != "api"]
    start = start_costs(run)
    with paused(others, run.deployment.settings) as tries:
        figures = _wrk(run, tenant)
    spent = costs_since(run, start, figures["stored"])
    api_cpu = api_cpu_per_job(spent["cost"]["cpu_seconds_per_1000_jobs"])
    finished = run.wait(tenant, figures["stored"])
    healthz = _wrk_healthz(run)
    return figures | {
        # The api's CPU per job it accepted (ms), and the whole machine's while only the api and wrk ran.
        "api_cpu_ms_per_job": api_cpu,
        "machine": spent["machine"],
        "group_commit": group_commit(spent["cost"], figures["accepted_per_second"]),
        "finished": finished,
        "pause_tries": tries,
        "healthz": healthz,
        # POST /jobs's 202s/s over GET /healthz's answers/s.
        "of_healthz": round(figures["accepted_per_second"] / healthz["accepted_per_second"], 3),
    }


def api_cpu_per_job(by_process: dict[str, float]) -> float | None:
    """The api's CPU per 1,000 jobs: its process's and, with `--api-workers`, each worker process's (those
    the counters name `api-<pid>`). None when no api process reported."""
    found = [cpu for name, cpu in by_process.items() if name == "api" or name.startswith("api-")]
    return round(sum(found), 3) if found else None


def group_commit(cost: dict[str, Any], per_second: float) -> dict[str, float | None]:
    """How the api's group commit carried the jobs (only the api writes while the others are paused): jobs
    per write transaction, how long each held the store (ms), and the share of the phase's seconds in which
    one was writing (`per_second` jobs a second, each `write_ms_per_job`). Each client waits for the
    transaction holding its job: when every client's request is in one, the api has nothing else to do."""
    per_transaction = cost.get("write_transactions_per_job")
    write_ms = cost.get("write_ms_per_job")
    if not per_transaction or write_ms is None:
        return {"jobs_per_transaction": None, "ms_per_transaction": None, "writing_share": None}
    return {
        "jobs_per_transaction": round(1 / per_transaction, 1),
        "ms_per_transaction": round(write_ms / per_transaction, 3),
        "writing_share": round(per_second * write_ms / 1000, 3),
    }


def http_whole(run: Run) -> dict[str, Any]:
    """202s/s and latency under wrk, and accepted-to-succeeded jobs/s of the whole deployment."""
    if not available():
        return skipped()
    tenant = run.tenant("http-whole")
    figures = _wrk(run, tenant)
    finished = run.wait(tenant, figures["stored"])
    return figures | {"finished": finished, "accepted_to_succeeded": throughput(run.watch.timings(tenant))}


def _wrk_healthz(run: Run) -> dict[str, Any]:
    """wrk's figures for `GET /healthz`, as many connections and as long as the posts."""
    how, out = _run_wrk(run, "/healthz", "healthz")
    return {"how": how + " GET /healthz"} | parse(out)


def _wrk(run: Run, tenant: str) -> dict[str, Any]:
    script = run.deployment.workdir / "post-noop.lua"
    script.write_text(SCRIPT)
    token = issue_token(run.deployment.settings.auth_secret, tenant=tenant, user=OWNER)
    how, out = _run_wrk(run, "/jobs", tenant, "-s", str(script), env={"OUTBOX_BRIDGE_TOKEN": token})
    # wrk counts the answers it read before its time was up; requests still in flight then were accepted
    # all the same: the store's count is the number of jobs to wait for.
    run.stop.wait(SETTLE_SECONDS)
    stored = run.watch.stored(tenant)
    return {"how": how + " (noop jobs, a fresh key each)", "stored": stored} | parse(out)


def _run_wrk(
    run: Run, path: str, name: str, *script: str, env: dict[str, str] | None = None
) -> tuple[str, str]:
    """wrk's report of `--duration` seconds at the api's `path` (kept as `wrk-<name>.txt` beside the run's
    logs), and its command line without the script and the URL."""
    seconds = max(1, round(run.options.duration))
    command = ["wrk", f"-t{THREADS}", f"-c{CONNECTIONS}", f"-d{seconds}s", "--latency"]
    out = subprocess.run(
        [*command, *script, f"{run.deployment.api_url}{path}"],
        env=os.environ | (env or {}),
        capture_output=True,
        text=True,
        timeout=seconds + 60,
        check=True,
    ).stdout
    (run.deployment.workdir / f"wrk-{name}.txt").write_text(out)
    return " ".join(command), out


def parse(out: str) -> dict[str, Any]:
    """The figures of wrk's report: requests, non-2xx answers, requests/s and the latency percentiles."""
    requests = int(_find(r"(\d+) requests in", out))
    rejected = int(_find(r"Non-2xx or 3xx responses: (\d+)", out, "0"))
    errors = sum(int(n) for n in re.findall(r"(?:connect|read|write|timeout) (\d+)", out))
    seconds = _ms(_find(r"requests in ([\d.]+(?:us|ms|s|m|h)),", out)) / 1000  # "8.00s", "2.00m"
    return {
        "requests": requests,
        "accepted": requests - rejected,
        "non_2xx": rejected,
        "socket_errors": errors,
        "accepted_per_second": round((requests - rejected) / seconds, 1),
        "latency_ms": {p: _ms(_find(rf"\s{p}%\s+([\d.]+\w+)", out)) for p in ("50", "90", "99")},
    }


def _find(pattern: str, text: str, default: str | None = None) -> str:
    found = re.search(pattern, text)
    if found is None:
        if default is None:
            raise ValueError(f"wrk's report has no match for {pattern!r}:\n{text}")
        return default
    return found.group(1)


def _ms(value: str) -> float:
    number, unit = re.fullmatch(r"([\d.]+)(us|ms|s|m|h)", value).groups()  # type: ignore[union-attr]
    return round(float(number) * {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0, "h": 3600000.0}[unit], 3)
