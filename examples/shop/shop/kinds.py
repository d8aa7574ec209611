"""The shop's job kinds. outbox-bridge loads this module at start (the `outbox_bridge.kinds` entry point in
pyproject.toml), in its api, consumers and workers."""

from __future__ import annotations

import json
import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

import outbox_bridge


class Receipt(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    order_id: int = Field(ge=1)
    email: str = Field(pattern=r"^[^@\s]+@[^@\s]+$", max_length=200)
    total_cents: int = Field(ge=0)


# Receipts run on a queue of their own (a consumer can be given threads for it alone: `--queues mail=2`),
# with a budget and a backoff of their own: the mail provider may be down for a few minutes.
@outbox_bridge.kind("shop.send_receipt", payload=Receipt, queue="mail", max_attempts=5, backoff=(1, 60))
def send_receipt(ctx: outbox_bridge.JobContext, payload: Receipt) -> dict[str, object]:
    """E-mail the receipt of one order. The mail provider stands in as a file of sent messages
    (SHOP_MAILBOX); a real one would take `ctx.operation_key` as its own idempotency key."""
    if payload.total_cents == 0:
        raise outbox_bridge.PermanentError("nothing_to_bill", "an order of nothing gets no receipt")
    ctx.check_cancel()  # the last moment a cancel can still stop it
    ctx.mark_external_started()  # from here on, a lost worker leaves the job `unknown`, never sent twice
    message = {"to": payload.email, "order": payload.order_id, "key": ctx.operation_key}
    mailbox = Path(os.environ.get("SHOP_MAILBOX", "shop-mailbox.jsonl"))
    with mailbox.open("a", encoding="utf-8") as sent:
        sent.write(json.dumps(message) + "\n")
    return {"sent_to": payload.email, "order_id": payload.order_id}
