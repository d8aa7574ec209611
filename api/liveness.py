"""The dashboard's liveness block: the warnings (`jobstore.alerts`) in the page's error colour, then who is
alive, by role. Rendered here, as one piece of markup, so the dashboard's template only places it."""

from __future__ import annotations

from markupsafe import Markup, escape

from outbox_bridge.jobstore.overview import Overview


def liveness_block(view: Overview) -> Markup:
    """A `<section id="liveness">`: one red `role="alert"` line per warning (`data-warning` is its code),
    then the live processes counted by role (`data-alive` is the role)."""
    warnings = Markup("").join(
        Markup('<div class="flash error" role="alert" data-warning="{}">{}</div>').format(a.code, a.message)
        for a in view.alerts
    )
    alive = Markup(" · ").join(
        Markup('<span data-alive="{}">{} {}</span>').format(role, n, role if n == 1 else f"{role}s")
        for role, n in view.alive.items()
    )
    hosts = ", ".join(sorted({f"{p.role} {p.host}:{p.pid}" for p in view.processes}))
    return Markup('<section id="liveness">{}<p class="muted" title="{}">alive: {}</p></section>').format(
        warnings, escape(hosts), alive
    )
