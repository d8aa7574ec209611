-- The sqlite driver's statements: leader (named blocks, as jobstore/drivers/sqlfile.py reads them).
--
-- One relay at a time publishes the outbox: the leader, under a lease of its role in `relay_role`
-- (`jobstore.leader`), held under a fresh token each time it is taken.

-- name: leader_current
-- Who holds the role, or held it last.
SELECT token, holder, expires_at FROM relay_role WHERE name = :name;

-- name: leader_take
-- Take the role under a token until a time, or renew it: only when nobody holds it, it expired, its
-- holder's token is the one given as gone (a process seen dead), or the token holds it already. The token
-- when it was taken, no row when not.
INSERT INTO relay_role (name, token, holder, expires_at)
VALUES (:name, :token, :holder, :until)
ON CONFLICT (name) DO UPDATE
SET token = excluded.token, holder = excluded.holder, expires_at = excluded.expires_at
WHERE relay_role.token = excluded.token OR relay_role.token = :gone OR relay_role.expires_at <= :now
RETURNING token;

-- name: leader_give_up
-- Hand the role back at once: a standby takes it at its next look.
UPDATE relay_role SET expires_at = 0.0 WHERE name = :name AND token = :token;

-- name: leader_lock
-- The lock the leader keeps on a session of its own while it lives, which the database lets go of when
-- the session ends: SQLite has none (NULL), so a standby judges the holder by its pid and its expiry alone.
SELECT NULL;

-- name: leader_unlock
-- Let go of the leader's session lock: there is none on SQLite.
SELECT NULL;
