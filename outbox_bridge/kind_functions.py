"""`outbox_bridge.kind`: the decorator that makes a function a job kind (`handlers.base.kind`), returning
the function callable as before with an `enqueue` of its own, typed by the kind's payload model:

    @outbox_bridge.kind("team.send_receipt", payload=Receipt)
    def send_receipt(ctx: JobContext, payload: Receipt) -> None: ...

    send_receipt.enqueue(conn, Receipt(order_id=7), key="receipt-7", tenant="shop", owner="checkout")

It lives above the kinds' own floor: `enqueue` applies the api's rules (`outbox_bridge.enqueuing`), which a
worker process running kinds never imports; they are loaded on the first `enqueue`."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, Protocol, TypeVar, cast

from pydantic import BaseModel

from outbox_bridge.client.job import Job
from outbox_bridge.core.queue_names import DEFAULT_QUEUE
from outbox_bridge.handlers import base
from outbox_bridge.handlers.base import Out, Progress

if TYPE_CHECKING:
    from sqlalchemy import Connection
    from sqlalchemy.orm import Session

Model = TypeVar("Model", bound=BaseModel)
Params = ParamSpec("Params")
_ModelIn = TypeVar("_ModelIn", bound=BaseModel, contravariant=True)
_OutCo = TypeVar("_OutCo", covariant=True)


class KindFunction(Protocol[_ModelIn, Params, _OutCo]):
    """A function `kind` made a kind: called as before, and with `enqueue` to write a job of its kind."""

    def __call__(self, *args: Params.args, **kwargs: Params.kwargs) -> _OutCo: ...

    def enqueue(
        self,
        conn: Connection | Session,
        payload: _ModelIn | dict[str, Any],
        *,
        key: str,
        tenant: str,
        owner: str,
        deadline_seconds: int | None = None,
        delay_seconds: float | None = None,
        run_at: datetime | str | None = None,
        priority: str | None = None,
        concurrency_key: str | None = None,
        after: Sequence[str] | None = None,
        on_dependency_failure: str = "cancel",
    ) -> Job:
        """`outbox_bridge.enqueue(conn, <this kind>, payload, ...)`: the payload is the kind's model or a
        dict."""
        ...


def kind(
    name: str,
    *,
    payload: type[Model],
    resumes: bool = False,
    progress: Callable[[dict[str, Any]], Progress | None] | None = None,
    discard: Callable[[Path, dict[str, Any]], None] | None = None,
    queue: str = DEFAULT_QUEUE,
    max_attempts: int | None = None,
    backoff: tuple[float, float] | None = None,
    timeout_seconds: float | None = None,
    priority: str | None = None,
    unique_for_seconds: float | None = None,
) -> Callable[[Callable[Params, Out]], KindFunction[Model, Params, Out]]:
    """`handlers.base.kind` (what a kind is, what it returns, how it runs), with `enqueue` on the function:
    `resize.enqueue(conn, ResizeImage(width=640), key=..., tenant=..., owner=...)` is
    `outbox_bridge.enqueue(conn, "resize_image", ...)`, its payload typed as the kind's model."""
    register = base.kind(
        name, payload=payload, resumes=resumes, progress=progress, discard=discard, queue=queue,
        max_attempts=max_attempts, backoff=backoff, timeout_seconds=timeout_seconds, priority=priority,
        unique_for_seconds=unique_for_seconds,
    )  # fmt: skip

    def define(run: Callable[Params, Out]) -> KindFunction[Model, Params, Out]:
        made = register(run)
        try:
            made.enqueue = _enqueuer(name)  # type: ignore[attr-defined]
        except AttributeError:  # a bound method takes no attribute: a partial of it in front does
            made = functools.update_wrapper(functools.partial(run), run)
            made.enqueue = _enqueuer(name)  # type: ignore[attr-defined]
        return cast("KindFunction[Model, Params, Out]", made)

    return define


def _enqueuer(name: str) -> Callable[..., Job]:
    def enqueue(conn: Connection | Session, payload: BaseModel | dict[str, Any], **options: Any) -> Job:
        from outbox_bridge.enqueuing import enqueue as enqueue_job  # the api's rules, on first use

        return enqueue_job(conn, name, payload, **options)

    enqueue.__doc__ = f"`outbox_bridge.enqueue(conn, {name!r}, payload, **options)`: a job of this kind."
    return enqueue
