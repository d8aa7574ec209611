"""Running one claimed attempt: the same code for the broker consumer and the polling baseline.

`run_attempt` executes the kind's code with a `StoreContext` and returns what happened without writing the
outcome (`worker.commit` writes it, under the fence, in the caller's transaction); `discard_uncommitted`
then removes what an output left on disk when the commit did not make it the job's result.

An `async def` kind's coroutine runs on an event loop of the thread running the attempt, made for the
attempt and closed at its end (`asyncio.run`), rather than on one loop the process shares: a coroutine that
blocks (a synchronous library, or the context's store writes) then holds only its own thread, as a
synchronous kind does, never the other threads' jobs; and nothing the attempt leaves running outlives it."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import os
import time
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from sqlalchemy import Connection, Engine

from outbox_bridge.core import clock
from outbox_bridge.core.settings import Settings
from outbox_bridge.handlers.base import (
    FILE_KEY,
    Cancelled,
    FileOutput,
    JobError,
    Kind,
    LeaseLost,
    Output,
    PermanentError,
    Snooze,
    file_output,
)
from outbox_bridge.handlers.registry import KINDS, is_accepted
from outbox_bridge.jobstore import db, fenced, workflows
from outbox_bridge.jobstore.decisions import STORAGE_FAULT
from outbox_bridge.jobstore.errors import Fenced
from outbox_bridge.jobstore.records import Claim
from outbox_bridge.jobstore.states import State
from outbox_bridge.telemetry import tracing
from outbox_bridge.telemetry.instruments import ACCEPT_TO_START, RUN_SECONDS
from outbox_bridge.worker.lease import LeasedJob
from outbox_bridge.worker.timeouts import TIMEOUT, AttemptTimedOut, TimeLimit, shielded

log = logging.getLogger(__name__)


@dataclass
class StoreContext:
    """The `JobContext` a kind runs with, backed by the store and the lease keeper."""

    engine: Engine
    settings: Settings
    claim: Claim
    held: LeasedJob
    checkpoint: dict[str, Any] | None = field(init=False)
    limit: TimeLimit | None = field(default=None, init=False)  # the kind's timeout_seconds, once it runs

    def __post_init__(self) -> None:
        self.checkpoint = self.claim.checkpoint

    job_id = property(lambda self: self.claim.job_id)
    attempt_id = property(lambda self: self.claim.attempt_id)
    epoch = property(lambda self: self.claim.epoch)
    attempts = property(lambda self: self.claim.attempts)
    tenant = property(lambda self: self.claim.tenant)
    owner = property(lambda self: self.claim.owner)
    operation_key = property(lambda self: self.claim.operation_key)

    @property
    def results_dir(self) -> Path:
        return self.settings.results_dir

    @cached_property
    def batch(self) -> dict[str, Any] | None:
        """Read once, when the kind first asks: a job whose key is not a callback's reads nothing."""
        key = self.operation_key
        if not (key.startswith("batch:") and key.endswith(":callback")):
            return None
        with shielded(self.limit):
            return db.read(self.engine, _batch_outcomes, self.job_id, self.tenant)

    def result_file(self, path: Path, *, media_type: str, **fields: Any) -> dict[str, Any]:
        root = self.results_dir.resolve()
        relative = path.resolve().relative_to(root)  # ValueError for a file outside RESULTS_DIR
        return file_output(relative.as_posix(), media_type, **fields)

    def remaining_seconds(self) -> float | None:
        left = [] if self.limit is None else [self.limit.remaining()]
        if self.claim.deadline_at is not None:
            left.append(self.claim.deadline_at - clock.now())
        return min(left, default=None)

    def check_cancel(self) -> None:
        if self.held.lost:
            raise LeaseLost(self.job_id)
        if self.held.cancel_requested:
            raise Cancelled(self.job_id)

    def save_checkpoint(self, data: dict[str, Any]) -> None:
        self._fenced(fenced.save_checkpoint, self.job_id, self.epoch, data, clock.now())
        self.checkpoint = data

    def mark_external_started(self) -> None:
        self._fenced(fenced.mark_external_started, self.job_id, self.epoch, self.attempt_id, clock.now())

    def record_execution(self, event: str, **fields: Any) -> None:
        with shielded(self.limit):
            record_execution(self.settings, self.claim, event, **fields)

    def _fenced(self, fn: Any, *args: Any) -> None:
        """`fn` in a store transaction, never cut short by the kind's timeout (`worker.timeouts`)."""
        try:
            with shielded(self.limit):
                db.transact(self.engine, fn, *args)
        except Fenced as exc:
            self.held.lost = True
            raise LeaseLost(self.job_id) from exc


