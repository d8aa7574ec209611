"""The export kind's CSV: deterministic, chunk-independent, its payload bounds, its progress checkpoints."""

from __future__ import annotations

import csv
import io
from typing import Any

import pytest
from pydantic import ValidationError

from outbox_bridge.handlers import export
from outbox_bridge.handlers.export import HEADER, ExportPayload, csv_chunks, csv_row


def export_text(rows: int, chunk: int) -> str:
    return b"".join(csv_chunks(rows, chunk)).decode()


def test_an_export_is_the_header_then_one_line_per_row_numbered_from_one() -> None:
    table = list(csv.reader(io.StringIO(export_text(5, 2))))
    assert table[0] == HEADER.strip().split(",")
    assert [row[0] for row in table[1:]] == ["1", "2", "3", "4", "5"]
    assert {len(row) for row in table} == {len(table[0])}


def test_the_same_rows_always_give_the_same_bytes() -> None:
    assert export_text(1_000, 100) == export_text(1_000, 100)
    assert csv_row(42) == csv_row(42) != csv_row(43)


@pytest.mark.parametrize("chunk", [1, 3, 7, 250, 999, 1_000, 100_000])
def test_the_chunk_size_does_not_change_the_file(chunk: int) -> None:
    assert export_text(1_000, chunk) == export_text(1_000, 1_000)


def test_chunks_hold_at_most_chunk_rows_after_the_header() -> None:
    chunks = list(csv_chunks(10, 4))
    assert chunks[0] == HEADER.encode()
    assert [c.count(b"\n") for c in chunks[1:]] == [4, 4, 2]


def test_zero_rows_is_a_header_only_file() -> None:
    assert export_text(0, 10) == HEADER


def test_rows_hold_plausible_values() -> None:
    row_id, ordered_on, sku, region, quantity, unit_price = csv_row(123_456).strip().split(",")
    assert row_id == "123456" and ordered_on.startswith("2024-") and sku.startswith("SKU-")
    assert region in {"north", "east", "south", "west"}
    assert 1 <= int(quantity) <= 50 and float(unit_price) >= 0


@pytest.mark.parametrize(
    "payload",
    [
        {"rows": 1_000_001, "chunk": 10},
        {"rows": -1, "chunk": 10},
        {"rows": 10, "chunk": 0},
        {"rows": 10, "chunk": 100_001},
        {"rows": "10", "chunk": 10},
        {"rows": True, "chunk": 10},
        {"rows": 10.5, "chunk": 10},
        {"rows": 10},
        {"rows": 10, "chunk": 10, "path": "/etc/passwd"},
    ],
)
def test_bad_export_payloads_are_refused(payload: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        ExportPayload.model_validate(payload)


def test_the_largest_export_is_accepted() -> None:
    assert ExportPayload.model_validate({"rows": 1_000_000, "chunk": 100_000}).rows == 1_000_000


class Checkpoints:
    """The part of a `JobContext` `checkpointed` uses: it records what was saved."""

    def __init__(self) -> None:
        self.saved: list[int] = []

    def save_checkpoint(self, data: dict[str, Any]) -> None:
        assert data["rows"] == 2_500
        self.saved.append(data["rows_written"])


def test_rows_written_are_checkpointed_after_their_chunk_and_all_of_them_at_the_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(export, "PROGRESS_SECONDS", 0.0)
    ctx = Checkpoints()
    seen: list[list[int]] = []
    for _ in export.checkpointed(ctx, csv_chunks(2_500, 1_000), 2_500, 1_000):  # type: ignore[arg-type]
        seen.append(list(ctx.saved))
    assert seen == [[], [], [1_000], [1_000, 2_000]], "a chunk is counted only once it was written"
    assert ctx.saved == [1_000, 2_000, 2_500]


def test_a_quick_export_checkpoints_once_when_it_is_all_written() -> None:
    ctx = Checkpoints()
    list(export.checkpointed(ctx, csv_chunks(2_500, 1_000), 2_500, 1_000))  # type: ignore[arg-type]
    assert ctx.saved == [2_500]
