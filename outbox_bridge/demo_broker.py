"""Which broker `outbox-bridge demo` runs on, so that the demo runs its scenario on any machine.

A broker that answers at RABBITMQ_URL is used as it is, and never stopped. When none answers, the URL names
this machine at RabbitMQ's own port and `rabbitmq-server` is installed, the demo starts one
(`rabbitmq-server -detached`), waits for its port, and stops it again when the demo ends, so the machine is
left as the demo found it. Otherwise (or when that server does not come up) the demo runs the same scenario
on the SQLite-only baseline and says so, with how to get a broker."""

from __future__ import annotations

import ipaddress
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from urllib.parse import urlparse

from rich.markup import escape

from outbox_bridge.core import amqp_urls
from outbox_bridge.launch.stack import broker_answers

SERVER = "rabbitmq-server"
CONTROL = "rabbitmqctl"
# The port a `rabbitmq-server` started with its default configuration listens on.
SERVER_PORT = 5672
START_SECONDS = 60.0
STOP_SECONDS = 60.0

Say = Callable[[str], None]


class Action(Enum):
    USE = "use"  # a broker answers: run on it
    START = "start"  # none answers, and a local rabbitmq-server can be started for the URL
    BASELINE = "baseline"  # none answers and none can be started: the SQLite-only baseline


def is_local(url: str) -> bool:
    """True when the broker URL names this machine (localhost or a loopback address)."""
    host = urlparse(url).hostname or "localhost"
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def decide(url: str, *, answers: bool, server_installed: bool) -> Action:
    """What to do for the broker at `url` (one node or several): use it when it answers; start the local
    server when it would answer at one of the URL's nodes (this machine, RabbitMQ's port) and is installed;
    else fall back to the baseline."""
    if answers:
        return Action.USE
    if server_installed and any(_startable(address) for address in amqp_urls.split(url)):
        return Action.START
    return Action.BASELINE


def _startable(address: str) -> bool:
    return is_local(address) and (urlparse(address).port or SERVER_PORT) == SERVER_PORT


@dataclass
class Broker:
    """What the demo runs on: `kind` is `rabbitmq` or `none` (the baseline); `started` when the demo
    started the server itself and so stops it at the end; `notes` say what was done and why."""

    kind: str
    started: bool = False
    notes: list[str] = field(default_factory=list)


def shown(url: str) -> str:
    """The URL (each of its nodes') with its password hidden."""
    return ",".join(_shown(address) for address in amqp_urls.split(url))


def _shown(url: str) -> str:
    parsed = urlparse(url)
    if parsed.password is None:
        return url
    return parsed._replace(netloc=parsed.netloc.replace(f":{parsed.password}@", ":***@", 1)).geturl()


def prepare(url: str, say: Say, start_seconds: float = START_SECONDS) -> Broker:
    """The broker the demo can run on, starting the local server when `decide` says so."""
    action = decide(url, answers=broker_answers(url), server_installed=shutil.which(SERVER) is not None)
    if action is Action.USE:
        return Broker("rabbitmq")
    if action is Action.START:
        say(f"No broker answers at {shown(url)}: starting the local RabbitMQ ({SERVER} -detached)")
        if _start_server(url, say, start_seconds):
            note = f"started the local RabbitMQ ({SERVER} -detached); the demo stops it again at the end"
            say(note)
            return Broker("rabbitmq", started=True, notes=[note])
    note = f"no broker answers at {shown(url)}; running the demo on the SQLite-only baseline"
    say(
        f"[bold]{note}[/] (api + two `outbox-bridge worker` processes instead of relay + consumers).\n"
        "To run it on RabbitMQ: [bold]docker compose up -d rabbitmq[/] (compose needs an "
        "[bold]AUTH_SECRET[/], see README.md), or install [bold]rabbitmq-server[/], or point "
        "[bold]RABBITMQ_URL[/] at a running broker."
    )
    return Broker("none", notes=[note])


def stop_started(broker: Broker, say: Say) -> None:
    """Stop the server the demo started (`rabbitmqctl stop`); a broker it found running is left alone."""
    if not broker.started:
        return
    if _run([CONTROL, "stop"], STOP_SECONDS, say):
        say("Stopped the local RabbitMQ the demo had started.")
    else:
        say(f"The local RabbitMQ the demo started may still run: stop it with [bold]{CONTROL} stop[/].")


def _start_server(url: str, say: Say, seconds: float) -> bool:
    """Start the server and wait up to `seconds` for it to answer at `url`. False when it cannot be
    started or does not answer in time (then it is left to finish starting, and the user told)."""
    if not _run([SERVER, "-detached"], 30.0, say):
        return False
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            if broker_answers(url, timeout=1.0):
                return True
            time.sleep(1.0)
    except KeyboardInterrupt:
        _run([CONTROL, "stop"], STOP_SECONDS, say)
        raise
    say(
        f"RabbitMQ did not answer within {seconds:.0f} s; it may still be starting ({CONTROL} stop stops it)."
    )
    return False


def _run(command: list[str], timeout: float, say: Say) -> bool:
    """Run `command`; True when it succeeded, else say why and return False."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        say(escape(f"{' '.join(command)} failed: {exc}"))
        return False
    if done.returncode != 0:
        output = (done.stderr or done.stdout).strip().splitlines()[-3:]
        say(escape(f"{' '.join(command)} failed (exit {done.returncode}): {' / '.join(output)}"))
        return False
    return True
