"""Which broker the demo runs on: use one that answers, start the local server only where it would answer
at the URL, else the baseline; and stop only a server the demo started. No server is started here: the
commands are recorded instead of run."""

from __future__ import annotations

import pytest

from outbox_bridge import demo_broker
from outbox_bridge.demo_broker import Action, Broker, decide

LOCAL = "amqp://guest:guest@127.0.0.1:5672/%2F"


@pytest.mark.parametrize(
    ("url", "answers", "installed", "action"),
    [
        (LOCAL, True, True, Action.USE),
        (LOCAL, True, False, Action.USE),
        ("amqp://guest:guest@broker.example:5672/%2F", True, False, Action.USE),
        (LOCAL, False, True, Action.START),
        ("amqp://guest:guest@localhost/%2F", False, True, Action.START),
        ("amqp://localhost:5672", False, True, Action.START),
        ("amqp://u:p@[::1]:5672/%2F", False, True, Action.START),
        ("amqp://u:p@127.0.0.2:5672/%2F", False, True, Action.START),
        (LOCAL, False, False, Action.BASELINE),
        # A server started here listens on 5672: it would never answer at another port.
        ("amqp://guest:guest@127.0.0.1:5673/%2F", False, True, Action.BASELINE),
        # A broker on another machine is not ours to start.
        ("amqp://guest:guest@broker.example:5672/%2F", False, True, Action.BASELINE),
        ("amqp://guest:guest@10.0.0.7:5672/%2F", False, True, Action.BASELINE),
    ],
)
def test_decide(url: str, answers: bool, installed: bool, action: Action) -> None:
    assert decide(url, answers=answers, server_installed=installed) is action


def test_the_url_is_shown_without_its_password() -> None:
    assert (
        demo_broker.shown("amqp://guest:s3cret@127.0.0.1:5672/%2F") == "amqp://guest:***@127.0.0.1:5672/%2F"
    )
    assert demo_broker.shown("amqp://127.0.0.1/%2F") == "amqp://127.0.0.1/%2F"


class Machine:
    """A stand-in for this machine: whether the broker answers, whether the server is installed, and the
    commands the demo ran (the server answers once `rabbitmq-server -detached` ran, if `boots`)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, answers: bool, installed: bool, boots: bool):
        self.up, self.boots = answers, boots
        self.ran: list[str] = []
        self.said: list[str] = []
        monkeypatch.setattr(demo_broker, "broker_answers", lambda url, timeout=2.0: self.up)
        monkeypatch.setattr(
            demo_broker.shutil, "which", lambda name: f"/usr/sbin/{name}" if installed else None
        )
        monkeypatch.setattr(demo_broker, "_run", self.run)
        monkeypatch.setattr(demo_broker.time, "sleep", lambda seconds: None)

    def run(self, command: list[str], timeout: float, say: object) -> bool:
        self.ran.append(" ".join(command))
        if command == ["rabbitmq-server", "-detached"]:
            self.up = self.boots
        return True

    def say(self, text: str) -> None:
        self.said.append(text)


def test_a_broker_that_answers_is_used_and_never_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    machine = Machine(monkeypatch, answers=True, installed=True, boots=True)
    broker = demo_broker.prepare(LOCAL, machine.say)
    demo_broker.stop_started(broker, machine.say)
    assert broker == Broker("rabbitmq")
    assert machine.ran == [] and machine.said == []


def test_the_local_server_is_started_when_none_answers_and_stopped_at_the_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    machine = Machine(monkeypatch, answers=False, installed=True, boots=True)
    broker = demo_broker.prepare(LOCAL, machine.say)
    assert broker.kind == "rabbitmq" and broker.started
    assert machine.ran == ["rabbitmq-server -detached"]
    assert "starting the local RabbitMQ (rabbitmq-server -detached)" in machine.said[0]
    demo_broker.stop_started(broker, machine.say)
    assert machine.ran == ["rabbitmq-server -detached", "rabbitmqctl stop"]


def test_a_server_that_does_not_come_up_leaves_the_demo_on_the_baseline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    machine = Machine(monkeypatch, answers=False, installed=True, boots=False)
    broker = demo_broker.prepare(LOCAL, machine.say, start_seconds=0.01)
    assert broker.kind == "none" and not broker.started
    assert "did not answer within" in " ".join(machine.said)
    assert "running the demo on the SQLite-only baseline" in machine.said[-1]


def test_without_a_server_to_start_the_demo_says_it_runs_on_the_baseline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    machine = Machine(monkeypatch, answers=False, installed=False, boots=True)
    broker = demo_broker.prepare("amqp://guest:pw@127.0.0.1:5672/%2F", machine.say)
    assert broker == Broker(
        "none",
        notes=[
            "no broker answers at amqp://guest:***@127.0.0.1:5672/%2F; running the demo on the "
            "SQLite-only baseline"
        ],
    )
    assert machine.ran == []
    assert "docker compose up -d rabbitmq" in machine.said[0]
