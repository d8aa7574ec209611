"""The completer: the group commit of a worker process's outcomes, as River's completer batches every job's
outcome, and the store writer thread that runs it.

One store writer thread writes every claim and every outcome of its process. Each round it takes every
outcome that finished (handed over by the executor, `worker.runners`) and every delivery that arrived
meanwhile, and, in ONE transaction, commits the outcomes under their fences (`worker.commit`) and then
writes what the producer claims (`worker.producer`); only after that commit does it ack the deliveries of
the committed jobs and let the producer begin what it claimed. A round takes, once its transaction holds the
write lock, whatever arrived while it waited for it. An outcome is never held back on a timer: the writer
commits what has finished as soon as it is free, so outcomes gather into one round only while the store is
busy with the round before (a group commit, as the api's), and a finished job is visible in the store one
transaction after its code returned.

A round the store cannot take (unavailable, busy past its timeout) is tried again for up to a lease's
length (`worker.retry.PatientStore`). Past that its outcomes are left to their leases (the sweeper settles
them; a late write would be fenced anyway). A round that fails otherwise is written again member by member,
so that one the store cannot take never fails the others.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection

from outbox_bridge.core import faults
from outbox_bridge.core.backoff import Backoff
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore.limits import Limits
from outbox_bridge.jobstore.states import TERMINAL, State
from outbox_bridge.telemetry import instruments
from outbox_bridge.telemetry.instruments import FENCED_WRITES
from outbox_bridge.worker.attempt import discard_uncommitted
from outbox_bridge.worker.counts import WriterCounts
from outbox_bridge.worker.inbox import NUDGE, take_batch, take_waiting
from outbox_bridge.worker.lease import LeasedJob
from outbox_bridge.worker.modes import Acker
from outbox_bridge.worker.producer import Claimed, Producer
from outbox_bridge.worker.release import Release
from outbox_bridge.worker.retry import PatientStore
from outbox_bridge.worker.rounds import Claims, Round, commit_all
from outbox_bridge.worker.runners import Finished, Runners

log = logging.getLogger(__name__)


class Completer:
    """The store writer thread of one worker process (module docstring): it takes from `inbox` what the
    executor finished and what the broker link delivered, commits the outcomes in rounds together with the
    producer's claims, then acks. `rounds` is held for the whole of each round, so whoever takes it knows
    no round is under way. Fault point `<role>.after_commit` (`core.faults`) lets the end-to-end tests kill
    the process between a round's commit and its acks."""

    def __init__(
        self,
        settings: Settings,
        inbox: queue.SimpleQueue[Any],
        runners: Runners,
        producer: Producer,
        store: PatientStore,
        counts: WriterCounts,
        *,
        backoff: Backoff,
        limits: Limits,
        role: str,
        acker: Acker,
    ) -> None:
        self._settings = settings
        self._inbox = inbox  # BrokerDelivery | Finished | NUDGE | STOP
        self._runners = runners
        self._producer = producer
        self._store = store
        self._counts = counts
        self._backoff = backoff
        self._limits = limits
        self._role = role
        self._acker = acker
        self.rounds = threading.Lock()
        self._thread = threading.Thread(target=self._write_loop, name="store-writer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def alive(self) -> bool:
        return self._thread.is_alive()

    def join(self, timeout: float) -> None:
        """Wait for the thread to end (after a STOP put in the inbox)."""
        self._thread.join(timeout)

    def _end(self, finished: Sequence[Finished]) -> list[bool]:
        """Forget the jobs and ack their deliveries: the store has each outcome, or the job under a lease
        that is no longer renewed. Which of them were still held here (not released meanwhile)."""
        held = [self._runners.forget(f.running) for f in finished]
        deliveries = [f.running.delivery for f, ours in zip(finished, held, strict=True) if ours]
        self._acker.ack([d for d in deliveries if d is not None])
        return held

    def _write_loop(self) -> None:
        while (batch := take_batch(self._inbox, timeout=self._producer.wait_seconds())) is not None:
            with self.rounds:
                finished = self._absorb(batch)
                claims = self._producer.plan(paused_only=not batch)
                if finished or claims is not None:
                    self._run_round(Round(finished, claims or Claims()))

    def _absorb(self, batch: list[Any]) -> list[Finished]:
        """Deliveries go to the producer; returns the finished outcomes (a nudge only wakes the loop)."""
        finished = [item for item in batch if isinstance(item, Finished)]
        if len(finished) < len(batch):
            self._producer.offered(
                [item for item in batch if not isinstance(item, Finished) and item is not NUDGE]
            )
        return finished

    def _run_round(self, round_: Round) -> None:
        try:
            self._write_round(round_)
        except Exception:
            log.exception("a store round failed; writing its %d members one by one", round_.size)
            self._write_alone(round_)

    def _write_alone(self, round_: Round) -> None:
        """Each member of a failed round in a transaction of its own, so that one the store cannot take
        never fails the others."""
        if round_.size == 1:
            self._give_up(round_)
            return
        for finished in round_.finished:
            self._run_round(Round([finished], topped_up=True))
        for claims in self._producer.one_by_one(round_.claims):
            self._run_round(Round([], claims, topped_up=True))
        self._producer.table_not_claimed(round_.claims)

    def _give_up(self, round_: Round) -> None:
        """A member the store fails to take even alone. Its outcome is acked and its job left to its lease
        (the sweeper settles it); its delivery is dead-lettered (`Producer.gave_up`)."""
        for finished in round_.finished:
            log.error(
                "job %s: the store refused its outcome; its lease will run out", finished.running.claim.job_id
            )
        self._end(round_.finished)
        self._producer.gave_up(round_.claims)

    def _in_transaction(self, conn: Connection, round_: Round) -> tuple[list[State | None], Claimed]:
        """The round's transaction, once it holds the write lock: first take what arrived while it waited
        for it (once: a rerun writes the same round), then commit the outcomes and write the claims."""
        if not round_.topped_up:
            round_.topped_up = True
            round_.finished += self._absorb(take_waiting(self._inbox))
            self._producer.top_up(conn, round_.claims)
        states = commit_all(
            conn, round_.finished, self._backoff, self._limits, max_snoozes=self._settings.max_snoozes
        )
        return states, self._producer.claim(conn, round_.claims)

    def _write_round(self, round_: Round) -> None:
        written = self._store.transact(self._in_transaction, round_)
        if written is None:
            log.error("the store took nothing for a lease's length; outcomes are left to their leases")
            self._end(round_.finished)
            self._producer.not_claimed(round_.claims)
            return
        states, claimed = written
        if round_.finished:
            faults.hit(f"{self._role}.after_commit")
            self._committed(round_.finished, states)
        self._producer.claimed(round_.claims, claimed)

    def _committed(self, finished: list[Finished], states: list[State | None]) -> None:
        fenced = sum(state is None for state in states)
        self._counts.add(commit_rounds=1, committed=len(finished) - fenced, fenced=fenced)
        FENCED_WRITES.inc(fenced)
        if fenced:
            log.info("%d of %d outcomes fenced out (a newer epoch or an expired lease)", fenced, len(states))
        held = self._end(finished)
        for f, state, ours in zip(finished, states, held, strict=True):
            discard_uncommitted(self._settings, f.running.claim, f.outcome, state)
            _count_ending(f, state)
            if ours:  # (a released job was counted as it was released)
                self._counts.ended(_outcome_name(f.running.held, state))


def _count_ending(finished: Finished, state: State | None) -> None:
    """The metrics of a committed outcome: the job's terminal state, or its retry (a snooze, which spends
    no attempt, is neither)."""
    if state is None or (state not in TERMINAL and finished.outcome.snooze is not None):
        return
    claim = finished.running.claim
    instruments.job_moved(claim.kind, claim.queue, state.value)


def _outcome_name(held: LeasedJob, state: State | None) -> str:
    if state is not None:
        return state.value
    return Release.RELEASED.value if held.handed_back else "fenced"
