"""The worker runtime both worker modes share: the broker consumer (`consumer/`) and the polling baseline
(`baseline/`) differ only in how work arrives (`worker.modes`). Claiming (the producer, `worker.producer`),
running claimed jobs (the executor, `worker.runners`) and the group commit of their outcomes (the completer,
`worker.completer`), put together by `worker.writer`; holding and renewing leases (`worker.lease`), running an
attempt (`worker.attempt`), committing outcomes (`worker.commit`), retrying while the store is unavailable
(`worker.retry`), giving jobs back (`worker.release`) and the process lifecycle (`worker.process`,
`worker.shutdown`) are written once, here."""
