"""nginx's request counter for Prometheus: stub_status read on every scrape, with the official
prometheus_client, under the metric names of NGINX's own nginx-prometheus-exporter (Debian's
prometheus-nginx-exporter), so queries written for one work with the other.

One difference, on purpose: stub_status counts every request nginx received, this exporter's own
reads of stub_status included (one a scrape, one a second at a 1 s scrape interval). Here
``nginx_http_requests_total`` leaves those reads out, so it counts the clients' requests alone;
``nginx_status_reads_total`` says how many were left out.

One addition: open-source nginx counts no upstream tries (stub_status has none), yet the tries are
what arrives at the app. With ``--access-log`` (a log whose last field is ``"$upstream_addr"``,
one address per try, comma separated) ``nginx_upstream_tries_total`` counts them, read from the
log's new lines at each scrape. A line is written when the client's request ends, after its
last try. The app's own counter cannot stand in for it: it counts what the app served, which in a
failed state is the app's capacity whatever arrives.

The same tries in the retry-debt kit's label convention (k8s/prometheus/README.md), when the log's
last four quoted fields are ``"$proxy_host" "$http_x_request_id" "$http_x_attempt"
"$upstream_addr"``: ``http_requests_total{job, attempt}``, one count per try, where ``job`` is the
upstream group the tries went to (nginx's ``$proxy_host``: scrape with ``honor_labels: true`` so
the series belong to the service, not to nginx) and ``attempt`` is the try's number among the
arrivals of its logical request at that group: the tries of the same ``x-request-id`` that came
before it, over the client's attempts and nginx's own tries (a request without an id: the client's
``x-attempt`` plus the try's index). So ``attempt="0"`` counts each logical request once, at its
first arrival, and every other try is a retry, whichever layer sent it: first attempts counted at
the outermost layer, ingress at the service, as the kit's README asks behind a retrying proxy (the
client's ``x-attempt`` alone would count nginx's retries of a first attempt as first attempts).
Counted when the line is written, so late by the request's time in nginx (at most its tries times
the try timeout).

    python nginx_exporter.py --status http://127.0.0.1:8081/stub_status --listen 127.0.0.1:9113 \
        [--access-log /var/log/nginx/tries.log]
"""

import argparse
import collections
import re
import threading
import urllib.request

from prometheus_client import REGISTRY, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

STATUS = re.compile(
    r"Active connections:\s*(\d+)\s*server accepts handled requests\s*(\d+)\s+(\d+)\s+(\d+)\s*"
    r"Reading:\s*(\d+)\s*Writing:\s*(\d+)\s*Waiting:\s*(\d+)"
)


QUOTED = re.compile(rb'"([^"]*)"')

# Request ids remembered for the attempt numbers: far more than the requests of a retry's
# lifetime at any rate the stack takes.
REMEMBERED = 100_000


def by_job_and_number(item):
    (job, attempt), _ = item
    return job, int(attempt)


