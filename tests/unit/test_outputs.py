"""Which files in a job's directory may go: the rule `OutputSweep` applies, as plain values."""

from __future__ import annotations

import os
from pathlib import Path

from outbox_bridge.handlers.outputs import Entry, abandoned, attempt_of, is_job_id, leftovers, remove

NOW = 1_700_000_000.0
QUIET_BEFORE = NOW - 300


def names(*found: tuple[str, float], keep: set[str], attempts: set[str]) -> list[str]:
    entries = [Entry(name, modified) for name, modified in found]
    return leftovers(entries, keep=frozenset(keep), attempts=frozenset(attempts), quiet_before=QUIET_BEFORE)


def test_a_file_belongs_to_the_attempt_its_name_starts_with() -> None:
    assert attempt_of("a1.csv") == attempt_of("a1.csv.partial") == attempt_of("a1") == "a1"


def test_the_results_files_and_a_running_attempts_files_stay_however_old() -> None:
    found = (("result.csv", 0.0), ("running.csv.partial", 0.0))
    assert names(*found, keep={"result", "running"}, attempts={"result", "running"}) == []


def test_the_files_of_an_attempt_that_ended_without_becoming_the_result_go_at_once() -> None:
    found = (("result.csv", NOW), ("lost.csv", NOW), ("lost.csv.partial", NOW))
    assert names(*found, keep={"result"}, attempts={"result", "lost"}) == ["lost.csv", "lost.csv.partial"]


def test_a_file_no_attempt_names_goes_only_once_it_has_been_quiet() -> None:
    found = (("stray-old", QUIET_BEFORE - 1), ("stray-new", QUIET_BEFORE + 1))
    assert names(*found, keep=set(), attempts=set()) == ["stray-old"]


def test_the_directory_of_a_missing_job_goes_only_when_nothing_in_it_changed_lately() -> None:
    old, new = QUIET_BEFORE - 1, QUIET_BEFORE + 1
    assert abandoned([Entry("a.csv", old)], old, quiet_before=QUIET_BEFORE)
    assert abandoned([], old, quiet_before=QUIET_BEFORE)
    assert not abandoned([Entry("a.csv", new)], old, quiet_before=QUIET_BEFORE)
    assert not abandoned([Entry("a.csv", old)], new, quiet_before=QUIET_BEFORE)


def test_only_names_shaped_like_job_ids_are_job_directories() -> None:
    assert is_job_id("8a26491b-6f0c-4c5e-9c1e-2d7b1c0e9f10")
    assert not is_job_id("notes")
    assert not is_job_id("8A26491B-6F0C-4C5E-9C1E-2D7B1C0E9F10")  # not how the store writes them


def test_remove_takes_read_only_files_and_counts_them_and_leaves_what_links_point_to(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "kept").write_text("x")
    tree = tmp_path / "tree"
    (tree / "inner").mkdir(parents=True)
    for path in (tree / "a.csv", tree / "inner" / "b.csv"):
        path.write_text("x")
        os.chmod(path, 0o444)
    (tree / "link").symlink_to(outside, target_is_directory=True)

    assert remove(tree) == 3
    assert not tree.exists()
    assert (outside / "kept").exists()
    assert remove(tree) == 0
