"""The command line of `outbox-bridge bench`."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from outbox_bridge.bench.proxy import STYLES

MODES = {"broker": ("broker",), "sqlite": ("sqlite",), "both": ("broker", "sqlite")}
SYNCHRONOUS = ("FULL", "NORMAL")
PROFILE = ("auto", "always", "never")
SCENARIOS = ("standard", "priority", "fairness", "delayed")


@dataclass(frozen=True)
class Options:
    modes: tuple[str, ...]
    jobs: int
    consumers: int
    concurrency: int | None
    rate: float
    light_rate: float
    duration: float
    idle_seconds: float
    batch: int
    http_threads: int
    fsync_jobs: int
    outage_seconds: float
    outage_style: str
    synchronous: tuple[str, ...]
    out: Path
    database_url: str | None
    rabbitmq_url: str | None
    profile: str
    keep: bool
    # standard: every phase; priority, fairness, delayed: one probe phase each (`bench.probes`)
    scenario: str = "standard"
    api_workers: int = 1  # api processes (`api --workers`)
    # deliveries the relay's sender drains to a local receiver, broker mode (`bench.webhooks`; 0: none)
    webhook_deliveries: int = 500

    @property
    def file_suffix(self) -> str:
        """`results.json` for the standard set of both modes, `results-<mode>.json` for one."""
        return "" if len(self.modes) > 1 else f"-{self.modes[0]}"


def _synchronous(text: str) -> tuple[str, ...]:
    values = tuple(v.strip().upper() for v in text.split(",") if v.strip())
    if not values or any(v not in SYNCHRONOUS for v in values):
        raise argparse.ArgumentTypeError(f"FULL, NORMAL or FULL,NORMAL; not {text!r}")
    return tuple(dict.fromkeys(values))


def _positive(kind: Callable[[str], float]) -> Callable[[str], float]:
    def parse(text: str) -> float:
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be positive: {text}")
        return value

    return parse


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="outbox-bridge bench",
        description="Measure the broker path and the SQLite-only baseline side by side, in one run.",
    )
    p.add_argument("--mode", choices=sorted(MODES), default="both")
    p.add_argument("--jobs", type=_positive(int), default=5000, help="burst size (default 5000)")
    p.add_argument("--consumers", type=_positive(int), default=2, help="consumer or worker processes")
    p.add_argument("--concurrency", type=_positive(int), help="threads per consumer/worker (their default)")
    p.add_argument(
        "--api-workers", type=_positive(int), default=1, help="api processes (`api --workers`, default 1)"
    )
    p.add_argument("--rate", type=_positive(float), default=200.0, help="offered load, jobs/s (default 200)")
    p.add_argument("--light-rate", type=float, default=20.0, help="a second, light load (0: skip it)")
    p.add_argument("--duration", type=_positive(float), default=10.0, help="latency phase seconds")
    p.add_argument("--idle-seconds", type=_positive(float), default=10.0, help="idle-cost window")
    p.add_argument("--batch", type=_positive(int), default=100, help="accepts per transaction (store path)")
    p.add_argument("--http-threads", type=_positive(int), default=8, help="concurrent HTTP clients")
    p.add_argument("--fsync-jobs", type=int, default=1000, help="jobs in the strace run (0: skip it)")
    p.add_argument(
        "--webhook-deliveries",
        type=int,
        default=500,
        help="webhook deliveries the relay's sender drains to a local receiver, broker mode (0: skip it)",
    )
    p.add_argument("--outage-seconds", type=float, default=4.0, help="broker outage (0: skip it)")
    p.add_argument(
        "--outage-style",
        choices=STYLES,
        default="refuse",
        help="refuse: the broker port stops listening; reset: connections are accepted and reset at once",
    )
    p.add_argument(
        "--synchronous",
        type=_synchronous,
        default=SYNCHRONOUS,
        help="SQLite synchronous: FULL, NORMAL or FULL,NORMAL (default); the first gets every phase",
    )
    p.add_argument("--out", type=Path, default=Path("docs/bench"), help="where the JSON and PNGs go")
    p.add_argument("--database-url", help="an existing store instead of a fresh SQLite file")
    p.add_argument("--rabbitmq-url", help="the broker (default: settings' RABBITMQ_URL)")
    p.add_argument("--profile", choices=PROFILE, default="auto", help="py-spy the broker burst")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory (logs, traces)")
    p.add_argument(
        "--scenario",
        choices=SCENARIOS,
        default="standard",
        help="standard: every phase; priority: a high job behind 5,000 queued normal ones; fairness: "
        "tenant B's job behind tenant A's 5,000 queued 50 ms sleep jobs; delayed: how late a job asked to "
        "start 1 s ahead starts after that time (20 probes each)",
    )
    return p


def parse(argv: list[str]) -> Options:
    a = parser().parse_args(argv)
    return Options(
        modes=MODES[a.mode],
        jobs=a.jobs,
        consumers=a.consumers,
        concurrency=a.concurrency,
        rate=a.rate,
        light_rate=max(0.0, a.light_rate),
        duration=a.duration,
        idle_seconds=a.idle_seconds,
        batch=a.batch,
        http_threads=a.http_threads,
        fsync_jobs=max(0, a.fsync_jobs),
        outage_seconds=max(0.0, a.outage_seconds),
        outage_style=a.outage_style,
        synchronous=a.synchronous,
        out=a.out,
        database_url=a.database_url,
        rabbitmq_url=a.rabbitmq_url,
        profile=a.profile,
        keep=a.keep,
        scenario=a.scenario,
        api_workers=a.api_workers,
        webhook_deliveries=max(0, a.webhook_deliveries),
    )
