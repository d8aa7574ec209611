"""The order a consumer claims the deliveries it holds in (`worker.rounds.take_in_order`): priority
first, then turns across tenants counting what each tenant runs here, then arrival; the rest stay in
arrival order."""

from __future__ import annotations

import collections
from collections import Counter

from outbox_bridge.broker.message import order_headers, order_of
from outbox_bridge.consumer.link import Delivery
from outbox_bridge.worker.rounds import take_in_order
from outbox_bridge.worker.share import TenantShare


def held(*specs: tuple[str, int, str]) -> collections.deque[Delivery]:
    return collections.deque(
        Delivery(job_id=job, tag=n, generation=1, priority=priority, tenant=tenant)
        for n, (job, priority, tenant) in enumerate(specs)
    )


def test_a_high_delivery_and_a_tenant_that_runs_nothing_go_before_an_older_backlog() -> None:
    waiting = held(("a1", 1, "a"), ("a2", 1, "a"), ("a3", 1, "a"), ("b1", 1, "b"), ("h", 0, "a"))
    taken = take_in_order(waiting, 2, Counter({"a": 4}))
    assert [d.job_id for d in taken] == ["h", "b1"]
    assert [d.job_id for d in waiting] == ["a1", "a2", "a3"]


def test_one_tenant_of_one_priority_is_taken_in_arrival_order() -> None:
    waiting = held(("a1", 1, "a"), ("a2", 1, "a"), ("a3", 1, "a"))
    assert [d.job_id for d in take_in_order(waiting, 2, Counter())] == ["a1", "a2"]
    assert [d.job_id for d in waiting] == ["a3"]


def test_the_order_headers_round_trip_and_their_absence_means_normal_of_no_tenant() -> None:
    assert order_of(order_headers(0, "acme")) == (0, "acme")
    assert order_of({"x-job-tenant": b"acme", "x-job-priority": 2}) == (2, "acme")
    assert order_of(None) == (1, "")


def test_with_a_share_a_tenant_is_taken_no_further_than_its_most_and_its_other_deliveries_stay() -> None:
    waiting = held(("a1", 1, "a"), ("a2", 1, "a"), ("a3", 1, "a"), ("a4", 1, "a"), ("b1", 1, "b"))
    taken = take_in_order(waiting, 4, Counter({"a": 1}), most=3)
    assert [d.job_id for d in taken] == ["b1", "a1", "a2"]
    assert [d.job_id for d in waiting] == ["a3", "a4"]


def test_with_a_share_even_one_tenant_alone_is_held_back_at_its_most() -> None:
    waiting = held(("a1", 1, "a"), ("a2", 1, "a"))
    assert take_in_order(waiting, 2, Counter({"a": 3}), most=3) == []
    assert [d.job_id for d in waiting] == ["a1", "a2"]


def test_claiming_ahead_a_tenant_is_still_held_at_its_share_while_another_tenants_delivery_waits() -> None:
    # A consumer of four threads whose jobs ran short has room for 64; the share holds all the same, and
    # is found without asking the store: the deliveries held show two tenants with work.
    waiting = held(*((f"a{n}", 1, "a") for n in range(40)), ("b1", 1, "b"))
    share = TenantShare(0.75, 4).bound(None, Counter(), Counter(d.tenant for d in waiting), 64, False)  # type: ignore[arg-type]
    assert share is not None and share.most == 3
    taken = take_in_order(waiting, 64, share.held, share.most)
    assert [d.job_id for d in taken] == ["a0", "b1", "a1", "a2"]
    assert len(waiting) == 37


def test_alone_a_tenant_is_given_every_delivery_the_room_allows() -> None:
    rule = TenantShare(0.75, 4)
    assert not rule.could_bind(Counter({"a": 3}), Counter({"a": 40}), 0, False)
    assert rule.could_bind(Counter({"a": 3}), Counter({"a": 40}), 61, False)
    assert rule.known(Counter({"a": 40})) == {"a"}, "one tenant known: the store is asked about others"
