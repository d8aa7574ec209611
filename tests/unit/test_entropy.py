"""Random bytes handed out from a page of the operating system's: each once, and never the same in a forked
child as in its parent."""

from __future__ import annotations

import os

from outbox_bridge.core import entropy
from outbox_bridge.core.entropy import PAGE_BYTES, random_bytes


def test_each_call_gets_bytes_of_its_own() -> None:
    taken = [random_bytes(16) for _ in range(3 * PAGE_BYTES // 16)]  # across three pages
    assert all(len(one) == 16 for one in taken)
    assert len(set(taken)) == len(taken)


def test_a_count_larger_than_a_page_is_read_whole() -> None:
    assert len(random_bytes(PAGE_BYTES + 1)) == PAGE_BYTES + 1


def test_a_forked_child_does_not_hand_out_its_parents_bytes() -> None:
    random_bytes(16)  # the parent holds a page with bytes still to hand out
    reader, writer = os.pipe()
    child = os.fork()
    if child == 0:  # the child: its next bytes, to the parent
        try:
            os.write(writer, random_bytes(16))
        finally:
            os._exit(0)
    os.close(writer)
    os.waitpid(child, 0)
    childs = os.read(reader, 16)
    os.close(reader)
    assert len(childs) == 16
    assert childs != random_bytes(16)  # what the parent hands out next


def test_the_pool_reads_a_page_at_a_time(monkeypatch) -> None:
    reads: list[int] = []
    real = os.urandom

    def counted(count: int) -> bytes:
        reads.append(count)
        return real(count)

    monkeypatch.setattr(entropy, "_pool", entropy._Pool())
    monkeypatch.setattr(entropy.os, "urandom", counted)
    for _ in range(2 * PAGE_BYTES // 16):
        random_bytes(16)
    assert reads == [PAGE_BYTES, PAGE_BYTES]
