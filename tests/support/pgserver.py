"""A PostgreSQL server of a test's own: `initdb` into a directory under /tmp, `pg_ctl` to start, restart and
stop it, on a free port of 127.0.0.1 with trust authentication. A test that restarts its store's server
uses this one, so the server the other tests share is never disturbed.

As root the programs run as the `postgres` user (initdb refuses root); as anyone else, as that user."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from tests.support.procs import free_port

SERVER_USER = "postgres"
PG_CTL_SECONDS = 60


def bin_dir() -> Path | None:
    """Where `initdb` and `pg_ctl` are: on PATH, else the newest of Debian's /usr/lib/postgresql/N/bin."""
    found = shutil.which("pg_ctl")
    if found and shutil.which("initdb"):
        return Path(found).parent
    versions = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"),
        key=lambda path: int(path.parent.parent.name) if path.parent.parent.name.isdigit() else 0,
    )
    return versions[-1].parent if versions else None


def missing_requirement() -> str | None:
    """Why a server of a test's own cannot start here, or None."""
    if bin_dir() is None:
        return "PostgreSQL's server programs are missing (apt-get install postgresql)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(SERVER_USER)
        except KeyError:
            return f"running PostgreSQL as root needs a {SERVER_USER!r} user"
    return None


class LocalPostgres:
    """One server: its data, socket and log under a directory of its own, removed by `stop`."""

    def __init__(self) -> None:
        found = bin_dir()
        assert found is not None, missing_requirement()
        self.bin = found
        self.dir = Path(tempfile.mkdtemp(prefix="postgres-", dir="/tmp"))
        self.data = self.dir / "data"
        self.log = self.dir / "server.log"
        self.port = free_port()

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, program: str, *args: str) -> None:
        command = [str(self.bin / program), *args]
        if os.geteuid() == 0:
            command = ["runuser", "-u", SERVER_USER, "--", *command]
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=PG_CTL_SECONDS + 30, check=False
        )
        if done.returncode != 0:
            log = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise RuntimeError(f"{program} {' '.join(args)}: {done.stdout}{done.stderr}\n{log}")

    def _pg_ctl(self, action: str, *extra: str) -> None:
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={self.dir}"
            " -c max_connections=200"
        )
        self._run(
            "pg_ctl", action, "-D", str(self.data), "-l", str(self.log), "-w", "-t", str(PG_CTL_SECONDS),
            "-o", options, *extra,
        )  # fmt: skip

    def start(self) -> None:
        if os.geteuid() == 0:
            shutil.chown(self.dir, SERVER_USER, SERVER_USER)
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
        self._pg_ctl("start")

    def restart(self) -> tuple[float, float]:
        """Stop the server at once (`-m immediate`: no checkpoint, every connection cut, crash recovery at
        the start, as after a power loss of its host) and start it again. Returns when it stopped and when it
        answered again (epoch seconds)."""
        stopped = time.time()
        self._pg_ctl("restart", "-m", "immediate")
        return stopped, time.time()

    def stop(self) -> None:
        """Stop the server if it runs and remove its directory."""
        if (self.data / "postmaster.pid").exists():
            self._pg_ctl("stop", "-m", "immediate")
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> LocalPostgres:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
