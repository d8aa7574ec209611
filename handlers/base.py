"""What a job kind is, what it may ask of the worker running it, and the kinds a process knows.

A kind is a payload schema plus a `run(ctx, payload)` function (`def` or `async def`), made one with
`@kind(name, payload=Model)` (as `outbox_bridge.kind`). It returns its output (a JSON object, or None for
the result `null`), or raises `PermanentError` (bad input: no retry), `TransientError` (try again later),
`Snooze` (not yet: due again later, spending no attempt) or `Cancelled`. Everything it needs from the
store goes through `JobContext`, so kinds never see SQL or AMQP."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ParamSpec, Protocol, TypeVar, cast

from pydantic import BaseModel

from outbox_bridge.core.queue_names import DEFAULT_QUEUE, QUEUE_RULE, is_queue_name


class JobError(Exception):
    """An attempt's failure: `code` and `message` are what the job's tenant sees; `detail`, when given, is
    kept on the attempt's record for the operator only (a server path, an exception's text)."""

    def __init__(self, code: str, message: str, *, detail: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.detail = detail


class PermanentError(JobError):
    """The input can never succeed: the job ends `failed`."""


class TransientError(JobError):
    """This attempt failed but another may not: retried after a backoff, `dead` once the budget is spent."""


# The longest a kind may snooze its job at once.
MAX_SNOOZE_SECONDS = 30 * 86400


class Snooze(Exception):
    """Raised by a kind: its job goes back to `queued`, due `seconds` from now, and this attempt is given
    back to the job's budget (its `attempts` count only real tries). A job snoozes at most MAX_SNOOZES times;
    a snooze past that is a failed attempt with code `snoozed_too_often`. `ValueError` for `seconds` not
    more than 0 or over MAX_SNOOZE_SECONDS (30 days)."""

    def __init__(self, seconds: float) -> None:
        if not _seconds(seconds) or seconds > MAX_SNOOZE_SECONDS:
            raise ValueError(
                f"Snooze(seconds) takes a number of seconds more than 0 and at most {MAX_SNOOZE_SECONDS}"
                f" (30 days), not {seconds!r}"
            )
        super().__init__(f"snoozed for {seconds:g} seconds")
        self.seconds = float(seconds)


# Where an output names the file that is the job's result: a key no kind returns of its own accord (a kind
# that does is refused), so a kind's JSON result may use any key it likes, `path` included.
FILE_KEY = "outbox_bridge.file"


class FileOutput(dict[str, Any]):
    """An output whose result is a file, as `JobContext.result_file` makes it: `FILE_KEY` holds the file's
    path (relative to RESULTS_DIR) and media type, the other keys are the kind's own."""


def file_output(path: str, media_type: str, **fields: Any) -> FileOutput:
    return FileOutput(fields, **{FILE_KEY: {"path": path, "media_type": media_type}})


def file_of(output: dict[str, Any] | None) -> tuple[str, str] | None:
    """The (path relative to RESULTS_DIR, media type) of a file result; None for a JSON one."""
    named = (output or {}).get(FILE_KEY)
    if not isinstance(named, dict) or not isinstance(named.get("path"), str):
        return None
    media_type = named.get("media_type")
    return named["path"], media_type if isinstance(media_type, str) else "application/octet-stream"


class Cancelled(Exception):
    """The job saw its cancel request at a safe point and stopped."""


class LeaseLost(Exception):
    """The worker no longer holds the job: stop without writing anything."""


class JobContext(Protocol):
    job_id: str
    attempt_id: str
    epoch: int
    attempts: int
    tenant: str
    owner: str
    operation_key: str
    checkpoint: dict[str, Any] | None

    @property
    def results_dir(self) -> Path:
        """Where kinds write their per-attempt files."""

    @property
    def batch(self) -> dict[str, Any] | None:
        """For a batch's callback job, how the batch's jobs ended: `{"id": batch id, "counts": {state: n},
        "jobs": {job id: state}}` (the jobs in the batch's order), read from the store when first asked for;
        None for a job that is no batch's callback."""

    def remaining_seconds(self) -> float | None:
        """Seconds left before the job's deadline or the attempt's timeout (the kind's `timeout_seconds`),
        whichever comes first; None when it has neither."""

    def check_cancel(self) -> None:
        """Raise `Cancelled` if a cancel was requested, `LeaseLost` if the lease is gone. Cheap: reads the
        flags the lease keeper refreshes."""

    def save_checkpoint(self, data: dict[str, Any]) -> None:
        """Durably record progress; a later attempt gets it back as `checkpoint`. `LeaseLost` if fenced."""

    def mark_external_started(self) -> None:
        """Durably record that an external effect is about to happen. `LeaseLost` if fenced, in which case
        the effect must not be started."""

    def result_file(self, path: Path, *, media_type: str, **fields: Any) -> dict[str, Any]:
        """The output to return when the job's result is the file at `path` (written by this attempt under
        `results_dir`), served by `GET /jobs/{id}/result` as `media_type`; `fields` are kept beside it."""

    def record_execution(self, event: str, **fields: Any) -> None:
        """Append to the execution log (when configured): tests count executions with it."""


