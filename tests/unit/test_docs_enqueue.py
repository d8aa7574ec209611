"""The `enqueue` examples README.md, docs/ and examples/ show run as written: every call of `enqueue`,
`<kind>.enqueue`, `enqueue_many` and `JobSpec` binds to the function's signature (no missing `owner`, no
option that does not exist), and a literal payload of a built-in kind fits its model."""

from __future__ import annotations

import ast
import inspect
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from outbox_bridge import enqueuing
from outbox_bridge.handlers.registry import BUILT_IN, KINDS
from outbox_bridge.kind_functions import KindFunction

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted(
    [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "docs" / "reference").glob("*.md")]
)
SOURCES = sorted((ROOT / "examples").rglob("*.py"))
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
CALLED = {"enqueue", "enqueue_many", "JobSpec"}


def programs() -> Iterator[tuple[str, str]]:
    """(where, source) of every Python code block of the pages and every example module that calls one."""
    for page in PAGES:
        text = page.read_text()
        for block in PYTHON_BLOCK.finditer(text):
            if any(f"{name}(" in block.group(1) for name in CALLED):
                line = text.count("\n", 0, block.start()) + 2
                yield f"{page.relative_to(ROOT)}:{line}", block.group(1)
    for source in SOURCES:
        text = source.read_text()
        if any(f"{name}(" in text for name in CALLED):
            yield str(source.relative_to(ROOT)), text


def calls() -> Iterator[tuple[str, ast.Call]]:
    for where, source in programs():
        for node in ast.walk(ast.parse(source, where)):
            if isinstance(node, ast.Call) and _name(node.func) in CALLED:
                yield f"{where} (line {node.lineno})", node


def _name(func: ast.expr) -> str | None:
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def signature_of(call: ast.Call) -> inspect.Signature:
    name = _name(call.func)
    if name == "enqueue" and isinstance(call.func, ast.Attribute):
        owner = call.func.value
        if not (isinstance(owner, ast.Name) and owner.id == "outbox_bridge"):  # a kind function's own
            return inspect.signature(KindFunction.enqueue).replace(
                parameters=list(inspect.signature(KindFunction.enqueue).parameters.values())[1:]
            )
    return inspect.signature({"enqueue": enqueuing.enqueue, "enqueue_many": enqueuing.enqueue_many,
                              "JobSpec": enqueuing.JobSpec}[name or ""])  # fmt: skip


EXAMPLES = list(calls())


def test_the_docs_and_examples_show_enqueue() -> None:
    assert {_name(call.func) for _, call in EXAMPLES} >= {"enqueue", "enqueue_many", "JobSpec"}


@pytest.mark.parametrize(("where", "call"), EXAMPLES, ids=[where for where, _ in EXAMPLES])
def test_every_enqueue_example_binds_to_its_signature(where: str, call: ast.Call) -> None:
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        return  # *args or **options: nothing to check by their names
    signature_of(call).bind(*call.args, **{k.arg: k.value for k in call.keywords if k.arg})


@pytest.mark.parametrize(("where", "call"), EXAMPLES, ids=[where for where, _ in EXAMPLES])
def test_every_literal_payload_of_a_built_in_kind_fits_the_kind(where: str, call: ast.Call) -> None:
    kind_at = {"enqueue": 1, "JobSpec": 0}.get(_name(call.func) or "")
    if kind_at is None or len(call.args) < kind_at + 2 or not isinstance(call.args[kind_at], ast.Constant):
        return
    kind = call.args[kind_at].value
    try:
        payload = ast.literal_eval(call.args[kind_at + 1])
    except ValueError:
        return  # a payload built from the example's own values
    if kind in BUILT_IN:
        KINDS[kind].parse(payload)
