"""The shop's own table and its one write: an order, and the job that e-mails its receipt, committed
together or not at all."""

from __future__ import annotations

from sqlalchemy import Column, Engine, Integer, MetaData, String, Table

import outbox_bridge

metadata = MetaData()
orders = Table(
    "shop_orders",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("item", String(100), nullable=False),
    Column("email", String(200), nullable=False),
    Column("total_cents", Integer, nullable=False),
)


def place_order(engine: Engine, *, item: str, email: str, total_cents: int) -> tuple[int, outbox_bridge.Job]:
    """Write the order and enqueue its receipt in one transaction; the receipt's job runs once it commits.
    A refused job (a bad address, say) raises `outbox_bridge.InvalidJob` and the order is not written."""
    with engine.begin() as conn:
        order_id = conn.execute(
            orders.insert().values(item=item, email=email, total_cents=total_cents)
        ).inserted_primary_key[0]
        job = outbox_bridge.enqueue(
            conn,
            "shop.send_receipt",
            {"order_id": order_id, "email": email, "total_cents": total_cents},
            key=f"receipt-{order_id}",
            tenant="shop",
            owner="checkout",
        )
    return order_id, job