@dataclass(frozen=True)
class Progress:
    """How far a running job got, as its kind counts: `done` of `total` (None: not known)."""

    done: int
    total: int | None


# What a kind's `run` returns (or its coroutine, for an `async def` kind): the job's result, None for `null`.
Output = dict[str, Any] | None


@dataclass(frozen=True)
class Policy:
    """What a kind sets for its own jobs (`@kind(queue=..., max_attempts=..., ...)`); what it leaves None
    falls back to the deployment's settings. `max_attempts`: the attempt budget fixed at accept. `backoff`:
    (base, cap) seconds of the wait before a retry. `timeout_seconds`: an attempt running longer ends as a
    failed attempt with code `timeout`. `priority`: the default of a request that names none.
    `unique_for_seconds`: for that long after a job is accepted, a request of the same tenant, kind and
    payload answers with that job."""

    queue: str = DEFAULT_QUEUE
    max_attempts: int | None = None
    backoff: tuple[float, float] | None = None
    timeout_seconds: float | None = None
    priority: str | None = None
    unique_for_seconds: float | None = None

    def refusal(self) -> str | None:
        """What is wrong with the policy, in a few words; None when nothing is."""
        if not is_queue_name(self.queue):
            return f"queue {self.queue!r} must be {QUEUE_RULE}"
        if self.max_attempts is not None and not (
            isinstance(self.max_attempts, int) and 1 <= self.max_attempts <= 1000
        ):
            return "max_attempts must be an integer from 1 to 1000"
        if self.backoff is not None:
            pair = self.backoff
            if not (
                isinstance(pair, tuple)
                and len(pair) == 2
                and all(_seconds(x) for x in pair)
                and pair[0] <= pair[1]
            ):
                return "backoff must be (base_seconds, cap_seconds), 0 < base <= cap"
        for name in ("timeout_seconds", "unique_for_seconds"):
            value = getattr(self, name)
            if value is not None and not _seconds(value):
                return f"{name} must be a positive number of seconds"
        if self.priority not in (None, "high", "normal", "low"):
            return "priority must be 'high', 'normal' or 'low'"
        return None


