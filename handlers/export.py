"""The `export` kind: a deterministic CSV written in chunks to an immutable per-attempt file.

The file is `<RESULTS_DIR>/<job_id>/<attempt_id>.csv`. It is written under a temporary name in the same
directory, fsynced, made read-only, moved into place (a hard link, which never replaces an existing file,
then the temporary name is removed) and the directory fsynced, so the final name only ever holds a
complete file and is never rewritten. Users reach it only through the committed result pointer (the
attempt output the job's result pointer names), so the file of a killed or fenced attempt is never
served. Cancellation and a lost lease are checked between chunks; either leaves no finished file and
removes the partial one. A file finished by an attempt whose output was then not committed (a cancel seen
after the last chunk, or at the commit itself) is removed by the worker once it knows (`discard_export`).

The rows written so far are checkpointed (at most every `PROGRESS_SECONDS`, and once all are written,
before the file is moved into place) for the job view's progress. An attempt that takes over starts its
own file from the first row, so its progress starts over with it (`resumes` is False).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from outbox_bridge.handlers.base import JobContext, Progress, file_of, kind

HEADER = "id,ordered_on,sku,region,quantity,unit_price\n"
REGIONS = ("north", "east", "south", "west")
ORDER_DATES = tuple((date(2024, 1, 1) + timedelta(days=d)).isoformat() for d in range(366))
PARTIAL_SUFFIX = ".csv.partial"
MEDIA_TYPE = "text/csv"
# A checkpoint is a store write: a long export reports its rows this often, not after every chunk.
PROGRESS_SECONDS = 0.5


class ExportPayload(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    rows: int = Field(ge=0, le=1_000_000)
    chunk: int = Field(ge=1, le=100_000)


def csv_row(i: int) -> str:
    """Row `i` of every export: a pure function of `i`, so the same payload always gives the same bytes."""
    code = (i * 7919) % 100_000
    day = ORDER_DATES[(i * 13) % 366]
    return f"{i},{day},SKU-{code:05d},{REGIONS[i % 4]},{1 + (i * 37) % 50},{code / 100:.2f}\n"


def csv_chunks(rows: int, chunk: int) -> Iterator[bytes]:
    """The header, then the rows `chunk` at a time. The concatenation does not depend on `chunk`."""
    yield HEADER.encode()
    for start in range(1, rows + 1, chunk):
        stop = min(start + chunk, rows + 1)
        yield "".join(csv_row(i) for i in range(start, stop)).encode()


@dataclass(frozen=True)
class Written:
    path: Path
    bytes: int
    sha256: str


def write_immutable(final: Path, chunks: Iterable[bytes], between_chunks: Callable[[], None]) -> Written:
    """Write `chunks` to `final` all or nothing, read-only once there; `FileExistsError` if `final` exists.
    `between_chunks()` runs before each chunk after the header; whatever it raises leaves no file at
    `final` and no partial file behind."""
    partial = final.with_name(final.name.removesuffix(".csv") + PARTIAL_SUFFIX)
    digest = hashlib.sha256()
    size = 0
    try:
        with open(partial, "xb") as out:
            for n, data in enumerate(chunks):
                if n:
                    between_chunks()
                out.write(data)
                digest.update(data)
                size += len(data)
            out.flush()
            os.fchmod(out.fileno(), 0o444)
            os.fsync(out.fileno())
        os.link(partial, final)  # unlike a rename, never replaces an existing file
        partial.unlink()
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()
        raise
    fsync_directory(final.parent)
    return Written(final, size, digest.hexdigest())


def fsync_directory(directory: Path) -> None:
    """Make a rename in `directory` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def job_directory(results_dir: Path, job_id: str) -> Path:
    """The job's directory under `results_dir`, created durably on first use."""
    job_dir = results_dir / job_id
    if not job_dir.is_dir():
        job_dir.mkdir(parents=True, exist_ok=True)
        fsync_directory(results_dir)
    return job_dir


def remove_stale_partials(job_dir: Path) -> None:
    """Remove the partial files that killed attempts of this job left behind. A new attempt exists only
    once the older one's lease expired, so an older attempt still writing is fenced: it fails its rename,
    and its output could never have been committed anyway."""
    for stale in job_dir.glob(f"*{PARTIAL_SUFFIX}"):
        with contextlib.suppress(FileNotFoundError):
            stale.unlink()


def run_export(ctx: JobContext, payload: ExportPayload) -> dict[str, Any]:
    """Write this attempt's file and return its description; the runner commits it as the output."""
    job_dir = job_directory(ctx.results_dir, ctx.job_id)
    remove_stale_partials(job_dir)
    final = job_dir / f"{ctx.attempt_id}.csv"
    ctx.check_cancel()
    chunks = checkpointed(ctx, csv_chunks(payload.rows, payload.chunk), payload.rows, payload.chunk)
    written = write_immutable(final, chunks, ctx.check_cancel)
    return ctx.result_file(
        written.path, media_type=MEDIA_TYPE, rows=payload.rows, bytes=written.bytes, sha256=written.sha256
    )


def checkpointed(ctx: JobContext, chunks: Iterable[bytes], rows: int, chunk: int) -> Iterator[bytes]:
    """`chunks` (the header, then `chunk` rows each), checkpointing `{"rows_written", "rows"}` as they are
    written: the next chunk is asked for only once the last one is written, so the count never runs ahead of
    the file. After the last chunk it always checkpoints all the rows; `LeaseLost` from a checkpoint stops
    the write and leaves no file."""
    saved_at, written = time.monotonic(), None
    for n, data in enumerate(chunks):
        yield data
        if n and time.monotonic() - saved_at >= PROGRESS_SECONDS:
            written = min(n * chunk, rows)
            ctx.save_checkpoint({"rows_written": written, "rows": rows})
            saved_at = time.monotonic()
    if written != rows:
        ctx.save_checkpoint({"rows_written": rows, "rows": rows})


def progress(checkpoint: dict[str, Any]) -> Progress:
    return Progress(int(checkpoint["rows_written"]), int(checkpoint["rows"]))


def discard_export(results_dir: Path, output: dict[str, Any]) -> None:
    """Remove the file of an attempt whose output was not committed; no result pointer names it."""
    named = file_of(output)
    if named is not None:
        with contextlib.suppress(FileNotFoundError):
            (results_dir / named[0]).unlink()


kind("export", payload=ExportPayload, discard=discard_export, progress=progress)(run_export)
