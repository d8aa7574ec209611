"""`outbox-bridge demo`: start a local stack and drive a realistic scenario through the HTTP API.

On RabbitMQ: api + relay + two consumers. With `--broker none`, or when no broker answers and none can be
started here (see `demo_broker`): api + two SQLite-only baseline workers, and the demo says so. The same
scenario runs either way; every process the demo starts, a local broker included, is stopped when it ends
(or on Ctrl-C), unless `--keep-running` was asked for (then when that ends)."""

from __future__ import annotations

import re
import shutil
import signal
import statistics
import sys
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table
from sqlalchemy import Connection, Engine
from sqlalchemy.engine import make_url

from outbox_bridge import demo_broker
from outbox_bridge.api.auth import TokenPolicy, secret_weakness
from outbox_bridge.broker import topology
from outbox_bridge.broker.connection import BROKER_ERRORS, broker_addresses, connect_first
from outbox_bridge.client.errors import ClientError
from outbox_bridge.client.http import Client
from outbox_bridge.client.job import Job as PublicJob
from outbox_bridge.core.settings import Settings
from outbox_bridge.demo_broker import Broker
from outbox_bridge.jobstore import db, migrate, queries
from outbox_bridge.jobstore.records import Job
from outbox_bridge.jobstore.states import TERMINAL, State
from outbox_bridge.launch.stack import Stack, free_port

console = Console()
DEMO_DIR = Path("data/demo")
TENANT = "acme"
RUN_TIMEOUT = 180.0


def run(settings: Settings, *, broker: str, keep_running: bool, port: int | None = None) -> int:
    """Run the scenario on `broker` (`rabbitmq` or `none`); on RabbitMQ, on the baseline instead when no
    broker can be had (saying so). 0 when every job finished."""
    found = (
        demo_broker.prepare(settings.rabbitmq_url, console.print) if broker == "rabbitmq" else Broker("none")
    )
    try:
        return _run_on(found, settings, keep_running=keep_running, port=port)
    finally:
        demo_broker.stop_started(found, console.print)


def _run_on(found: Broker, settings: Settings, *, keep_running: bool, port: int | None) -> int:
    broker = found.kind
    settings = _demo_settings(settings)
    engine = db.make_engine(settings, "demo")
    migrate.init_schema(settings, engine)
    if port is None:
        port = 8000 if _port_free(8000) else free_port()
    with _interrupts_stop_the_stack() as stopped_by:
        try:
            demo, jobs = _run_stack(settings, engine, found, port, keep_running)
        except KeyboardInterrupt:
            by = stopped_by[0] if stopped_by else "an interrupt"
            console.print(f"[bold]Stopped by {by}[/]: every process the demo started has been stopped.")
            return 130
        finally:
            if broker == "rabbitmq":
                _delete_broker_names(settings)
    if not keep_running:
        _summary(jobs, demo, port, running=False)
    return 0 if all(j.state in TERMINAL for j in jobs) else 1


def _run_stack(
    settings: Settings, engine: Engine, found: Broker, port: int, keep_running: bool
) -> tuple[Demo, list[Job]]:
    """Start the stack, drive the scenario, and stop every process again (also when interrupted)."""
    with Stack(settings, DEMO_DIR / "logs") as stack:
        _start(stack, found.kind, port)
        demo = Demo(settings, stack, f"http://127.0.0.1:{port}", found.kind, notes=list(found.notes))
        demo.drive()
        jobs = [job for job in db.read(engine, _jobs_of, demo.ids.values()) if job is not None]
        demo.notes.extend(_document_notes(demo))  # while the api still answers
        demo.client.close()
        if keep_running:
            _summary(jobs, demo, port, running=True)
            _keep_running(port)
        console.print("[bold]Stopping the stack[/]...")
    return demo, jobs


