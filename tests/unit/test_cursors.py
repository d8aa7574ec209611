"""List cursors: every cursor the store hands out reads back as its position; nothing else reads as one."""

from __future__ import annotations

import base64
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from outbox_bridge.jobstore.queries import BadCursor, decode_cursor, encode_position


def raw(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


JOB_ID = "8f0c6d1e-2b7a-4c3e-9a51-0d3f6b2e7c41"
FORGED = {
    "nan": raw(f"nan|{JOB_ID}"),
    "inf": raw(f"inf|{JOB_ID}"),
    "-inf": raw(f"-inf|{JOB_ID}"),
    "1e999": raw(f"1e999|{JOB_ID}"),
    "nan, any id": raw("nan|x"),
    "inf, any id": raw("inf|x"),
    "a time not in its canonical form": raw(f"1.7e9|{JOB_ID}"),
    "a time with spaces": raw(f" 1700000000.0 |{JOB_ID}"),
    "an id that is no job id": raw("1700000000.0|' OR 1=1 --"),
    "no id": raw("1700000000.0|"),
    "no separator": raw("1700000000.0"),
    "padding kept": raw(f"1700000000.0|{JOB_ID}") + "==",
    "characters outside base64url": raw(f"1700000000.0|{JOB_ID}")[:-2] + "!?",
    "plain text": "not-a-cursor",
    "arbitrary text": "hello world",
    "empty": "",
    "not UTF-8": base64.urlsafe_b64encode(b"\xff\xfe|x").decode().rstrip("="),
}


@pytest.mark.parametrize("case", FORGED)
def test_a_cursor_the_store_did_not_write_is_refused(case: str) -> None:
    with pytest.raises(BadCursor):
        decode_cursor(FORGED[case])


@given(
    created=st.floats(min_value=0, max_value=4e9, allow_nan=False, allow_infinity=False),
    job_id=st.uuids(version=4).map(str),
)
def test_every_cursor_the_store_writes_reads_back_as_its_position(created: float, job_id: str) -> None:
    assert decode_cursor(encode_position(created, job_id)) == (created, job_id)


def test_a_real_position_reads_back() -> None:
    job_id = str(uuid.uuid4())
    assert decode_cursor(raw(f"1700000000.125|{job_id}")) == (1700000000.125, job_id)
