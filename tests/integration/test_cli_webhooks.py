"""`outbox-bridge webhooks` as an operator runs it: `add` prints the id and the secret once and keeps the
secret sealed, `list` never shows it, `rotate` keeps the old secret signing for the grace, `deliveries`
lists the log newest first, `replay` makes a delivery pending again under its id, `remove` takes the
endpoint and its deliveries away. Each change is recorded with the OS user; each refusal is one line, exit
1, and writes nothing."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable

import pytest
from sqlalchemy import Engine
from typer.testing import CliRunner

from outbox_bridge.core import clock
from outbox_bridge.core.sealing import Sealer
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, fenced
from outbox_bridge.jobstore.schema import webhook_actions, webhook_deliveries, webhook_endpoints
from outbox_bridge.jobstore.webhook_deliveries import Attempted, RetryDecision, record_attempt
from outbox_bridge.jobstore.webhooks import DeliveryState, get_delivery
from tests.support.cli import Ran, done, invoke, refused, rows, runner
from tests.support.store import claimed, new_job

OPERATOR = "olga"


@pytest.fixture
def cli(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    """The command line run in this process, with the test's settings, as the OS user `OPERATOR`."""
    return runner(settings, monkeypatch, OPERATOR)


def run(cli: CliRunner, *args: str) -> Ran:
    return invoke(cli, "webhooks", *args)


def test_add_prints_the_secret_once_keeps_it_sealed_and_records_who(
    cli: CliRunner, settings: Settings, engine: Engine
) -> None:
    added = json.loads(
        done(run(cli, "add", "--tenant", "acme", "--url", "https://example.test/hook", "--json"))
    )
    secret = added["secret"]
    assert secret.startswith("whsec_") and len(base64.b64decode(secret.removeprefix("whsec_"))) == 32
    assert added["events"] == ["job.succeeded", "job.failed", "job.dead", "job.cancelled", "job.unknown"]
    (stored,) = rows(engine, webhook_endpoints)
    assert stored["id"] == added["id"] and stored["created_by"] == OPERATOR
    key = base64.b64decode(secret.removeprefix("whsec_"))
    sealed = str(stored["secret"])
    assert secret not in sealed and secret.removeprefix("whsec_") not in sealed
    assert Sealer.of(settings.auth_secret).open(sealed) == key
    assert [(a["action"], a["actor"]) for a in rows(engine, webhook_actions)] == [("add", OPERATOR)]

    listed = done(run(cli, "list", "--json"))
    assert json.loads(listed)["endpoints"][0]["id"] == added["id"]
    assert secret.removeprefix("whsec_") not in listed and 'secret"' not in listed.replace(
        "previous_secret", ""
    )

    text = done(
        run(
            cli, "add", "--tenant", "acme", "--url", "http://hooks.example.test:8080/x", "--event", "job.dead"
        )
    )
    assert "job.dead" in text and "whsec_" in text


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--url", "ftp://example.test/hook"], "only http:// and https://"),
        (["--url", "file:///etc/passwd"], "only http:// and https://"),
        (["--url", "javascript:alert(1)"], "only http:// and https://"),
        (["--url", "http:///no-host"], "names no host"),
        (["--url", "https://user:pw@example.test/"], "credentials"),
        (["--url", "https://example.test/a b"], "one line"),
        (["--url", "https://example.test/", "--event", "job.done"], "not one of"),
    ],
)
def test_add_refuses_what_is_not_an_http_endpoint_and_writes_nothing(
    cli: CliRunner, settings: Settings, engine: Engine, args: list[str], says: str
) -> None:
    said = refused(run(cli, "add", "--tenant", "acme", *args))
    assert says in said
    assert rows(engine, webhook_endpoints) == [] and rows(engine, webhook_actions) == []


REFUSALS = "set WEBHOOK_ALLOW_PRIVATE=1 to allow private targets"


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://127.0.0.1:8080/x", "127.0.0.1 is a loopback address"),
        ("http://2130706433/", "127.0.0.1 is a loopback address"),
        ("http://0x7f000001/", "127.0.0.1 is a loopback address"),
        ("http://0177.0.0.1/", "127.0.0.1 is a loopback address"),
        ("http://[::ffff:127.0.0.1]/", "::ffff:127.0.0.1 is a loopback address"),
        ("http://0.0.0.0/", "0.0.0.0 is an unspecified address"),
        ("http://169.254.169.254/latest/meta-data/", "169.254.169.254 is a link-local address"),
        ("https://10.0.0.8/hook", "10.0.0.8 is a private address"),
        ("https://[fd00::8]/hook", "fd00::8 is a private address"),
    ],
)
def test_add_refuses_a_private_destination_in_one_line_naming_the_rule(
    cli: CliRunner, engine: Engine, url: str, says: str
) -> None:
    said = refused(run(cli, "add", "--tenant", "acme", "--url", url))
    assert said == f"outbox-bridge: refused: {says}; {REFUSALS}"
    assert rows(engine, webhook_endpoints) == [] and rows(engine, webhook_actions) == []