def _batch_outcomes(conn: Connection, job_id: str, tenant: str) -> dict[str, Any] | None:
    """`ctx.batch`: the outcomes of the batch whose callback the job is; None when it is none's."""
    batch_id = workflows.callbacks_of(conn, [job_id]).get(job_id)
    batch = None if batch_id is None else workflows.get_batch(conn, batch_id, tenant)
    return None if batch is None else dict(workflows.outcomes(batch))


def record_execution(settings: Settings, claim: Claim, event: str, **fields: Any) -> None:
    """Append one JSON line to the execution log, when one is configured (O_APPEND keeps lines whole)."""
    if settings.execution_log is None:
        return
    line = {
        "event": event,
        "job_id": claim.job_id,
        "epoch": claim.epoch,
        "attempt_id": claim.attempt_id,
        "worker": claim.worker,
        "pid": os.getpid(),
        "kind": claim.kind,
        "at": time.time(),
        **fields,
    }
    fd = os.open(settings.execution_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(line) + "\n").encode())
    finally:
        os.close(fd)


@dataclass(frozen=True)
class AttemptOutcome:
    """What running an attempt produced, before it is committed."""

    # Also kept when the attempt was cancelled or lost its lease after the kind returned: it is not
    # committed then, but what it left on disk must be discarded. None with no error, not cancelled and
    # not lost: the kind returned None, whose result is `null`.
    output: Output = None
    error: JobError | None = None
    permanent: bool = False
    cancelled: bool = False
    lease_lost: bool = False
    snooze: float | None = None  # the kind snoozed the job for this many seconds (`Snooze`)

    @property
    def name(self) -> str:
        """What the attempt came to, in a word (before the commit decides retry, failed or dead)."""
        if self.cancelled:
            return "cancelled"
        if self.lease_lost:
            return "lease_lost"
        if self.snooze is not None:
            return "snoozed"
        if self.error is not None:
            return "failed_permanently" if self.permanent else "failed"
        return "succeeded"

    @property
    def succeeded(self) -> bool:
        """An output to publish (None included): no error, no snooze, neither cancelled nor fenced out
        after the kind returned it."""
        return self.error is None and self.snooze is None and not self.cancelled and not self.lease_lost


def run_attempt(ctx: StoreContext, parent: str | None = None) -> AttemptOutcome:
    """Run the claimed job's kind and report the outcome; never raises for the job's own failures.

    The attempt is a `run` span in the job's trace, a child of `parent` (the delivery's trace context) or,
    without a valid one, of the context stored with the job; it names the job, its kind, epoch, attempt
    number and outcome (and an error's code), never the payload or the result."""
    claim = ctx.claim
    attributes: dict[str, tracing.Attribute] = {"job.id": claim.job_id, "job.kind": claim.kind}
    attributes.update({"job.epoch": claim.epoch, "job.attempt": claim.attempts})
    with tracing.span("run", tracing.valid(parent) or claim.traceparent, "consumer", attributes) as span:
        outcome = _attempt(ctx)
        span.set_attribute("job.outcome", outcome.name)
        if outcome.error is not None:
            span.set_attribute("job.error_code", outcome.error.code)
    return outcome


def _attempt(ctx: StoreContext) -> AttemptOutcome:
    claim = ctx.claim
    kind = KINDS.get(claim.kind)
    if kind is None or not is_accepted(ctx.settings, claim.kind):
        return AttemptOutcome(
            error=PermanentError("unknown_kind", f"unknown kind {claim.kind!r}"), permanent=True
        )
    try:
        payload = kind.parse(claim.payload)
    except ValidationError as exc:
        return AttemptOutcome(error=PermanentError("invalid_payload", _first_error(exc)), permanent=True)
    ctx.record_execution("start")
    if claim.attempts == 1:
        ACCEPT_TO_START.labels(claim.kind).observe(max(0.0, clock.now() - claim.created_at))
    with RUN_SECONDS.labels(claim.kind).time():
        return _run_kind(ctx, kind, payload)


