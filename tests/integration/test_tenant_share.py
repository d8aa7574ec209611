"""`TENANT_SHARE` in the store's claims (`worker.share`, `jobstore.tenantcap.Share`), on either store: the
table's claim passes over the tenants the claiming process holds its most of and takes a tenant no further
than that; the bound applies while another tenant has work (a delivery held, a due job in the store, a job
seen lately), however short the jobs ran, and only when the share leaves a thread apart."""

from __future__ import annotations

from collections import Counter

from sqlalchemy import Engine

from outbox_bridge.core.clock import FakeClock
from outbox_bridge.jobstore import claiming, db, tenantcap
from outbox_bridge.worker.share import ACTIVE_SECONDS, TenantShare
from tests.support.store import LEASE, claimed, job_row, new_jobs


def share(held: dict[str, int], most: int = 3) -> tenantcap.Share:
    return tenantcap.Share(Counter(held), most)


def test_the_claim_passes_over_a_tenant_at_its_most_and_takes_none_past_it(
    engine: Engine, clock: FakeClock
) -> None:
    heavy = new_jobs(engine, 5, tenant="heavy")
    light = new_jobs(engine, 2, tenant="light")
    clock.advance(1)

    def claim(held: dict[str, int]) -> list[str]:
        claims = db.transact(engine, claiming.claim_due, "w1", clock.now(), LEASE, 10, share=share(held))
        return sorted(job_row(engine, c.job_id).tenant for c in claims)

    assert claim({"heavy": 3, "light": 0}) == ["light", "light"]
    assert claim({"heavy": 1}) == ["heavy", "heavy"], "two more reach its most of three"
    assert claim({"heavy": 2}) == ["heavy"]
    assert [job_row(engine, job_id).state.value for job_id in heavy].count("queued") == 2
    assert {job_row(engine, job_id).state.value for job_id in light} == {"running"}


def test_any_due_says_no_when_only_tenants_at_their_most_have_queued_jobs(
    engine: Engine, clock: FakeClock
) -> None:
    new_jobs(engine, 2, tenant="heavy")
    clock.advance(1)
    assert not db.read(engine, claiming.any_due, clock.now(), share=share({"heavy": 3}))
    assert db.read(engine, claiming.any_due, clock.now(), share=share({"heavy": 2}))


def test_another_tenant_has_due_work_only_with_a_due_job_it_could_start(
    engine: Engine, clock: FakeClock
) -> None:
    def due(known: set[str], wanted: int = 1) -> bool:
        return bool(db.read(engine, tenantcap.other_tenant_due, clock.now(), known, wanted))

    assert not due(set())
    new_jobs(engine, 50, tenant="busy")
    assert not due({"busy"}), "a tenant's own backlog is no other tenant's work"
    assert due(set()) and not due(set(), 2)
    new_jobs(engine, 1, tenant="later", now=clock.now() + 60)
    assert not due({"busy"}), "a job waiting for its run_at is not due"
    claimed(engine, new_jobs(engine, 1, tenant="ran")[0])
    assert not due({"busy"}), "a tenant whose jobs run has none due"
    new_jobs(engine, 1, tenant="another")
    assert due({"busy"}) and due({"another"}) and not due({"busy", "another"})
    assert due(set(), 2)
    clock.advance(61)
    assert due({"busy", "another"}), "its run_at came"


def test_the_bound_applies_while_another_tenant_has_work_whatever_the_run_times(
    engine: Engine, clock: FakeClock
) -> None:
    new_jobs(engine, 10, tenant="one")
    rule = TenantShare(0.75, 4)
    held, waiting = Counter({"one": 3}), Counter({"one": 7})

    def bound(waiting: Counter[str] = waiting, room: int = 60) -> tenantcap.Share | None:
        return db.read(engine, rule.bound, held, waiting, room, False)

    assert rule.most == 3
    assert bound() is None, "one tenant alone gets every thread, and claims ahead"
    assert bound(Counter({"one": 7, "two": 1})) == share({"one": 3}), "another tenant's delivery waits"
    new_jobs(engine, 1, tenant="three")
    rule = TenantShare(0.75, 4)  # (a fresh rule: the store's last "no" stands for a moment)
    assert bound() == share({"one": 3}), "another tenant's job is due in the store"


def test_a_tenant_seen_lately_still_counts_as_having_work(engine: Engine, clock: FakeClock) -> None:
    rule = TenantShare(0.75, 4)
    held, waiting = Counter({"one": 3}), Counter({"one": 7})
    rule.saw(["two"])
    assert db.read(engine, rule.bound, held, waiting, 60, False) == share({"one": 3})
    clock.advance(ACTIVE_SECONDS + 0.1)
    assert db.read(engine, rule.bound, held, waiting, 60, False) is None


def test_the_bound_is_not_looked_for_when_no_tenant_could_pass_its_most() -> None:
    rule = TenantShare(0.75, 4)
    assert not rule.could_bind(Counter({"one": 1}), Counter({"one": 2, "two": 5}), 2, False)
    assert rule.could_bind(Counter({"one": 1}), Counter({"one": 3}), 4, False)
    assert rule.could_bind(Counter(), Counter(), 4, True), "the table may give one tenant all four"
    assert not rule.could_bind(Counter({"one": 2}), Counter({"one": 3}), 0, True), "no room"
    assert not TenantShare(1.0, 4).could_bind(Counter(), Counter({"one": 9}), 9, True), "no thread apart"
    assert not TenantShare(0.75, 1).could_bind(Counter(), Counter({"one": 9}), 9, True)
    assert TenantShare(0.5, 8).most == 4 and TenantShare(0.1, 4).most == 1


def test_a_claim_from_the_table_asks_the_store_afresh_for_the_tenants_it_may_take(
    engine: Engine, clock: FakeClock
) -> None:
    rule = TenantShare(0.75, 4)
    rule.saw(["light"])
    assert db.read(engine, rule.bound, Counter(), Counter(), 4, True) is None, "light alone"
    new_jobs(engine, 6, tenant="heavy")
    assert db.read(engine, rule.bound, Counter(), Counter(), 4, True) == share({}), "heavy's jobs came since"
