"""A local stack of real `outbox-bridge` processes (api, relay, consumers or baseline workers), as the demo
and the benchmark run it: each process gets the settings as environment variables and a log file, and every
process the stack started is stopped when it closes (SIGTERM, then SIGKILL after a bound)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import httpx

from outbox_bridge.core import amqp_urls
from outbox_bridge.core.settings import Settings, environment_of


def settings_env(settings: Settings, **extra: str) -> dict[str, str]:
    """The environment that makes a child process load exactly `settings` (this one's, without a fault
    schedule), with `extra` on top."""
    inherited = {k: v for k, v in os.environ.items() if k != "OUTBOX_BRIDGE_FAULTS"}
    return environment_of(settings, inherited) | extra


def command() -> list[str]:
    """How to start `outbox-bridge`: the console script beside this interpreter, else `python -m`."""
    script = Path(sys.executable).parent / "outbox-bridge"
    if script.exists():
        return [str(script)]
    found = shutil.which("outbox-bridge")
    return [found] if found else [sys.executable, "-m", "outbox_bridge"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def broker_answers(url: str, timeout: float = 2.0) -> bool:
    """True when something accepts TCP connections at the host and port of a node RABBITMQ_URL lists."""
    from urllib.parse import urlparse

    for address in amqp_urls.split(url):
        parsed = urlparse(address)
        try:
            with socket.create_connection(
                (parsed.hostname or "localhost", parsed.port or 5672), timeout=timeout
            ):
                return True
        except OSError:
            continue
    return False


@dataclass
class Service:
    name: str
    args: list[str]
    log_path: Path
    popen: subprocess.Popen[bytes]
    extra_env: dict[str, str] = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def signal(self, sig: signal.Signals) -> None:
        if self.alive():
            os.kill(self.popen.pid, sig)


class Stack:
    """Processes started for one run. Use as a context manager so nothing outlives it."""

    def __init__(self, settings: Settings, log_dir: Path) -> None:
        self.settings = settings
        self.log_dir = log_dir
        self.services: dict[str, Service] = {}
        log_dir.mkdir(parents=True, exist_ok=True)

    def start(self, name: str, *args: str, **extra_env: str) -> Service:
        log_path = self.log_dir / f"{name}.log"
        log = open(log_path, "ab")  # the child keeps its own descriptor; ours is closed below
        try:
            popen = subprocess.Popen(
                [*command(), *args],
                env=settings_env(self.settings, **extra_env),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # Ctrl-C in the terminal reaches us, and we stop the children
            )
        finally:
            log.close()
        service = Service(name, list(args), log_path, popen, dict(extra_env))
        self.services[name] = service
        return service

    def restart(self, name: str) -> Service:
        old = self.services[name]
        return self.start(name, *old.args, **old.extra_env)

    def start_api(self, port: int, name: str = "api", workers: int = 1) -> Service:
        """`outbox-bridge api` on `port`, with `workers` processes (`--workers`), once it answers ready."""
        more = ["--workers", str(workers)] if workers > 1 else []
        service = self.start(name, "api", "--host", "127.0.0.1", "--port", str(port), *more)
        wait_ready(f"http://127.0.0.1:{port}/readyz", service)
        return service

    def stop(self, name: str, timeout: float = 30.0) -> int | None:
        """SIGTERM, wait up to `timeout`, then SIGKILL. Returns the exit code."""
        service = self.services[name]
        service.signal(signal.SIGTERM)
        try:
            return service.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            service.signal(signal.SIGKILL)
            return service.popen.wait(10)

    def kill(self, name: str) -> None:
        service = self.services[name]
        service.signal(signal.SIGKILL)
        service.popen.wait(10)

    def close(self, timeout: float = 30.0) -> None:
        for service in self.services.values():
            service.signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for service in self.services.values():
            try:
                service.popen.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                service.signal(signal.SIGKILL)
                service.popen.wait(10)

    def __enter__(self) -> Stack:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def wait_ready(url: str, service: Service | None = None, timeout: float = 30.0) -> None:
    """Wait until `url` answers 200; raise with the service's log tail if it dies or times out."""
    if service is None:
        wait_ok(url, timeout=timeout)
    else:
        wait_ok(url, alive=service.alive, log_path=service.log_path, name=service.name, timeout=timeout)


def wait_ok(
    url: str,
    *,
    alive: Callable[[], bool] | None = None,
    log_path: Path | None = None,
    name: str = "process",
    timeout: float = 30.0,
) -> None:
    """Wait until `url` answers 200; `RuntimeError` with the end of `log_path` if `alive()` turns false
    first or `timeout` passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if alive is not None and not alive():
            raise RuntimeError(f"{name} exited early:\n{_tail(log_path)}")
        try:
            if httpx.get(url, timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer within {timeout:.0f}s\n{_tail(log_path)}")


def _tail(path: Path | None, chars: int = 3000) -> str:
    if path is None:
        return ""
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return ""
