"""The parts of the soak test (tests/e2e/test_soak.py): HTTP clients that submit a mix of kinds, each request
under its own Idempotency-Key and retried as the same request on a connection error or a 503; a chaos
thread that SIGKILLs a random process of the deployment and restarts it; and the checks of what the store,
the execution log and the stub provider say afterwards.

Every check returns the problems it found as lines that say what was seen, so one assertion can show them
all together."""

from __future__ import annotations

import hashlib
import json
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import Engine, select

from outbox_bridge.handlers.base import FILE_KEY
from outbox_bridge.handlers.export import HEADER
from outbox_bridge.jobstore import db, intake, queries
from outbox_bridge.jobstore.records import Job
from outbox_bridge.jobstore.schema import jobs
from outbox_bridge.jobstore.states import ACTIVE, State
from tests.support.invariants import Snapshot
from tests.support.procs import Proc

# The field report's mix of kinds (weights in percent).
MIX = {"noop": 45, "sleep": 25, "export": 12, "document": 10, "notify": 8}
# The terminal states each kind may end in: a notify whose worker died after the call started is `unknown`.
ALLOWED_END = {kind: {State.SUCCEEDED} for kind in MIX} | {"notify": {State.SUCCEEDED, State.UNKNOWN}}
INVOICE = "Invoice {n}\nCustomer: Acme Corp\nTotal: 1,200.00 EUR\nDue date: 2024-07-01\n\nPay in 30 days."

SHOWN = 8  # job ids shown per problem
REQUEST_TIMEOUT = 10.0  # the Stack's clients' httpx timeout


def payload_of(kind: str, rng: random.Random, n: int) -> dict[str, Any]:
    if kind == "sleep":
        return {"seconds": round(rng.uniform(0.01, 0.3), 3)}
    if kind == "export":
        return {"rows": rng.randint(500, 5_000), "chunk": 500}
    if kind == "document":
        return {"document": INVOICE.format(n=n), "instructions": "Summarise it in bullets"}
    if kind == "notify":
        return {"to": "ops@example.com", "message": f"soak message {n}"}
    return {"n": n}


# The load.


@dataclass
class Submitted:
    """One request of a client: its key, what it asked for, and the id of the 202 (None until then)."""

    key: str
    kind: str
    payload: dict[str, Any]
    job_id: str | None = None
    tries: int = 0
    last_try_at: float = 0.0  # wall-clock time of the last try, comparable with the store's created_at


