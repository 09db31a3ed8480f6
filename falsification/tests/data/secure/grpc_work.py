"""The secure stack's gRPC server: one unary method on grpcio, without a protobuf schema.

Service ``retrydebt.Work``, method ``Do`` (``/retrydebt.Work/Do``), registered with
``grpc.method_handlers_generic_handler`` and no (de)serializers: the handler sees the request
message's raw bytes and returns raw bytes. A request whose bytes are not exactly those of
--expect-file is aborted with INVALID_ARGUMENT at once. Any other takes a process-wide FIFO lock,
keeps one core busy for --cpu-ms (by the wall clock) while holding it, and answers ``b"ok"``: one
call served at a time, in arrival order, about 1000 / (cpu-ms + overhead) a second (99/s measured
at 10 ms, 8 calls out at a time).

It does not stop for cancelled calls: a call whose client gave up (deadline or cancel) while it
waited on the lock is still served when its turn comes, as a FIFO that finishes abandoned work
(measured: 600 calls at 200/s with a 0.2 s deadline, 563 timed out, all 600 served). grpcio itself
drops a call that is cancelled before it reaches the handler, so the handler must be reached
quickly: the executor has many threads (--threads, 1024; calls past that wait in grpcio's queue,
where a cancelled one is dropped), and the CPU work lets go of the GIL (``burn``). Only bursts
faster than grpcio hands calls to threads lose some: 1,000 calls sent at once with a 0.1 s
deadline, 400 were served.

``/retrydebt.Work/Stats`` (any request bytes, no lock, no spin) answers
``{"served": N, "abandoned": A, "invalid": M}`` in JSON bytes: calls served, those of them whose
call was no longer active when served (the client had gone), and calls aborted for their bytes.

Two listeners: --h2c (plaintext HTTP/2, "insecure") and --tls with --cert/--key (TLS, no client
certificate asked).

    python grpc_work.py --h2c 127.0.0.1:50051 --tls 127.0.0.1:50052 --cert server.pem \
        --key server.key --expect-file work-request.bin [--cpu-ms 10]
"""

import argparse
import collections
import hashlib
import json
import logging
import os
import signal
import sys
import threading
import time
from concurrent import futures

import grpc

SERVICE = "retrydebt.Work"


class FifoLock:
    """A lock handed to its waiters in the order they asked (threading.Lock promises no order)."""

    def __init__(self):
        self.mutex = threading.Lock()
        self.busy = False
        self.waiters = collections.deque()

    def __enter__(self):
        with self.mutex:
            if not self.busy:
                self.busy = True
                return self
            turn = threading.Event()
            self.waiters.append(turn)
        turn.wait()  # set by the holder's release: the lock is ours, still busy
        return self

    def __exit__(self, *exc):
        with self.mutex:
            if self.waiters:
                self.waiters.popleft().set()
            else:
                self.busy = False


class Counts:
    def __init__(self):
        self.lock = threading.Lock()
        self.served = 0
        self.abandoned = 0
        self.invalid = 0

    def json(self):
        with self.lock:
            return {"served": self.served, "abandoned": self.abandoned, "invalid": self.invalid}


# What burn hashes: hashlib lets go of the GIL for inputs this long, so grpcio's own Python
# threads (the one that takes new calls off the wire and hands them to the executor) run while a
# call burns its CPU. A busy loop in Python would hold the GIL but for every 5 ms switch interval:
# measured, new calls then reached the handler so late that grpcio dropped most of those whose
# deadline passed first (16 of 100 with a 0.1 s deadline were served, against 100 of 100 here).
CHUNK = b"\x5a" * 16384


def burn(seconds):
    """Keep one core busy until the wall clock has advanced by `seconds` (GIL released)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        hashlib.sha256(CHUNK)


def make_handler(cpu_s, expected, counts):
    lock = FifoLock()

    def do(request, context):
        if request != expected:
            with counts.lock:
                counts.invalid += 1
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"request is {len(request)} bytes that are not the expected {len(expected)}",
            )
        with lock:
            burn(cpu_s)
            with counts.lock:
                counts.served += 1
                if not context.is_active():
                    counts.abandoned += 1
        return b"ok"

    def stats(_request, _context):
        return json.dumps(counts.json()).encode()

    return grpc.method_handlers_generic_handler(
        SERVICE,
        {
            "Do": grpc.unary_unary_rpc_method_handler(do),
            "Stats": grpc.unary_unary_rpc_method_handler(stats),
        },
    )


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--h2c", required=True, help="HOST:PORT of the plaintext (h2c) listener")
    p.add_argument("--tls", required=True, help="HOST:PORT of the TLS listener")
    p.add_argument("--cert", required=True, help="the TLS listener's certificate chain (PEM)")
    p.add_argument("--key", required=True, help="its private key (PEM)")
    p.add_argument("--expect-file", required=True, help="the exact bytes every Do request carries")
    p.add_argument("--cpu-ms", type=float, default=10.0, help="CPU time per call, ms")
    p.add_argument("--threads", type=int, default=1024, help="executor threads: calls outstanding at once")
    a = p.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    with open(a.expect_file, "rb") as f:
        expected = f.read()
    with open(a.cert, "rb") as f:
        cert = f.read()
    with open(a.key, "rb") as f:
        key = f.read()
    counts = Counts()
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=a.threads),
        handlers=[make_handler(a.cpu_ms / 1000.0, expected, counts)],
        # grpcio sets SO_REUSEPORT by default: a port taken by another server would be shared.
        options=[("grpc.so_reuseport", 0)],
    )
    for what, port in [
        ("h2c", server.add_insecure_port(a.h2c)),
        ("tls", server.add_secure_port(a.tls, grpc.ssl_server_credentials([(key, cert)]))),
    ]:
        if port == 0:
            sys.exit(f"grpc_work.py: could not listen ({what})")
    server.start()
    logging.info("serving %s on h2c %s and tls %s", SERVICE, a.h2c, a.tls)
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    done.wait()
    server.stop(grace=None)
    logging.info("stopped: %s", json.dumps(counts.json()))
    # Without waiting for the calls still queued on the lock (the executor's threads).
    os._exit(0)


if __name__ == "__main__":
    main()
