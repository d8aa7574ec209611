-- The postgresql driver's statements: schedules (named blocks, as jobstore/drivers/sqlfile.py reads them).

-- A schedule's row is read in the order `PeriodicSchedule.from_row` (jobstore.schedules) takes it.

-- name: schedule_add
-- A new schedule, returned as stored.
INSERT INTO schedules
    (tenant, name, kind, payload, priority, cron, timezone, every_seconds, catch_up, concurrency_key,
     next_slot_at, created_at, created_by, declared)
VALUES (%(tenant)s, %(name)s, %(kind)s, %(payload)s, %(priority)s, %(cron)s, %(timezone)s, %(every_seconds)s,
    %(catch_up)s, %(concurrency_key)s, %(next_slot_at)s, %(now)s, %(actor)s, %(declared)s)
RETURNING tenant, name, kind, payload, priority, cron, timezone, every_seconds, catch_up, concurrency_key,
    next_slot_at, last_slot_at, last_job_id, paused_at, paused_by, created_at, created_by, declared;

-- name: schedule
SELECT tenant, name, kind, payload, priority, cron, timezone, every_seconds, catch_up, concurrency_key,
    next_slot_at, last_slot_at, last_job_id, paused_at, paused_by, created_at, created_by, declared
FROM schedules
WHERE tenant = %(tenant)s AND name = %(name)s;

-- name: schedule_to_fire
-- The schedule, to fire it or to bring it in line with its declaration, locked until the transaction ends:
-- a concurrent firing waits, then finds its slots fired (and the schedule as declared).
SELECT tenant, name, kind, payload, priority, cron, timezone, every_seconds, catch_up, concurrency_key,
    next_slot_at, last_slot_at, last_job_id, paused_at, paused_by, created_at, created_by, declared
FROM schedules
WHERE tenant = %(tenant)s AND name = %(name)s
FOR UPDATE;

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
WHERE paused_at IS NULL AND next_slot_at <= %(now)s
ORDER BY next_slot_at;

-- name: schedule_pause
-- No row when the schedule is paused already, or not there.
UPDATE schedules
SET paused_at = %(now)s, paused_by = %(actor)s
WHERE tenant = %(tenant)s AND name = %(name)s AND paused_at IS NULL
RETURNING name;

-- name: schedule_resume
-- No row when the schedule is not paused, or not there.
UPDATE schedules
SET paused_at = NULL, paused_by = NULL, next_slot_at = %(next_slot_at)s
WHERE tenant = %(tenant)s AND name = %(name)s AND paused_at IS NOT NULL
RETURNING name;

-- name: schedule_remove
DELETE FROM schedules
WHERE tenant = %(tenant)s AND name = %(name)s
RETURNING name;

-- name: schedule_fired
-- The schedule's next slot moved past the firing; the last slot and job, when the firing made one (null
-- parameters when it made none keep the ones before).
UPDATE schedules
SET next_slot_at = %(next_slot_at)s,
    last_slot_at = COALESCE(%(last_slot_at)s, last_slot_at),
    last_job_id = COALESCE(%(last_job_id)s, last_job_id)
WHERE tenant = %(tenant)s AND name = %(name)s;

-- name: schedule_declare
-- The schedule brought in line with its declaration in code and marked declared: its kind, payload, priority
-- and slots, and its next slot (the caller keeps the one stored when the slots did not change). Its pause,
-- catch-up and concurrency key stay as they are: a declaration names none of them.
UPDATE schedules
SET kind = %(kind)s, payload = %(payload)s, priority = %(priority)s,
    cron = %(cron)s, timezone = %(timezone)s, every_seconds = %(every_seconds)s,
    next_slot_at = %(next_slot_at)s, declared = TRUE
WHERE tenant = %(tenant)s AND name = %(name)s;

-- name: schedule_undeclare
-- The schedule no longer marked declared in code (it runs on as an operator's); no row when it was not.
UPDATE schedules
SET declared = FALSE
WHERE tenant = %(tenant)s AND name = %(name)s AND declared
RETURNING name;

-- name: schedule_action_record
-- What an operator did to a schedule, who and when.
INSERT INTO schedule_actions (tenant, name, action, actor, at)
VALUES (%(tenant)s, %(name)s, %(action)s, %(actor)s, %(now)s);
