"""Property-based: schemathesis drives every documented route with generated requests, valid and invalid,
and every answer must be a documented status with a body matching its documented schema. Never a 5xx."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.generation import GenerationMode
from schemathesis.specs.openapi import checks as openapi_checks
from sqlalchemy import Engine

from outbox_bridge.api.app import create_app
from outbox_bridge.api.auth import issue_token
from outbox_bridge.core.backoff import Backoff
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import claiming, db, fenced, intake, migrate
from tests.conftest import make_settings

EXAMPLES = 100
CHECKS = [
    schemathesis.checks.not_a_server_error,
    openapi_checks.status_code_conformance,
    openapi_checks.content_type_conformance,
    openapi_checks.response_headers_conformance,
    openapi_checks.response_schema_conformance,
]


def _seed(engine: Engine, app_settings: Settings) -> None:
    """A queued, a succeeded and a failed job, so listings return real views of each shape."""
    now = 1_700_000_000.0
    accepted = [
        db.transact(
            engine,
            intake.accept,
            tenant="acme",
            owner="alice",
            kind="noop",
            payload={"n": n},
            operation_key=f"seed-{n}",
            now=now + n,
            max_attempts=3,
            deadline_seconds=600 if n == 0 else None,
        )
        for n in range(3)
    ]
    for index, accepted_job in enumerate(accepted[1:]):
        claim = db.transact(engine, claiming.claim, accepted_job.job.id, "seed-worker", now + 10, 30.0).claim
        assert claim is not None
        if index == 0:
            db.transact(
                engine, fenced.complete, claim.job_id, claim.epoch, claim.attempt_id, {"ok": 1}, now + 11
            )
        else:
            db.transact(
                engine,
                fenced.fail,
                claim.job_id,
                claim.epoch,
                claim.attempt_id,
                code="bad_input",
                message="seeded failure",
                permanent=True,
                now=now + 11,
                backoff=Backoff(0.0, 0.0),
            )


@pytest.fixture
def app_settings(tmp_path: Path) -> Settings:
    return make_settings(tmp_path)


@pytest.fixture
def api_token(app_settings: Settings) -> str:
    return issue_token(app_settings.auth_secret, tenant="acme", user="alice")


@pytest.fixture
def api_schema(app_settings: Settings) -> Any:
    engine = db.make_engine(app_settings)
    migrate.init_schema(app_settings, engine)
    _seed(engine, app_settings)
    engine.dispose()
    schema = schemathesis.openapi.from_asgi("/openapi.json", create_app(app_settings))
    return schema.include(path_regex=r"^/(jobs|healthz|readyz|metrics)")


# Schemathesis's Python API (a Hypothesis strategy over every operation) rather than its lazy pytest fixture
# loader, which fails under pytest 9 ('Function' object has no attribute '_nodeid'); the checks are the same.
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=str)
def test_every_route_answers_with_a_documented_status_and_body(
    api_schema: Any, api_token: str, mode: GenerationMode
) -> None:
    @given(case=api_schema.as_strategy(mode))
    @settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    def answers_as_documented(case: Any) -> None:
        case.call_and_validate(headers={"Authorization": f"Bearer {api_token}"}, checks=CHECKS)

    answers_as_documented()
