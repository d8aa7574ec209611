"""A standby relay takes the role as soon as its holder is known gone, not at the role's expiry: on PostgreSQL
the holder keeps a session lock whose connection ends with it, on any host; everywhere, a holder whose pid
is gone from the standby's own host. A live holder keeps the role."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, insert, text

from outbox_bridge.core.clock import FakeClock
from outbox_bridge.jobstore import db, leader
from outbox_bridge.jobstore.leader import LeaderClaim
from outbox_bridge.jobstore.schema import relay_role
from tests.support.processes import gone_pid

ROLE = 5.0


@pytest.fixture
def claims(engine: Engine) -> Iterator[list[LeaderClaim]]:
    """Each relay's claim a test makes (it appends them); every one is closed at the end."""
    made: list[LeaderClaim] = []
    yield made
    for claim in made:
        claim.close()


def relay(engine: Engine, claims: list[LeaderClaim]) -> LeaderClaim:
    claim = LeaderClaim(engine, ROLE)
    claims.append(claim)
    return claim


def cut_the_role_locks_connection(engine: Engine) -> int:
    """End the server session holding this store's role lock, as a killed holder's connection ends; how many
    sessions were ended."""
    query = text(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_locks WHERE locktype = 'advisory' AND granted"
        " AND classid = 29295 AND objsubid = 2"  # the role lock's space, 0x726F
        " AND objid::bigint = hashtext(current_schema())::bigint & 4294967295"
    )
    with engine.connect() as conn:
        return int(conn.execute(query).scalar_one())


def holder(engine: Engine) -> leader.Holder:
    found = db.read(engine, leader.current)
    assert found is not None
    return found


@pytest.mark.databases("postgresql")
def test_a_standby_takes_the_role_at_once_when_the_holders_connection_ends(
    engine: Engine, clock: FakeClock, claims: list[LeaderClaim]
) -> None:
    first, standby = relay(engine, claims), relay(engine, claims)
    token, _ = first.take_or_renew(None)
    assert token is not None
    assert standby.take_or_renew(None) == (None, 0.0), "a live holder keeps the role"

    assert cut_the_role_locks_connection(engine) == 1  # the holder was killed, on whatever host
    taken, until = standby.take_or_renew(None)
    assert taken is not None and until == clock.now() + ROLE, "taken before the role expired"
    assert holder(engine).token == taken
    assert first.take_or_renew(token) == (None, 0.0), "the old token renews nothing"


@pytest.mark.databases("postgresql")
def test_a_holder_that_took_an_expired_role_takes_the_lock_once_the_stalled_holder_lets_go(
    engine: Engine, clock: FakeClock, claims: list[LeaderClaim]
) -> None:
    stalled, second, third = relay(engine, claims), relay(engine, claims), relay(engine, claims)
    old, _ = stalled.take_or_renew(None)
    assert old is not None
    clock.advance(ROLE + 1)  # it stalled past its role, keeping its lock
    new, _ = second.take_or_renew(None)
    assert new is not None
    assert stalled.take_or_renew(old) == (None, 0.0)  # it resumes, finds the role gone, lets go of its lock
    assert second.take_or_renew(new)[0] == new  # the renewal takes the lock
    assert third.take_or_renew(None) == (None, 0.0), "the new holder keeps the role"


def test_a_standby_takes_the_role_of_a_holder_whose_pid_is_gone_from_this_host(
    engine: Engine, clock: FakeClock, claims: list[LeaderClaim]
) -> None:
    dead = f"{socket.gethostname()}:{gone_pid()}"
    row = {"name": leader.NAME, "token": "dead", "holder": dead, "expires_at": clock.now() + ROLE}
    db.transact(engine, lambda conn: conn.execute(insert(relay_role).values(**row)))
    taken, _ = relay(engine, claims).take_or_renew(None)
    assert taken is not None and holder(engine).token == taken


def test_a_standby_leaves_a_live_holder_alone_until_its_role_expires(
    engine: Engine, clock: FakeClock, claims: list[LeaderClaim]
) -> None:
    first, standby = relay(engine, claims), relay(engine, claims)
    token, _ = first.take_or_renew(None)
    clock.advance(ROLE - 0.5)
    assert standby.take_or_renew(None) == (None, 0.0)
    clock.advance(1)
    taken, _ = standby.take_or_renew(None)
    assert taken is not None and first.take_or_renew(token) == (None, 0.0)


def test_a_holder_that_hands_the_role_back_lets_a_standby_take_it_at_once(
    engine: Engine, clock: FakeClock, claims: list[LeaderClaim]
) -> None:
    first, standby = relay(engine, claims), relay(engine, claims)
    token, _ = first.take_or_renew(None)
    assert token is not None
    first.give_up(token)
    taken, _ = standby.take_or_renew(None)
    assert taken is not None
