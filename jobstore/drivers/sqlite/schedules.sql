-- The sqlite driver's statements: schedules (named blocks, as jobstore/drivers/sqlfile.py reads them).

-- A schedule's row is read in the order `PeriodicSchedule.from_row` (jobstore.schedules) takes it.

-- name: schedule_add
-- A new schedule, returned as stored.
INSERT INTO schedules
    (tenant, name, kind, payload, priority, cron, timezone, every_seconds, catch_up, concurrency_key,
     next_slot_at, created_at, created_by, declared)
VALUES (:tenant, :name, :kind, :payload, :priority, :cron, :timezone, :every_seconds,
    :catch_up, :concurrency_key, :next_slot_at, :now, :actor, :declared)
RETURNING tenant, name, kind, payload, priority, cron, timezone, every_seconds, catch_up, concurrency_key,
    next_slot_at, last_slot_at, last_job_id, paused_at, paused_by, created_at, created_by, declared;

-- name: schedule
SELECT tenant, name, kind, payload, priority, cron, timezone, every_seconds, catch_up, concurrency_key,
    next_slot_at, last_slot_at, last_job_id, paused_at, paused_by, created_at, created_by, declared
FROM schedules
WHERE tenant = :tenant AND name = :name;

-- name: schedule_to_fire
-- The schedule, to fire it or to bring it in line with its declaration. Nothing to lock: the write
-- transaction holds the store's one write lock from its BEGIN IMMEDIATE, so a concurrent firing begins after
-- it ends and finds its slots fired (and the schedule as declared).
SELECT tenant, name, kind, payload, priority, cron, timezone, every_seconds, catch_up, concurrency_key,
    next_slot_at, last_slot_at, last_job_id, paused_at, paused_by, created_at, created_by, declared
FROM schedules
WHERE tenant = :tenant AND name = :name;

-- name: schedules_all
-- Every schedule, by tenant and name.
SELECT tenant, name, kind, payload, priority, cron, timezone, every_seconds, catch_up, concurrency_key,
    next_slot_at, last_slot_at, last_job_id, paused_at, paused_by, created_at, created_by, declared
FROM schedules
ORDER BY tenant, name;

-- name: schedules_due
-- The schedules, not paused, whose next slot has come, soonest first.
SELECT tenant, name
FROM schedules
WHERE paused_at IS NULL AND next_slot_at <= :now
ORDER BY next_slot_at;

-- name: schedule_pause
-- No row when the schedule is paused already, or not there.
UPDATE schedules
SET paused_at = :now, paused_by = :actor
WHERE tenant = :tenant AND name = :name AND paused_at IS NULL
RETURNING name;

-- name: schedule_resume
-- No row when the schedule is not paused, or not there.
UPDATE schedules
SET paused_at = NULL, paused_by = NULL, next_slot_at = :next_slot_at
WHERE tenant = :tenant AND name = :name AND paused_at IS NOT NULL
RETURNING name;

-- name: schedule_remove
DELETE FROM schedules
WHERE tenant = :tenant AND name = :name
RETURNING name;

-- name: schedule_fired
-- The schedule's next slot moved past the firing; the last slot and job, when the firing made one (null
-- parameters when it made none keep the ones before).
UPDATE schedules
SET next_slot_at = :next_slot_at,
    last_slot_at = COALESCE(:last_slot_at, last_slot_at),
    last_job_id = COALESCE(:last_job_id, last_job_id)
WHERE tenant = :tenant AND name = :name;

-- name: schedule_declare
-- The schedule brought in line with its declaration in code and marked declared: its kind, payload, priority
-- and slots, and its next slot (the caller keeps the one stored when the slots did not change). Its pause,
-- catch-up and concurrency key stay as they are: a declaration names none of them.
UPDATE schedules
SET kind = :kind, payload = :payload, priority = :priority,
    cron = :cron, timezone = :timezone, every_seconds = :every_seconds,
    next_slot_at = :next_slot_at, declared = TRUE
WHERE tenant = :tenant AND name = :name;

-- name: schedule_undeclare
-- The schedule no longer marked declared in code (it runs on as an operator's); no row when it was not.
UPDATE schedules
SET declared = FALSE
WHERE tenant = :tenant AND name = :name AND declared
RETURNING name;

-- name: schedule_action_record
-- What an operator did to a schedule, who and when.
INSERT INTO schedule_actions (tenant, name, action, actor, at)
VALUES (:tenant, :name, :action, :actor, :now);
