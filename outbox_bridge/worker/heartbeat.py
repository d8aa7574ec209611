"""What a consumer or baseline worker reports about itself at each heartbeat (`jobstore.heartbeats.Heartbeat`
writes the beats of every long-running process)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from outbox_bridge.jobstore.conditions import WORKER_KEY
from outbox_bridge.worker.lease import LeaseKeeper


def runner_detail(keeper: LeaseKeeper, concurrency: int, worker: str) -> Callable[[], dict[str, Any]]:
    """What a consumer or worker reports at each beat: its concurrency, the jobs it holds now, and the name
    its claims write as the lease owner (`worker`), by which `status` and the dashboard match each running
    job to its process."""
    return lambda: {"concurrency": concurrency, "in_flight": len(keeper.held()), WORKER_KEY: worker}
