"""`outbox-bridge bench`: start the real processes of each mode on a fresh store, run the phases, and
report throughput, latency, cost and (broker mode) a broker outage, side by side.

Runs, in order: each mode at the first `--synchronous` value with every phase, then each mode at the
other values with the throughput, latency and fsync phases. Each deployment first measures the SQLite
commit rate of the machine at that moment (`bench.calibrate`); broker deployments that fall short of
the store-path speed asked for are profiled with py-spy (`--profile`), and the broker outage runs last.

Whatever happens (an error, a phase past its bound, Ctrl-C, SIGTERM) every process, tracer and proxy
started here is stopped, and the broker names of the run are deleted."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any
from urllib.parse import urlsplit

from rich.console import Console

from outbox_bridge.bench import loadgen, phases, plots, probes, report, targets, webhooks
from outbox_bridge.bench.calibrate import broker_floor, quorum_hop, single_row_commits
from outbox_bridge.bench.deploy import BROKER, Deployment, broker_version, run_settings
from outbox_bridge.bench.observe import StoreWatch
from outbox_bridge.bench.options import Options, parse
from outbox_bridge.bench.outage import outage
from outbox_bridge.bench.proxy import BrokerProxy
from outbox_bridge.bench.submit import HttpSubmitter
from outbox_bridge.bench.tracing import strace_available
from outbox_bridge.core import amqp_urls
from outbox_bridge.core.settings import Settings, load
from outbox_bridge.jobstore import db

console = Console(stderr=True)
Phase = Callable[[phases.Run], dict[str, Any]]


class Stopper:
    """The first SIGINT or SIGTERM sets `stop` (the loops watch it) and raises KeyboardInterrupt in the
    main thread; later ones are only reported, so the cleanup they would interrupt runs to its end."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self._previous: dict[int, Any] = {}

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        if self.stop.is_set():
            console.print("stopping: closing what the benchmark started, please wait")
            return
        self.stop.set()
        raise KeyboardInterrupt(signal.strsignal(signum))

    @contextlib.contextmanager
    def installed(self) -> Iterator[Stopper]:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous[int(sig)] = signal.signal(sig, self._on_signal)
        try:
            yield self
        finally:
            for number, handler in self._previous.items():
                signal.signal(number, handler)


def plan(options: Options) -> list[tuple[str, str, bool]]:
    """(mode, synchronous, every phase?) for each deployment of the invocation."""
    first, *others = options.synchronous
    return [(m, first, True) for m in options.modes] + [(m, s, False) for s in others for m in options.modes]


SCENARIO_PHASES: dict[str, Phase] = {
    "priority": probes.priority,
    "fairness": probes.fairness,
    "delayed": probes.delayed,
}


def phase_list(options: Options, mode: str, full: bool) -> list[tuple[str, Phase]]:
    chosen: list[tuple[str, Phase]] = [("warmup", phases.warmup)]
    if options.scenario != "standard":  # a scenario of its own: its probes, nothing else
        return [*chosen, (options.scenario, SCENARIO_PHASES[options.scenario])]
    if full:
        chosen.append(("idle", phases.idle))
    chosen += [
        ("burst_store", phases.burst_store),
        ("burst_http", phases.burst_http),
    ]
    if full:
        chosen += [("http_api", loadgen.http_api), ("http_whole", loadgen.http_whole)]
    chosen += [("latency", phases.latency)]
    if options.light_rate:
        chosen.append(("latency_light", phases.latency_light))
    if full and mode == BROKER and options.webhook_deliveries:  # the relay sends them
        chosen.append(("webhooks", webhooks.deliveries))
    if options.fsync_jobs and strace_available() and options.database_url is None:
        chosen.append(("fsync", phases.fsyncs))
    return chosen


def run_deployment(
    options: Options,
    base: Settings,
    mode: str,
    synchronous: str,
    full: bool,
    stop: threading.Event,
    runs: list[dict[str, Any]],
) -> None:
    """Start one deployment, run its phases, stop it; its result goes into `runs` at once, so an
    interrupted run still reports what it measured. A failed phase is recorded and ends the deployment
    (its processes may be in any state); the figures of the phases before it stand."""
    label = f"{mode}-{synchronous.lower()}"
    result: dict[str, Any] = {"mode": mode, "synchronous": synchronous, "processes": options.consumers}
    result |= {
        "concurrency": options.concurrency or "default",
        "api_workers": options.api_workers,
        "phases": {},
    }
    result["load_average_at_start"] = [round(x, 2) for x in os.getloadavg()]
    runs.append(result)
    workdir = Path(tempfile.mkdtemp(prefix=f"outbox-bridge-bench-{label}-"))
    settings = run_settings(
        base, workdir, label=label, synchronous=synchronous, database_url=options.database_url
    )
    with contextlib.ExitStack() as cleanup:
        if not options.keep:
            cleanup.callback(shutil.rmtree, workdir, ignore_errors=True)
        else:
            console.print(f"{label}: logs and traces kept in {workdir}")
        wants_outage = mode == BROKER and full and options.outage_seconds
        proxy = _proxy(settings, options.outage_style, cleanup) if wants_outage else None
        deployment = cleanup.enter_context(
            Deployment(
                mode,
                settings,
                workdir,
                processes=options.consumers,
                concurrency=options.concurrency,
                api_workers=options.api_workers,
            )
        )
        cleanup.callback(lambda: result.update(pids=deployment.names()))
        try:
            result["calibration"] = single_row_commits(workdir, synchronous)
            if mode == BROKER:
                result["broker_calibration"] = quorum_hop(settings.rabbitmq_url)
                result["broker_floor"] = broker_floor(settings.rabbitmq_url)
            _started(deployment, label)
            run = _run_context(label, options, deployment, settings, stop, cleanup)
            _run_phases(run, phase_list(options, mode, full), result, proxy)
        except KeyboardInterrupt:
            raise
        except Exception as exc:
            result["error"] = f"{type(exc).__name__}: {exc}"
            console.print(f"[red]{label}: {result['error']}[/red]")
            console.print(deployment.tails(), markup=False)


