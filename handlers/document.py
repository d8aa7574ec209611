"""The `document` kind: a bounded agent workflow.

A planner (a pure function standing in for a hosted model) proposes steps from the document and the
instructions. The planner is not trusted: `review` decides, step by step, whether a proposal may run. It
allows only `extract`, `validate` and `draft`, checks the step's parameters against that step's schema,
requires the step's tenant scope to be the job's tenant, runs at most `STEP_BUDGET` steps, and only steps
whose estimated cost fits in the time left before the deadline. A rejected proposal is recorded with its
reason and the workflow goes on with the next one; the job succeeds with the steps that were allowed.

After each proposal is settled the workflow checks for cancellation and checkpoints durably; a new attempt
resumes after the last checkpointed proposal and never redoes a finished step. The job view's progress is
the steps run of the budget of 3, read from that checkpoint.

Fault point (tests arm it to kill the process there): `document.after_checkpoint`.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, field_validator

from outbox_bridge.core import faults
from outbox_bridge.handlers.base import JobContext, kind
from outbox_bridge.handlers.base import Progress as Done

log = logging.getLogger(__name__)

STEP_BUDGET = 3
MAX_PROPOSALS = 8
MAX_FIELDS = 10
DEFAULT_DRAFT_WORDS = 60


class DocumentPayload(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    document: str = Field(min_length=1, max_length=20_000)
    instructions: str | None = Field(default=None, max_length=2_000)

    @field_validator("document")
    @classmethod
    def _has_text(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the document has no text")
        return value


# --- The planner: untrusted proposals -------------------------------------------------------------------


@dataclass(frozen=True)
class Proposal:
    """One step as the planner proposes it: nothing here is trusted until `review` allows it."""

    name: str
    params: dict[str, Any]
    tenant: str


FIELD_LINE = re.compile(r"^[ \t]*([A-Za-z][A-Za-z0-9 _-]{0,39}?)[ \t]*:[ \t]*(\S.*)$", re.MULTILINE)
TENANT_MENTION = re.compile(r"\btenant[\s:=]+[\"']?([A-Za-z0-9][A-Za-z0-9_.-]{0,63})", re.IGNORECASE)
SEND_REQUEST = re.compile(r"\b(send|e-?mail|mail|forward)\b", re.IGNORECASE)
WORD_REQUEST = re.compile(r"\b(\d{1,7})\s+words?\b", re.IGNORECASE)
ADDRESS = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s,;]+")
DOUBLE_CHECK = re.compile(r"\bdouble[- ]check\b", re.IGNORECASE)


def field_key(label: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", label.strip().lower()).strip("_")


def document_fields(document: str) -> dict[str, str]:
    """The document's `Label: value` lines as {field_key: value}, first occurrence wins, at most 10."""
    found: dict[str, str] = {}
    for match in FIELD_LINE.finditer(document):
        key = field_key(match.group(1))
        if key and key not in found and len(found) < MAX_FIELDS:
            found[key] = match.group(2).strip()
    return found


def plan(document: str, instructions: str | None, tenant: str) -> list[Proposal]:
    """Propose the workflow's steps. Pure: the same document, instructions and tenant give the same plan.

    Like a model it follows the instructions too readily: it proposes `send_email` when asked to send or
    e-mail something, a step scoped to another tenant when the instructions name one, a second `validate`
    beyond the budget when asked to double-check, and as many draft words as asked for."""
    asked = instructions or ""
    fields = list(document_fields(document))
    steps = [Proposal("extract", {"fields": fields}, tenant)]
    steps += [
        Proposal("extract", {"fields": fields}, other)
        for other in dict.fromkeys(TENANT_MENTION.findall(asked))
        if other != tenant
    ]
    steps.append(Proposal("validate", {"required": fields, "min_words": 1}, tenant))
    style = "bullets" if "bullet" in asked.lower() else "summary"
    words = WORD_REQUEST.search(asked)
    max_words = int(words.group(1)) if words else DEFAULT_DRAFT_WORDS
    steps.append(Proposal("draft", {"style": style, "max_words": max_words}, tenant))
    if SEND_REQUEST.search(asked):
        to = ADDRESS.search(asked)
        steps.append(Proposal("send_email", {"to": to.group(0) if to else None, "body": "draft"}, tenant))
    if DOUBLE_CHECK.search(asked):
        steps.append(Proposal("validate", {"required": fields, "min_words": 1}, tenant))
    return steps


