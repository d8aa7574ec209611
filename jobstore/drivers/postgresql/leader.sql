-- The postgresql driver's statements: leader (named blocks, as jobstore/drivers/sqlfile.py reads them).
--
-- One relay at a time publishes the outbox: the leader, under a lease of its role in `relay_role`
-- (`jobstore.leader`), held under a fresh token each time it is taken.

-- name: leader_current
-- Who holds the role, or held it last.
SELECT token, holder, expires_at FROM relay_role WHERE name = %(name)s;

-- name: leader_take
-- Take the role under a token until a time, or renew it: only when nobody holds it, it expired, its
-- holder's token is the one given as gone (a process seen dead), or the token holds it already. The token
-- when it was taken, no row when not.
INSERT INTO relay_role (name, token, holder, expires_at)
VALUES (%(name)s, %(token)s, %(holder)s, %(until)s)
ON CONFLICT (name) DO UPDATE
SET token = excluded.token, holder = excluded.holder, expires_at = excluded.expires_at
WHERE relay_role.token = excluded.token OR relay_role.token = %(gone)s OR relay_role.expires_at <= %(now)s
RETURNING token;

-- name: leader_give_up
-- Hand the role back at once: a standby takes it at its next look.
UPDATE relay_role SET expires_at = 0.0 WHERE name = %(name)s AND token = %(token)s;

-- name: leader_lock
-- Take, for this session (outside any transaction), the lock the leader keeps while it lives: true once
-- this session holds it, false while another does. The server lets go of it the moment the session ends,
-- a killed leader's included. One per store (its schema), apart from every other use of advisory locks by
-- its first key, 29295 (0x726F).
SELECT pg_try_advisory_lock(29295, hashtext(current_schema()));

-- name: leader_unlock
-- Let go of the lock `leader_lock` took on this session (false when it held none).
SELECT pg_advisory_unlock(29295, hashtext(current_schema()));
