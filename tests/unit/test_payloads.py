"""What every payload must be (`api.payloads`): JSON text read without letting its nesting exhaust the parser,
and a payload nested at most `MAX_DEPTH` levels, refused past it with the same problem however deep."""

from __future__ import annotations

import pytest

from outbox_bridge.api.payloads import MAX_DEPTH, check_encodable, loads
from outbox_bridge.api.problems import ProblemError


def nested(levels: int) -> str:
    """A payload object whose innermost list is `levels` deep (the object itself is the first level)."""
    return '{"x": ' + "[" * (levels - 1) + "]" * (levels - 1) + "}"


def test_the_limit_is_thirty_two_levels() -> None:
    assert MAX_DEPTH == 32
    check_encodable(loads(nested(MAX_DEPTH)))


@pytest.mark.parametrize("levels", [MAX_DEPTH + 1, 900, 5_000, 100_000])
def test_a_payload_nested_past_the_limit_is_refused_naming_it_however_deep(levels: int) -> None:
    with pytest.raises(ProblemError) as refused:
        check_encodable(loads(nested(levels)))
    assert refused.value.problem.slug == "invalid-payload" and refused.value.problem.status == 400
    assert refused.value.detail == "The payload is nested more than 32 levels deep."


def test_text_that_is_not_json_is_a_value_error_as_json_loads_says() -> None:
    with pytest.raises(ValueError, match="Expecting"):
        loads("{rows: 1}")
    assert loads(b'{"rows": 1}') == {"rows": 1}
