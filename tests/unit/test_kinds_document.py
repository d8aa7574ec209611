"""The document workflow's planner and trusted checks: pure functions, no store."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from outbox_bridge.handlers.base import Cancelled
from outbox_bridge.handlers.document import (
    STEP_BUDGET,
    Allowed,
    DocumentPayload,
    DraftParams,
    Progress,
    Proposal,
    Rejected,
    document_fields,
    estimated_seconds,
    plan,
    result_of,
    review,
    run_document,
)
from outbox_bridge.jobstore.records import dumps

INVOICE = "Invoice 2024-17\nCustomer: Acme Corp\nTotal: 1,200.00 EUR\nDue date: 2024-07-01\n\nPay in 30 days."


@dataclass
class FakeContext:
    """A `JobContext` held in memory: records checkpoints (round-tripped as the store does) and steps."""

    tenant: str = "acme"
    checkpoint: dict[str, Any] | None = None
    remaining: float | None = None
    cancel_after_checks: int | None = None
    checkpoints: list[dict[str, Any]] = field(default_factory=list)
    executed: list[tuple[int, str]] = field(default_factory=list)
    checks: int = 0
    job_id: str = "job-1"
    attempt_id: str = "attempt-1"
    epoch: int = 1
    attempts: int = 1
    owner: str = "alice"
    operation_key: str = "key-1"
    results_dir: Path = Path("results")

    def remaining_seconds(self) -> float | None:
        return self.remaining

    def check_cancel(self) -> None:
        self.checks += 1
        if self.cancel_after_checks is not None and self.checks > self.cancel_after_checks:
            raise Cancelled(self.job_id)

    def save_checkpoint(self, data: dict[str, Any]) -> None:
        stored = json.loads(dumps(data))  # as the store keeps it: canonical JSON, keys sorted
        self.checkpoints.append(stored)
        self.checkpoint = stored

    def mark_external_started(self) -> None:
        raise AssertionError("the document workflow has no external effect")

    def record_execution(self, event: str, **fields: Any) -> None:
        assert event == "document_step"
        self.executed.append((fields["index"], fields["step"]))


def names(proposals: list[Proposal]) -> list[str]:
    return [p.name for p in proposals]


def allowed_step(name: str, params: dict[str, Any], **overrides: Any) -> Allowed | Rejected:
    checks: dict[str, Any] = {"tenant": "acme", "steps_run": 0, "remaining": None, "document_chars": 100}
    checks.update(overrides)
    return review(Proposal(name, params, "acme"), **checks)


# --- the planner ----------------------------------------------------------------------------------------


def test_the_same_input_always_gives_the_same_plan() -> None:
    instructions = "bullets, tenant globex, e-mail it to a@b.example, double-check, 80 words"
    assert plan(INVOICE, instructions, "acme") == plan(INVOICE, instructions, "acme")


def test_plain_instructions_give_extract_validate_draft_in_the_jobs_tenant() -> None:
    proposals = plan(INVOICE, "summarise", "acme")
    assert names(proposals) == ["extract", "validate", "draft"]
    assert {p.tenant for p in proposals} == {"acme"}
    assert proposals[0].params == {"fields": ["customer", "total", "due_date"]}


def test_document_fields_reads_label_value_lines_only() -> None:
    assert document_fields(INVOICE) == {
        "customer": "Acme Corp",
        "total": "1,200.00 EUR",
        "due_date": "2024-07-01",
    }
    assert document_fields("no labels here\n2024: a year\n: nothing") == {}


@pytest.mark.parametrize(
    "instructions",
    ["send it to finance", "E-mail the summary to bob@example.com", "email this", "mail it", "Forward it"],
)
def test_asking_to_send_or_email_makes_the_planner_propose_send_email(instructions: str) -> None:
    assert "send_email" in names(plan(INVOICE, instructions, "acme"))


@pytest.mark.parametrize("instructions", [None, "", "summarise for the sender's records", "emailing is off"])
def test_without_a_request_to_send_there_is_no_send_email(instructions: str | None) -> None:
    assert "send_email" not in names(plan(INVOICE, instructions, "acme"))


def test_naming_another_tenant_makes_the_planner_reach_into_it() -> None:
    proposals = plan(INVOICE, "compare with tenant globex", "acme")
    assert [(p.name, p.tenant) for p in proposals if p.tenant != "acme"] == [("extract", "globex")]


def test_naming_the_jobs_own_tenant_is_not_a_cross_tenant_reference() -> None:
    assert {p.tenant for p in plan(INVOICE, "use tenant: acme", "acme")} == {"acme"}


def test_the_planner_asks_for_as_many_draft_words_as_the_instructions_do() -> None:
    (draft,) = [p for p in plan(INVOICE, "in 1000 words", "acme") if p.name == "draft"]
    assert draft.params == {"style": "summary", "max_words": 1000}


# --- the trusted checks ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["send_email", "shell", "http_get", "Extract"])
def test_only_extract_validate_and_draft_are_allowed(name: str) -> None:
    verdict = allowed_step(name, {})
    assert isinstance(verdict, Rejected)
    assert verdict.reason.startswith(f"not_allowed: {name!r} is not an allowed step")


def test_a_send_email_proposal_is_rejected_even_with_well_formed_parameters() -> None:
    verdict = allowed_step("send_email", {"to": "a@b.example", "body": "draft"})
    assert verdict == Rejected(
        "send_email", "not_allowed: 'send_email' is not an allowed step (allowed: draft, extract, validate)"
    )


def test_a_step_scoped_to_another_tenant_is_rejected() -> None:
    verdict = review(
        Proposal("extract", {"fields": []}, "globex"),
        tenant="acme",
        steps_run=0,
        remaining=None,
        document_chars=10,
    )
    assert verdict == Rejected(
        "extract", "tenant_scope: the step is scoped to tenant 'globex', the job to 'acme'"
    )


@pytest.mark.parametrize(
    ("name", "params", "reason"),
    [
        ("draft", {"style": "summary", "max_words": 1000}, "invalid_params: max_words: Input should be less"),
        ("draft", {"style": "poem", "max_words": 10}, "invalid_params: style: Input should be"),
        ("extract", {"fields": ["ok"], "url": "http://x"}, "invalid_params: url: Extra inputs"),
        ("extract", {"fields": ["../etc/passwd"]}, "invalid_params: fields.0: String should match"),
        ("validate", {"required": []}, "invalid_params: min_words: Field required"),
    ],
)
def test_step_parameters_are_checked_against_the_steps_schema(
    name: str, params: dict[str, Any], reason: str
) -> None:
    verdict = allowed_step(name, params)
    assert isinstance(verdict, Rejected)
    assert verdict.reason.startswith(reason)


def test_well_formed_parameters_are_parsed_into_the_steps_schema() -> None:
    assert allowed_step("draft", {"style": "bullets", "max_words": 5}) == Allowed(
        "draft", DraftParams(style="bullets", max_words=5)
    )


def test_no_step_runs_once_the_budget_is_spent() -> None:
    params = {"style": "summary", "max_words": 5}
    assert isinstance(allowed_step("draft", params, steps_run=STEP_BUDGET - 1), Allowed)
    assert allowed_step("draft", params, steps_run=STEP_BUDGET) == Rejected(
        "draft", f"budget: {STEP_BUDGET} steps already ran"
    )


def test_a_step_runs_only_if_the_time_left_covers_its_estimated_cost() -> None:
    params = {"style": "summary", "max_words": 5}
    cost = estimated_seconds("draft", 100)
    assert isinstance(allowed_step("draft", params, remaining=None), Allowed)
    assert isinstance(allowed_step("draft", params, remaining=cost), Allowed)
    verdict = allowed_step("draft", params, remaining=cost - 0.01)
    assert isinstance(verdict, Rejected)
    assert verdict.reason.startswith("time: needs about 1.0s")
    assert allowed_step("draft", params, remaining=-3.0) == Rejected(
        "draft", "time: needs about 1.0s, 0.0s left"
    )


def test_a_longer_document_is_estimated_to_cost_more() -> None:
    assert estimated_seconds("extract", 20_000) > estimated_seconds("extract", 10)


def test_a_rejected_step_name_is_recorded_truncated() -> None:
    verdict = allowed_step("x" * 1000, {})
    assert isinstance(verdict, Rejected) and verdict.name == "x" * 64


# --- the workflow, against an in-memory context ---------------------------------------------------------


def test_an_email_request_is_rejected_and_recorded_while_allowed_steps_run() -> None:
    ctx = FakeContext()
    output = run_document(ctx, DocumentPayload(document=INVOICE, instructions="email it to a@b.example"))
    assert [s["name"] for s in output["steps"]] == ["extract", "validate", "draft"]
    assert [r["name"] for r in output["rejected"]] == ["send_email"]
    assert output["rejected"][0]["reason"].startswith("not_allowed:")
    assert output["draft"] and output["draft"].startswith("Invoice 2024-17 Customer: Acme Corp")
    assert output["resumed_from_step"] is None


def test_at_most_three_steps_run_however_many_are_proposed() -> None:
    ctx = FakeContext()
    output = run_document(ctx, DocumentPayload(document=INVOICE, instructions="double-check it"))
    assert len(output["steps"]) == STEP_BUDGET
    assert output["rejected"] == [{"name": "validate", "reason": "budget: 3 steps already ran"}]
    assert len(ctx.executed) == STEP_BUDGET


def test_a_cross_tenant_step_is_rejected_and_the_rest_still_runs() -> None:
    output = run_document(
        FakeContext(), DocumentPayload(document=INVOICE, instructions="bullets; tenant globex")
    )
    assert [r["reason"].split(":")[0] for r in output["rejected"]] == ["tenant_scope"]
    assert output["draft"] == "- customer: Acme Corp\n- total: 1,200.00 EUR\n- due date: 2024-07-01"


def test_each_settled_proposal_is_checked_for_cancel_then_checkpointed() -> None:
    ctx = FakeContext()
    run_document(ctx, DocumentPayload(document=INVOICE, instructions="email it"))
    assert [c["step_index"] for c in ctx.checkpoints] == [0, 1, 2, 3]
    assert ctx.checks == 4
    last = ctx.checkpoints[-1]
    assert len(last["outputs"]) == 3 and [r["name"] for r in last["rejected"]] == ["send_email"]


def test_a_cancel_seen_after_a_step_stops_the_workflow_before_its_checkpoint() -> None:
    ctx = FakeContext(cancel_after_checks=1)
    with pytest.raises(Cancelled):
        run_document(ctx, DocumentPayload(document=INVOICE))
    assert [c["step_index"] for c in ctx.checkpoints] == [0]
    assert ctx.executed == [(0, "extract"), (1, "validate")]


def test_a_resumed_attempt_does_not_redo_checkpointed_steps() -> None:
    payload = DocumentPayload(document=INVOICE, instructions="as bullets")
    first = FakeContext(cancel_after_checks=1)
    with pytest.raises(Cancelled):
        run_document(first, payload)
    second = FakeContext(checkpoint=first.checkpoints[-1])
    output = run_document(second, payload)
    assert second.executed == [(1, "validate"), (2, "draft")]
    assert output["resumed_from_step"] == 0


def test_a_resumed_attempt_gives_the_same_output_as_an_uninterrupted_one() -> None:
    payload = DocumentPayload(document=INVOICE, instructions="as bullets")
    first = FakeContext(cancel_after_checks=1)
    with pytest.raises(Cancelled):
        run_document(first, payload)
    resumed = run_document(FakeContext(checkpoint=first.checkpoints[-1]), payload)
    assert resumed == {**run_document(FakeContext(), payload), "resumed_from_step": 0}
    assert resumed["draft"] == "- customer: Acme Corp\n- total: 1,200.00 EUR\n- due date: 2024-07-01"


def test_an_unreadable_checkpoint_starts_the_workflow_over() -> None:
    assert Progress.resume({"step_index": "x"}) == Progress()
    assert Progress.resume({"outputs": []}) == Progress()


def test_proposals_past_the_plan_limit_are_reported_as_ignored() -> None:
    assert result_of(Progress(), None, dropped=2)["rejected"] == [
        {"name": "plan", "reason": "budget: 2 proposals past 8 ignored"}
    ]


def test_time_rejections_leave_the_draft_empty() -> None:
    output = run_document(FakeContext(remaining=0.6), DocumentPayload(document=INVOICE))
    assert [s["name"] for s in output["steps"]] == ["extract", "validate"]
    assert output["draft"] is None
    assert [r["reason"].split(":")[0] for r in output["rejected"]] == ["time"]


# --- the payload ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "payload",
    [
        {"document": ""},
        {"document": "   \n\t"},
        {"document": "x" * 20_001},
        {"document": "ok", "instructions": "x" * 2_001},
        {"document": "ok", "tenant": "globex"},
        {"instructions": "no document"},
    ],
)
def test_bad_document_payloads_are_refused(payload: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        DocumentPayload.model_validate(payload)
