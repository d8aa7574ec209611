"""The dashboard's batches, on each database: the batches page lists every tenant's batches newest first with
their members' counts and callback job, filtered by tenant and state, a page at a time; a batch's page lists
its members in the request's order with their states, linked to their pages, and its callback job; a job's
page shows the jobs it waits for and those that wait for it, with their states, and the batch it belongs to
or is the callback of. A visitor who is no operator sees none of it."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from outbox_bridge.api.app import create_app
from outbox_bridge.api.auth import issue_token
from outbox_bridge.api.dashboard import batches as batches_page
from outbox_bridge.core.clock import FakeClock
from outbox_bridge.core.settings import Settings
from tests.support.batches import batch_now, fail, new_batch, new_job_after, succeed
from tests.support.store import new_job


@pytest.fixture
def client(settings: Settings, engine: Engine, clock: FakeClock) -> Iterator[TestClient]:
    with TestClient(create_app(settings), follow_redirects=False) as test_client:
        yield test_client


def bearer(settings: Settings, *, operator: bool = True) -> dict[str, str]:
    token = issue_token(settings.auth_secret, tenant="ops", user="olga", operator=operator)
    return {"Authorization": f"Bearer {token}"}


def text_of(page: str, attribute: str, value: str) -> str:
    """The text of the element whose `attribute` is `value`, its tags left out."""
    found = re.search(rf'<(\w+) {attribute}="{re.escape(value)}"[^>]*>(.*?)</\1>', page, re.S)
    assert found is not None, f"no {attribute}={value} in the page"
    return " ".join(re.sub(r"<[^>]+>", " ", found.group(2)).split())


def listed(page: str) -> list[str]:
    return re.findall(r'<tr data-batch="([^"]+)"', page)


def test_the_batches_page_lists_every_tenants_batches_newest_first_and_filters_them(
    client: TestClient, settings: Settings, engine: Engine, clock: FakeClock
) -> None:
    first = new_batch(engine, "first", 2)
    clock.advance(60)
    second = new_batch(engine, "second", 3, tenant="globex", callback=False)
    for job_id in first.jobs:
        succeed(engine, job_id)
    fail(engine, next(iter(second.jobs)))
    first = batch_now(engine, first.id)
    ops = bearer(settings)

    page = client.get("/ui/batches", headers=ops)

    assert page.status_code == 200
    assert listed(page.text) == [second.id, first.id]
    done_row = text_of(page.text, "data-batch", first.id)
    assert "acme / alice" in done_row and "done" in done_row and "succeeded 2" in done_row
    assert first.callback_job_id is not None and f'href="/ui/jobs/{first.callback_job_id}"' in page.text
    running_row = text_of(page.text, "data-batch", second.id)
    assert "globex" in running_row and "queued 2 failed 1" in running_row and "not yet" in running_row
    assert f'href="/ui/batches/{first.id}"' in page.text
    assert listed(client.get("/ui/batches?tenant=globex", headers=ops).text) == [second.id]
    assert listed(client.get("/ui/batches?state=done", headers=ops).text) == [first.id]
    wrong = client.get("/ui/batches?state=finished", headers=ops).text
    assert listed(wrong) == [] and "not &#39;finished&#39;" in wrong
    assert 'href="/ui/batches"' in client.get("/ui", headers=ops).text


def test_the_batches_page_goes_a_page_at_a_time(
    client: TestClient, settings: Settings, engine: Engine, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(batches_page, "PAGE_SIZE", 2)
    made = []
    for i in range(3):
        made.append(new_batch(engine, f"b{i}", 1, callback=False).id)
        clock.advance(1)
    ops = bearer(settings)

    first = client.get("/ui/batches?tenant=acme", headers=ops).text
    more = re.search(r'href="([^"]+)" id="next-page"', first)
    assert more is not None
    second = client.get(more.group(1).replace("&amp;", "&"), headers=ops).text
    stale = client.get("/ui/batches?cursor=not-a-cursor", headers=ops).text

    assert listed(first) == made[:0:-1] and listed(second) == made[:1]
    assert 'id="next-page"' not in second and 'id="first-page"' in second
    assert listed(stale) == [] and "That page link is stale." in stale


def test_a_batchs_page_lists_its_members_in_order_with_their_states_and_its_callback(
    client: TestClient, settings: Settings, engine: Engine
) -> None:
    batch = new_batch(engine, "nightly", 3)
    members = list(batch.jobs)
    succeed(engine, members[0])
    fail(engine, members[1])
    ops = bearer(settings)

    running = client.get(f"/ui/batches/{batch.id}", headers=ops)
    succeed(engine, members[2])
    finished = client.get(f"/ui/batches/{batch.id}", headers=ops).text
    callback = batch_now(engine, batch.id).callback_job_id
    assert callback is not None

    assert running.status_code == 200
    assert re.findall(r'<tr data-job="([^"]+)"', running.text) == members
    assert [text_of(running.text, "data-job", m).split()[2:4] for m in members] == [
        ["noop", "succeeded"], ["noop", "failed"], ["noop", "queued"]
    ]  # fmt: skip
    assert "boom" in text_of(running.text, "data-job", members[1])
    assert all(f'href="/ui/jobs/{m}"' in running.text for m in members)
    assert "not yet" in text_of(running.text, "data-field", "callback")
    assert "queued 1 succeeded 1 failed 1" in text_of(running.text, "data-field", "counts")
    assert f'href="/ui/jobs/{callback}"' in finished
    assert "noop queued" in text_of(finished, "data-field", "callback")
    assert "done" in text_of(finished, "id", "batch")
    assert client.get("/ui/batches/8a26491b-0000-4000-8000-000000000000", headers=ops).status_code == 404


def test_a_jobs_page_shows_what_it_waits_for_what_waits_for_it_and_its_batch(
    client: TestClient, settings: Settings, engine: Engine
) -> None:
    first, second = new_job(engine, "first"), new_job(engine, "second")
    then = new_job_after(engine, "then", [first, second])
    after_then = new_job_after(engine, "after-then", [then])
    succeed(engine, first)
    batch = new_batch(engine, "nightly", 1)
    (member,) = batch.jobs
    succeed(engine, member)
    callback = batch_now(engine, batch.id).callback_job_id
    assert callback is not None
    ops = bearer(settings)

    page = client.get(f"/ui/jobs/{then}", headers=ops).text
    dependency = client.get(f"/ui/jobs/{first}", headers=ops).text
    member_page = client.get(f"/ui/jobs/{member}", headers=ops).text
    callback_page = client.get(f"/ui/jobs/{callback}", headers=ops).text
    alone = client.get(f"/ui/jobs/{new_job(engine, 'alone')}", headers=ops).text

    waits = text_of(page, "data-field", "dependencies")
    assert "still waiting for 1 of 2" in waits
    assert "noop succeeded" in text_of(page, "data-dependency", first)
    assert "noop queued" in text_of(page, "data-dependency", second)
    assert "noop queued" in text_of(page, "data-dependent", after_then)
    assert f'href="/ui/jobs/{after_then}"' in page and f'href="/ui/jobs/{second}"' in page
    assert "noop queued" in text_of(dependency, "data-dependent", then)
    assert 'data-field="dependencies"' not in dependency
    assert f'href="/ui/batches/{batch.id}"' in text_of_section(member_page, "member-of")
    assert f'href="/ui/batches/{batch.id}"' in text_of_section(callback_page, "callback-of")
    assert 'id="workflow"' not in alone


def text_of_section(page: str, field: str) -> str:
    """The markup of the job page's row `field` (its links kept)."""
    found = re.search(rf'<td data-field="{field}">(.*?)</td>', page, re.S)
    assert found is not None, f"no {field} in the page"
    return found.group(1)


@pytest.mark.databases("sqlite")
@pytest.mark.parametrize("path", ["/ui/batches", "/ui/batches/{id}"])
def test_only_an_operator_sees_the_batches(
    client: TestClient, settings: Settings, engine: Engine, path: str
) -> None:
    batch = new_batch(engine, "nightly", 1)
    url = path.format(id=batch.id)

    assert client.get(url).status_code == 401
    tenant = client.get(url, headers=bearer(settings, operator=False))
    assert tenant.status_code == 404 and batch.id not in tenant.text
