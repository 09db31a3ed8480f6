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

    python nginx_exporter.py --status http://127.0.0.1:8081/stub_status --listen 127.0.0.1:9113 \
        [--access-log /var/log/nginx/tries.log]
"""

import argparse
import re
import threading
import urllib.request

from prometheus_client import REGISTRY, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

STATUS = re.compile(
    r"Active connections:\s*(\d+)\s*server accepts handled requests\s*(\d+)\s+(\d+)\s+(\d+)\s*"
    r"Reading:\s*(\d+)\s*Writing:\s*(\d+)\s*Waiting:\s*(\d+)"
)


class TriesLog:
    """Upstream tries from the access log's new lines, read on each scrape."""

    def __init__(self, path):
        self.path = path
        self.offset = 0
        self.partial = b""
        self.tries = 0
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
                # The last quoted field: "127.0.0.1:8001, 127.0.0.1:8001" ("-": no upstream).
                parts = line.rsplit(b'"', 2)
                if len(parts) == 3:
                    addrs = parts[1].strip()
                    if addrs and addrs != b"-":
                        self.tries += addrs.count(b",") + addrs.count(b" : ") + 1
            return self.tries

    def collect(self):
        yield CounterMetricFamily(
            "nginx_upstream_tries",
            "Tries nginx sent to its upstreams (the arrivals at the app), from the access log's "
            "$upstream_addr, counted when the client's request ends.",
            value=self.read(),
        )


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
