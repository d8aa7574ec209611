"""`TENANT_SHARE` in the store's claims (`worker.share`, `jobstore.tenantcap.Share`), on either store: the
table's claim passes over the tenants the claiming process holds its most of and takes a tenant no further
than that; the bound applies only while jobs run long, once the store holds several tenants' jobs, and
when the share leaves a thread apart."""

from __future__ import annotations

from collections import Counter

from sqlalchemy import Engine

from outbox_bridge.core.clock import FakeClock
from outbox_bridge.jobstore import claiming, db, tenantcap
from outbox_bridge.worker.share import TenantShare
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


def test_several_tenants_counts_jobs_in_any_state(engine: Engine, clock: FakeClock) -> None:
    assert not db.read(engine, tenantcap.several_tenants)
    [first] = new_jobs(engine, 1, tenant="one")
    assert not db.read(engine, tenantcap.several_tenants)
    claimed(engine, first)
    new_jobs(engine, 1, tenant="two")
    assert db.read(engine, tenantcap.several_tenants)


def test_the_bound_applies_only_to_long_jobs_of_a_store_of_several_tenants(
    engine: Engine, clock: FakeClock
) -> None:
    [job_id] = new_jobs(engine, 1, tenant="one")
    holding = Counter([claimed(engine, job_id).tenant])
    rule = TenantShare(0.75, 4)

    assert rule.most == 3
    assert db.read(engine, rule.held, holding, False) is None, "one tenant: nothing to keep a thread for"
    new_jobs(engine, 1, tenant="two")
    assert db.read(engine, rule.held, holding, True) is None, "short jobs: a thread frees at once"
    assert db.read(engine, rule.held, holding, False) == share({"one": 1})
    assert db.read(engine, TenantShare(1.0, 4).held, holding, False) is None, "a share of 1 is no bound"
    assert db.read(engine, TenantShare(0.75, 1).held, holding, False) is None, "one thread: none apart"
    assert TenantShare(0.5, 8).most == 4 and TenantShare(0.1, 4).most == 1
