"""Notifying the relays on the host when outbox rows are committed, instead of leaving them to poll.

A relay listens on a Unix datagram socket (its `NotifySocket`) in a directory beside the SQLite file. After a
write transaction that added outbox rows commits, `db.transact` sends to every socket there (`Notifier`):
one datagram carrying the earliest `available_at` among the rows it added, so a relay leases rows that are
due at once and sets a timer for rows that come due later (a retry after its backoff).

Notifying never blocks a writer and never fails it: a full socket buffer means the relay is awake already,
and a socket whose relay was killed refuses and is skipped. Relays still poll, rarely, for rows no
notification announces (written by a program that does not notify, or whose relay's lease ran out). A
PostgreSQL store's relays hear of rows by LISTEN/NOTIFY instead (`drivers.postgresql.listener`), which reaches
relays on every host.

Socket paths are limited to 108 bytes, so sockets are addressed through a descriptor of their directory
(`/proc/self/fd/N/name`): the directory may sit as deep as the database does. The directory's name
(`<db>-relays`) and the sockets' (`<role>-<pid>`) are what processes of earlier versions use too, so they
and this version notify each other.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import socket
import struct
import threading
import weakref
from pathlib import Path

log = logging.getLogger(__name__)

_MESSAGE = struct.Struct("!d")


def directory_for(database: Path) -> Path:
    """Where the relays of the SQLite database at `database` keep their notify sockets."""
    return database.with_name(f"{database.name}-relays")


class _Directory:
    """The notify sockets' directory, opened as a descriptor so sockets in it have short addresses."""

    def __init__(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)

    def address(self, name: str) -> str:
        return f"/proc/self/fd/{self.fd}/{name}"

    def close(self) -> None:
        os.close(self.fd)


_sender: socket.socket | None = None  # one unbound socket per process sends to every socket
_sender_lock = threading.Lock()


def _sending_socket() -> socket.socket:
    global _sender
    with _sender_lock:
        if _sender is None:
            _sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            _sender.setblocking(False)
            atexit.register(_sender.close)
        return _sender


class Notifier:
    """Notifies every socket in one directory. Thread-safe; the directory listing is read again only when
    the directory changes (a relay started or stopped)."""

    def __init__(self, directory: Path) -> None:
        self._path = directory
        self._directory: _Directory | None = None
        self._names: tuple[str, ...] = ()
        self._seen: int | None = None  # the directory's mtime when it was listed
        self._lock = threading.Lock()

    def notify(self, due: float) -> None:
        """Tell every listening relay that rows coming due at `due` were committed. Never raises."""
        try:
            directory, names = self._listening()
        except OSError:
            return  # no relay has ever listened here
        sender, message = _sending_socket(), _MESSAGE.pack(due)
        for name in names:
            with contextlib.suppress(OSError):  # full (it is awake anyway), or its relay is gone
                sender.sendto(message, directory.address(name))

    def _listening(self) -> tuple[_Directory, tuple[str, ...]]:
        changed = os.stat(self._path).st_mtime_ns
        with self._lock:
            if self._directory is None:
                self._directory = _Directory(self._path)
                weakref.finalize(self, self._directory.close)
            if changed != self._seen:
                self._names = tuple(os.listdir(self._directory.fd))
                self._seen = changed
            return self._directory, self._names


class NotifySocket:
    """One relay's socket in the notify sockets' directory. `fileno()` turns readable when a writer
    notified it."""

    def __init__(self, directory: _Directory, name: str, sock: socket.socket) -> None:
        self._directory = directory
        self._name = name
        self._socket = sock

    @classmethod
    def open(cls, path: Path, role: str = "relay") -> NotifySocket | None:
        """Listen in `path` (created if missing) as `role`; None when that is not possible (the process then
        polls)."""
        try:
            directory = _Directory(path)
        except OSError as exc:
            log.warning("no notify socket in %s (%s): polling instead", path, exc)
            return None
        name = f"{role}-{os.getpid()}"
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=directory.fd)
            sock.bind(directory.address(name))
            sock.setblocking(False)
        except OSError as exc:
            sock.close()
            directory.close()
            log.warning("no notify socket in %s (%s): polling instead", path, exc)
            return None
        _remove_stale(directory, keep=name)
        return cls(directory, name, sock)

    @property
    def name(self) -> str:
        return self._name

    def fileno(self) -> int:
        return self._socket.fileno()

    def take(self) -> float | None:
        """Read every notification waiting; the earliest due time they announced, or None when there was
        none."""
        earliest: float | None = None
        while True:
            try:
                data = self._socket.recv(64)
            except (BlockingIOError, InterruptedError):
                return earliest
            if len(data) != _MESSAGE.size:
                continue
            (due,) = _MESSAGE.unpack(data)
            earliest = due if earliest is None else min(earliest, due)

    def close(self) -> None:
        """Stop listening and remove the socket (writers stop notifying it)."""
        with contextlib.suppress(OSError):
            os.unlink(self._name, dir_fd=self._directory.fd)
        self._socket.close()
        self._directory.close()


def _remove_stale(directory: _Directory, *, keep: str) -> None:
    """Remove sockets nobody listens on any more (their relay was killed): connecting to one is refused."""
    for name in os.listdir(directory.fd):
        if name == keep:
            continue
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        try:
            probe.connect(directory.address(name))
        except ConnectionRefusedError:
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=directory.fd)
        except OSError:
            pass
        finally:
            probe.close()
