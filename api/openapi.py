"""The OpenAPI document: every route's errors as `application/problem+json` with the `Problem` schema, the
deployment's accepted kinds as an enum, and no framework 422 (validation failures are answered 400)."""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from outbox_bridge.api.problems import ALL_TYPES, MEDIA_TYPE
from outbox_bridge.api.schemas import Problem
from outbox_bridge.handlers.registry import KINDS

PROBLEM_REF = "#/components/schemas/Problem"

DESCRIPTIONS = {
    400: "The request is not valid: see `errors` (also a method this route does not take).",
    401: "No valid bearer token. The response carries `WWW-Authenticate: Bearer`.",
    403: "A signed result link that has expired (`result-link-expired`: read the job again for a fresh one) "
    "or that was not signed for this result (`result-link-invalid`).",
    404: "Not found. An unknown id and another tenant's id get the same answer.",
    409: "The Idempotency-Key was already used for a different request; `job_url` names that job "
    "(`batch_url` that batch, for `POST /batches`).",
    413: "The request body is over MAX_BODY_BYTES.",
    503: "The store is unavailable; nothing was written. Retry after `Retry-After` seconds.",
}
RETRY_AFTER = {
    "Retry-After": {"description": "Seconds to wait before retrying.", "schema": {"type": "integer"}}
}
WWW_AUTHENTICATE = {
    "WWW-Authenticate": {"description": "The bearer challenge.", "schema": {"type": "string"}}
}


def problems(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """`responses=` for a route that may answer these statuses with a problem (413 is added to every route:
    any request may carry an oversized body)."""
    answers: dict[int | str, dict[str, Any]] = {}
    for status in sorted({*statuses, 413}):
        answer: dict[str, Any] = {
            "description": DESCRIPTIONS[status],
            "content": {MEDIA_TYPE: {"schema": {"$ref": PROBLEM_REF}}},
        }
        if status == 401:
            answer["headers"] = WWW_AUTHENTICATE
        answers[status] = answer
    return answers


def install(app: FastAPI, accepted_kinds: Iterable[str]) -> None:
    """Replace the app's OpenAPI generator with one that documents problems as they are sent."""
    kinds = sorted(accepted_kinds)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = get_openapi(
                title=app.title,
                version=app.version,
                description=app.description,
                routes=app.routes,
            )
            _document_problems(document)
            _drop_framework_422(document)
            _enumerate_kinds(document, kinds)
            app.openapi_schema = document
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _document_problems(document: dict[str, Any]) -> None:
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    problem = Problem.model_json_schema(ref_template="#/components/schemas/{model}")
    for name, schema in problem.pop("$defs", {}).items():
        schemas[name] = schema
    problem["properties"]["type"]["examples"] = [t.uri for t in ALL_TYPES]
    schemas["Problem"] = problem
    for operation in _operations(document):
        answer = operation["responses"].get("503")
        if answer is not None:
            answer["headers"] = RETRY_AFTER


def _drop_framework_422(document: dict[str, Any]) -> None:
    for operation in _operations(document):
        operation["responses"].pop("422", None)
    schemas = document.get("components", {}).get("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)


def _enumerate_kinds(document: dict[str, Any], kinds: list[str]) -> None:
    """`JobCreate` as one schema per accepted kind (`JobCreate_<kind>`: that kind, and its payload's schema
    as `Payload_<kind>`), told apart by `kind`: a client generated from the document learns every payload."""
    schemas = document.get("components", {}).get("schemas", {})
    job_create = schemas.get("JobCreate")
    if job_create is None or not kinds:
        return
    variants = {}
    for name in kinds:
        payload = KINDS[name].schema.model_json_schema(ref_template="#/components/schemas/{model}")
        for nested, schema in payload.pop("$defs", {}).items():
            schemas.setdefault(nested, schema)
        schemas[f"Payload_{name}"] = payload
        variant = copy.deepcopy(job_create)
        variant["title"] = f"JobCreate_{name}"
        variant["properties"]["kind"] = {"type": "string", "const": name, "title": "Kind"}
        variant["properties"]["payload"] = {"$ref": f"#/components/schemas/Payload_{name}"}
        schemas[f"JobCreate_{name}"] = variant
        variants[name] = f"#/components/schemas/JobCreate_{name}"
    schemas["JobCreate"] = {
        "title": "JobCreate",
        "description": job_create.get("description", "A job to run."),
        "oneOf": [{"$ref": ref} for ref in variants.values()],
        "discriminator": {"propertyName": "kind", "mapping": variants},
    }


def _operations(document: dict[str, Any]) -> list[dict[str, Any]]:
    return [op for path in document.get("paths", {}).values() for op in path.values() if "responses" in op]
