"""The shell blocks of README.md and docs/ run as written. Every ```sh block of a page runs, in the page's
order, in one shell (what one block exports, the next sees), in an empty directory of its own, as a reader
would type it: `outbox-bridge api`, `relay`, `consumer` and `worker` (which a reader starts in terminals of
their own) start in the background, the api on a free port in place of 8000, and a command that fails fails
the test, naming its block. A page that does not make its own store runs against a deployment started first,
as the quick start starts one.

A block that is not meant to run says why on the line above it: `<!-- not run: it builds an image -->`: it
installs or builds something, it needs a host the tests do not have (systemd, Docker, a second machine), or
its ids are placeholders for the reader's own. Every other block runs here."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import pika
import pytest

from outbox_bridge.broker import topology
from tests.conftest import make_settings
from tests.support.procs import free_port

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted(
    [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "docs" / "reference").glob("*.md")]
)
SHELL = re.compile(r"^\s*```(?:sh|bash|shell)\s*$")
FENCE = re.compile(r"^\s*```")
NOT_RUN = re.compile(r"<!--\s*not run:\s*(?P<why>[^>]*?)\s*-->")
SERVICE = re.compile(
    r"^(?P<lead>\s*(?:[A-Z_]+=\S+\s+)*)outbox-bridge\s+(?P<name>api|relay|consumer|worker)\b(?P<rest>.*)$"
)
FILE = re.compile(r"^#\s*(?P<path>[\w-]+(?:/[\w-]+)*\.(?:py|toml|ini|cfg|txt|yaml|yml|json|env))\s*\n")
PORT = re.compile(r"(?<=:)8000\b|(?<=--port )8000\b")
TIMEOUT = 120
# What a page's install block (not run) would give its processes, given here: the shop's entry point.
INSTALLED = {"docs/tutorial.md": {"OUTBOX_BRIDGE_KINDS": "shop.kinds"}}

pytestmark = [pytest.mark.databases("sqlite"), pytest.mark.broker]


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    text: str
    not_run: str | None  # why, when it is not meant to run
    # A file the reader is told to write (the block's first line names it), not commands to run.
    file: str | None = None

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> Iterator[Block]:
    """The page's shell blocks, with the reason given above each one that is not run, and its blocks of files
    the reader writes (a block whose first line is a comment naming the file: `# teamapp/kinds.py`)."""
    lines = page.read_text().splitlines()
    index = 0
    while index < len(lines):
        if FENCE.match(lines[index]):
            end = next(i for i in range(index + 1, len(lines)) if FENCE.match(lines[i]))
            text = textwrap.dedent("\n".join(lines[index + 1 : end]))
            above = next((lines[i] for i in range(index - 1, -1, -1) if lines[i].strip()), "")
            marked = NOT_RUN.search(above)
            why = marked and marked.group("why")
            if SHELL.match(lines[index]):
                yield Block(page, index + 1, text, why)
            elif named := FILE.match(text):
                yield Block(page, index + 1, text, why, file=named.group("path"))
            index = end
        index += 1


def script(page_blocks: list[Block], port: int) -> str:
    """One bash script that runs the blocks in order; services start in the background. A page that does not
    make its own store (`outbox-bridge db init`) runs against a deployment started first, as the quick start
    starts one: a store, the api, a relay and a consumer, and `TOKEN` for the tenant acme."""
    out = ["set -e", "trap 'echo \"the block at ${BLOCK} failed (exit $?)\" >&2' ERR"]
    if not any("outbox-bridge db init" in block.text for block in page_blocks if block.not_run is None):
        out += [
            "BLOCK='the deployment the page runs against'",
            "outbox-bridge db init >/dev/null",
            f"outbox-bridge api --port {port} >service-api.log 2>&1 &",
            "outbox-bridge relay >service-relay.log 2>&1 &",
            "outbox-bridge consumer --concurrency 4 >service-consumer.log 2>&1 &",
            f"wait_api {port} service-api.log",
            "export TOKEN=$(outbox-bridge token --tenant acme --user ana)",
        ]
    for block in page_blocks:
        if block.not_run is not None:
            continue
        out.append(f"BLOCK={block.where}")
        if block.file is not None:
            out += [
                f"mkdir -p $(dirname {block.file})",
                f"cat >{block.file} <<'END_OF_FILE'",
                block.text,
                "END_OF_FILE",
            ]
            continue
        text = PORT.sub(str(port), block.text.replace("\\\n", " "))
        for line in text.splitlines():
            service = SERVICE.match(line.split(" #")[0])
            if not service:
                out.append(line)
                continue
            lead, name, rest = service.group("lead", "name", "rest")
            if name == "api" and "--port" not in rest:
                rest += f" --port {port}"
            log = f"service-{len(out)}.log"
            if line.split(" #")[0].rstrip().endswith("&"):  # the page starts it in the background itself
                out.append(line)
            else:
                out.append(f"{lead}outbox-bridge {name}{rest} >{log} 2>&1 &")
            if name == "api":
                out.append(f"wait_api {port} {log}")
    out.append('echo "every block ran"')
    return "\n".join(out) + "\n"


PRELUDE = r"""
wait_api() {  # the api answers /healthz, or its log is shown
  for _ in $(seq 200); do
    curl -sf "http://127.0.0.1:$1/healthz" >/dev/null && return 0
    sleep 0.1
  done
  cat "$2" >&2 2>/dev/null; return 1
}
"""


def pages_that_run() -> list[Path]:
    """The pages with a shell block to run (on the others, each block says why it is not run)."""
    return [page for page in PAGES if any(b.not_run is None and b.file is None for b in blocks(page))]


@pytest.mark.parametrize("page", pages_that_run(), ids=lambda p: str(p.relative_to(ROOT)))
def test_the_page_s_shell_blocks_run_as_written(page: Path, tmp_path: Path, rabbitmq_url: str) -> None:
    page_blocks = list(blocks(page))
    port = free_port()
    suffix = uuid.uuid4().hex[:8]  # the broker is shared: the page's queues are its own
    names = {"exchange": f"jobs-{suffix}", "queue": f"jobs-{suffix}"}
    names |= {"dead_letter_exchange": f"jobs.dead-{suffix}", "dead_letter_queue": f"jobs.dead-{suffix}"}
    (tmp_path / ".venv").symlink_to(Path(sys.prefix))
    for shared in ("examples", "requirements"):
        (tmp_path / shared).symlink_to(ROOT / shared)
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("OUTBOX_BRIDGE_", "DATABASE_URL", "TEST_"))
    } | {
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "RABBITMQ_URL": rabbitmq_url,
        "AUTH_SECRET": "a-secret-for-the-docs-test-only-0123456789",
        "OUTBOX_BRIDGE_DEV": "1",
        "WEBHOOK_ALLOW_PRIVATE": "1",
        "HOME": str(tmp_path),
        "USER": os.environ.get("USER") or "reader",
        "PYTHONPATH": str(ROOT / "examples" / "shop"),
        **INSTALLED.get(page.relative_to(ROOT).as_posix(), {}),
        **{name.upper(): value for name, value in names.items()},
    }
    (tmp_path / "page.sh").write_text(PRELUDE + script(page_blocks, port))
    # Output to a file, not a pipe: a process the page starts in the background keeps what it inherits open.
    with open(tmp_path / "page.out", "wb") as out:
        child = subprocess.Popen(
            ["bash", "page.sh"], cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    try:
        child.wait(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        pass  # its output says where it stopped
    finally:
        _stop(child.pid)
        child.wait(timeout=10)
        _delete_queues(rabbitmq_url, names, page.read_text(), tmp_path)
    output = (tmp_path / "page.out").read_text(errors="replace")
    logs = "\n".join(
        f"--- {log.name}\n{log.read_text()[-2000:]}" for log in sorted(tmp_path.glob("service-*.log"))
    )
    assert child.returncode == 0 and "every block ran" in output, f"{page.name}:\n{output[-4000:]}\n{logs}"


def test_a_block_that_does_not_run_says_why() -> None:
    unexplained = [b.where for page in PAGES for b in blocks(page) if b.not_run is not None and not b.not_run]
    assert not unexplained, f"say why after `not run:`: {unexplained}"


def test_the_runner_finds_blocks_and_starts_services_in_the_background() -> None:
    page = ROOT / "docs" / "tutorial.md"
    made = script(list(blocks(page)), 8123)
    assert "outbox-bridge api --port 8123 >" in made and "wait_api 8123" in made
    assert "outbox-bridge relay >" in made and made.count(" &\n") >= 3


def _delete_queues(url: str, names: dict[str, str], text: str, tmp: Path) -> None:
    """The page's queues and exchanges, the named queues its `--queues` options name included."""
    named = {q.split("=")[0] for found in re.findall(r"--queues[ =](\S+)", text) for q in found.split(",")}
    with closing(pika.BlockingConnection(pika.URLParameters(url))) as connection:
        topology.delete(connection.channel(), make_settings(tmp, **names), named)


def _stop(pid: int) -> None:
    """The page's shell and everything it started (nothing of theirs is checked after the page ran)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
