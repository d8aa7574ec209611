"""Broker mode: the broker goes away for a few seconds in the middle of a run at the offered load.

The relay and the consumers are restarted to reach the broker through `BrokerProxy`, which then resets
every connection and refuses new ones for `outage_seconds` (`--outage-style`: the port stops listening,
or connections are accepted and reset at once). Jobs keep being submitted through the HTTP
API all along; the figures say how many were accepted during the outage and how long after the broker
came back every job accepted before that had succeeded (the time to drain)."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

from outbox_bridge.bench.observe import StoreWatch
from outbox_bridge.bench.phases import Run
from outbox_bridge.bench.proxy import BrokerProxy
from outbox_bridge.bench.submit import Tally, open_loop
from outbox_bridge.core import amqp_urls

if TYPE_CHECKING:
    import numpy as np

MAX_MARGIN_SECONDS = 3.0  # offered load before the outage and after it: as long as the outage, at most this
SAMPLE_SECONDS = 0.25


class Timeline:
    """Every `SAMPLE_SECONDS`: seconds since the start, jobs accepted, jobs succeeded, outbox rows pending."""

    def __init__(self, watch: StoreWatch, tenant: str, tally: Tally) -> None:
        self.rows: list[tuple[float, int, int, int]] = []
        self._watch, self._tenant, self._tally = watch, tenant, tally
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="outage-timeline", daemon=True)
        self.start = time.time()

    def __enter__(self) -> Timeline:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._done.set()
        self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._done.wait(SAMPLE_SECONDS):
            try:
                done = self._watch.progress(self._tenant).succeeded
                pending = self._watch.outbox_pending()
            except Exception:  # a busy read: skip this sample
                continue
            self.rows.append((round(time.time() - self.start, 3), self._tally.accepted, done, pending))


def outage(run: Run, proxy: BrokerProxy) -> dict[str, Any]:
    o = run.options
    # With several nodes in RABBITMQ_URL, the broker side goes through a proxy to the first one alone.
    url = amqp_urls.split(run.deployment.settings.rabbitmq_url)[0]
    run.deployment.reconnect_broker_side(proxy.url_for(url))
    tenant, tally = run.tenant("outage"), Tally()
    marks: dict[str, float] = {}

    def cut() -> None:
        marks["cut"] = time.time()
        proxy.cut()

    def restore() -> None:
        marks["restore"] = time.time()
        proxy.restore()

    margin = max(1.0, min(MAX_MARGIN_SECONDS, o.outage_seconds))
    seconds = margin + o.outage_seconds + margin
    with Timeline(run.watch, tenant, tally) as timeline:
        open_loop(
            lambda: run.http.submit(tenant, tally),
            o.rate,
            seconds,
            run.stop,
            at=[(margin, cut), (margin + o.outage_seconds, restore)],
        )
        finished = run.wait(tenant, tally.accepted, timeout=120.0 + tally.accepted / 20)
    proxy_figures = vars(proxy.counts) | {"style": proxy.style}
    return _figures(run, tenant, tally, marks, timeline) | {"finished": finished, "proxy": proxy_figures}


def _max_ms(seconds: np.ndarray) -> float | None:
    return round(float(seconds.max()) * 1000, 1) if len(seconds) else None


def _figures(
    run: Run, tenant: str, tally: Tally, marks: dict[str, float], timeline: Timeline
) -> dict[str, Any]:
    o = run.options
    t = run.watch.timings(tenant)
    cut, restore = marks["cut"], marks["restore"]
    during = (t.created >= cut) & (t.created < restore)
    before_restore = t.created < restore
    drained_at = float(t.finished[before_restore].max()) if before_restore.any() else restore
    return {
        "path": "http",
        "offered_rate": o.rate,
        "outage_seconds": round(restore - cut, 3),
        "outage_starts_at_second": round(cut - timeline.start, 3),
        "submitted": tally.as_dict(),
        "accepted_during_outage": int(during.sum()),
        "drain_seconds": round(drained_at - restore, 3),
        "max_outbox_pending": max((row[3] for row in timeline.rows), default=0),
        "accept_to_succeeded_max_ms": _max_ms(t.finished - t.created),
        "timeline": [list(row) for row in timeline.rows],
    }
