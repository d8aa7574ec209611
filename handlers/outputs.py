"""What the kinds leave under RESULTS_DIR, and taking it away again.

Every file a kind writes for a job is in `<RESULTS_DIR>/<job_id>/` (`export.job_directory`), and its name
starts with the id of the attempt that wrote it, up to the first dot: `export` writes `<attempt_id>.csv`,
and `<attempt_id>.csv.partial` while it writes. So a file says which attempt it belongs to, and whether it
may stay is a question about that attempt: the committed result's and a running attempt's files stay,
every other attempt's files go. Only directories named like a job id are ever touched.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


def attempt_of(name: str) -> str:
    """The attempt a file in a job's directory belongs to: its name up to the first dot."""
    return name.split(".", 1)[0]


def is_job_id(name: str) -> bool:
    """Whether `name` has the shape of a job id (a UUID, as `intake.new_id` makes them)."""
    try:
        return str(uuid.UUID(name)) == name
    except ValueError:
        return False


def job_directories(results_dir: Path) -> list[str]:
    """The names of the directories in `results_dir` named like a job id, sorted; none when it is missing."""
    try:
        with os.scandir(results_dir) as found:
            return sorted(e.name for e in found if is_job_id(e.name) and e.is_dir(follow_symlinks=False))
    except FileNotFoundError:
        return []


@dataclass(frozen=True)
class Entry:
    """One thing in a job's directory, and when it last changed (epoch seconds)."""

    name: str
    modified: float


def entries(job_dir: Path) -> list[Entry]:
    """What is in `job_dir` now (nothing when it is gone); what disappears while it is read is left out."""
    found = []
    try:
        with os.scandir(job_dir) as listing:
            for entry in listing:
                with contextlib.suppress(FileNotFoundError):
                    found.append(Entry(entry.name, entry.stat(follow_symlinks=False).st_mtime))
    except (FileNotFoundError, NotADirectoryError):
        return []
    return found


def leftovers(
    found: Sequence[Entry], *, keep: frozenset[str], attempts: frozenset[str], quiet_before: float
) -> list[str]:
    """The names in the directory of a job that exists which may go: those of an attempt the store knows
    and does not keep (it ended without becoming the result), and those of no attempt it knows, once
    unchanged since `quiet_before` (a claim the store committed after it was asked may be writing them)."""
    gone = []
    for entry in found:
        attempt = attempt_of(entry.name)
        if attempt in keep:
            continue
        if attempt in attempts or entry.modified < quiet_before:
            gone.append(entry.name)
    return gone


def abandoned(found: Sequence[Entry], directory_modified: float, *, quiet_before: float) -> bool:
    """Whether the directory of a job the store does not have may go: nothing in it, nor the directory
    itself, changed since `quiet_before`."""
    return max([directory_modified, *(e.modified for e in found)]) < quiet_before


def modified(path: Path) -> float | None:
    """When `path` last changed, or None when it is gone."""
    try:
        return path.stat(follow_symlinks=False).st_mtime
    except FileNotFoundError:
        return None


def remove(path: Path) -> int:
    """Remove the file or the whole tree at `path` (read-only files too); returns how many files went.
    What is already gone counts as removed by someone else, not as an error."""
    if not path.is_dir() or path.is_symlink():
        return _unlink(path)
    removed = 0
    for root, dirs, files in os.walk(path, topdown=False):
        removed += sum(_unlink(Path(root, name)) for name in files)
        for name in dirs:
            inner = Path(root, name)
            if inner.is_symlink():  # a link to a directory: the link goes, never what it points to
                removed += _unlink(inner)
                continue
            with contextlib.suppress(FileNotFoundError):
                inner.rmdir()
    with contextlib.suppress(FileNotFoundError):
        path.rmdir()
    return removed


def count_files(path: Path) -> int:
    """How many files `remove(path)` would remove now."""
    if not path.is_dir() or path.is_symlink():
        return int(path.is_symlink() or path.exists())
    return sum(
        len(files) + sum(Path(root, d).is_symlink() for d in dirs) for root, dirs, files in os.walk(path)
    )


def _unlink(path: Path) -> int:
    try:
        path.unlink()
    except FileNotFoundError:
        return 0
    return 1
