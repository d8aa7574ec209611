"""`outbox-bridge status`, `jobs list` and `jobs show` as a script reads them: `--json` is one JSON document
with whole ids and the api's time format, and piped tables are never cut short."""

from __future__ import annotations

import json
import re

from sqlalchemy import Engine, update

from outbox_bridge.core import clock
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, fenced
from outbox_bridge.jobstore.schema import jobs
from tests.support import procs
from tests.support.store import claimed, job_row, new_job, new_jobs

ISO_UTC = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def cli_json(settings: Settings, *args: str, code: int = 0) -> dict[str, object]:
    result = procs.run([*args, "--json"], settings)
    assert result.returncode == code, result.stdout + result.stderr
    document = json.loads(result.stdout)
    assert isinstance(document, dict)
    return document


def test_jobs_list_json_holds_whole_ids_newest_first(settings: Settings, engine: Engine) -> None:
    ids = new_jobs(engine, 3)

    document = cli_json(settings, "jobs", "list")

    items = document["items"]
    assert isinstance(items, list)
    assert sorted(item["id"] for item in items) == sorted(ids)
    assert document["next_cursor"] is None
    first = items[0]
    assert (first["tenant"], first["state"], first["epoch"]) == ("acme", "queued", 0)
    assert ISO_UTC.fullmatch(first["created_at"]), first["created_at"]


def test_jobs_list_json_pages_with_its_cursor(settings: Settings, engine: Engine) -> None:
    ids = {new_job(engine, f"k{i}") for i in range(3)}

    first = cli_json(settings, "jobs", "list", "--limit", "2")
    cursor = first["next_cursor"]
    assert isinstance(cursor, str)
    rest = cli_json(settings, "jobs", "list", "--limit", "2", "--cursor", cursor)

    seen = [item["id"] for page in (first, rest) for item in page["items"]]  # type: ignore[attr-defined]
    assert sorted(seen) == sorted(ids)
    assert rest["next_cursor"] is None


def test_jobs_show_json_has_the_job_its_input_and_its_attempts(settings: Settings, engine: Engine) -> None:
    job_id = new_job(engine, "show-me", payload={"to": "ops@example.com"})
    claim = claimed(engine, job_id, "w1")

    document = cli_json(settings, "jobs", "show", job_id)

    job = document["job"]
    assert isinstance(job, dict)
    assert (job["id"], job["state"], job["epoch"], job["attempts"]) == (job_id, "running", 1, 1)
    assert job["lease_owner"] == "w1"
    assert document["payload"] == {"to": "ops@example.com"}
    assert document["operation_key"] == job_row(engine, job_id).operation_key
    [attempt] = document["attempts"]  # type: ignore[misc]
    assert (attempt["id"], attempt["epoch"], attempt["worker"]) == (claim.attempt_id, 1, "w1")
    assert ISO_UTC.fullmatch(attempt["started_at"]), attempt
    assert attempt["ended_at"] is None


def test_status_json_counts_jobs_by_state_and_names_the_dead_letter_queue(
    settings: Settings, engine: Engine
) -> None:
    new_jobs(engine, 2)

    document = cli_json(settings, "status", code=3)  # it warns: jobs wait and no consumer is alive

    assert document["counts"]["queued"] == 2  # type: ignore[index]
    assert document["outbox"]["pending"] == 2  # type: ignore[index]
    assert len(document["finished_per_minute"]) == 10  # type: ignore[arg-type]
    assert (document["dead"], document["unknown"]) == ([], [])
    assert document["dead_letter_queue"]["name"] == settings.dead_letter_queue  # type: ignore[index]


def test_piped_jobs_list_and_show_print_whole_ids(settings: Settings, engine: Engine) -> None:
    ids = new_jobs(engine, 3)
    claim = claimed(engine, ids[0], "consumer-on-a-host-with-a-long-name:12345/worker-7")

    listed = procs.run(["jobs", "list"], settings)
    shown = procs.run(["jobs", "show", ids[0]], settings)

    assert listed.returncode == 0 and shown.returncode == 0, listed.stderr + shown.stderr
    assert "…" not in listed.stdout + shown.stdout, "nothing is cut short in a pipe"
    for job_id in ids:
        assert job_id in listed.stdout.split(), listed.stdout
    [running] = [line for line in listed.stdout.splitlines() if ids[0] in line]
    assert claim.worker in running.split() and "expires in" in running, "the worker and its lease"
    for whole in (claim.attempt_id, claim.worker):
        assert whole in shown.stdout.split(), shown.stdout


def test_jobs_show_says_when_a_job_may_start_and_how_far_it_got(settings: Settings, engine: Engine) -> None:
    job_id = new_job(engine, "export", kind="export", payload={"rows": 1_000, "chunk": 250})
    claim = claimed(engine, job_id, "w1")
    checkpoint = {"rows_written": 250, "rows": 1_000}
    db.transact(engine, fenced.save_checkpoint, job_id, claim.epoch, checkpoint, clock.now())

    shown = procs.run(["jobs", "show", job_id], settings)
    document = cli_json(settings, "jobs", "show", job_id)

    assert shown.returncode == 0, shown.stderr
    assert re.search(r"progress: 250 of 1000\n", shown.stdout), shown.stdout
    assert re.search(r"run at: -\n", shown.stdout), shown.stdout
    job = document["job"]
    assert isinstance(job, dict)
    assert (job["progress"], job["run_at"], job["waited_seconds"]) == (
        {"done": 250, "total": 1_000},
        None,
        None,
    )


def test_jobs_show_names_the_concurrency_key_and_what_holds_the_job_back(
    settings: Settings, engine: Engine
) -> None:
    job_id = new_job(engine, "keyed", concurrency_key="[red]customer-42[/]")
    db.transact(
        engine, lambda conn: conn.execute(update(jobs).where(jobs.c.id == job_id).values(held_by="key"))
    )

    shown = procs.run(["jobs", "show", job_id], settings)
    document = cli_json(settings, "jobs", "show", job_id)

    assert shown.returncode == 0, shown.stderr
    assert re.search(r"concurrency key: \[red\]customer-42\[/\]\n", shown.stdout), shown.stdout
    assert re.search(r"held back by: its concurrency key's running cap", shown.stdout), shown.stdout
    job = document["job"]
    assert isinstance(job, dict)
    assert (job["concurrency_key"], job["held_by"]) == ("[red]customer-42[/]", "key")


def test_jobs_list_filters_by_kind_and_by_how_recently_a_job_changed(
    settings: Settings, engine: Engine
) -> None:
    [old] = new_jobs(engine, 1, kind="noop", now=clock.now() - 7200)
    [recent_noop] = new_jobs(engine, 1, kind="noop")
    [recent_sleep] = new_jobs(engine, 1, kind="sleep", payload={"seconds": 0.01})

    def ids(*options: str) -> set[str]:
        items = cli_json(settings, "jobs", "list", *options)["items"]
        return {item["id"] for item in items}  # type: ignore[attr-defined]

    assert ids("--kind", "noop") == {old, recent_noop}
    assert ids("--since", "1h") == {recent_noop, recent_sleep}
    assert ids("--kind", "noop", "--since", "1h") == {recent_noop}
    refused = procs.run(["jobs", "list", "--since", "yesterday"], settings)
    assert refused.returncode == 1 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