class TriesLog:
    """Upstream tries from the access log's new lines, read on each scrape."""

    def __init__(self, path):
        self.path = path
        self.offset = 0
        self.partial = b""
        self.tries = 0
        # (job, attempt) -> tries, and (job, request id) -> tries seen, oldest first.
        self.by_attempt = collections.Counter()
        self.seen = collections.OrderedDict()
        self.lock = threading.Lock()

    def read(self):
        with self.lock:
            try:
                with open(self.path, "rb") as f:
                    size = f.seek(0, 2)
                    if size < self.offset:  # truncated or rotated: start over
                        self.offset, self.partial = 0, b""
                    f.seek(self.offset)
                    data = f.read()
                    self.offset += len(data)
            except FileNotFoundError:
                data = b""
            lines = (self.partial + data).split(b"\n")
            self.partial = lines.pop()
            for line in lines:
                self.count(line)
            return self.tries, dict(self.by_attempt)

    def count(self, line):
        fields = QUOTED.findall(line)
        if not fields:
            return
        # The last quoted field: "127.0.0.1:8001, 127.0.0.1:8001" ("-": no upstream).
        addrs = fields[-1].strip()
        if not addrs or addrs == b"-":
            return
        n = addrs.count(b",") + addrs.count(b" : ") + 1
        self.tries += n
        if len(fields) < 4:
            return
        job, request_id, attempt = (f.decode("ascii", "replace") for f in fields[-4:-1])
        try:
            # Bounded: a client's header does not make label values without end.
            first = min(max(int(attempt), 0), 99)
        except ValueError:  # "-": no x-attempt
            first = 0
        if request_id not in ("", "-"):
            key = (job, request_id)
            first = max(first, self.seen.pop(key, 0))
            self.seen[key] = first + n
            while len(self.seen) > REMEMBERED:
                self.seen.popitem(last=False)
        for i in range(n):
            self.by_attempt[(job, str(first + i))] += 1

    def collect(self):
        tries, by_attempt = self.read()
        yield CounterMetricFamily(
            "nginx_upstream_tries",
            "Tries nginx sent to its upstreams (the arrivals at the app), from the access log's "
            "$upstream_addr, counted when the client's request ends.",
            value=tries,
        )
        arrivals = CounterMetricFamily(
            "http_requests",
            "Requests arriving at the service (job: nginx's upstream group), one per nginx try, "
            "by attempt: the try's number among its request's (x-request-id) arrivals there.",
            labels=["job", "attempt"],
        )
        for (job, attempt), value in sorted(by_attempt.items(), key=by_job_and_number):
            arrivals.add_metric([job, attempt], value)
        yield arrivals


class StubStatus:
    """A collector that reads stub_status once per scrape."""

    def __init__(self, url, timeout_s):
        self.url = url
        self.timeout_s = timeout_s
        self.reads = 0
        self.lock = threading.Lock()

    def read(self):
        with self.lock:
            self.reads += 1
            reads = self.reads
        with urllib.request.urlopen(self.url, timeout=self.timeout_s) as r:
            text = r.read().decode("ascii", "replace")
        m = STATUS.search(text)
        if not m:
            raise ValueError(f"not a stub_status page: {text[:80]!r}")
        return [int(x) for x in m.groups()], reads

    def collect(self):
        up = GaugeMetricFamily("nginx_up", "Whether the last read of stub_status succeeded.")
        try:
            (active, accepts, handled, requests, reading, writing, waiting), reads = self.read()
        except Exception:  # noqa: BLE001 - any failure is nginx_up 0
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield CounterMetricFamily(
            "nginx_http_requests",
            "Client requests nginx has received (stub_status requests, less this exporter's "
            "own reads of stub_status).",
            value=max(requests - reads, 0),
        )
        yield CounterMetricFamily(
            "nginx_status_reads",
            "Reads of stub_status by this exporter, left out of nginx_http_requests_total.",
            value=reads,
        )
        yield CounterMetricFamily(
            "nginx_connections_accepted", "Client connections accepted.", value=accepts
        )
        yield CounterMetricFamily(
            "nginx_connections_handled", "Client connections handled.", value=handled
        )
        for name, value, what in [
            ("active", active, "Active client connections, waiting ones included."),
            ("reading", reading, "Connections where nginx is reading the request header."),
            ("writing", writing, "Connections where nginx is writing the response back."),
            ("waiting", waiting, "Idle client connections."),
        ]:
            yield GaugeMetricFamily(f"nginx_connections_{name}", what, value=value)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--status", required=True, help="URL of nginx's stub_status")
    p.add_argument("--listen", required=True, help="HOST:PORT of /metrics")
    p.add_argument("--timeout", type=float, default=0.5, help="stub_status read timeout, s")
    p.add_argument("--access-log", help='access log whose last field is "$upstream_addr"')
    a = p.parse_args()
    REGISTRY.register(StubStatus(a.status, a.timeout))
    if a.access_log:
        REGISTRY.register(TriesLog(a.access_log))
    host, _, port = a.listen.rpartition(":")
    _server, thread = start_http_server(int(port), addr=host)
    thread.join()


if __name__ == "__main__":
    main()