def _started(deployment: Deployment, label: str) -> None:
    started = time.monotonic()
    deployment.start()
    console.print(
        f"{label}: {len(deployment.stack.services)} processes up in {time.monotonic() - started:.1f}s"
    )


def _proxy(settings: Settings, style: str, cleanup: contextlib.ExitStack) -> BrokerProxy:
    parts = urlsplit(amqp_urls.split(settings.rabbitmq_url)[0])  # the outage phase cuts the first node
    target = (parts.hostname or "localhost", parts.port or 5672)
    return cleanup.enter_context(BrokerProxy(target, style=style))


def _run_context(
    label: str,
    options: Options,
    deployment: Deployment,
    settings: Settings,
    stop: threading.Event,
    cleanup: contextlib.ExitStack,
) -> phases.Run:
    engine = db.make_engine(settings)
    cleanup.callback(engine.dispose)
    watch = StoreWatch(settings.database_url)
    cleanup.callback(watch.close)
    http = HttpSubmitter(deployment.api_url, settings.auth_secret)
    cleanup.callback(http.close)
    return phases.Run(label, options, deployment, engine, watch, http, stop)


def _run_phases(
    run: phases.Run, chosen: list[tuple[str, Phase]], result: dict[str, Any], proxy: BrokerProxy | None
) -> None:
    """The chosen phases in order; then a profile when one is wanted, and the outage last (it leaves the
    broker side connected through the proxy). The first failed phase ends the deployment."""
    for name, phase in chosen:
        if not _run_phase(run, name, phase, result):
            return
    if _needs_profile(run, result):
        for name, phase in (("profile", phases.profile), ("profile_http", phases.profile_http)):
            if not _run_phase(run, name, phase, result):
                return
    if proxy is not None:
        _run_phase(run, "outage", lambda r: outage(r, proxy), result)


def _run_phase(run: phases.Run, name: str, phase: Phase, result: dict[str, Any]) -> bool:
    console.print(f"{run.label}: {name} ...")
    started = time.monotonic()
    try:
        result["phases"][name] = phase(run)
    except KeyboardInterrupt:
        raise
    except Exception as exc:
        result["phases"][name] = {"error": f"{type(exc).__name__}: {exc}"}
        console.print(f"[red]{run.label}: {name} failed: {exc}[/red]")
        console.print(run.deployment.tails(), markup=False)
        return False
    console.print(f"{run.label}: {name} done in {time.monotonic() - started:.1f}s")
    return True


def _needs_profile(run: phases.Run, result: dict[str, Any]) -> bool:
    if run.options.profile == "never":
        return False
    if run.options.profile == "always":
        return True
    # auto: broker mode, when the store path falls short of the speed asked for at FULL (at NORMAL too:
    # there the commit path costs least, so the profile shows the CPU the code itself spends).
    measured = targets.figure(result, "burst_store", "jobs_per_second")
    return run.deployment.mode == BROKER and (measured is None or measured < targets.STORE_JOBS_PER_SECOND)


def _base_settings(options: Options) -> Settings:
    base = load()
    return base.model_copy(update={"rabbitmq_url": options.rabbitmq_url}) if options.rabbitmq_url else base


def main(argv: list[str]) -> int:
    """Run the benchmark; 0 when every deployment and phase ran to its end, 1 otherwise, 130 on Ctrl-C."""
    options = parse(argv)
    base = _base_settings(options)
    stopper = Stopper()
    results: dict[str, Any] = {
        "command": "outbox-bridge bench " + " ".join(argv),
        "code": report.code_version(),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "options": {k: str(v) if isinstance(v, Path) else v for k, v in vars(options).items()},
        "machine": report.machine(broker_version(base.rabbitmq_url) if BROKER in options.modes else None),
        "runs": [],
    }
    interrupted = False
    with stopper.installed():
        try:
            for mode, synchronous, full in plan(options):
                run_deployment(options, base, mode, synchronous, full, stopper.stop, results["runs"])
        except KeyboardInterrupt:
            interrupted = True
            console.print("[yellow]interrupted: writing the figures measured so far[/yellow]")
        except Exception:
            console.print(traceback.format_exc())
            results["error"] = "the benchmark failed; see the traceback above"
    return _finish(results, options, interrupted)


def _finish(results: dict[str, Any], options: Options, interrupted: bool) -> int:
    results["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    results["machine"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    results["targets"] = targets.targets(results["runs"])
    results["ratios"] = targets.ratios(results["runs"])
    path = report.write(results, options.out, options.file_suffix)
    pngs = plots.draw(results, options.out, options.file_suffix)
    report.show(results, Console())
    console.print(f"wrote {path} and {', '.join(str(p) for p in pngs) or 'no plots'}")
    if interrupted:
        return 130
    return 1 if report.errors(results["runs"]) or "error" in results else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
