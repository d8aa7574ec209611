"""Real `outbox-bridge` processes for tests, started the way a user starts them (the console script), with
settings passed as environment variables, and stopped with real signals."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from outbox_bridge.core.settings import Settings
from outbox_bridge.launch.stack import settings_env, wait_ok

BIN = Path(sys.executable).parent / "outbox-bridge"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Proc:
    """One child process; its output goes to a log file the test can read."""

    def __init__(self, args: Sequence[str], env: dict[str, str], log_path: Path) -> None:
        self.args = list(args)
        self.log_path = log_path
        self._log = open(log_path, "ab")
        self.popen = subprocess.Popen(
            [str(BIN), *args], env=env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def signal(self, sig: signal.Signals) -> None:
        if self.popen.poll() is None:
            os.kill(self.popen.pid, sig)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        self.wait(10)

    def terminate(self, timeout: float = 30) -> int:
        """SIGTERM, then wait for a clean exit; returns the exit code."""
        self.signal(signal.SIGTERM)
        return self.wait(timeout)

    def wait(self, timeout: float) -> int:
        code = self.popen.wait(timeout)
        self._log.close()
        return code

    def alive(self) -> bool:
        return self.popen.poll() is None

    def output(self) -> str:
        """Everything the process wrote so far (also after it exited)."""
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")


def start(args: Sequence[str], settings: Settings, log_dir: Path, name: str, **env: str) -> Proc:
    log_dir.mkdir(parents=True, exist_ok=True)
    return Proc(args, settings_env(settings, **env), log_dir / f"{name}.log")


def wait_http(url: str, proc: Proc | None = None, timeout: float = 20.0) -> None:
    """Wait until `url` answers 200 (or fail, showing the process output)."""
    if proc is None:
        wait_ok(url, timeout=timeout)
    else:
        wait_ok(url, alive=proc.alive, log_path=proc.log_path, name=" ".join(proc.args), timeout=timeout)


def wait_for(predicate: object, timeout: float, interval: float = 0.05, what: str = "condition") -> None:
    """Poll `predicate()` until it is true, at most `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def run(
    args: Sequence[str], settings: Settings, timeout: float = 60.0, **env: str
) -> subprocess.CompletedProcess[str]:
    """`outbox-bridge ARGS` run to its end as a user runs it (stdout a pipe, not a terminal), with
    `settings` in its environment."""
    return subprocess.run(
        [str(BIN), *args],
        env=settings_env(settings, **env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
