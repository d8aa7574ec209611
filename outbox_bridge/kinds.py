"""`outbox-bridge kinds`: the kinds this deployment runs, and pausing and resuming one of them (each recorded
with the OS user who did it)."""

from __future__ import annotations

from typing import Annotated

import typer

from outbox_bridge.console import (
    JsonOption,
    load_kinds,
    load_settings,
    open_store,
    os_user,
    out,
    print_json,
    refuse,
    table,
)
from outbox_bridge.core import clock
from outbox_bridge.jobstore import db, pausing

kinds_app = typer.Typer(help="The kinds this deployment runs; pause and resume one.")

KindArgument = Annotated[str, typer.Argument(metavar="KIND", help="A kind's name (`outbox-bridge kinds`).")]
NoteOption = Annotated[str | None, typer.Option(help="Why, for whoever looks next.")]


@kinds_app.callback(invoke_without_command=True)
def kinds(ctx: typer.Context, as_json: JsonOption = False) -> None:
    """The kinds this deployment runs (built in, OUTBOX_BRIDGE_KINDS, entry points) and accepts, with the
    payload schema of each."""
    if ctx.invoked_subcommand is not None:
        return
    from outbox_bridge.handlers.registry import BUILT_IN, KINDS, accepted

    settings = load_settings()
    load_kinds(settings)
    allowed = set(accepted(settings))
    documents = [
        {
            "name": name,
            "accepted": name in allowed,
            "built_in": name in BUILT_IN,
            "payload_schema": KINDS[name].schema.model_json_schema(),
        }
        for name in sorted(KINDS)
    ]
    if as_json:
        print_json({"kinds": documents})
        return
    shown = table()
    for column in ("kind", "accepted", "from", "payload fields"):
        shown.add_column(column)
    for name in sorted(KINDS):
        fields = ", ".join(KINDS[name].schema.model_json_schema().get("properties", {})) or "-"
        source = "built in" if name in BUILT_IN else KINDS[name].run.__module__
        shown.add_row(name, "yes" if name in allowed else "no", source, fields)
    out.print(shown)


@kinds_app.command("pause")
def kinds_pause(kind: KindArgument, note: NoteOption = None) -> None:
    """Pause KIND: its queued jobs do not start (they spend no attempt and keep their order) until it is
    resumed; its running jobs finish."""
    from outbox_bridge.handlers.registry import KINDS

    load_kinds(load_settings())
    if kind not in KINDS:
        refuse(f"this deployment runs no kind {kind!r} (`outbox-bridge kinds` lists them)")
    _, engine = open_store()
    if not db.transact(engine, pausing.pause, kind, clock.now(), actor=os_user(), note=note):
        out.print(f"already paused: kind {kind}", markup=False)
        return
    out.print(
        f"paused: kind {kind}; its queued jobs wait, its running ones finish (`outbox-bridge kinds resume "
        f"{kind}` to start them again)",
        markup=False,
        highlight=False,
    )


@kinds_app.command("resume")
def kinds_resume(kind: KindArgument, note: NoteOption = None) -> None:
    """Resume a paused KIND: its queued jobs start, in their order."""
    _, engine = open_store()
    announced = db.transact(engine, pausing.resume, kind, clock.now(), actor=os_user(), note=note)
    if announced is None:
        out.print(f"not paused: kind {kind}", markup=False)
        return
    out.print(f"resumed: kind {kind}; {announced} queued jobs announced again", markup=False)
