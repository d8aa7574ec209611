-- The postgresql driver's statements: sessions (named blocks, as jobstore/drivers/sqlfile.py reads them).

-- name: session_prune
-- Sessions that ended or expired more than a day before.
DELETE FROM dashboard_sessions WHERE expires_at < %(before)s;

-- name: session_start
INSERT INTO dashboard_sessions (id, tenant, "user", created_at, expires_at, ended_at)
VALUES (%(id)s, %(tenant)s, %(user)s, %(now)s, %(expires_at)s, NULL);

-- name: session_holder
-- The open session a secret's HMAC names.
SELECT id, tenant, "user", expires_at
FROM dashboard_sessions
WHERE id = %(id)s AND ended_at IS NULL AND expires_at > %(now)s;

-- name: session_end
UPDATE dashboard_sessions SET ended_at = %(now)s
WHERE id = %(id)s AND ended_at IS NULL
RETURNING id;
