"""How a kind's checkpoint reads as the job view's progress (`Kind.progress_of`): none before a checkpoint,
an earlier attempt's only for a kind that resumes from it, never negative nor over its total."""

from __future__ import annotations

from typing import Any

import pytest

from outbox_bridge.handlers.base import Kind, Progress
from outbox_bridge.handlers.document import STEP_BUDGET
from outbox_bridge.handlers.registry import KINDS

DOCUMENT, EXPORT, NOOP = KINDS["document"], KINDS["export"], KINDS["noop"]

ROWS = {"rows_written": 500, "rows": 1000}
STEPS = {"step_index": 1, "outputs": [{"name": "extract"}, {"name": "validate"}], "rejected": []}


def test_an_export_reports_rows_written_of_its_total_and_a_document_steps_run_of_the_budget() -> None:
    assert EXPORT.progress_of(ROWS, current=True) == Progress(500, 1000)
    assert DOCUMENT.progress_of(STEPS, current=True) == Progress(2, STEP_BUDGET)


def test_there_is_no_progress_before_the_first_checkpoint_nor_for_a_kind_that_reports_none() -> None:
    assert EXPORT.progress_of(None, current=True) is None
    assert NOOP.progress_of({"anything": 1}, current=True) is None


def test_an_earlier_attempts_checkpoint_counts_only_for_a_kind_that_resumes_from_it() -> None:
    assert EXPORT.progress_of(ROWS, current=False) is None, "a new export attempt starts over"
    assert DOCUMENT.progress_of(STEPS, current=False) == Progress(2, STEP_BUDGET)


@pytest.mark.parametrize(
    "read,expected",
    [
        (Progress(-3, 10), Progress(0, 10)),
        (Progress(12, 10), Progress(10, 10)),
        (Progress(-1, None), Progress(0, None)),
        (Progress(7, -2), Progress(0, 0)),
    ],
)
def test_progress_is_never_negative_nor_over_its_total(read: Progress, expected: Progress) -> None:
    kind = Kind("odd", NOOP.schema, NOOP.run, progress=lambda _: read)
    assert kind.progress_of({}, current=True) == expected


@pytest.mark.parametrize("checkpoint", [{}, {"rows_written": "many", "rows": 1}, {"rows": None}])
def test_a_checkpoint_the_kind_did_not_write_reads_as_no_progress(checkpoint: dict[str, Any]) -> None:
    assert EXPORT.progress_of(checkpoint, current=True) is None