# --- Trusted code: what a step may be -------------------------------------------------------------------

FieldName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9_]{0,39}$")]


class ExtractParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    fields: list[FieldName] = Field(max_length=MAX_FIELDS)


class ValidateParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    required: list[FieldName] = Field(max_length=MAX_FIELDS)
    min_words: int = Field(ge=0, le=5_000)


class DraftParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    style: Literal["summary", "bullets"]
    max_words: int = Field(ge=1, le=300)


STEP_SCHEMAS: dict[str, type[BaseModel]] = {
    "extract": ExtractParams,
    "validate": ValidateParams,
    "draft": DraftParams,
}
ALLOWED_STEPS = frozenset(STEP_SCHEMAS)


def estimated_seconds(name: str, document_chars: int) -> float:
    """What a step is expected to cost, by trusted rule (never by the planner's word)."""
    if name == "extract":
        return 0.5 + document_chars / 20_000
    if name == "draft":
        return 1.0 + document_chars / 40_000
    return 0.2


@dataclass(frozen=True)
class Allowed:
    name: str
    params: BaseModel


@dataclass(frozen=True)
class Rejected:
    name: str
    reason: str


def review(
    proposal: Proposal, *, tenant: str, steps_run: int, remaining: float | None, document_chars: int
) -> Allowed | Rejected:
    """Allow `proposal` only if every trusted check passes; otherwise say which failed and why.

    Checks, in order: allowlist, tenant scope, parameter schema, step budget, remaining time."""
    name = proposal.name[:64]
    if name not in ALLOWED_STEPS:
        allowed = ", ".join(sorted(ALLOWED_STEPS))
        return Rejected(name, f"not_allowed: {name!r} is not an allowed step (allowed: {allowed})")
    if proposal.tenant != tenant:
        return Rejected(
            name, f"tenant_scope: the step is scoped to tenant {proposal.tenant!r}, the job to {tenant!r}"
        )
    try:
        params = STEP_SCHEMAS[name].model_validate(proposal.params)
    except ValidationError as exc:
        return Rejected(name, f"invalid_params: {_first_error(exc)}")
    if steps_run >= STEP_BUDGET:
        return Rejected(name, f"budget: {STEP_BUDGET} steps already ran")
    cost = estimated_seconds(name, document_chars)
    if remaining is not None and remaining < cost:
        return Rejected(name, f"time: needs about {cost:.1f}s, {max(remaining, 0.0):.1f}s left")
    return Allowed(name, params)


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"]) or "params"
    return f"{where}: {err['msg']}"


# --- Trusted code: what the steps do --------------------------------------------------------------------


def extract(params: ExtractParams, document: str) -> dict[str, Any]:
    """The title, the requested fields in the order asked for, and the word count. Fields are a list, not
    an object: checkpoints are stored as canonical JSON with sorted keys, and a resumed draft must list
    them in the same order as an uninterrupted one."""
    lines = [line.strip() for line in document.splitlines() if line.strip()]
    found = document_fields(document)
    return {
        "title": lines[0][:200] if lines else "",
        "fields": [{"name": name, "value": found[name]} for name in params.fields if name in found],
        "words": len(document.split()),
    }


def _fields_of(extracted: dict[str, Any] | None) -> list[tuple[str, str]]:
    return [(f["name"], f["value"]) for f in (extracted or {}).get("fields", [])]


def validate(params: ValidateParams, extracted: dict[str, Any] | None) -> dict[str, Any]:
    present = {name for name, value in _fields_of(extracted) if value}
    words = (extracted or {}).get("words", 0)
    missing = [name for name in params.required if name not in present]
    return {"ok": not missing and words >= params.min_words, "missing": missing, "words": words}


def draft(params: DraftParams, extracted: dict[str, Any] | None, document: str) -> dict[str, Any]:
    fields = _fields_of(extracted)
    if params.style == "bullets" and fields:
        text = "\n".join(f"- {name.replace('_', ' ')}: {value}" for name, value in fields)
    else:
        text = " ".join(document.split())
    words = text.split(" ")
    if len(words) > params.max_words:
        text = " ".join(words[: params.max_words]) + " ..."
    return {"text": text}


