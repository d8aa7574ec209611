"""`python -m shop place ITEM EMAIL CENTS`: place an order (its receipt job is enqueued with it);
`python -m shop wait JOB_ID`: wait for a job through the api and print how it ended.

DATABASE_URL names the store's database (the shop's table lives beside outbox-bridge's); SHOP_API and
SHOP_TOKEN the api and a bearer token for the tenant `shop` (`outbox-bridge token --tenant shop --user u`)."""

from __future__ import annotations

import os
import sys

from sqlalchemy import create_engine

import outbox_bridge
from shop.orders import metadata, place_order


def main(argv: list[str]) -> int:
    if argv[:1] == ["place"] and len(argv) == 4:
        engine = create_engine(os.environ["DATABASE_URL"])
        metadata.create_all(engine)
        order_id, job = place_order(engine, item=argv[1], email=argv[2], total_cents=int(argv[3]))
        print(f"order {order_id}: receipt job {job.id} {job.state}")
        return 0
    if argv[:1] == ["wait"] and len(argv) == 2:
        with outbox_bridge.Client(os.environ["SHOP_API"], token=os.environ["SHOP_TOKEN"]) as jobs:
            job = jobs.wait(argv[1], timeout=60)
            print(f"job {job.id} {job.state}")
            return 0 if job.state == "succeeded" else 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
