"""A TCP relay between the benchmarked processes and the broker that can cut the line for a while.

The broker is shared, so the benchmark never stops it; it stages an outage here instead. During an outage
every open connection is reset, and new ones are refused (the port stops listening, as a stopped broker's
does) or, in the "reset" style, accepted and reset at once (as behind a load balancer whose broker is
gone); afterwards connections go through again."""

from __future__ import annotations

import socket
import struct
import threading
from dataclasses import dataclass, field

CHUNK = 65536
STYLES = ("refuse", "reset")


def _close(sock: socket.socket, *, reset: bool = False) -> None:
    """Close `sock`, waking any thread blocked on it; with `reset`, the peer sees an RST (linger 0)."""
    try:
        if reset:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


@dataclass
class ProxyCounts:
    connections: int = 0
    refused: int = 0
    cut: int = 0


@dataclass
class BrokerProxy:
    """Forwards 127.0.0.1:<port> to `target`. Use as a context manager: it closes every socket it opened."""

    target: tuple[str, int]
    style: str = "refuse"
    counts: ProxyCounts = field(default_factory=ProxyCounts)

    def __post_init__(self) -> None:
        if self.style not in STYLES:
            raise ValueError(f"style is one of {STYLES}, not {self.style!r}")
        self._listener: socket.socket | None = self._listen(0)
        self.port = int(self._listener.getsockname()[1])
        self._down = threading.Event()
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []

    def url_for(self, broker_url: str) -> str:
        """`broker_url` with its host and port replaced by this proxy's."""
        from urllib.parse import urlsplit, urlunsplit

        parts = urlsplit(broker_url)
        userinfo = parts.netloc.rpartition("@")[0]
        netloc = f"{userinfo}@127.0.0.1:{self.port}" if userinfo else f"127.0.0.1:{self.port}"
        return urlunsplit(parts._replace(netloc=netloc))

    @staticmethod
    def _listen(port: int) -> socket.socket:
        listener = socket.create_server(("127.0.0.1", port))
        listener.settimeout(0.2)
        return listener

    def start(self) -> BrokerProxy:
        assert self._listener is not None
        self._spawn(self._accept_loop, self._listener)
        return self

    def cut(self) -> None:
        """Begin an outage: reset every open connection and refuse new ones until `restore`."""
        self._down.set()
        if self.style == "refuse":
            self._stop_listening()
        with self._lock:
            doomed, self._open = self._open, set()
        self.counts.cut += len(doomed)
        for sock in doomed:
            _close(sock, reset=True)

    def restore(self) -> None:
        """End the outage: new connections go through to the broker again (on the same port)."""
        if self._listener is None and not self._closed.is_set():
            self._listener = self._listen(self.port)
            self._spawn(self._accept_loop, self._listener)
        self._down.clear()

    def _stop_listening(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            _close(listener)  # shutdown wakes the accept loop, which then ends

    def close(self) -> None:
        self._closed.set()
        self.cut()
        self._stop_listening()
        for thread in self._threads:
            thread.join(timeout=2)

    def __enter__(self) -> BrokerProxy:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _spawn(self, target: object, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)  # type: ignore[arg-type]
        thread.start()
        self._threads = [t for t in self._threads if t.is_alive()] + [thread]

    def _accept_loop(self, listener: socket.socket) -> None:
        while not self._closed.is_set():
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self._connect(client)

    def _connect(self, client: socket.socket) -> None:
        if self._down.is_set():
            self.counts.refused += 1
            _close(client, reset=True)
            return
        try:
            upstream = socket.create_connection(self.target, timeout=5)
        except OSError:
            self.counts.refused += 1
            _close(client, reset=True)
            return
        upstream.settimeout(None)
        client.settimeout(None)
        with self._lock:
            self._open.update((client, upstream))
        self.counts.connections += 1
        self._spawn(self._pump, client, upstream)
        self._spawn(self._pump, upstream, client)

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(CHUNK):
                sink.sendall(data)
        except OSError:
            pass
        with self._lock:
            ours = source in self._open
            self._open.discard(source)
            self._open.discard(sink)
        if ours:  # one side hung up: hang up the other (a cut already closed both)
            _close(source)
            _close(sink)
