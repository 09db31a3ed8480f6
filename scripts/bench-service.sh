#!/usr/bin/env bash
# Benchmark of the service pod (prints figures; not a test). Builds release itself.
#
#   1. served rate relative to --rate at 100, 1,000 and 10,000/s over WINDOW (30 s)
#      with a saturated queue: in-process (real worker thread, real time), and
#      through real loopback sockets where this machine can keep the queue full;
#   2. resident memory per queued abandoned request with COUNT (1,000,000) queued:
#      in-process, and through sockets (the pod process's VmRSS).
#
# Targets: rate within 0.5% of --rate; at most 256 bytes per queued request.
# Environment: WINDOW (seconds, 30), COUNT (1000000), SOCKET_COUNT (COUNT),
# BENCH_PORT (18470), SECTIONS ("rate sockets memory": which parts to run), CARGO_TARGET_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."

window=${WINDOW:-30}
count=${COUNT:-1000000}
socket_count=${SOCKET_COUNT:-$count}
port=${BENCH_PORT:-18470}
addr="127.0.0.1:$port"
target_dir=${CARGO_TARGET_DIR:-target}
bin="$target_dir/release/service"
bench="$target_dir/release/examples/bench"
sections=" ${SECTIONS:-rate sockets memory} "

command -v curl >/dev/null || { echo "bench-service: curl is required" >&2; exit 1; }

echo "== building (release)"
cargo build --release --locked -p service --bin service --example bench

pod_pid=""
stop_pod() {
  if [[ -n $pod_pid ]]; then
    kill -TERM "$pod_pid" 2>/dev/null || true
    wait "$pod_pid" 2>/dev/null || true
    pod_pid=""
  fi
}
trap stop_pod EXIT

# start_pod RATE: a pod on $addr, ready at once, that exits at once on SIGTERM.
start_pod() {
  RUST_LOG=error "$bin" --listen "$addr" --rate "$1" --ready-after 0s --shutdown-grace 0s &
  pod_pid=$!
  for _ in $(seq 100); do
    curl -fs "http://$addr/healthz" >/dev/null && return 0
    sleep 0.1
  done
  echo "bench-service: pod did not start on $addr" >&2
  exit 1
}

# metric NAME: one series' value from the pod's /metrics.
metric() {
  curl -fs "http://$addr/metrics" | awk -v s="$1" '$1 == s { print $2 }'
}

# sample: "SECONDS SERVED SPREAD" from one scrape, timed at the middle of the
# request; SPREAD is how long the scrape took (the timing uncertainty).
sample() {
  local before after text
  before=$(date +%s.%N)
  text=$(curl -fs "http://$addr/metrics")
  after=$(date +%s.%N)
  awk -v b="$before" -v a="$after" '
    /^retrydebt_completions_total\{outcome="(answered|abandoned)"\}/ { n += $2 }
    END { printf "%.6f %d %.6f\n", (a + b) / 2, n, a - b }' <<<"$text"
}

rss_kib() {
  awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"
}

if [[ $sections == *" rate "* ]]; then
  echo
  echo "== served rate, in-process, saturated queue, ${window}s window"
  for rate in 100 1000 10000; do
    "$bench" rate --rate "$rate" --window "${window}s"
  done
fi

if [[ $sections == *" sockets "* ]]; then
  echo
  echo "== served rate through loopback sockets, saturated queue, ${window}s window"
  # The flood client abandons each request; it must fill the queue faster than
  # the pod serves it, which bounds the rates this (shared, 2-core) machine can test.
  for rate in 100 1000; do
    start_pod "$rate"
    fill=$((rate * (window + 25)))
    "$bench" flood --addr "$addr" --count "$fill"
    sleep 2 # let the worker settle after competing with the flood for CPU
    read -r t0 c0 e0 < <(sample)
    sleep "$window"
    read -r t1 c1 e1 < <(sample)
    depth=$(metric retrydebt_queue_depth)
    awk -v r="$rate" -v c0="$c0" -v c1="$c1" -v t0="$t0" -v t1="$t1" -v e="$e0 $e1" -v d="$depth" 'BEGIN {
      split(e, s, " "); m = (c1 - c0) / (t1 - t0)
      printf "sockets: rate %d/s: served %.2f/s over %.1fs = %+.3f%% (+/- %.3f%% scrape timing) of --rate (queue left: %d)\n",
        r, m, t1 - t0, (m / r - 1) * 100, (s[1] + s[2]) / 2 / (t1 - t0) * 100, d }'
    stop_pod
  done
fi

if [[ $sections == *" memory "* ]]; then
  echo
  echo "== resident memory per queued abandoned request"
  "$bench" memory --count "$count"
  start_pod 0.001 # nothing is served: every request stays queued
  sleep 0.5
  before=$(rss_kib "$pod_pid")
  "$bench" flood --addr "$addr" --count "$socket_count"
  sleep 1
  after=$(rss_kib "$pod_pid")
  depth=$(metric retrydebt_queue_depth)
  awk -v b="$before" -v a="$after" -v d="$depth" 'BEGIN {
    printf "sockets: %d queued abandoned requests: pod VmRSS %d -> %d KiB = %.1f bytes each\n",
      d, b, a, (a - b) * 1024 / d }'
  stop_pod
fi
