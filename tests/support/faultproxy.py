"""A TCP proxy that tests can break on purpose, in front of one upstream address (e.g. RabbitMQ).

    with FaultProxy(("127.0.0.1", 5672)) as proxy:
        url = proxy.url_for("amqp://guest:guest@127.0.0.1:5672/%2F")
        proxy.refuse()      # stop listening: new connections are refused (the port stays bound, ours)
        proxy.listen()      # accept again, on the same port
        proxy.cut()         # reset every open connection, both ends
        proxy.pause("to_client")  # hold bytes flowing back to clients (e.g. publisher confirms)
        proxy.resume()

Everything runs on one selector thread, whatever the number of connections (at most `max_links` at once;
more are closed on accept). The control methods are synchronous: when they return, the proxy has done it.
"""

from __future__ import annotations

import errno
import queue
import selectors
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import urlsplit, urlunsplit

Direction = Literal["to_upstream", "to_client"]
DIRECTIONS: tuple[Direction, ...] = ("to_upstream", "to_client")
CHUNK = 65536
# Stop reading from one side while this much is waiting to be written to the other.
HIGH_WATER = 1 << 20
CONTROL_TIMEOUT = 10.0


@dataclass(eq=False)
class _Link:
    client: socket.socket
    upstream: socket.socket
    connected: bool = False
    # Bytes waiting to be written, by direction.
    pending: dict[str, bytearray] = field(
        default_factory=lambda: {"to_upstream": bytearray(), "to_client": bytearray()}
    )


