"""Every kind validates strictly (no `"5"` for a number) and reads equal payloads as the same payload."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from outbox_bridge.handlers.registry import BUILT_IN, KINDS

LOOSE = {
    "sleep seconds as text": ("sleep", {"seconds": "5"}),
    "sleep seconds as a boolean": ("sleep", {"seconds": True}),
    "export rows as text": ("export", {"rows": "10", "chunk": 5}),
    "export chunk as a float": ("export", {"rows": 10, "chunk": 5.0}),
    "flaky attempt as text": ("flaky", {"fail_until_attempt": "2"}),
    "document as a number": ("document", {"document": 5}),
    "notify message as a number": ("notify", {"to": "a@example.com", "message": 5}),
}


@pytest.mark.parametrize("name", sorted(BUILT_IN))
def test_every_built_in_kind_has_a_strict_schema(name: str) -> None:
    assert KINDS[name].schema.model_config.get("strict") is True


@pytest.mark.parametrize("case", LOOSE)
def test_a_value_of_another_type_is_refused_not_converted(case: str) -> None:
    kind, payload = LOOSE[case]
    with pytest.raises(ValidationError):
        KINDS[kind].parse(payload)


@pytest.mark.parametrize(
    "kind,payload,normalised",
    [
        ("sleep", {"seconds": 0}, {"seconds": 0.0}),
        ("sleep", {"seconds": 1.5}, {"seconds": 1.5}),
        ("document", {"document": "text"}, {"document": "text", "instructions": None}),
        ("noop", {"b": [1, {"c": 2.5}], "a": None}, {"a": None, "b": [1, {"c": 2.5}]}),
        ("export", {"rows": 10, "chunk": 5}, {"rows": 10, "chunk": 5}),
    ],
)
def test_normalise_gives_the_payload_as_the_kind_reads_it(
    kind: str, payload: dict[str, Any], normalised: dict[str, Any]
) -> None:
    assert KINDS[kind].normalise(payload) == normalised
    assert KINDS[kind].normalise(normalised) == normalised
