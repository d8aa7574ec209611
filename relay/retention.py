"""The pruner: every `RETENTION_CHECK_SECONDS` the relay runs one bounded pass of the job retention
(`worker.retention.retain`): finished jobs past `JOB_RETENTION_SECONDS` are deleted with their files, and
the results directory is swept on from where the last pass stopped. Every relay runs it, the leader and the
standbys alike (each pass is safe beside another)."""

from __future__ import annotations

import logging

from sqlalchemy import Engine

from outbox_bridge.core.settings import Settings
from outbox_bridge.relay.loop import RelayLoop
from outbox_bridge.relay.services import PeriodicService
from outbox_bridge.worker.retention import OutputSweep, Retained, retain

log = logging.getLogger("relay")


class Pruner(PeriodicService[Retained]):
    """`retain` every `retention_check_seconds`, its sweep of the results directory going on from pass to
    pass; what each pass removed is logged."""

    name = "retention"

    def __init__(self, settings: Settings, engine: Engine, loop: RelayLoop) -> None:
        super().__init__(loop, settings.retention_check_seconds)
        self._settings = settings
        self._engine = engine
        self._output_sweep = OutputSweep()

    def work(self) -> Retained:
        return retain(self._engine, self._settings, self._output_sweep)

    def done(self, result: Retained) -> None:
        for line in result.lines():
            log.info("%s", line)
