"""The idempotency fingerprint never changes for a request: stored keys keep matching across versions. It is
built from the encoded fields (the payload encoded once per accept); it must equal the digest of the whole
request encoded canonically, as it always has been."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from outbox_bridge.jobstore import intake
from outbox_bridge.jobstore.records import Priority, dumps
from outbox_bridge.jobstore.schedule import Schedule

# Digests stored by earlier versions: a change here breaks every stored Idempotency-Key.
PINNED = [
    (
        ("noop", {}, None, None, Priority.NORMAL),
        "60af6c49dbcf8378f1d1afc186ef300435fd24a0b863584daa70cda5a3073902",
    ),
    (
        ("noop", {"b": [1, 2.5, "é"], "a": {"z": None, "y": True}}, 60, None, Priority.NORMAL),
        "a1470526a7b33e8e7c0f2a6eea964aced261df13d03c02c5a6e40327b783d24d",
    ),
    (
        ("sleep", {"seconds": 1}, 30.5, Schedule(run_at=1_700_000_000.0), Priority.HIGH),
        "e5a75ab15afee8a456df705659cff00e9e442e75d99714c2c1df16d8dec1ad31",
    ),
    (
        ("noop", {"ü": "ß"}, None, Schedule(delay_seconds=5), Priority.LOW),
        "271d93f8fb6f2dedf338f35a530fbb1bb99b4a7886d8c008b565547f005fa3e4",
    ),
]


@pytest.mark.parametrize(("request_", "digest"), PINNED)
def test_a_request_keeps_the_fingerprint_earlier_versions_stored(
    request_: tuple[Any, ...], digest: str
) -> None:
    assert intake.fingerprint(*request_) == digest


def whole(
    kind: str, payload: Any, deadline: float | None, schedule: Schedule | None, priority: Priority
) -> str:
    request: dict[str, Any] = {"kind": kind, "payload": payload}
    if deadline is not None:
        request["deadline_seconds"] = float(deadline)
    if schedule is not None:
        request.update(schedule.identity())
    if priority is not Priority.NORMAL:
        request["priority"] = priority.label
    return hashlib.sha256(dumps(request).encode()).hexdigest()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
schedules = (
    st.none()
    | st.builds(Schedule, run_at=st.floats(0, 2e9))
    | st.builds(Schedule, delay_seconds=st.floats(0, 1e6))
)


@given(
    st.text(min_size=1, max_size=12),
    st.dictionaries(st.text(max_size=8), json_values, max_size=5),
    st.none() | st.floats(0.001, 1e6),
    schedules,
    st.sampled_from(list(Priority)),
)
def test_the_fingerprint_is_the_digest_of_the_whole_request_encoded_canonically(
    kind: str, payload: dict[str, Any], deadline: float | None, schedule: Schedule | None, priority: Priority
) -> None:
    assert intake.fingerprint(kind, payload, deadline, schedule, priority) == whole(
        kind, payload, deadline, schedule, priority
    )
    row = intake._job_row(
        tenant="t", owner="o", kind=kind, payload=payload, operation_key="k", now=1.0, max_attempts=3,
        deadline_seconds=deadline, schedule=schedule, priority=priority,
    )  # fmt: skip
    assert row["fingerprint"] == whole(kind, payload, deadline, schedule, priority)
    assert row["payload"] == dumps(payload)
