"""Looking inside the processes during a phase: fsync calls counted with `strace -c`, and where CPU time
goes sampled with `py-spy`. Both attach to running processes by pid, slow them down, and are stopped
(SIGINT, then SIGKILL after a bound) when the block ends."""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

FSYNC_CALLS = ("fsync", "fdatasync", "sync_file_range")
RAW = ("--format", "raw", "-o")
PACKAGES = {"jobstore", "relay", "consumer", "api", "baseline", "handlers", "bench"}
ENTRY_POINTS = {"outbox_bridge/cli.py)", "bench/runner.py)"}
ATTACH_SECONDS = 1.0
DETACH_TIMEOUT = 20.0


def strace_available() -> bool:
    return shutil.which("strace") is not None


def py_spy() -> str | None:
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


@dataclass
class Tracers:
    """One tracer subprocess per traced process, with its output file."""

    outputs: dict[str, Path] = field(default_factory=dict)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        deadline = time.monotonic() + DETACH_TIMEOUT
        for proc in self.procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


@contextlib.contextmanager
def _attached(commands: Mapping[str, tuple[list[str], Path]], log_dir: Path) -> Iterator[Tracers]:
    tracers = Tracers()
    log_dir.mkdir(parents=True, exist_ok=True)
    try:
        for name, (argv, output) in commands.items():
            with open(log_dir / f"{name}.log", "ab") as log:
                tracers.procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT))
            tracers.outputs[name] = output
        time.sleep(ATTACH_SECONDS)
        yield tracers
    finally:
        tracers.stop()


@contextlib.contextmanager
def fsyncs_counted(pids: Mapping[str, int], workdir: Path) -> Iterator[Tracers]:
    """`strace -f -c` on each process, counting only the fsync family (read them with `fsync_counts`)."""
    commands = {
        name: (
            ["strace", "-f", "-c", "-e", f"trace={','.join(FSYNC_CALLS)}", "-o", str(out), "-p", str(pid)],
            out,
        )
        for name, pid in pids.items()
        for out in [workdir / f"strace-{name}.txt"]
    }
    with _attached(commands, workdir / "tracers") as tracers:
        yield tracers


def fsync_counts(tracers: Tracers) -> dict[str, int]:
    """Per process, the fsync-family calls from each `strace -c` summary (0 when it saw none)."""
    return {name: _strace_calls(path) for name, path in tracers.outputs.items()}


def _strace_calls(path: Path) -> int:
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return 0
    calls = 0
    for line in lines:
        parts = line.split()
        if len(parts) >= 5 and parts[-1] in FSYNC_CALLS:
            calls += int(parts[3])
    return calls


@contextlib.contextmanager
def profiled(pids: Mapping[str, int], workdir: Path, rate: int = 100) -> Iterator[Tracers]:
    """`py-spy record` (non-blocking, raw collapsed stacks) on each process; read with `profile_summary`."""
    tool = py_spy()
    if tool is None:
        raise RuntimeError("py-spy is not installed (pip install py-spy)")
    commands = {
        name: (
            [tool, "record", "--pid", str(pid), "--rate", str(rate), "--nonblocking", *RAW, str(out)],
            out,
        )
        for name, pid in pids.items()
        for out in [workdir / f"profile-{name}.txt"]
    }
    with _attached(commands, workdir / "tracers") as tracers:
        yield tracers


def profile_summary(path: Path, top: int = 12) -> dict[str, object]:
    """From collapsed stacks: the share of samples whose innermost frame is each function line (self),
    and the share that passed through each of the project's own functions (inclusive), largest first."""
    own: Counter[str] = Counter()
    through: Counter[str] = Counter()
    total = 0
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return {"samples": 0, "self": [], "inclusive": []}
    for line in lines:
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        raw = stack.split(";")
        frames = [_function(f) for f in raw]
        total += count
        own[_function(raw[-1], line=True)] += count
        for frame in set(frames):
            if _ours(frame):
                through[frame] += count

    def shares(counter: Counter[str]) -> list[list[object]]:
        return [[name, round(100 * n / total, 1)] for name, n in counter.most_common(top)] if total else []

    return {"samples": total, "self": shares(own), "inclusive": shares(through)}


def _ours(frame: str) -> bool:
    """A frame of the project's own code below the command-line entry points (which every sample
    passes through, so their share says nothing)."""
    where = frame.rpartition(" (")[2]
    return where.split("/")[0] in PACKAGES and where not in ENTRY_POINTS


def _function(frame: str, *, line: bool = False) -> str:
    """`name (path/to/module.py:123)` -> `name (to/module.py)`, paths shortened, lines merged unless
    `line` (the innermost frame keeps its line: it says where a function waits or spends)."""
    name, _, where = frame.partition(" (")
    file, _, number = where.rstrip(")").rpartition(":")
    if not file:
        file, number = number, ""
    parts = Path(file).parts
    short = "/".join(parts[-2:]) if len(parts) >= 2 else file
    if line and number:
        short = f"{short}:{number}"
    return f"{name} ({short})" if file else name