class FaultProxy:
    """Forwards bytes both ways between clients and `upstream`, until told to refuse, cut or pause."""

    def __init__(
        self, upstream: tuple[str, int], *, host: str = "127.0.0.1", port: int = 0, max_links: int = 64
    ) -> None:
        self.upstream = upstream
        self.host = host
        self.max_links = max_links
        self._selector = selectors.DefaultSelector()
        self._listener: socket.socket | None = None
        # While not listening, the port stays bound to this socket (not listening: connections are refused),
        # so that no other process's socket takes it meanwhile and `listen` finds it in use.
        self._held: socket.socket | None = None
        self._links: set[_Link] = set()
        self._paused: set[str] = set()
        self._control: queue.Queue[tuple[Callable[[], object], threading.Event, list[object]]] = queue.Queue()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, ("wake", None))
        self._running = True
        self._failure: BaseException | None = None
        self.accepted = 0
        self._held = self._new_listener(port)
        self.port = int(self._held.getsockname()[1])
        self._thread = threading.Thread(target=self._loop, name="fault-proxy", daemon=True)

    # -- control (any thread) ------------------------------------------------------------------------------

    def start(self) -> FaultProxy:
        """Start the proxy thread, listening."""
        self._thread.start()
        self.listen()
        return self

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def url_for(self, url: str) -> str:
        """`url` with its host and port replaced by the proxy's."""
        parts = urlsplit(url)
        credentials = parts.netloc.rpartition("@")[0]
        netloc = f"{credentials}@{self.host}:{self.port}" if credentials else f"{self.host}:{self.port}"
        return urlunsplit(parts._replace(netloc=netloc))

    def listen(self) -> None:
        """Accept new connections (again), on the same port."""
        self._call(self._open_listener)

    def refuse(self) -> None:
        """Stop listening: new connections are refused. Open connections are left alone (see `cut`)."""
        self._call(self._close_listener)

    def cut(self) -> int:
        """Reset every open connection, both ends. Returns how many were cut."""
        return int(self._call(self._cut_all))  # type: ignore[call-overload]

    def pause(self, *directions: Direction) -> None:
        """Stop forwarding in `directions` (both when none given); bytes wait until `resume`."""
        self._call(lambda: self._paused.update(directions or DIRECTIONS))

    def resume(self, *directions: Direction) -> None:
        """Forward again in `directions` (both when none given)."""
        self._call(lambda: self._paused.difference_update(directions or DIRECTIONS))

    @property
    def links(self) -> int:
        """Connections open through the proxy right now."""
        return int(self._call(lambda: len(self._links)))  # type: ignore[call-overload]

    def close(self) -> None:
        """Cut everything, stop listening and stop the thread."""
        if self._thread.is_alive():
            self._call(self._shutdown)
            self._thread.join(timeout=CONTROL_TIMEOUT)
        else:  # never started, or died: nothing else touches the sockets now
            self._shutdown()
        self._release()
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()

    def _call(self, fn: Callable[[], object]) -> object:
        done = threading.Event()
        result: list[object] = []
        self._control.put((fn, done, result))
        self._wake_w.send(b"x")
        deadline = time.monotonic() + CONTROL_TIMEOUT
        while not done.wait(0.05):
            if not self._thread.is_alive():
                raise RuntimeError("the fault proxy's thread died") from self._failure
            if time.monotonic() > deadline:
                raise TimeoutError("fault proxy did not answer")
        return result[0] if result else None

    # -- the loop (proxy thread only) ----------------------------------------------------------------------

    def _new_listener(self, port: int) -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, port))
        return sock

    def _loop(self) -> None:
        try:
            while self._running:
                self._dispatch(self._selector.select(timeout=1.0))
        except Exception as exc:  # kept, so that the next control call fails with it rather than timing out
            self._failure = exc

    def _dispatch(self, ready: list[tuple[selectors.SelectorKey, int]]) -> None:
        """Handle one select batch. A control call early in the batch can close or replace a socket that a
        later entry of the same batch names (`refuse` closes the listener a pending "listen" entry was
        for; `cut` drops a link): such stale entries are skipped."""
        for key, events in ready:
            kind, link = key.data
            if kind == "wake":
                self._run_control()
            elif kind == "listen":
                if key.fileobj is self._listener:
                    self._accept()
            else:
                self._service(link, key.fileobj, events)  # type: ignore[arg-type]

    def _run_control(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except BlockingIOError:
            pass
        while not self._control.empty():
            fn, done, result = self._control.get_nowait()
            result.append(fn())
            for link in list(self._links):
                self._update_interest(link)
            done.set()

    def _open_listener(self) -> None:
        if self._listener is not None:
            return
        self._listener, self._held = self._held or self._new_listener(self.port), None
        self._listener.listen(64)
        self._listener.setblocking(False)
        self._selector.register(self._listener, selectors.EVENT_READ, ("listen", None))

    def _close_listener(self) -> None:
        if self._listener is not None:
            self._selector.unregister(self._listener)
            self._listener.close()
            self._listener = None
        if self._running and self._held is None:
            self._held = self._new_listener(self.port)

    def _release(self) -> None:
        if self._held is not None:
            self._held.close()
            self._held = None

    def _cut_all(self) -> int:
        links = list(self._links)
        for link in links:
            self._drop(link, reset=True)
        return len(links)

    def _shutdown(self) -> None:
        self._cut_all()
        self._running = False
        self._close_listener()
        self._release()

    def _accept(self) -> None:
        assert self._listener is not None
        try:
            client, _ = self._listener.accept()
        except BlockingIOError:
            return
        if len(self._links) >= self.max_links:
            client.close()
            return
        self.accepted += 1
        client.setblocking(False)
        upstream = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        upstream.setblocking(False)
        link = _Link(client, upstream)
        self._links.add(link)
        code = upstream.connect_ex(self.upstream)
        if code not in (0, errno.EINPROGRESS):
            self._drop(link, reset=True)
            return
        self._update_interest(link)

    def _service(self, link: _Link, sock: socket.socket, events: int) -> None:
        if link not in self._links:
            return
        if sock is link.upstream and not link.connected:
            if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) != 0:
                self._drop(link, reset=True)
                return
            link.connected = True
        try:
            if events & selectors.EVENT_READ:
                self._read(link, sock)
            if events & selectors.EVENT_WRITE and link in self._links:
                self._write(link, sock)
        except OSError:
            self._drop(link, reset=True)
            return
        if link in self._links:
            self._update_interest(link)

    def _read(self, link: _Link, sock: socket.socket) -> None:
        direction = "to_upstream" if sock is link.client else "to_client"
        data = sock.recv(CHUNK)
        if not data:  # the peer closed: close the other side once its bytes are written
            self._drop(link, reset=False)
            return
        link.pending[direction] += data

    def _write(self, link: _Link, sock: socket.socket) -> None:
        direction = "to_client" if sock is link.client else "to_upstream"
        buffer = link.pending[direction]
        if buffer and direction not in self._paused:
            sent = sock.send(buffer)
            del buffer[:sent]

    def _update_interest(self, link: _Link) -> None:
        """Watch each socket for what it can do now: read unless its direction is paused or backed up,
        write while bytes wait (and the direction is not paused); an upstream still connecting, for write."""
        if link not in self._links:
            return
        for sock, inbound, outbound in (
            (link.client, "to_upstream", "to_client"),
            (link.upstream, "to_client", "to_upstream"),
        ):
            if sock is link.upstream and not link.connected:
                self._watch(sock, link, selectors.EVENT_WRITE)
                continue
            events = 0
            if inbound not in self._paused and len(link.pending[inbound]) < HIGH_WATER:
                events |= selectors.EVENT_READ
            if outbound not in self._paused and link.pending[outbound]:
                events |= selectors.EVENT_WRITE
            self._watch(sock, link, events)

    def _watch(self, sock: socket.socket, link: _Link, events: int) -> None:
        registered = self._selector.get_map().get(sock)
        if events == 0:
            if registered is not None:
                self._selector.unregister(sock)
        elif registered is None:
            self._selector.register(sock, events, ("link", link))
        elif registered.events != events:
            self._selector.modify(sock, events, ("link", link))

    def _drop(self, link: _Link, *, reset: bool) -> None:
        self._links.discard(link)
        for sock in (link.client, link.upstream):
            self._watch(sock, link, 0)
            if reset:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            else:
                self._flush_best_effort(link, sock)
            sock.close()

    def _flush_best_effort(self, link: _Link, sock: socket.socket) -> None:
        direction = "to_client" if sock is link.client else "to_upstream"
        try:
            sock.setblocking(True)
            sock.settimeout(1.0)
            sock.sendall(link.pending[direction])
        except OSError:
            pass