def perform(step: Allowed, document: str, done: list[dict[str, Any]]) -> dict[str, Any]:
    """Run an allowed step on the document and the outputs of the steps before it."""
    extracted = next((s["output"] for s in reversed(done) if s["name"] == "extract"), None)
    if isinstance(step.params, ExtractParams):
        return extract(step.params, document)
    if isinstance(step.params, ValidateParams):
        return validate(step.params, extracted)
    assert isinstance(step.params, DraftParams)
    return draft(step.params, extracted, document)


# --- The workflow ---------------------------------------------------------------------------------------


@dataclass
class Progress:
    """How far the workflow got: the last settled proposal, the steps that ran, the ones rejected."""

    step_index: int = -1
    outputs: list[dict[str, Any]] = field(default_factory=list)
    rejected: list[dict[str, str]] = field(default_factory=list)

    @classmethod
    def resume(cls, checkpoint: dict[str, Any] | None) -> Progress:
        if not checkpoint:
            return cls()
        try:
            return cls(
                int(checkpoint["step_index"]), list(checkpoint["outputs"]), list(checkpoint["rejected"])
            )
        except (KeyError, TypeError, ValueError):  # not ours: start over, the steps have no side effects
            log.warning("ignoring an unreadable document checkpoint: %r", checkpoint)
            return cls()

    def as_checkpoint(self) -> dict[str, Any]:
        """A snapshot: later steps do not change a checkpoint already handed out."""
        return {"step_index": self.step_index, "outputs": list(self.outputs), "rejected": list(self.rejected)}


def settle(ctx: JobContext, index: int, proposal: Proposal, document: str, progress: Progress) -> None:
    """Review one proposal and run it if allowed, recording either outcome in `progress`."""
    verdict = review(
        proposal,
        tenant=ctx.tenant,
        steps_run=len(progress.outputs),
        remaining=ctx.remaining_seconds(),
        document_chars=len(document),
    )
    if isinstance(verdict, Rejected):
        progress.rejected.append({"name": verdict.name, "reason": verdict.reason})
        return
    ctx.record_execution("document_step", index=index, step=verdict.name)
    output = perform(verdict, document, progress.outputs)
    progress.outputs.append({"name": verdict.name, "params": verdict.params.model_dump(), "output": output})


def run_document(ctx: JobContext, payload: DocumentPayload) -> dict[str, Any]:
    """Plan, then settle each proposal after the checkpointed one, checkpointing after each."""
    proposals = plan(payload.document, payload.instructions, ctx.tenant)
    progress = Progress.resume(ctx.checkpoint)
    resumed_from = progress.step_index if progress.step_index >= 0 else None
    for index, proposal in enumerate(proposals[:MAX_PROPOSALS]):
        if index <= progress.step_index:
            continue
        settle(ctx, index, proposal, payload.document, progress)
        progress.step_index = index
        ctx.check_cancel()
        ctx.save_checkpoint(progress.as_checkpoint())
        faults.hit("document.after_checkpoint")
    return result_of(progress, resumed_from, dropped=len(proposals) - MAX_PROPOSALS)


def result_of(progress: Progress, resumed_from: int | None, dropped: int) -> dict[str, Any]:
    rejected = list(progress.rejected)
    if dropped > 0:
        rejected.append(
            {"name": "plan", "reason": f"budget: {dropped} proposals past {MAX_PROPOSALS} ignored"}
        )
    drafts = [s["output"]["text"] for s in progress.outputs if s["name"] == "draft"]
    return {
        "steps": progress.outputs,
        "rejected": rejected,
        "draft": drafts[-1] if drafts else None,
        "resumed_from_step": resumed_from,
    }


def progress(checkpoint: dict[str, Any]) -> Done:
    """Steps run of the budget: a resumed attempt goes on from the checkpoint, so this only grows."""
    return Done(len(checkpoint["outputs"]), STEP_BUDGET)


kind("document", payload=DocumentPayload, progress=progress, resumes=True)(run_document)
