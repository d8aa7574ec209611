"""The worker runtime both worker modes share: the broker consumer (`consumer/`) and the polling baseline
(`baseline/`) differ only in how work arrives. Holding and renewing leases (`worker.lease`), running an
attempt (`worker.attempt`), committing outcomes (`worker.commit`), retrying while the store is unavailable
(`worker.retry`), giving jobs back (`worker.release`) and the process lifecycle (`worker.process`,
`worker.shutdown`) are written once, here."""
