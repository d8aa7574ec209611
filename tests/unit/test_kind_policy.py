"""A kind's policy is checked when its module registers it: a value that cannot hold stops the module with
one line naming the kind and what is wrong."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel

import outbox_bridge
from outbox_bridge.handlers import base


class Image(BaseModel):
    name: str


@pytest.fixture(autouse=True)
def _kinds() -> Iterator[None]:
    known, defined_in = dict(base.KINDS), dict(base._DEFINED_IN)
    yield
    base.KINDS.clear()
    base.KINDS.update(known)
    base._DEFINED_IN.clear()
    base._DEFINED_IN.update(defined_in)


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"queue": "Fast"}, "queue 'Fast' must be 1 to 64 characters"),
        ({"queue": ""}, "queue '' must be"),
        ({"queue": "x" * 65}, "must be 1 to 64 characters"),
        ({"max_attempts": 0}, "max_attempts must be an integer from 1 to 1000"),
        ({"max_attempts": 2.5}, "max_attempts must be an integer"),
        ({"backoff": (5, 1)}, "backoff must be (base_seconds, cap_seconds)"),
        ({"backoff": (1,)}, "backoff must be"),
        ({"timeout_seconds": 0}, "timeout_seconds must be a positive number"),
        ({"timeout_seconds": True}, "timeout_seconds must be a positive number"),
        ({"unique_for_seconds": -1}, "unique_for_seconds must be a positive number"),
        ({"priority": "urgent"}, "priority must be 'high', 'normal' or 'low'"),
    ],
)
def test_a_policy_that_cannot_hold_stops_the_kinds_module_with_one_line(
    options: dict[str, Any], said: str
) -> None:
    def run(ctx: outbox_bridge.JobContext, payload: Image) -> None:
        return None

    with pytest.raises(base.KindError, match=r"kind 'team.bad' \(in [\w.]+\): ") as refused:
        outbox_bridge.kind("team.bad", payload=Image, **options)(run)
    assert said in str(refused.value)
    assert "\n" not in str(refused.value)
    assert "team.bad" not in base.KINDS


def test_a_kind_that_sets_nothing_keeps_the_deployments_settings() -> None:
    def run(ctx: outbox_bridge.JobContext, payload: Image) -> None:
        return None

    outbox_bridge.kind("team.plain", payload=Image)(run)
    assert base.KINDS["team.plain"].policy == base.Policy()
    assert base.Policy().queue == "default"
    assert (base.Policy().max_attempts, base.Policy().backoff, base.Policy().timeout_seconds) == (None,) * 3


def test_a_backoff_given_as_a_list_reads_as_its_pair() -> None:
    def run(ctx: outbox_bridge.JobContext, payload: Image) -> None:
        return None

    outbox_bridge.kind("team.listed", payload=Image, backoff=[2, 30])(run)  # type: ignore[arg-type]
    assert base.KINDS["team.listed"].policy.backoff == (2, 30)
