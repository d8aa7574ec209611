"""Job ids are random (operators name a job by its first characters); attempt ids are UUIDs of version 7,
so ids made later sort later (the attempts' index pages stay local)."""

from __future__ import annotations

import time
import uuid

from outbox_bridge.jobstore.intake import new_attempt_id, new_id


def test_job_ids_differ_in_their_first_characters() -> None:
    made = [new_id() for _ in range(100)]
    assert all(uuid.UUID(one).version == 4 for one in made)
    assert len({one[:8] for one in made}) == 100


def test_an_attempt_id_is_a_version_7_uuid_of_the_rfc_variant() -> None:
    made = new_attempt_id()
    parsed = uuid.UUID(made)
    assert str(parsed) == made
    assert parsed.version == 7
    assert parsed.variant == uuid.RFC_4122


def test_an_attempt_id_carries_the_milliseconds_it_was_made_at() -> None:
    before = time.time_ns() // 1_000_000
    made = new_attempt_id()
    after = time.time_ns() // 1_000_000
    assert before <= uuid.UUID(made).int >> 80 <= after


def test_attempt_ids_made_later_sort_later_and_never_repeat() -> None:
    first = [new_attempt_id() for _ in range(1_000)]
    time.sleep(0.002)
    second = [new_attempt_id() for _ in range(1_000)]
    assert max(first) < min(second)
    assert len(set(first + second)) == 2_000