@contextmanager
def _interrupts_stop_the_stack() -> Iterator[list[str]]:
    """SIGTERM, like Ctrl-C, ends the demo with a KeyboardInterrupt, so the stack's `with` stops every
    process it started (they run in sessions of their own, so no signal reaches them directly). After the
    first, both are ignored, so a second Ctrl-C cannot cut that cleanup short. Yields the signal's name once
    one came."""
    received: list[str] = []

    def interrupt(signum: int, _frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        received.append(signal.Signals(signum).name)
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield received
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _delete_broker_names(settings: Settings) -> None:
    """Remove the demo's own queues and exchanges from the broker (best effort: it may be gone)."""
    nodes = broker_addresses(settings.rabbitmq_url, name="demo cleanup", timeout=5.0)
    try:
        connection, _node = connect_first(nodes)
    except BROKER_ERRORS:
        return
    try:
        topology.delete(connection.channel(), settings)
    except BROKER_ERRORS:
        pass
    finally:
        with suppress(*BROKER_ERRORS):
            connection.close()


def _jobs_of(conn: Connection, ids: Iterable[str]) -> list[Job | None]:
    return [queries.get_job(conn, job_id) for job_id in ids]


def _demo_settings(settings: Settings) -> Settings:
    """The demo's own store, results and short timings, so a killed consumer's jobs come back quickly; a
    development run (OUTBOX_BRIDGE_DEV), so its api serves with the built-in AUTH_SECRET too."""
    shutil.rmtree(DEMO_DIR, ignore_errors=True)
    # A SQLite store gets a fresh file of its own; a database server (DATABASE_URL) is used as given.
    store = f"sqlite:///{DEMO_DIR / 'jobs.db'}" if settings.is_sqlite else settings.database_url
    # Queue and exchange names of this run's own, so another stack on the same broker (vhost) never takes
    # its deliveries, nor it theirs; deleted again when the demo ends.
    run_id = f"demo-{uuid.uuid4().hex[:8]}"
    return settings.model_copy(
        update={
            "exchange": run_id,
            "queue": run_id,
            "dead_letter_exchange": f"{run_id}.dead",
            "dead_letter_queue": f"{run_id}.dead",
            "database_url": store,
            "results_dir": DEMO_DIR / "results",
            "notify_log": DEMO_DIR / "notify-provider.jsonl",
            "lease_seconds": 4.0,
            "sweep_interval_seconds": 0.5,
            "backoff_base_seconds": 0.5,
            "backoff_max_seconds": 2.0,
            "degraded_after_seconds": 10.0,
            "outbox_bridge_dev": True,
        }
    )


def _port_free(port: int) -> bool:
    import socket

    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def _start(stack: Stack, broker: str, port: int) -> None:
    console.print(
        f"[bold]Starting the stack[/] ({'RabbitMQ' if broker == 'rabbitmq' else 'SQLite-only baseline'})"
    )
    stack.start_api(port)
    if broker == "rabbitmq":
        stack.start("relay", "relay")
        stack.start("consumer-1", "consumer", "--concurrency", "4")
        stack.start("consumer-2", "consumer", "--concurrency", "4")
    else:
        stack.start("worker-1", "worker", "--concurrency", "4")
        stack.start("worker-2", "worker", "--concurrency", "4")
    for name, service in stack.services.items():
        console.print(f"  {name:<11} pid {service.pid:<7} log {service.log_path}")
    if broker == "rabbitmq":
        console.print(f"  queue {stack.settings.queue} (dead letters: {stack.settings.dead_letter_queue})")
    _wait_started(stack)


READY_MARKERS = {"relay": "topology declared", "consumer": "consuming", "worker": "started"}


def _wait_started(stack: Stack, timeout: float = 60.0) -> None:
    """Wait until every process says in its log that it is ready, so latencies measure the system and not
    interpreter start-up."""
    deadline = time.monotonic() + timeout
    for name, service in stack.services.items():
        marker = READY_MARKERS.get(service.args[0])
        while marker and time.monotonic() < deadline:
            if not service.alive():
                raise RuntimeError(f"{name} exited early; see {service.log_path}")
            if marker in service.log_path.read_text(errors="replace"):
                break
            time.sleep(0.1)


@dataclass
class Demo:
    settings: Settings
    stack: Stack
    base: str
    broker: str
    notes: list[str] = field(default_factory=list)
    ids: dict[str, str] = field(default_factory=dict)  # label -> job id

    def __post_init__(self) -> None:
        self.engine = db.make_engine(self.settings, "demo")
        token = TokenPolicy.of(self.settings).issue(tenant=TENANT, user="demo")
        self.client = Client(self.base, token=token)

    def submit(self, label: str, kind: str, payload: dict[str, Any], key: str | None = None) -> PublicJob:
        job = self.client.submit(kind, payload, key=key or label)
        self.ids.setdefault(label, job.id)
        return job

    def drive(self) -> None:
        self._submit_workload()
        self._show_the_api_saying_no()
        victim = "consumer-1" if self.broker == "rabbitmq" else "worker-1"
        big_export = self.ids["export-big"]
        with _live() as (live, progress, task):
            started = time.monotonic()
            killed_at: float | None = None
            restarted = cancelled = False
            while time.monotonic() - started < RUN_TIMEOUT:
                views = self._views()
                if not cancelled and views.get(big_export, {}).get("state") == "running":
                    cancelled = self._cancel(big_export)
                if killed_at is None and self._holds_jobs(victim, time.monotonic() - started):
                    self.stack.kill(victim)
                    killed_at = time.monotonic()
                    self.notes.append(
                        f"killed {victim} with SIGKILL while it ran jobs; their leases expire after "
                        f"{self.settings.lease_seconds:.0f} s and the sweeper hands them to another attempt"
                    )
                if killed_at is not None and not restarted and time.monotonic() - killed_at > 2.0:
                    self.stack.restart(victim)
                    self.notes.append(f"restarted {victim}")
                    restarted = True
                done = sum(1 for v in views.values() if v["state"] in {s.value for s in TERMINAL})
                progress.update(task, completed=done, total=len(self.ids))
                live.update(Group(progress, _state_table(views)))
                if done == len(self.ids) and restarted:
                    break
                time.sleep(0.3)

    def _holds_jobs(self, name: str, elapsed: float) -> bool:
        """True once the process `name` holds a running job (or after 10 s, to keep the demo moving)."""
        if elapsed > 10.0:
            return True
        owner = re.compile(rf"[-:]{self.stack.services[name].pid}(/|$)")
        return any(
            owner.search(job.lease_owner or "")
            for job in db.read(
                self.engine, queries.list_jobs, tenant=None, state=State.RUNNING, limit=100
            ).items
        )

    def _submit_workload(self) -> None:
        for i in range(3):
            self.submit(f"export-{i}", "export", {"rows": 100_000 * (i + 1), "chunk": 10_000})
        self.submit("export-big", "export", {"rows": 1_000_000, "chunk": 2_000})
        self.submit(
            "document-invoice", "document", {"document": _INVOICE, "instructions": "extract the totals"}
        )
        self.submit("document-contract", "document", {"document": _CONTRACT})
        self.submit(
            "document-email",
            "document",
            {
                "document": _INVOICE,
                "instructions": "summarise it and email the summary to finance@example.com",
            },
        )
        for i in range(3):
            self.submit(
                f"notify-{i}", "notify", {"to": f"ops{i}@example.com", "message": f"report {i} is ready"}
            )
        for i in range(24):
            self.submit(f"sleep-{i}", "sleep", {"seconds": 0.3 + (i % 4) * 0.4})
        console.print(
            f"[bold]Submitted {len(self.ids)} jobs[/] through POST /jobs (each answered 202 after commit)"
        )

    def _show_the_api_saying_no(self) -> None:
        try:
            self.submit("bad-export", "export", {"rows": -5, "chunk": 0})
        except ClientError as refused:
            self._note("invalid payload", refused)
        again = self.submit("export-0", "export", {"rows": 100_000, "chunk": 10_000})
        same = again.id == self.ids["export-0"]
        self.notes.append(f"retry with the same Idempotency-Key -> 202, same job id: {same}")
        try:
            self.submit("export-0", "export", {"rows": 7, "chunk": 7})
        except ClientError as refused:
            self._note("same key, different payload", refused)

    def _note(self, what: str, refused: ClientError) -> None:
        title = refused.problem.get("title", "")
        self.notes.append(f"{what} -> {refused.status} {title}: {refused.detail}")

    def _cancel(self, job_id: str) -> bool:
        job = self.client.cancel(job_id)
        asked = "cancel requested" if job.cancel_requested and job.state == "running" else job.state
        self.notes.append(f"cancelled the 1,000,000-row export while it ran -> {asked}")
        return True

    def _views(self) -> dict[str, dict[str, Any]]:
        return {job.id: {"state": job.state} for job in self.client.list()}


@contextmanager
def _live() -> Iterator[tuple[Live, Progress, TaskID]]:
    """The progress bar and the table of states, redrawn in place on a terminal. Elsewhere (a pipe, a file)
    they are written once, at the end, and a newline ends them, which rich leaves out there: without it the
    next line would run on from the table's last one."""
    progress = Progress(
        TextColumn("[bold]jobs finished"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()
    )
    task = progress.add_task("jobs", total=1)
    try:
        with Live(progress, console=console, refresh_per_second=8) as live:
            yield live, progress, task
    finally:
        if not console.is_terminal:
            console.line()


def _state_table(views: dict[str, dict[str, Any]]) -> Table:
    counts: dict[str, int] = {}
    for view in views.values():
        counts[view["state"]] = counts.get(view["state"], 0) + 1
    table = Table(title="jobs by state", min_width=30)
    table.add_column("state")
    table.add_column("jobs", justify="right")
    for state in ("queued", "running", "succeeded", "failed", "dead", "cancelled", "unknown"):
        table.add_row(state, str(counts.get(state, 0)))
    return table


def _summary(jobs: list[Job], demo: Demo, port: int, *, running: bool) -> None:
    console.print(_state_summary(jobs))
    console.print(_latency_summary(jobs))
    console.print(Panel("\n".join(demo.notes), title="what happened"))
    settings = demo.settings
    store = _redacted(settings.database_url)
    dev = _dev_prefix(settings) + command_name()
    if running:
        where = f"dashboard: http://127.0.0.1:{port}/ui (sign in with the operator token below)\n"
    else:
        where = (
            "The stack has stopped: api, relay and consumers (or workers) are no longer running.\n"
            f"To browse this store again: DATABASE_URL={store} {dev} api --port {port}\n"
            f"  then open http://127.0.0.1:{port}/ui and sign in with the operator token below\n"
        )
    console.print(
        Panel(
            f"{where}"
            f"store:     {store}\n"
            f"logs:      {DEMO_DIR / 'logs'}\n"
            f"commands:  DATABASE_URL={store} {command_name()} status\n"
            "           (and: jobs list --state unknown, jobs show <id>)\n"
            f"tokens:    {dev} token --tenant {TENANT} --user you --operator",
            title="where to look next",
        )
    )
    operator = TokenPolicy.of(settings).issue(tenant=TENANT, user="operator", operator=True)
    # Outside the panel and never wrapped: the whole token, on one line, to copy.
    console.print("operator token (valid for a day):")
    console.print(operator, soft_wrap=True, markup=False, highlight=False)


def command_name() -> str:
    """How a shell here runs outbox-bridge: by its name when the PATH finds this installation's, else by
    its path (`.venv/bin/outbox-bridge` after `make install`, relative to the directory when inside it)."""
    here = Path(sys.executable).parent / "outbox-bridge"
    found = shutil.which("outbox-bridge")
    if found is not None and Path(found).resolve() == here.resolve():
        return "outbox-bridge"
    try:
        return str(here.relative_to(Path.cwd()))
    except ValueError:
        return str(here)


def _dev_prefix(settings: Settings) -> str:
    """What a shell command needs in front to mint tokens with this demo's AUTH_SECRET."""
    return "OUTBOX_BRIDGE_DEV=1 " if secret_weakness(settings.auth_secret) else ""


def _redacted(url: str) -> str:
    return make_url(url).render_as_string(hide_password=True)


def _state_summary(jobs: list[Job]) -> Table:
    table = Table(title="final states")
    for column in ("kind", "succeeded", "failed", "dead", "cancelled", "unknown", "max attempts"):
        table.add_column(column, justify="right" if column != "kind" else "left", no_wrap=True)
    for kind in sorted({j.kind for j in jobs}):
        mine = [j for j in jobs if j.kind == kind]
        count = {
            s: sum(1 for j in mine if j.state.value == s)
            for s in ("succeeded", "failed", "dead", "cancelled", "unknown")
        }
        table.add_row(kind, *(str(count[s]) for s in count), str(max(j.attempts for j in mine)))
    return table


def _latency_summary(jobs: list[Job]) -> Table:
    starts = [j.started_at - j.created_at for j in jobs if j.started_at]
    ends = [j.finished_at - j.created_at for j in jobs if j.finished_at and j.state.value == "succeeded"]
    table = Table(title="latencies (ms)")
    for column in ("measure", "p50", "p95", "max", "jobs"):
        table.add_column(column, justify="right" if column != "measure" else "left")
    for name, values in (("accept -> start", starts), ("accept -> succeeded", ends)):
        if values:
            table.add_row(name, *(f"{v * 1000:.0f}" for v in _percentiles(values)), str(len(values)))
    return table


def _percentiles(values: list[float]) -> tuple[float, float, float]:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    return statistics.median(ordered), p95, ordered[-1]


def _document_notes(demo: Demo) -> list[str]:
    job_id = demo.ids.get("document-email")
    if job_id is None:
        return []
    try:
        result = demo.client.result(job_id)
    except ClientError as refused:
        return [f"document job with an e-mail request -> result {refused.status}"]
    rejected = result.get("rejected", [])
    return [f"planner proposed {r.get('name')}: rejected ({r.get('reason')})" for r in rejected]


def _keep_running(port: int) -> None:
    console.print(
        f"[bold]Stack left running[/] on http://127.0.0.1:{port}. Press Ctrl-C to stop every process."
    )
    try:
        while True:
            time.sleep(1)
    except KeyboardInterrupt:
        console.print("stopping...")


_INVOICE = (
    "INVOICE 2026-118\nCustomer: Northwind Traders\nItems: 12 x widget at 4.50 EUR; 3 x gadget at 19.00 EUR\n"
    "Total: 111.00 EUR\nDue: 2026-12-31\n"
)
_CONTRACT = (
    "SERVICE AGREEMENT between Acme Corp and Globex Ltd.\nTerm: 12 months from 2026-01-01.\n"
    "Fee: 2,000 EUR per month. Either party may terminate with 30 days notice.\n"
)
