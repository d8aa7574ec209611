"""A completion webhook receiver for the benchmark: on 127.0.0.1, in a process of its own (its work is not
counted as the sender's), it reads each POST whole and answers 204 at once, over kept connections. It prints
its port on the first line of its output, and serves until its input is closed (so it ends with the process
that started it, however that one ends).

    python -m outbox_bridge.bench.receiver
"""

from __future__ import annotations

import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class _NoContent(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as a receiver in production would
    disable_nagle_algorithm = True

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", "0")))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *_args: object) -> None:
        pass


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is for the benchmark, which ends this process
    server = ThreadingHTTPServer(("127.0.0.1", 0), _NoContent)
    server.daemon_threads = True
    print(server.server_address[1], flush=True)
    threading.Thread(target=_shut_when_input_ends, args=(server,), daemon=True).start()
    server.serve_forever()


def _shut_when_input_ends(server: ThreadingHTTPServer) -> None:
    sys.stdin.read()
    server.shutdown()


if __name__ == "__main__":
    main()