def test_add_accepts_a_private_destination_where_the_deployment_allows_private_targets(
    settings_factory: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch, engine: Engine
) -> None:
    allowing = runner(settings_factory(webhook_allow_private=True), monkeypatch, OPERATOR)
    done(run(allowing, "add", "--tenant", "acme", "--url", "http://127.0.0.1:8080/x"))
    assert [e["url"] for e in rows(engine, webhook_endpoints)] == ["http://127.0.0.1:8080/x"]


def test_rotate_keeps_the_old_secret_signing_for_the_grace(
    cli: CliRunner, settings: Settings, engine: Engine
) -> None:
    added = json.loads(done(run(cli, "add", "--tenant", "acme", "--url", "https://e.test/", "--json")))
    before = clock.now()
    rotated = json.loads(done(run(cli, "rotate", added["id"], "--grace", "2h", "--json")))
    assert rotated["secret"] != added["secret"] and rotated["secret"].startswith("whsec_")
    (stored,) = rows(engine, webhook_endpoints)
    sealer = Sealer.of(settings.auth_secret)
    assert sealer.open(str(stored["previous_secret"])) == base64.b64decode(added["secret"][6:])
    assert sealer.open(str(stored["secret"])) == base64.b64decode(rotated["secret"][6:])
    assert before + 7200 <= float(stored["previous_secret_until"]) <= clock.now() + 7200
    assert [(a["action"], a["actor"]) for a in rows(engine, webhook_actions)] == [
        ("add", OPERATOR),
        ("rotate", OPERATOR),
    ]
    assert "no longer signs" in done(run(cli, "rotate", added["id"], "--grace", "0"))
    (stored,) = rows(engine, webhook_endpoints)
    assert stored["previous_secret"] is None and stored["previous_secret_until"] is None
    assert "no webhook endpoint" in refused(run(cli, "rotate", "nope"))
    assert "--grace" in refused(run(cli, "rotate", added["id"], "--grace", "soon"))


def test_deliveries_replay_and_remove(cli: CliRunner, settings: Settings, engine: Engine) -> None:
    added = json.loads(done(run(cli, "add", "--tenant", "acme", "--url", "https://e.test/", "--json")))
    held = claimed(engine, new_job(engine))
    db.transact(engine, fenced.complete, held.job_id, held.epoch, held.attempt_id, {}, clock.now())
    (pending,) = json.loads(done(run(cli, "deliveries", "--json")))["deliveries"]
    assert pending["state"] == "pending" and pending["job_id"] == held.job_id
    assert "still pending" in refused(run(cli, "replay", pending["id"]))

    delivery = db.read(engine, get_delivery, pending["id"])
    assert delivery is not None
    attempted = Attempted(at=clock.now(), status_code=200, latency_ms=12.5)
    decision = RetryDecision(DeliveryState.DELIVERED, delivery.next_attempt_at)
    assert db.transact(engine, record_attempt, delivery, attempted, decision)
    (shown,) = json.loads(done(run(cli, "deliveries", "--endpoint", added["id"], "--json")))["deliveries"]
    assert shown["state"] == "delivered" and shown["attempt_log"][0]["status_code"] == 200
    assert pending["id"] in done(run(cli, "deliveries"))

    assert "pending again" in done(run(cli, "replay", pending["id"]))
    again = db.read(engine, get_delivery, pending["id"])
    assert again is not None and again.state is DeliveryState.PENDING and again.replayed_at is not None
    assert "no webhook delivery" in refused(run(cli, "replay", "nope"))

    done(run(cli, "remove", added["id"]))
    assert rows(engine, webhook_endpoints) == [] and rows(engine, webhook_deliveries) == []
    actions = [(a["action"], a["actor"]) for a in rows(engine, webhook_actions)]
    assert actions == [("add", OPERATOR), ("replay", OPERATOR), ("remove", OPERATOR)]
    assert "no webhook endpoint" in refused(run(cli, "remove", added["id"]))