def _seconds(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 < value < 10**9


@dataclass(frozen=True)
class Kind:
    """A job kind. `discard(results_dir, output)`, when given, removes what `run` left behind for an output
    that did not become the job's result (the attempt was cancelled or fenced out after it returned), so
    that only committed results stay on disk. A kind writes its files in `<results_dir>/<job_id>/`, each
    named after the attempt that writes it (`<attempt_id>` then any suffix): the job retention
    (`handlers.outputs`) goes by that name to remove what a killed or lost attempt left."""

    name: str
    schema: type[BaseModel]
    run: Callable[[JobContext, Any], Output | Awaitable[Output]]
    discard: Callable[[Path, dict[str, Any]], None] | None = None
    # Reads the kind's checkpoint as progress (None: it says none); a kind without it reports none.
    progress: Callable[[dict[str, Any]], Progress | None] | None = None
    # A new attempt continues from the checkpoint an earlier attempt saved (else it starts over).
    resumes: bool = False
    policy: Policy = field(default_factory=lambda: Policy())

    def parse(self, payload: Any) -> BaseModel:
        """Validate a payload against the kind's schema, strictly (every kind's schema is strict: `"5"` is
        not a number); raises pydantic's ValidationError."""
        return self.schema.model_validate(payload)

    def progress_of(self, checkpoint: dict[str, Any] | None, *, current: bool) -> Progress | None:
        """The progress `checkpoint` shows: None before any, for a kind that reports none, and for a
        checkpoint an earlier attempt saved (`current` False) when a new attempt starts over rather than
        resuming from it, so a view never shows progress the running attempt has not made. `done` is never
        negative nor over `total`."""
        if checkpoint is None or self.progress is None or not (current or self.resumes):
            return None
        try:
            found = self.progress(checkpoint)
        except (KeyError, TypeError, ValueError):  # not a checkpoint this kind wrote
            return None
        if found is None:
            return None
        done = max(0, found.done)
        total = None if found.total is None else max(0, found.total)
        return Progress(done if total is None else min(done, total), total)

    def normalise(self, payload: Any) -> dict[str, Any]:
        """The payload as the kind reads it: validated, defaults filled in, each value in its field's type
        (`0` for a float field is `0.0`). Two payloads that mean the same job give the same dict."""
        return self.parse(payload).model_dump(mode="json")


# --- the kinds this process knows ------------------------------------------------------------------------

KINDS: dict[str, Kind] = {}
# The module that defined each kind, to name both when a name is taken twice.
_DEFINED_IN: dict[str, str] = {}
NAME_RULE = "1 to 64 characters of a-z, 0-9, '_', '-' and '.', starting with a letter"
_NAME = re.compile(r"[a-z][a-z0-9_.-]{0,63}")

Model = TypeVar("Model", bound=BaseModel)
Params = ParamSpec("Params")
Out = TypeVar("Out", bound=Output | Awaitable[Output])


class KindError(Exception):
    """A kind that cannot be registered, or a kinds module that does not load; the message is one line."""


def register(new: Kind, defined_in: str) -> Kind:
    """Add `new` to the kinds this process knows. `KindError` for a name already taken or not a valid name,
    or a payload that is not a pydantic model."""
    if not _NAME.fullmatch(new.name):
        raise KindError(f"kind name {new.name!r} (in {defined_in}) must be {NAME_RULE}")
    if not (isinstance(new.schema, type) and issubclass(new.schema, BaseModel)):
        raise KindError(f"kind {new.name!r} (in {defined_in}): payload must be a pydantic model class")
    refusal = new.policy.refusal()
    if refusal is not None:
        raise KindError(f"kind {new.name!r} (in {defined_in}): {refusal}")
    if new.name in KINDS:
        raise KindError(f"kind {new.name!r} is defined twice: in {_DEFINED_IN[new.name]} and in {defined_in}")
    KINDS[new.name] = new
    _DEFINED_IN[new.name] = defined_in
    return new


def kind(
    name: str,
    *,
    payload: type[Model],
    resumes: bool = False,
    progress: Callable[[dict[str, Any]], Progress | None] | None = None,
    discard: Callable[[Path, dict[str, Any]], None] | None = None,
    queue: str = DEFAULT_QUEUE,
    max_attempts: int | None = None,
    backoff: tuple[float, float] | None = None,
    timeout_seconds: float | None = None,
    priority: str | None = None,
    unique_for_seconds: float | None = None,
) -> Callable[[Callable[Params, Out]], Callable[Params, Out]]:
    """Make `run(ctx: JobContext, payload: <payload>) -> dict | None` the kind `name`:

        @outbox_bridge.kind("resize_image", payload=ResizeImage)
        def resize(ctx: JobContext, payload: ResizeImage) -> dict:
            ...
            return {"width": payload.width}

    The payload of every job of the kind is validated (strictly, as the model says) when it is submitted
    and again before it runs. The JSON object `run` returns is the job's result; None is the result `null`.
    `run` may be `async def`: each attempt's coroutine runs to its end on an event loop of the worker
    thread running it (`worker.attempt`), under the same lease, cancel, checkpoint and deadline rules; the
    context's methods are plain calls there (those that write to the store hold that attempt's loop while
    they do). `resumes`: a new attempt
    continues from the checkpoint an earlier one saved (`ctx.checkpoint`) instead of starting over;
    `progress` reads a checkpoint as a `Progress` for the job's view; `discard` removes what an attempt
    left on disk for an output that did not become the result. `queue`, `max_attempts`, `backoff`,
    `timeout_seconds`, `priority` and `unique_for_seconds` are the kind's `Policy`.

    The function is returned as it was. `outbox_bridge.kind` (`outbox_bridge.kind_functions`) is this
    decorator with an `enqueue` added to the function; the built-in kinds, internal names, are made with
    this one."""

    def define(run: Callable[Params, Out]) -> Callable[Params, Out]:
        # The worker calls it as (ctx, payload), whatever its parameters are named.
        runs = cast("Callable[[JobContext, Any], dict[str, Any]]", run)
        pair = tuple(backoff) if isinstance(backoff, list) else backoff  # a list reads as the pair it holds
        policy = Policy(queue, max_attempts, pair, timeout_seconds, priority, unique_for_seconds)
        register(
            Kind(name, payload, runs, discard, progress=progress, resumes=resumes, policy=policy),
            run.__module__,
        )
        return run

    return define