def _run_kind(ctx: StoreContext, kind: Kind, payload: Any) -> AttemptOutcome:
    """The kind's run, its failures turned into the outcome they mean."""
    claim = ctx.claim
    output = None
    try:
        returned = _called(ctx, kind, payload)
        if returned is not None and not isinstance(returned, dict):
            return _not_a_result(returned)
        output = returned
        if output is not None and FILE_KEY in output and not isinstance(output, FileOutput):
            message = (
                f"The job's result uses the reserved key {FILE_KEY!r}; name a file with ctx.result_file."
            )
            return AttemptOutcome(error=PermanentError("reserved_key", message), permanent=True)
        ctx.check_cancel()
    except AttemptTimedOut:
        return _timed_out(claim, kind)
    except Snooze as exc:
        return AttemptOutcome(snooze=exc.seconds)
    except Cancelled:
        return AttemptOutcome(output=output, cancelled=True)
    except LeaseLost:
        return AttemptOutcome(output=output, lease_lost=True)
    except PermanentError as exc:
        return AttemptOutcome(error=exc, permanent=True)
    except JobError as exc:
        return AttemptOutcome(error=exc)
    except OSError as exc:
        if not _is_storage_fault(exc, ctx.results_dir):
            return _raised(claim, exc)
        log.error("job %s: the worker's storage failed (%s): %s", claim.job_id, ctx.results_dir, exc)
        message = "The worker could not store the job's output; it will try again later."
        return AttemptOutcome(error=JobError(STORAGE_FAULT, message, detail=f"{type(exc).__name__}: {exc}"))
    except (Exception, asyncio.CancelledError) as exc:  # a coroutine's own CancelledError too
        return _raised(claim, exc)
    return AttemptOutcome(output=output)


def _called(ctx: StoreContext, kind: Kind, payload: Any) -> object:
    """What the kind's run returns (what its coroutine returns, for an `async def` kind), within the kind's
    `timeout_seconds` when it has one (`worker.timeouts`: `AttemptTimedOut` past it)."""
    seconds = kind.policy.timeout_seconds
    if seconds is None:
        returned = kind.run(ctx, payload)
        return _awaited(returned) if asyncio.iscoroutine(returned) else returned
    limit = ctx.limit = TimeLimit(seconds)
    returned = limit.call(lambda: kind.run(ctx, payload))
    return _awaited(limit.bounded(returned)) if asyncio.iscoroutine(returned) else returned


def _timed_out(claim: Claim, kind: Kind) -> AttemptOutcome:
    """An attempt that ran past its kind's `timeout_seconds`: a failure, retried within the budget."""
    seconds = kind.policy.timeout_seconds
    log.warning("job %s: the attempt ran past its kind's timeout of %gs", claim.job_id, seconds)
    message = f"The attempt ran past its kind's timeout of {seconds:g} seconds."
    return AttemptOutcome(error=JobError(TIMEOUT, message))


def _awaited(coroutine: Any) -> Output:
    """What an `async def` kind's coroutine returns, run to its end on a new event loop in this thread (see
    the module's docstring); what it raises, raised. Where a loop already runs in this thread (a team's
    async test calling `outbox_bridge.testing`), on a thread of its own, since a thread runs one loop at a
    time."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        output: Output = asyncio.run(coroutine)
        return output
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="job-coroutine") as aside:
        output = aside.submit(asyncio.run, coroutine).result()
    return output


def _not_a_result(returned: object) -> AttemptOutcome:
    """A kind returned what is not a result (a list, a model, a number): a bug in the kind, which another
    attempt would repeat after doing its work again."""
    message = f"The kind returned {type(returned).__name__}; a kind returns a JSON object or None."
    return AttemptOutcome(error=PermanentError("invalid_result", message), permanent=True)


def _raised(claim: Claim, exc: BaseException) -> AttemptOutcome:
    """A bug in a kind: retried, then dead. The tenant sees the exception's type; the attempt's record and
    the log keep its text (which may name the server's files)."""
    log.exception("job %s raised", claim.job_id)
    detail = f"{type(exc).__name__}: {exc}"
    return AttemptOutcome(
        error=JobError("handler_error", f"The job raised {type(exc).__name__}.", detail=detail)
    )


def _is_storage_fault(exc: OSError, results_dir: Path) -> bool:
    """An OSError about a file under `results_dir` (the worker's storage), not about anything the kind
    itself reaches."""
    names = [name for name in (exc.filename, exc.filename2) if name]
    root = Path(os.path.abspath(results_dir))
    return any(Path(os.path.abspath(os.fsdecode(name))).is_relative_to(root) for name in names)


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"]) or "payload"
    return f"{where}: {err['msg']}"


def discard_uncommitted(
    settings: Settings, claim: Claim, outcome: AttemptOutcome, state: State | None
) -> None:
    """Once the commit is known (`state` is what it wrote, None when fenced out), remove what an output
    that did not become the job's result left on disk (the kind's `discard`). Never raises: a file left
    behind is untidy, not wrong, since only a committed result pointer makes a file visible."""
    if outcome.output is None or state is State.SUCCEEDED:
        return
    kind = KINDS.get(claim.kind)
    if kind is None or kind.discard is None:
        return
    try:
        kind.discard(settings.results_dir, outcome.output)
    except (OSError, KeyError, TypeError) as exc:
        log.warning("job %s attempt %s: uncommitted output kept: %s", claim.job_id, claim.attempt_id, exc)
