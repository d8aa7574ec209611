"""What an operator must be told about at once, decided from the overview's figures (a pure rule; `status`,
`status --json` and the dashboard all show what it returns).

- `no-consumer`: jobs are due and no consumer and no baseline worker is alive, so nothing will run them.
- `no-relay`: outbox rows are due and no relay is alive, so nothing publishes them. A baseline worker claims
  from the table and needs no relay, so while one is alive this is not said.
- `worker-lost`: running jobs are held by a worker that is gone (`conditions`): nothing will finish them;
  each is retried or settled by the sweeper once its lease expires, and an operator may want to know why
  the worker went.
- `queued-too-long`: the oldest due job has waited longer than `QUEUED_AGE_WARNING_SECONDS` (0: never
  said), whatever the reason (too few consumers, a stuck broker, a relay that cannot publish).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Alert:
    code: str
    message: str


def alerts(
    *,
    due: int,
    oldest_due_age: float,
    outbox_pending: int,
    alive: Mapping[str, int],
    queued_age_limit: float,
    worker_lost: int = 0,
) -> list[Alert]:
    """The alerts the figures call for, most urgent first; empty when all is well. `worker_lost` counts the
    running jobs whose worker is lost."""
    found: list[Alert] = []
    runners = alive.get("consumer", 0) + alive.get("worker", 0)
    if due and not runners:
        found.append(Alert("no-consumer", f"{due} job(s) waiting and no consumer or worker is alive"))
    if outbox_pending and not alive.get("relay", 0) and not alive.get("worker", 0):
        found.append(Alert("no-relay", f"{outbox_pending} outbox row(s) due and no relay is alive"))
    if worker_lost:
        found.append(
            Alert(
                "worker-lost",
                f"{worker_lost} running job(s) held by a worker that is gone: the sweeper retries or "
                "settles each once its lease expires",
            )
        )
    if queued_age_limit > 0 and oldest_due_age > queued_age_limit:
        found.append(
            Alert(
                "queued-too-long",
                f"the oldest queued job has waited {oldest_due_age:.0f}s (more than {queued_age_limit:.0f}s)",
            )
        )
    return found
