"""The PNGs: latency CDFs at the fixed offered load, a throughput bar chart, and the outage timeline."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from outbox_bridge.bench.report import label
from outbox_bridge.bench.targets import HTTP_JOBS_PER_SECOND, STORE_JOBS_PER_SECOND, figure

Result = dict[str, Any]
PATH_LABELS = {"store": "submitted through the store", "http": "submitted through HTTP (POST /jobs)"}
TARGETS = {"store": STORE_JOBS_PER_SECOND, "http": HTTP_JOBS_PER_SECOND}


def _pyplot() -> Any:
    """matplotlib's pyplot on the file-only Agg backend (matplotlib comes with the `bench` extra)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def draw(results: Result, out: Path, suffix: str) -> list[Path]:
    """Write every plot the figures allow; returns the files written."""
    runs = results["runs"]
    drawn = [
        _latency_cdf(runs, "latency", out / f"latency-cdf{suffix}.png"),
        _latency_cdf(runs, "latency_light", out / f"latency-cdf-light{suffix}.png"),
        _throughput(runs, out / f"throughput{suffix}.png"),
    ]
    drawn += [_outage(run, out / f"outage{suffix}.png") for run in runs if figure(run, "outage", "timeline")]
    return [p for p in drawn if p is not None]


def _latency_cdf(runs: list[Result], phase: str, path: Path) -> Path | None:
    curves = [(label(r), figure(r, phase, "cdf_ms")) for r in runs]
    curves = [(name, cdf) for name, cdf in curves if cdf]
    if not curves:
        return None
    fig, axes = _pyplot().subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, which, title in zip(
        axes,
        ("accept_to_start", "accept_to_succeeded"),
        ("accept to start", "accept to succeeded"),
        strict=True,
    ):
        for name, cdf in curves:
            values = cdf[which]
            ax.plot(values, [i / (len(values) - 1) for i in range(len(values))], label=name)
        ax.set_xscale("log")
        ax.set_xlabel("milliseconds (log scale)")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("fraction of jobs")
    axes[0].legend(loc="lower right")
    rate = next((figure(r, phase, "offered_rate") for r in runs if figure(r, phase)), None)
    fig.suptitle(f"latency at {rate:g} jobs/s offered (open loop, noop jobs)" if rate else "latency")
    return _save(fig, path)


def _throughput(runs: list[Result], path: Path) -> Path | None:
    names = [label(r) for r in runs]
    bars = {p: [figure(r, f"burst_{p}", "jobs_per_second") or 0 for r in runs] for p in ("store", "http")}
    if not any(v for values in bars.values() for v in values):
        return None
    fig, ax = _pyplot().subplots(figsize=(9, 4.5))
    width = 0.38
    for offset, (path_name, values) in zip((-width / 2, width / 2), bars.items(), strict=True):
        xs = [i + offset for i in range(len(names))]
        drawn = ax.bar(xs, values, width, label=PATH_LABELS[path_name])
        ax.bar_label(drawn, fmt="%.0f", fontsize=8)
    for path_name, target in TARGETS.items():
        ax.axhline(target, linestyle="--", linewidth=0.8, color="grey")
        ax.text(
            len(names) - 0.5,
            target,
            f"broker {path_name} target {target}",
            fontsize=7,
            va="bottom",
            ha="right",
        )
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel("jobs/s, accepted to succeeded")
    jobs = next((figure(r, "burst_store", "jobs") for r in runs if figure(r, "burst_store")), None)
    ax.set_title(f"throughput for a burst of {jobs} noop jobs" if jobs else "throughput")
    ax.legend(loc="upper left")
    return _save(fig, path)


def _outage(run: Result, path: Path) -> Path | None:
    o = run["phases"]["outage"]
    rows = o["timeline"]
    t = [r[0] for r in rows]
    fig, ax = _pyplot().subplots(figsize=(9, 4))
    ax.plot(t, [r[1] for r in rows], label="accepted (202)")
    ax.plot(t, [r[2] for r in rows], label="succeeded")
    ax.plot(t, [r[3] for r in rows], label="outbox rows pending")
    start = o["outage_starts_at_second"]
    ax.axvspan(start, start + o["outage_seconds"], color="red", alpha=0.12, label="broker unreachable")
    ax.set_xlabel("seconds")
    ax.set_ylabel("jobs")
    ax.set_title(
        f"{label(run)}: broker outage at {o['offered_rate']:g} jobs/s offered, "
        f"drained {o['drain_seconds']:.2f} s after"
    )
    ax.legend(loc="upper left")
    ax.grid(True, alpha=0.3)
    return _save(fig, path)


def _save(fig: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    _pyplot().close(fig)
    return path