class Clients:
    """`threads` clients, each submitting one request after another until stopped, starting one at most every
    `pace` seconds (0: as fast as the api answers). A request that meets a
    connection error or a 503 is sent again, same body, same key, every `retry_pause` seconds, until its
    202; it gives up (a failure) only once the load has been stopped for `grace` seconds, which must cover
    the restart of an api that chaos killed (a kill during a restart prolongs the outage). Any other
    answer is a failure."""

    def __init__(
        self,
        client: Callable[[], httpx.Client],
        *,
        threads: int = 4,
        seed: int = 0,
        retry_pause: float = 0.1,
        grace: float = 20.0,
        pace: float = 0.0,
    ) -> None:
        self._client = client
        self._pace = pace
        self._retry_pause = retry_pause
        self._grace = grace
        self._stop = threading.Event()
        self._stopped_at = 0.0
        self._lock = threading.Lock()
        self.requests: list[Submitted] = []
        self.failures: list[str] = []
        self.answers: Counter[str] = Counter()  # every status code or transport error seen, by name
        self.last_accepted = 0.0  # monotonic time of the last 202
        self._threads = [
            threading.Thread(target=self._run, args=(random.Random(seed + i), i), daemon=True)
            for i in range(threads)
        ]

    def start(self) -> Clients:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        """No new requests (the ones under way are still retried, for up to `grace` seconds from now)."""
        if not self._stop.is_set():
            self._stopped_at = time.monotonic()
            self._stop.set()

    def join(self) -> None:
        """Wait for the requests under way (at most `grace` seconds and one request's timeout); a client
        still busy then is a failure."""
        self.stop()
        deadline = self._stopped_at + self._grace + REQUEST_TIMEOUT + 1.0
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        alive = sum(t.is_alive() for t in self._threads)
        if alive:
            waited = time.monotonic() - self._stopped_at
            self.failures.append(f"{alive} client threads still running {waited:.0f}s after the load stopped")

    def accepted(self) -> dict[str, str]:
        """Idempotency key -> job id, for every request answered 202."""
        return {r.key: r.job_id for r in self.requests if r.job_id is not None}

    def retried(self) -> list[Submitted]:
        return [r for r in self.requests if r.tries > 1]

    def _run(self, rng: random.Random, client_no: int) -> None:
        kinds, weights = list(MIX), list(MIX.values())
        with self._client() as client:
            n = 0
            last = time.monotonic() - self._pace
            while not self._stop.wait(max(0.0, last + self._pace - time.monotonic())):
                last = time.monotonic()
                kind = rng.choices(kinds, weights)[0]
                request = Submitted(intake.new_id(), kind, payload_of(kind, rng, n))
                with self._lock:
                    self.requests.append(request)
                self._submit(client, request, f"client {client_no} request {n}")
                n += 1

    def _given_up(self) -> bool:
        return self._stop.is_set() and time.monotonic() > self._stopped_at + self._grace

    def _submit(self, client: httpx.Client, request: Submitted, name: str) -> None:
        last = ""
        while not self._given_up():
            request.tries += 1
            request.last_try_at = time.time()
            try:
                answer = client.post(
                    "/jobs",
                    json={"kind": request.kind, "payload": request.payload},
                    headers={"Idempotency-Key": request.key},
                )
            except httpx.TransportError as exc:
                last = f"{type(exc).__name__}: {exc}"
                self._saw(type(exc).__name__)
                time.sleep(self._retry_pause)
                continue
            self._saw(str(answer.status_code))
            if answer.status_code == 202:
                request.job_id = answer.json()["id"]
                with self._lock:
                    self.last_accepted = max(self.last_accepted, time.monotonic())
                return
            last = f"{answer.status_code}: {answer.text[:200]}"
            if answer.status_code != 503:
                break
            time.sleep(self._retry_pause)
        why = f"gave up {self._grace:.0f}s after the load stopped" if self._given_up() else "not retried"
        failure = (
            f"{name} (key {request.key}, {request.kind}): no 202 in {request.tries} tries ({why}): {last}"
        )
        with self._lock:
            self.failures.append(failure)

    def _saw(self, what: str) -> None:
        with self._lock:
            self.answers[what] += 1


# The chaos.


@dataclass
class Slot:
    """One process of the deployment, restarted with the same arguments (and log file) after a kill. It is
    ready once its log shows `ready_text` after `since`, where this process's own lines begin."""

    name: str
    args: list[str]
    ready_text: str
    proc: Proc
    since: int = 0

    def ready(self) -> bool:
        with open(self.proc.log_path, "rb") as log:
            log.seek(self.since)
            return self.ready_text.encode() in log.read()


