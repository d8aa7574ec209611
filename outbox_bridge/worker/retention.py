"""The job retention: finished jobs older than `JOB_RETENTION_SECONDS` are deleted with their files, and
attempt outputs that never became a result are removed from the results directory. Every relay runs a
bounded pass (`retain`) every `RETENTION_CHECK_SECONDS`, and so does every baseline worker process (which
has no relay beside it); `outbox-bridge jobs prune` runs it to the end. Several at once are safe: every
delete is guarded and a file already gone counts as removed.

Rows go before files. Each batch of jobs is deleted in a committed transaction of its own, and only then
are the directories of the jobs it deleted removed: a crash in between leaves directories of jobs that no
longer exist, which the sweep of the results directory removes later, never a job whose files are gone.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Engine

from outbox_bridge.core import clock
from outbox_bridge.core.settings import Settings
from outbox_bridge.handlers import outputs
from outbox_bridge.jobstore import db, retention
from outbox_bridge.jobstore.retention import JobFiles

log = logging.getLogger(__name__)

# A job directory, or a file in one, that the store cannot account for is removed once unchanged this long,
# so that nothing a worker is writing for a claim committed after the store was asked is ever touched.
QUIET_SECONDS = 300.0
# A pass of `retain` is bounded: at most this many batches of `retention.BATCH` jobs deleted, and this many
# job directories looked through (the next pass goes on from there).
RETENTION_BATCHES = 10
SWEEP_DIRECTORIES = 2_000


@dataclass(frozen=True)
class Pruned:
    """Jobs the retention deleted (or would delete), and the files of theirs removed with them."""

    jobs: int = 0
    files: int = 0


def prune_finished(
    engine: Engine,
    settings: Settings,
    cutoff: float,
    *,
    batches: int | None = None,
    batch_size: int = retention.BATCH,
) -> Pruned:
    """Delete the jobs finished before `cutoff` (`retention.prune`), `batch_size` per transaction and at
    most `batches` batches (None: until none is left), each batch's directories removed once it committed."""
    jobs = files = done = 0
    while batches is None or done < batches:
        deleted = db.transact(engine, retention.prune, cutoff, limit=batch_size)
        jobs += len(deleted)
        files += sum(_remove(settings.results_dir / job_id) for job_id in deleted)
        done += 1
        if len(deleted) < batch_size:
            break
    return Pruned(jobs, files)


def preview_prune(engine: Engine, settings: Settings, cutoff: float) -> Pruned:
    """What `prune_finished` would delete at `cutoff` now; deletes nothing."""
    jobs = files = 0
    after: tuple[float, str] | None = None
    while page := db.read(engine, retention.expired, cutoff, after=after):
        jobs += len(page)
        files += sum(outputs.count_files(settings.results_dir / job_id) for _, job_id in page)
        after = page[-1]
    return Pruned(jobs, files)


@dataclass(frozen=True)
class Swept:
    """What a sweep of the results directory removed (or would remove): files of attempts that did not
    become their job's result, and directories of jobs the store does not have (with the files in them)."""

    files: int = 0
    directories: int = 0


class OutputSweep:
    """Goes through the job directories under RESULTS_DIR in name order, where the previous call stopped,
    and removes what no job needs: the files of every attempt that ended without becoming its job's result
    (killed or lost attempts the sweeper ended, fenced-out ones), files no attempt of the job names, and
    the directories of jobs that no longer exist. The committed result's files and those of running
    attempts stay."""

    def __init__(self) -> None:
        self._after = ""

    def run(
        self,
        engine: Engine,
        settings: Settings,
        now: float,
        *,
        limit: int | None = None,
        dry_run: bool = False,
    ) -> Swept:
        """Look through `limit` directories (None: all of them); with `dry_run`, only count."""
        try:
            names = [name for name in outputs.job_directories(settings.results_dir) if name > self._after]
        except OSError as exc:
            log.warning("retention: cannot list %s: %s", settings.results_dir, exc)
            return Swept()
        chosen = names if limit is None else names[:limit]
        self._after = chosen[-1] if limit is not None and len(names) > limit else ""
        files = directories = 0
        for start in range(0, len(chosen), retention.BATCH):
            batch = chosen[start : start + retention.BATCH]
            known = db.read(engine, retention.job_files, batch)
            for name in batch:
                removed, gone = _tidy(
                    settings.results_dir / name, known.get(name), now - QUIET_SECONDS, dry_run
                )
                files += removed
                directories += gone
        return Swept(files, directories)


def _tidy(job_dir: Path, job: JobFiles | None, quiet_before: float, dry_run: bool) -> tuple[int, int]:
    """Files removed from `job_dir`, and 1 when the directory itself went (its job does not exist)."""
    found = outputs.entries(job_dir)
    if job is None:
        changed = outputs.modified(job_dir)
        if changed is None or not outputs.abandoned(found, changed, quiet_before=quiet_before):
            return 0, 0
        removed = _remove(job_dir, dry_run=dry_run)
        return removed, int(dry_run or not job_dir.exists())
    names = outputs.leftovers(found, keep=job.keep, attempts=job.attempts, quiet_before=quiet_before)
    return sum(_remove(job_dir / name, dry_run=dry_run) for name in names), 0


def _remove(path: Path, *, dry_run: bool = False) -> int:
    """Files removed at `path` (with `dry_run`, that would be). One that cannot be removed is logged and
    left for a later pass: a file left behind is untidy, and never reachable without its job's row."""
    try:
        return outputs.count_files(path) if dry_run else outputs.remove(path)
    except OSError as exc:
        log.warning("retention: cannot remove %s: %s", path, exc)
        return 0


@dataclass(frozen=True)
class Retained:
    """What one pass of `retain` did."""

    pruned: Pruned
    swept: Swept

    def lines(self) -> list[str]:
        found = []
        if self.pruned.jobs:
            found.append(
                f"retention: deleted {self.pruned.jobs} finished jobs and {self.pruned.files} of their files"
            )
        if self.swept.files or self.swept.directories:
            found.append(
                f"retention: removed {self.swept.files} files of attempts that did not become a result or of "
                f"jobs that no longer exist, and {self.swept.directories} directories of such jobs"
            )
        return found


def retain(engine: Engine, settings: Settings, sweep: OutputSweep) -> Retained:
    """One bounded retention pass: jobs finished longer than `job_retention_seconds` ago are deleted (none
    when it is 0), then `sweep` goes on through the results directory."""
    now = clock.now()
    pruned = Pruned()
    if settings.job_retention_seconds > 0:
        cutoff = now - settings.job_retention_seconds
        pruned = prune_finished(engine, settings, cutoff, batches=RETENTION_BATCHES)
    return Retained(pruned, sweep.run(engine, settings, now, limit=SWEEP_DIRECTORIES))
