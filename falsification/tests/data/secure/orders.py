"""The secure stack's orders app: a tiny WSGI app under waitress with one worker thread.

Behind nginx (TLS, client certificates, a bearer token: scripts/secure-stack.sh), it checks what
a load generator sends in a JSON POST and does the work of each request it accepts:

- ``POST /orders``: the body must come with ``Content-Type: application/json`` (parameters such as
  ``; charset=utf-8`` allowed) and parse as a JSON object with a key ``"sku"``; otherwise 400 with
  a one-line reason, at once. An accepted order keeps the worker spinning on the CPU for --cpu-ms
  (a busy loop by the wall clock, not a sleep), then answers 201 with a small JSON body.
- ``GET /work``: spins --cpu-ms, answers 200 (for GET cases).
- ``GET /stats``: ``{"created": N, "bad_request": M, "served": K}``, without spinning: orders
  created (201), requests answered 400, and every request answered on the two routes above
  (whatever the status: /stats itself and unknown paths are not counted). A test reads it before
  and after a run to assert that no request it sent was malformed. It is served by the same worker,
  in turn behind whatever is queued.

With one worker thread the app is a FIFO queue serving about 1000 / (cpu-ms + overhead) requests a
second. waitress's default ``channel_request_lookahead = 0`` stops it reading a connection while a
request from it is queued, so it never learns that the client (or nginx) has gone and runs the app
for abandoned requests too: the FIFO that finishes abandoned work, like the staging stack's app
(falsification/tests/data/stack/app.py).

    python orders.py --listen 127.0.0.1:8001 [--cpu-ms 10] [--threads 1]
"""

import argparse
import json
import logging
import sys
import threading
import time

from waitress import create_server

# The largest body read; a larger one is answered 400 unread.
MAX_BODY = 1 << 20


class Counts:
    """What /stats reports (locked: waitress may run more than one thread)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.created = 0
        self.bad_request = 0
        self.served = 0

    def add(self, code):
        with self.lock:
            self.served += 1
            if code == 201:
                self.created += 1
            elif code == 400:
                self.bad_request += 1

    def json(self):
        with self.lock:
            return {"created": self.created, "bad_request": self.bad_request, "served": self.served}


def burn(seconds):
    """Spin on the CPU until the wall clock has advanced by `seconds`."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def read_body(environ):
    """The request body, or None when it is larger than MAX_BODY."""
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    if length > MAX_BODY:
        return None
    stream = environ["wsgi.input"]
    # waitress has buffered the whole body (and de-chunked it): read what there is.
    body = stream.read(length) if length > 0 else stream.read(MAX_BODY + 1)
    return None if len(body) > MAX_BODY else body


def order_problem(environ):
    """Why a POST /orders is malformed (one line), or (None, the order) when it is not."""
    media = (environ.get("CONTENT_TYPE") or "").split(";", 1)[0].strip().lower()
    if media != "application/json":
        return f"content-type is {media or 'missing'!r}, not 'application/json'", None
    body = read_body(environ)
    if body is None:
        return f"body larger than {MAX_BODY} bytes", None
    if not body:
        return "empty body", None
    try:
        order = json.loads(body)
    except (UnicodeDecodeError, ValueError) as e:
        return f"body is not JSON: {str(e).splitlines()[0]}", None
    if not isinstance(order, dict):
        return f"body is a JSON {type(order).__name__}, not an object", None
    if "sku" not in order:
        return 'body has no key "sku"', None
    return None, order


def make_app(cpu_s, counts):
    def answer(start_response, code, reason, body, ctype="text/plain"):
        start_response(
            f"{code} {reason}", [("Content-Type", ctype), ("Content-Length", str(len(body)))]
        )
        return [body]

    def app(environ, start_response):
        method = environ["REQUEST_METHOD"]
        path = environ.get("PATH_INFO")
        if path == "/stats" and method == "GET":
            return answer(
                start_response, 200, "OK", json.dumps(counts.json()).encode() + b"\n",
                "application/json",
            )
        if path == "/orders":
            if method != "POST":
                counts.add(405)
                return answer(start_response, 405, "Method Not Allowed", b"POST only\n")
            problem, order = order_problem(environ)
            if problem is not None:
                counts.add(400)
                return answer(start_response, 400, "Bad Request", problem.encode() + b"\n")
            burn(cpu_s)
            with counts.lock:
                number = counts.created + 1
            body = json.dumps({"order": number, "sku": order["sku"], "status": "created"})
            counts.add(201)
            return answer(start_response, 201, "Created", body.encode() + b"\n", "application/json")
        if path == "/work":
            if method not in ("GET", "HEAD"):
                counts.add(405)
                return answer(start_response, 405, "Method Not Allowed", b"GET only\n")
            burn(cpu_s)
            counts.add(200)
            return answer(start_response, 200, "OK", b"ok\n")
        return answer(start_response, 404, "Not Found", b"not found\n")

    return app


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--listen", required=True, help='waitress listen: "HOST:PORT [HOST:PORT...]"')
    p.add_argument("--cpu-ms", type=float, default=10.0, help="CPU time per accepted request, ms")
    p.add_argument("--threads", type=int, default=1, help="waitress worker threads")
    p.add_argument(
        "--connection-limit",
        type=int,
        default=4000,
        help="waitress connection_limit: connections held (queued requests) before it stops accepting",
    )
    a = p.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    # One line per queued request under load otherwise.
    logging.getLogger("waitress.queue").setLevel(logging.ERROR)
    server = create_server(
        make_app(a.cpu_ms / 1000.0, Counts()),
        listen=a.listen,
        threads=a.threads,
        connection_limit=a.connection_limit,
        backlog=2048,
        # select() stops at 1024 descriptors; poll() does not.
        asyncore_use_poll=True,
        ident="orders-app",
    )
    server.print_listen("Serving on http://{}:{}")
    server.run()


if __name__ == "__main__":
    main()