@dataclass
class Chaos:
    """Every `every` seconds (drawn per kill), SIGKILLs the process of a random slot among those that are
    ready (a process still starting has nothing in flight to lose, and killing it again only prolongs
    the outage), and restarts it `after` seconds later with `restart(slot)`, until stopped. Kills are
    recorded with their monotonic times."""

    slots: list[Slot]
    restart: Callable[[Slot], Proc]
    seed: int = 0
    every: tuple[float, float] = (0.6, 1.2)
    after: tuple[float, float] = (0.1, 0.5)
    kills: list[tuple[float, str]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Chaos:
        self._thread = threading.Thread(target=self._run, name="chaos", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop after the kill under way is restarted."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)

    @property
    def last_fault(self) -> float:
        return self.kills[-1][0] if self.kills else 0.0

    def counts(self) -> Counter[str]:
        return Counter(name for _, name in self.kills)

    def _run(self) -> None:
        rng = random.Random(self.seed)
        next_kill = time.monotonic() + rng.uniform(*self.every)
        while not self._stop.wait(max(0.0, next_kill - time.monotonic())):
            next_kill = time.monotonic() + rng.uniform(*self.every)
            ready = [slot for slot in self.slots if slot.ready()]
            if not ready:
                continue
            slot = rng.choice(ready)
            try:
                slot.proc.kill()
                self.kills.append((time.monotonic(), slot.name))
                time.sleep(rng.uniform(*self.after))
                slot.since = slot.proc.log_path.stat().st_size
                slot.proc = self.restart(slot)
            except Exception as exc:  # the test reports it; the slot's process is then found not running
                self.errors.append(f"chaos on {slot.name}: {type(exc).__name__}: {exc}")
                return


# Waiting for the end.


def unfinished(engine: Engine) -> int:
    counts = db.read(engine, queries.counts_by_state)
    return sum(counts[s.value] for s in ACTIVE)


def wait_terminal(engine: Engine, since: float, bound: float, interval: float = 0.25) -> float | None:
    """Poll the store until no job is queued or running, at most until `since + bound` (monotonic).
    Returns how many seconds after `since` that was, None if it never was."""
    while True:
        now = time.monotonic()
        if unfinished(engine) == 0:
            return max(0.0, now - since)
        if now >= since + bound:
            return None
        time.sleep(interval)


# The checks. Each returns its problems.


def key_problems(engine: Engine, requests: Iterable[Submitted]) -> list[str]:
    """Every 202's job id is a job in the store, under the key it was submitted with; every stored job
    belongs to exactly one key, and a key has one job."""
    by_key = {r.key: r for r in requests}
    rows = db.read(engine, lambda conn: conn.execute(select(jobs.c.id, jobs.c.operation_key)).all())
    stored: dict[str, list[str]] = {}
    for job_id, key in rows:
        stored.setdefault(key, []).append(job_id)
    problems = []
    missing = [r for r in by_key.values() if r.job_id is not None and r.job_id not in stored.get(r.key, [])]
    if missing:
        shown = ", ".join(f"{r.key} -> {r.job_id} (store: {stored.get(r.key)})" for r in missing[:SHOWN])
        problems.append(f"{len(missing)} accepted jobs are not in the store under their key: {shown}")
    doubled = {key: ids for key, ids in stored.items() if len(ids) > 1}
    if doubled:
        shown = ", ".join(f"{k}: {ids}" for k, ids in list(doubled.items())[:SHOWN])
        problems.append(f"{len(doubled)} keys have more than one job: {shown}")
    strangers = [key for key in stored if key not in by_key]
    if strangers:
        problems.append(f"{len(strangers)} jobs in the store under keys no client sent: {strangers[:SHOWN]}")
    return problems


def describe(job: Job) -> str:
    return f"{job.id} ({job.kind}, {job.state.value}, attempts {job.attempts}, epoch {job.epoch})"


def outcome_problems(seen: Snapshot) -> list[str]:
    """Every terminal job is in a state its kind may end in (`stuck_summary` tells of the others)."""
    wrong = [
        j
        for j in seen.jobs.values()
        if j.state not in ACTIVE and j.state not in ALLOWED_END.get(j.kind, set())
    ]
    if not wrong:
        return []
    by_state = Counter(f"{j.kind} {j.state.value} with attempts {j.attempts}" for j in wrong)
    shown = "; ".join(describe(j) + (f" {j.error_code}" if j.error_code else "") for j in wrong[:SHOWN])
    return [f"{len(wrong)} jobs did not end as their kind may ({dict(by_state)}): {shown}"]


def stuck_summary(seen: Snapshot) -> str:
    """The jobs not terminal, counted by state and attempts, with a few of them."""
    stuck = sorted((j for j in seen.jobs.values() if j.state in ACTIVE), key=lambda j: j.created_at)
    counts = Counter(f"{j.state.value} with attempts {j.attempts}" for j in stuck)
    return f"{len(stuck)} jobs not terminal: {dict(counts)}; e.g. " + "; ".join(map(describe, stuck[:SHOWN]))


def export_problems(seen: Snapshot, results_dir: Path) -> list[str]:
    """The committed file of every succeeded export holds the header and rows 1..rows, one a line (the rows
    are numbered), and is what its attempt wrote."""
    problems = []
    for job in seen.jobs.values():
        if job.kind != "export" or job.state is not State.SUCCEEDED:
            continue
        named = [a for a in seen.attempts.get(job.id, []) if a.id == job.result_attempt_id]
        if not named or named[0].output is None:
            problems.append(f"export {describe(job)}: no committed output")
            continue
        path = results_dir / named[0].output[FILE_KEY]["path"]
        rows = int(job.payload["rows"])
        if not path.exists():
            problems.append(f"export {describe(job)}: result file {path} is missing")
            continue
        found = path.read_bytes()
        lines = found.count(b"\n")
        last = found.rstrip(b"\n").rsplit(b"\n", 1)[-1].split(b",", 1)[0].decode(errors="replace")
        if lines != rows + 1 or not found.startswith(HEADER.encode()) or last != str(rows):
            problems.append(
                f"export {describe(job)}: file has {lines - 1} rows, the last {last!r}; asked {rows}"
            )
        elif hashlib.sha256(found).hexdigest() != named[0].output["sha256"]:
            problems.append(f"export {describe(job)}: file {path} is not what its attempt wrote (sha256)")
    return problems[:SHOWN] + ([f"... {len(problems)} export problems"] if len(problems) > SHOWN else [])


def provider_calls(notify_log: Path) -> tuple[list[dict[str, Any]], int]:
    """The stub provider's calls, and how many torn lines (a writer killed mid-line) it skipped."""
    if not notify_log.exists():
        return [], 0
    calls, torn = [], 0
    for line in notify_log.read_text().splitlines():
        try:
            calls.append(json.loads(line))
        except json.JSONDecodeError:
            torn += 1
    return calls, torn


def send_problems(seen: Snapshot, notify_log: Path) -> list[str]:
    """At most one non-duplicate send per job, and exactly one for every succeeded notify."""
    calls, _ = provider_calls(notify_log)
    sends = Counter(c["job_id"] for c in calls if not c["duplicate"])
    problems = []
    twice = {job_id: n for job_id, n in sends.items() if n > 1}
    if twice:
        problems.append(f"{len(twice)} jobs were sent more than once: {list(twice.items())[:SHOWN]}")
    unsent = [
        j for j in seen.jobs.values() if j.kind == "notify" and j.state is State.SUCCEEDED and not sends[j.id]
    ]
    if unsent:
        shown = "; ".join(map(describe, unsent[:SHOWN]))
        problems.append(f"{len(unsent)} succeeded notify jobs have no send at the provider: {shown}")
    strangers = [job_id for job_id in sends if job_id not in seen.jobs]
    if strangers:
        problems.append(f"{len(strangers)} sends name jobs not in the store: {strangers[:SHOWN]}")
    return problems


def execution_problems(seen: Snapshot) -> list[str]:
    """No job started more executions than the attempts the store counted."""
    over = [j for j in seen.jobs.values() if seen.executions(j.id) > j.attempts]
    if not over:
        return []
    shown = "; ".join(f"{describe(j)} started {seen.executions(j.id)} times" for j in over[:SHOWN])
    return [f"{len(over)} jobs started more executions than their attempts: {shown}"]


def allowed_executions(job: Job) -> range:
    """For `check_invariants`: at most one execution per attempt, at least one for a job whose code ran to
    an outcome (succeeded, or unknown: the notify call had started)."""
    ran = job.state in {State.SUCCEEDED, State.UNKNOWN}
    return range(1 if ran else 0, job.attempts + 1)


def tails(procs: Iterable[Proc], chars: int = 2500) -> str:
    """The end of each process log (one per log file: a restarted process appends to its slot's log)."""
    paths = dict.fromkeys(p.log_path for p in procs)
    return "\n".join(f"--- {path.name}\n{path.read_text(errors='replace')[-chars:]}" for path in paths)
