"""The dashboard's schedules page: every schedule with its slots, next slot, last slot fired and pause; an add
form checked as `outbox-bridge schedules add` checks its options (a refusal says why on the page, keeps what
was typed and writes nothing); pause, resume and remove of a schedule and of a kind, each recorded with the
operator token's `sub`. A visitor who is no operator sees and changes nothing."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from httpx import Response
from sqlalchemy import Engine

from outbox_bridge.api.app import create_app
from outbox_bridge.api.auth import issue_token
from outbox_bridge.core.clock import FakeClock
from outbox_bridge.core.recurrence import CatchUp, Recurrence
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, pausing, schedules
from outbox_bridge.jobstore.priorities import Priority
from outbox_bridge.jobstore.schema import kind_actions, paused_kinds, schedule_actions
from outbox_bridge.jobstore.schema import schedules as schedule_rows
from tests.support.cli import rows
from tests.support.dashboard import flash_of
from tests.support.store import new_job

OPERATOR = "olga"
OWN = "http://testserver"
EXPORT = '{"rows": 10, "chunk": 5}'
CRON = {"cron": "0 9 * * 1-5", "timezone": "Europe/Berlin"}


@pytest.fixture
def client(settings: Settings, engine: Engine, clock: FakeClock) -> Iterator[TestClient]:
    with TestClient(create_app(settings), follow_redirects=False) as test_client:
        yield test_client


def bearer(settings: Settings, *, operator: bool = True) -> dict[str, str]:
    token = issue_token(settings.auth_secret, tenant="ops", user=OPERATOR, operator=operator)
    return {"Authorization": f"Bearer {token}"}


def add_schedule(engine: Engine, clock: FakeClock, name: str, recurrence: Recurrence) -> None:
    db.transact(
        engine, schedules.add, tenant="acme", name=name, kind="export", payload={"rows": 10, "chunk": 5},
        priority=Priority.NORMAL, recurrence=recurrence, catch_up=CatchUp.LATEST, now=clock.now(),
        actor="pat",
    )  # fmt: skip


def form(**fields: str) -> dict[str, str]:
    """An add form as the page posts it: every field, the ones not named left empty."""
    blank = dict.fromkeys(("cron", "timezone", "every", "priority", "catch_up"), "")
    return blank | {"tenant": "acme", "name": "nightly", "kind": "export", "payload": EXPORT} | fields


def flash(answer: Response) -> str:
    return flash_of(answer)


def row_of(page: str, attribute: str, value: str) -> str:
    found = re.search(rf'<tr {attribute}="{re.escape(value)}"[^>]*>(.*?)</tr>', page, re.S)
    assert found is not None, page
    return " ".join(re.sub(r"<[^>]+>", " ", found.group(1)).split())


def actions(engine: Engine) -> list[tuple[str, str, str]]:
    return [(r["name"], r["action"], r["actor"]) for r in rows(engine, schedule_actions)]


def test_the_page_lists_every_schedule_and_the_kinds_with_their_pauses(
    client: TestClient, settings: Settings, engine: Engine, clock: FakeClock
) -> None:
    add_schedule(
        engine, clock, "nightly", Recurrence.of(cron="0 2 * * *", timezone="Asia/Tokyo", every_seconds=None)
    )
    add_schedule(engine, clock, "tick", Recurrence.of(cron=None, timezone=None, every_seconds=60))
    db.transact(engine, schedules.pause, "acme", "tick", clock.now(), actor="pat")
    new_job(engine, "e-1", kind="export", payload={"rows": 10, "chunk": 5})
    db.transact(engine, pausing.pause, "export", clock.now(), actor="pat", note="upstream down")
    clock.advance(120)

    page = client.get("/ui/schedules", headers=bearer(settings))

    assert page.status_code == 200
    assert re.findall(r'<tr data-schedule="([^"]+)"', page.text) == ["acme/nightly", "acme/tick"]
    nightly = row_of(page.text, "data-schedule", "acme/nightly")
    assert "cron 0 2 * * * (Asia/Tokyo)" in nightly and "latest" in nightly and "never" in nightly
    assert "Pause" in nightly and "Resume" not in nightly
    tick = row_of(page.text, "data-schedule", "acme/tick")
    assert "every 1m" in tick and "by pat since 2m ago" in tick and "Resume" in tick
    export = row_of(page.text, "data-kind", "export")
    assert "1" in export.split() and "paused since 2m ago by pat" in export and "upstream down" in export
    assert "Resume" in export
    assert "paused" not in row_of(page.text, "data-kind", "notify")
    assert re.findall(r'<tr data-kind="([^"]+)"', page.text) == sorted(settings.allowed_kinds or ())
    assert 'href="/ui/schedules"' in client.get("/ui", headers=bearer(settings)).text


def test_a_cron_schedule_added_on_the_page_keeps_its_time_zone_and_is_recorded_with_the_operator(
    client: TestClient, settings: Settings, engine: Engine
) -> None:
    answer = client.post("/ui/schedules", headers=bearer(settings), data=form(**CRON, catch_up="none"))

    assert answer.status_code == 303 and answer.headers["location"] == "/ui/schedules"
    assert flash(answer).startswith("ok:Schedule acme/nightly added: cron 0 9 * * 1-5 (Europe/Berlin)")
    (stored,) = rows(engine, schedule_rows)
    assert (stored["cron"], stored["timezone"], stored["every_seconds"], stored["catch_up"]) == (
        "0 9 * * 1-5",
        "Europe/Berlin",
        None,
        "none",
    )
    assert (stored["kind"], json.loads(stored["payload"]), stored["created_by"]) == (
        "export",
        {"rows": 10, "chunk": 5},
        OPERATOR,
    )
    assert actions(engine) == [("nightly", "add", OPERATOR)]


def test_an_interval_schedule_added_on_the_page_takes_its_priority(
    client: TestClient, settings: Settings, engine: Engine
) -> None:
    answer = client.post("/ui/schedules", headers=bearer(settings), data=form(every="10m", priority="low"))

    assert answer.status_code == 303, answer.text
    (stored,) = rows(engine, schedule_rows)
    assert (stored["every_seconds"], stored["cron"], stored["timezone"], stored["catch_up"]) == (
        600,
        None,
        None,
        "latest",
    )
    assert stored["priority"] == int(Priority.LOW)
    listed = client.get("/ui/schedules", headers=bearer(settings)).text
    assert "every 10m" in row_of(listed, "data-schedule", "acme/nightly")


def test_a_concurrency_key_typed_on_the_page_is_kept_and_shown(
    client: TestClient, settings: Settings, engine: Engine
) -> None:
    answer = client.post(
        "/ui/schedules", headers=bearer(settings), data=form(every="1h", concurrency_key="k7")
    )

    assert answer.status_code == 303, answer.text
    (stored,) = rows(engine, schedule_rows)
    assert stored["concurrency_key"] == "k7"
    listed = client.get("/ui/schedules", headers=bearer(settings)).text
    assert "k7" in row_of(listed, "data-schedule", "acme/nightly")
    refused = client.post("/ui/schedules", headers=bearer(settings), data=form(name="b", every="1h",
                          concurrency_key="a\nb"))  # fmt: skip
    assert refused.status_code == 400 and "Concurrency key" in refused.text
    assert len(rows(engine, schedule_rows)) == 1


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        pytest.param(
            {"cron": "0 25 * * *"}, "Cron: &#39;0 25 * * *&#39; is not a cron expression", id="bad-cron"
        ),
        pytest.param(
            {"cron": "0 9 * * *", "timezone": "Europe/Atlantis"}, "not a time zone", id="unknown-time-zone"
        ),
        pytest.param({"every": "1m", "payload": "{rows: 1}"}, "Payload is not JSON", id="bad-json"),
        pytest.param(
            {"every": "1m", "payload": '{"rows": 2000000, "chunk": 5}'},
            "not a valid export payload",
            id="payload",
        ),
        pytest.param({"every": "1m", "kind": "resize"}, "accepts these kinds", id="unknown-kind"),
        pytest.param({"every": "1m", **CRON}, "not both", id="cron-and-every"),
        pytest.param({}, "not both and not neither", id="neither"),
        pytest.param({"every": "soon"}, "Every &#39;soon&#39; is not a duration", id="bad-every"),
        pytest.param({"every": "1m", "tenant": "a b"}, "Tenant must be", id="bad-tenant"),
        pytest.param(
            {"every": "1m", "catch_up": "all"}, "Catch-up must be latest or none", id="bad-catch-up"
        ),
    ],
)
def test_add_refuses_on_the_page_what_the_command_refuses_and_writes_nothing(
    client: TestClient, settings: Settings, engine: Engine, fields: dict[str, str], says: str
) -> None:
    posted = form(**fields)
    answer = client.post("/ui/schedules", headers=bearer(settings), data=posted)

    assert answer.status_code == 400
    error = re.search(r'<p class="error-text" id="add-error"[^>]*>(.*?)</p>', answer.text, re.S)
    assert error is not None and error.group(1).startswith("Not added: ") and says in error.group(1)
    assert f'value="{posted["name"]}"' in answer.text, "what was typed stays in the form"
    assert rows(engine, schedule_rows) == [] and rows(engine, schedule_actions) == []


def test_a_kind_the_deployment_does_not_accept_is_refused(
    settings_factory: object, engine: Engine, clock: FakeClock
) -> None:
    settings = settings_factory(allowed_kinds=("export", "notify"))  # type: ignore[operator]
    with TestClient(create_app(settings), follow_redirects=False) as client:
        answer = client.post(
            "/ui/schedules", headers=bearer(settings), data=form(every="1m", kind="document")
        )

    assert answer.status_code == 400
    assert "This deployment accepts these kinds: export, notify" in answer.text
    assert rows(engine, schedule_rows) == []


def test_a_second_schedule_of_the_same_name_is_refused_and_the_first_stays(
    client: TestClient, settings: Settings, engine: Engine
) -> None:
    assert client.post("/ui/schedules", headers=bearer(settings), data=form(every="1h")).status_code == 303
    again = client.post("/ui/schedules", headers=bearer(settings), data=form(every="5m"))

    assert again.status_code == 400
    assert "tenant acme already has a schedule named nightly" in again.text
    assert [r["every_seconds"] for r in rows(engine, schedule_rows)] == [3600]
    assert actions(engine) == [("nightly", "add", OPERATOR)]


def test_pause_resume_and_remove_from_the_page_are_recorded_with_the_operators_sub(
    client: TestClient, settings: Settings, engine: Engine, clock: FakeClock
) -> None:
    add_schedule(engine, clock, "nightly", Recurrence.of(cron=None, timezone=None, every_seconds=3600))
    path = "/ui/schedules/acme/nightly"

    def act(action: str) -> str:
        answer = client.post(f"{path}/{action}", headers=bearer(settings), data={"back": "/ui/schedules"})
        assert answer.status_code == 303 and answer.headers["location"] == "/ui/schedules"
        return flash(answer)

    assert act("pause") == "ok:Schedule acme/nightly paused."
    assert schedules_paused_by(engine) == OPERATOR
    assert "by olga since" in row_of(
        client.get("/ui/schedules", headers=bearer(settings)).text, "data-schedule", "acme/nightly"
    )
    assert act("pause") == "error:Not paused: schedule acme/nightly is paused already."
    assert act("resume") == "ok:Schedule acme/nightly resumed."
    assert act("resume") == "error:Not resumed: schedule acme/nightly is not paused."
    assert act("remove") == "ok:Schedule acme/nightly removed."
    assert act("pause") == "error:Not paused: tenant acme has no schedule named nightly."

    assert rows(engine, schedule_rows) == []
    assert actions(engine) == [
        ("nightly", "add", "pat"), ("nightly", "pause", OPERATOR), ("nightly", "resume", OPERATOR),
        ("nightly", "remove", OPERATOR),
    ]  # fmt: skip


def schedules_paused_by(engine: Engine) -> str | None:
    (stored,) = rows(engine, schedule_rows)
    return stored["paused_by"]


def test_a_kind_paused_and_resumed_from_the_page_is_recorded_and_shown(
    client: TestClient, settings: Settings, engine: Engine, clock: FakeClock
) -> None:
    new_job(engine, "e-1", kind="export", payload={"rows": 10, "chunk": 5})

    paused = client.post("/ui/kinds/export/pause", headers=bearer(settings), data={"note": "upstream down"})
    assert paused.status_code == 303 and flash(paused).startswith("ok:Kind export paused")
    page = client.get("/ui/schedules", headers=bearer(settings)).text
    assert "paused since 0s ago by olga" in row_of(page, "data-kind", "export")
    again = client.post("/ui/kinds/export/pause", headers=bearer(settings), data={})
    assert flash(again) == "error:Not paused: kind export is paused already."
    resumed = client.post("/ui/kinds/export/resume", headers=bearer(settings), data={})
    assert flash(resumed).startswith("ok:Kind export resumed: ")
    assert flash(client.post("/ui/kinds/export/resume", headers=bearer(settings), data={})).startswith(
        "error:Not resumed"
    )
    unknown = client.post("/ui/kinds/resize/pause", headers=bearer(settings), data={})
    assert flash(unknown) == "error:Not paused: this deployment runs no kind 'resize'."

    assert rows(engine, paused_kinds) == []
    assert [(r["kind"], r["action"], r["actor"], r["note"]) for r in rows(engine, kind_actions)] == [
        ("export", "pause", OPERATOR, "upstream down"),
        ("export", "resume", OPERATOR, None),
    ]
    assert "paused" not in row_of(
        client.get("/ui/schedules", headers=bearer(settings)).text, "data-kind", "export"
    )


def test_a_visitor_who_is_no_operator_sees_and_changes_nothing(
    client: TestClient, settings: Settings, engine: Engine, clock: FakeClock
) -> None:
    add_schedule(engine, clock, "nightly", Recurrence.of(cron=None, timezone=None, every_seconds=3600))
    user = bearer(settings, operator=False)

    assert client.get("/ui/schedules", headers=user).status_code == 404
    assert client.get("/ui/schedules").status_code == 401
    assert 'href="/ui/schedules"' not in client.get("/ui/schedules", headers=user).text
    for path, data in [
        ("/ui/schedules", form(every="1m", name="other")),
        ("/ui/schedules/acme/nightly/pause", {}),
        ("/ui/schedules/acme/nightly/remove", {}),
        ("/ui/kinds/export/pause", {}),
    ]:
        assert client.post(path, headers=user, data=data).status_code == 404
        assert client.post(path, data=data).status_code == 401

    assert [(r["name"], r["paused_at"]) for r in rows(engine, schedule_rows)] == [("nightly", None)]
    assert actions(engine) == [("nightly", "add", "pat")]
    assert rows(engine, paused_kinds) == [] and rows(engine, kind_actions) == []


def test_a_form_under_the_session_acts_only_with_the_pages_csrf_token(
    client: TestClient, settings: Settings, engine: Engine
) -> None:
    token = issue_token(settings.auth_secret, tenant="ops", user=OPERATOR, operator=True)
    assert client.post("/ui/login", data={"token": token}, headers={"Origin": OWN}).status_code == 303
    page = client.get("/ui/schedules")
    csrf = re.search(r'name="csrf" value="([0-9a-f]{64})"', page.text)
    assert csrf is not None

    forged = client.post("/ui/kinds/export/pause", data={"note": "x"}, headers={"Origin": OWN})
    assert forged.status_code == 403 and rows(engine, paused_kinds) == []
    posted = client.post("/ui/schedules", data=form(every="1m", csrf=csrf.group(1)), headers={"Origin": OWN})
    assert posted.status_code == 303 and actions(engine) == [("nightly", "add", OPERATOR)]
