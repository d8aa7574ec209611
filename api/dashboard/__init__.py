"""The operator dashboard at `/ui`: server-rendered HTML over the same figures as `outbox-bridge status`, the
jobs with filters and paging, each job's page, and the same operator actions as `outbox-bridge jobs
cancel|requeue|resolve` (requeue also for every job a filter names, after a page that shows the count).

Only operators see it: a bearer token (HS256, `AUTH_SECRET`) whose claims carry `role: operator`, sent either
as `Authorization: Bearer ...` or, for a browser, once to the sign-in form at `/ui/login`, which starts a
session (no longer than the token's own life) held by an HttpOnly, SameSite=Strict cookie. No valid token or
session: 401 and the sign-in form. A valid token without the operator role:
404, as if there were no dashboard. Because the cookie is SameSite=Strict, another site cannot make a
signed-in browser post the action forms. Every action is recorded with the token's `sub`.

`access` holds who may look and the sign-in, flash and form plumbing; `pages` the pages; `actions` the
forms that change jobs; `webhooks` the completion webhooks' endpoints (added, rotated, removed), their
deliveries and replays; `schedules` the schedules and the kinds, added, paused, resumed and removed;
`batches` the batches, each batch's members, and what a job's page shows of its dependencies.
Importing them registers their routes on the one `router`.
"""

from outbox_bridge.api.dashboard import actions, batches, pages, schedules, webhooks
from outbox_bridge.api.dashboard.access import router

__all__ = ["actions", "batches", "pages", "router", "schedules", "webhooks"]
