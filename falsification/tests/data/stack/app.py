"""The staging stack's web app: a tiny WSGI app under waitress with one worker thread.

Each request to /work keeps the worker spinning on the CPU for --cpu-ms (a busy loop, not a sleep;
by the wall clock, so the capacity does not depend on what else the cores run, or with
``--clock thread`` by this thread's CPU time), then answers 200: the one worker is a FIFO queue
serving about 1000 / (cpu-ms + overhead) requests a second (85-96/s measured at 10 ms).

waitress queues what the worker has not taken yet. With its default
``channel_request_lookahead = 0`` it does not read a connection again while a request on it is
queued, so it never learns that the client has gone and runs the app for abandoned requests too
(the publication's FIFO that finishes abandoned work; measured: every abandoned request served).
``--lookahead 1`` lets waitress see a disconnect before it starts the request and skip it (the
reversal condition); measured, it skipped only some of them (README.md beside this file).

The request counter is the official prometheus_client's ``http_requests_total{handler, method,
code}``, counted when the app answers. Like any server's own counter it counts requests served,
not requests queued. /metrics is served by prometheus_client's own HTTP server on another port
and thread, so it answers while the worker is saturated (the busy loop gives up the GIL at the
interpreter's switch interval).

What the retry-debt alert needs from the app itself (the arrivals are counted by nginx, in front
of it), as a team would export them:

- ``http_request_queue_seconds`` (histogram): how long each request waited before the worker took
  it, from the ``X-Request-Start: t=<unix seconds>`` header nginx sets (the usual queue-time
  practice; ``t=`` in seconds, milliseconds or microseconds). Requests without it are not observed.
  nginx builds the upstream request once, so its retries of a request carry the first try's time:
  their wait counts from the first try, as X-Request-Start always counts from the edge.
- ``http_request_service_seconds`` (summary): the worker's time per request finished, so its
  ``_sum`` is the worker's busy time and ``_count`` the requests it finished. With one worker
  thread it is the FIFO's departure recursion: a request the worker finds already waiting (sent
  before the previous one ended) is charged from the previous one's end, so what waitress does on
  the worker between two requests counts as busy; one that arrives to an idle worker from when
  the worker takes it. It ends when waitress has written the response (the iterable's ``close``).
  With several threads each request is charged from when its thread takes it.
- ``app_ready`` (gauge): 1 once waitress listens.

    python app.py --listen "127.0.0.1:8001 127.0.0.1:8002" --metrics 127.0.0.1:9001
"""

import argparse
import logging
import sys
import time

from prometheus_client import Counter, Gauge, Histogram, Summary, start_http_server
from waitress import create_server

REQUESTS = Counter(
    "http_requests",
    "HTTP requests answered by the app, by handler, method and status code.",
    ["handler", "method", "code"],
)
QUEUE = Histogram(
    "http_request_queue_seconds",
    "Time a request waited before the worker took it, from nginx's X-Request-Start.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.75, 1.0, 1.5, 2.0,
             3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 60.0),
)
SERVICE = Summary(
    "http_request_service_seconds",
    "Worker time per request finished (sum: the worker's busy seconds; count: requests finished).",
)
READY = Gauge("app_ready", "1 once the server listens.")


def request_start(value):
    """Unix seconds from an X-Request-Start value (``t=1733400000.123``, or in ms or us)."""
    try:
        t = float(value.strip().removeprefix("t="))
    except (AttributeError, ValueError):
        return None
    if t > 1e14:  # microseconds
        return t / 1e6
    if t > 1e11:  # milliseconds
        return t / 1e3
    return t if t > 0 else None


class Worker:
    """What the one worker did last, for the service-time recursion (its own thread only)."""

    def __init__(self, fifo):
        self.fifo = fifo
        self.last_end = 0.0


class Timed:
    """A response body that observes its request's service time when waitress closes it."""

    def __init__(self, body, worker, begin):
        self.body = body
        self.worker = worker
        self.begin = begin

    def __iter__(self):
        return iter(self.body)

    def close(self):
        end = time.time()
        SERVICE.observe(max(end - self.begin, 0.0))
        self.worker.last_end = end


def burn(seconds, clock):
    """Spin on the CPU until `clock` has advanced by `seconds`."""
    end = clock() + seconds
    while clock() < end:
        pass


def make_app(cpu_s, clock, worker):
    work = REQUESTS.labels(handler="/work", method="get", code="200")

    def app(environ, start_response):
        taken = time.time()
        sent = request_start(environ.get("HTTP_X_REQUEST_START"))
        if sent is not None:
            QUEUE.observe(max(taken - sent, 0.0))
        begin = taken
        if worker.fifo and sent is not None and sent < worker.last_end <= taken:
            # It was waiting when the previous request ended: the worker went straight on.
            begin = worker.last_end
        return Timed(respond(environ, start_response), worker, begin)

    def respond(environ, start_response):
        method = environ["REQUEST_METHOD"]
        if environ.get("PATH_INFO") != "/work":
            REQUESTS.labels(handler="other", method=method.lower(), code="404").inc()
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"not found\n"]
        burn(cpu_s, clock)
        if method == "GET":
            work.inc()
        else:
            REQUESTS.labels(handler="/work", method=method.lower(), code="200").inc()
        body = b"ok\n"
        start_response(
            "200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))]
        )
        return [body]

    return app


CLOCKS = {"wall": time.perf_counter, "thread": time.thread_time}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--listen", required=True, help='waitress listen: "HOST:PORT [HOST:PORT...]"')
    p.add_argument("--metrics", required=True, help="HOST:PORT of /metrics")
    p.add_argument("--cpu-ms", type=float, default=10.0, help="CPU time per request, ms")
    p.add_argument(
        "--clock",
        choices=["wall", "thread"],
        default="wall",
        help="what --cpu-ms counts: wall time spent spinning (a capacity that does not depend on "
        "what else the cores run), or this thread's CPU time",
    )
    p.add_argument("--threads", type=int, default=1, help="waitress worker threads")
    p.add_argument(
        "--lookahead",
        type=int,
        default=0,
        help="waitress channel_request_lookahead (0: abandoned work is served)",
    )
    p.add_argument(
        "--connection-limit",
        type=int,
        default=4000,
        help="waitress connection_limit: connections held (queued requests) before it stops accepting",
    )
    a = p.parse_args()
    host, _, port = a.metrics.rpartition(":")
    # The series exists (at 0) before the first request, so rate() sees the first ones.
    REQUESTS.labels(handler="/work", method="get", code="200")
    READY.set(0)
    start_http_server(int(port), addr=host)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    # One line per queued request under load otherwise.
    logging.getLogger("waitress.queue").setLevel(logging.ERROR)
    server = create_server(
        make_app(a.cpu_ms / 1000.0, CLOCKS[a.clock], Worker(fifo=a.threads == 1)),
        listen=a.listen,
        threads=a.threads,
        channel_request_lookahead=a.lookahead,
        connection_limit=a.connection_limit,
        backlog=2048,
        # select() stops at 1024 descriptors; poll() does not.
        asyncore_use_poll=True,
        ident="staging-app",
    )
    server.print_listen("Serving on http://{}:{}")
    READY.set(1)
    server.run()


if __name__ == "__main__":
    main()
