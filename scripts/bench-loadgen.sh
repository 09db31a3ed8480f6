#!/usr/bin/env bash
# Benchmark of the loadgen, side by side with wrk and oha against the same trivial loopback
# server (loadgen/examples/bench_server.rs). Prints figures and ratios; it is not a pass/fail
# test (the machine is shared, numbers are noisy). Usage:
#   scripts/bench-loadgen.sh [SECONDS_PER_RUN]      (default 10)
# Measures:
#   1. wrk's keep-alive maximum (closed loop, 2 threads, 64 connections);
#   2. the highest open-loop rate the loadgen holds (every first attempt sent, all answered,
#      send-lag p99 < 2 ms), on a ladder of fractions of wrk's maximum, with 64 connections
#      opened first as wrk's (oha -q opens its default 50);
#   3. oha -q at that rate (achieved rate, latency p99);
#   4. rate accuracy at 10,000/s (Poisson and constant);
#   5. attempts in flight to a server that never answers, at 10,000/s with 10 s timeouts
#      (100,000 in flight), RSS and timeout lateness. If the open-files hard limit is below
#      what 100,000 sockets need and cannot be raised, the timeout is scaled down to fit and
#      the figures are extrapolated per connection (said so in the output).
set -euo pipefail
cd "$(dirname "$0")/.."

secs=${1:-10}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}

# Peers and tools, from the registries.
need_apt=()
command -v wrk >/dev/null || need_apt+=(wrk)
command -v jq >/dev/null || need_apt+=(jq)
if ((${#need_apt[@]})); then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi
command -v oha >/dev/null || cargo install oha --locked

cargo build --release --quiet -p loadgen --bins --examples
bin=$CARGO_TARGET_DIR/release/loadgen
server=$CARGO_TARGET_DIR/release/examples/bench_server

work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do
    kill "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT

# start_server MODE: starts bench_server, sets $addr.
start_server() {
  "$server" "$1" >"$work/$1.addr" 2>"$work/$1.err" &
  pids+=($!)
  for _ in $(seq 200); do
    [[ -s $work/$1.addr ]] && break
    sleep 0.05
  done
  addr=$(head -1 "$work/$1.addr")
  [[ -n $addr ]] || { echo "bench_server $1 did not start: $(cat "$work/$1.err")" >&2; exit 1; }
}

# lg NAME ARGS...: one loadgen run, records in $work/NAME.
lg() {
  local name=$1
  shift
  if ! "$bin" --out "$work/$name" "$@" >/dev/null 2>"$work/$name.log"; then
    echo "loadgen $name failed: $(tail -1 "$work/$name.log")" >&2
    exit 1
  fi
}
# js NAME FILTER: a value from a run's summary.json.
js() { jq -r "$2" "$work/$1/summary.json"; }
calc() { awk "BEGIN { printf \"%s\", $1 }"; }

echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), open files: soft $(ulimit -Sn) hard $(ulimit -Hn)"
start_server ok
url="http://$addr/work"

# 1. wrk keep-alive maximum.
wrk -t2 -c64 -d"${secs}s" --latency "$url" >"$work/wrk.txt"
wrk_rps=$(awk '/^Requests\/sec/ {print $2}' "$work/wrk.txt")
wrk_p99=$(awk '$1 == "99%" {print $2}' "$work/wrk.txt")
echo "wrk -t2 -c64: ${wrk_rps} req/s (closed loop), latency p99 ${wrk_p99}"

# 2. Ladder of open-loop rates. This machine's timing is noisy (a shared VM): each rate gets two
# tries and keeps the better; the ladder stops once a rate is not even sent (achieved < 90%).
held=0
printf '%-8s %-10s %-10s %-12s %-12s %s\n' fraction rate achieved lag_p99_ms lat_p99_ms ok
for frac in 0.1 0.2 0.3 0.4 0.5 0.6 0.7 0.8 0.9 1.0; do
  rate=$(calc "int($wrk_rps * $frac / 100) * 100")
  best=""
  for try in 1 2; do
    name=ladder_${rate}_$try
    lg "$name" --target "$url" --rate "$rate" --arrivals constant --duration "${secs}s" \
      --timeout 2s --retries 0 --max-in-flight 15000 --connections 64
    lag=$(js "$name" '.send_lag_seconds.p99 * 1000')
    if [[ -z $best ]] || (($(calc "($lag < $(js "$best" '.send_lag_seconds.p99 * 1000')) ? 1 : 0"))); then
      best=$name
    fi
  done
  rm -rf "$work/ladder_$rate"
  mv "$work/$best" "$work/ladder_$rate"
  name=ladder_$rate
  expected=$(calc "$rate * $secs")
  first=$(js "$name" .first_attempts)
  ok_count=$(js "$name" .succeeded)
  lag=$(js "$name" '.send_lag_seconds.p99 * 1000')
  lat=$(js "$name" '.attempt_latency_seconds.p99 * 1000')
  achieved=$(calc "$first / $secs")
  good=$(calc "($first >= 0.99 * $expected && $ok_count == $first && $lag < 2) ? 1 : 0")
  printf '%-8s %-10s %-10s %-12s %-12s %s\n' "$frac" "$rate" "$achieved" "$lag" "$lat" "$good"
  if ((good)); then
    held=$rate
  fi
  (($(calc "($first >= 0.9 * $expected) ? 1 : 0"))) || break
done
echo "loadgen holds ${held}/s open loop with send-lag p99 < 2 ms: $(calc "$held / $wrk_rps") of wrk's maximum (target >= 0.8)"

# 3. oha -q at the same rate (or half of wrk's maximum if the loadgen held none).
oha_rate=$held
((oha_rate > 0)) || oha_rate=$(calc "int($wrk_rps / 200) * 100")
oha -q "$oha_rate" -z "${secs}s" --no-tui --output-format json "$url" >"$work/oha.json"
oha_rps=$(jq -r '.summary.requestsPerSec' "$work/oha.json")
oha_p99=$(jq -r '.latencyPercentiles.p99 * 1000' "$work/oha.json")
oha_ok=$(jq -r '.summary.successRate' "$work/oha.json")
if [[ -f $work/ladder_$oha_rate/summary.json ]]; then
  lg_rps=$(calc "$(js "ladder_$oha_rate" .first_attempts) / $secs")
  lg_p99=$(js "ladder_$oha_rate" '.attempt_latency_seconds.p99 * 1000')
else
  lg_rps=n/a lg_p99=n/a
fi
echo "at ${oha_rate}/s: oha -q achieved ${oha_rps} req/s (success ${oha_ok}), latency p99 ${oha_p99} ms; loadgen achieved ${lg_rps}/s, latency p99 ${lg_p99} ms"

# 4. Rate accuracy at 10,000/s.
for kind in poisson constant; do
  lg "acc_$kind" --target "$url" --rate 10000 --arrivals "$kind" --duration "${secs}s" --timeout 2s --retries 0 \
    --connections 64
  first=$(js "acc_$kind" .first_attempts)
  echo "rate accuracy at 10000/s ($kind): $(calc "$first / $secs")/s sent, error $(calc "($first / $secs - 10000) / 100") %, send-lag p99 $(js "acc_$kind" '.send_lag_seconds.p99 * 1000') ms"
done

# 5. Attempts in flight to a server that never answers, 10,000/s.
start_server silent
hard=$(ulimit -Hn)
timeout_ms=10000
if [[ $hard != unlimited ]] && ((hard < 103000)); then
  timeout_ms=$(((hard - 2000) / 10))
  echo "open-files hard limit ${hard} < 103000 and this process cannot raise it: timeout scaled to ${timeout_ms} ms (in flight ~$((timeout_ms * 10)))"
fi
lg inflight --target "http://$addr/work" --rate 10000 --arrivals constant \
  --duration "$((timeout_ms / 1000 + secs))s" --timeout "${timeout_ms}ms" --retries 0 \
  --bind 127.0.0.1-127.0.0.8 --max-in-flight 200000
peak=$(js inflight .peak_in_flight)
rss=$(js inflight .max_rss_bytes)
echo "in flight: peak ${peak} attempts, timeouts $(js inflight .timeouts)/$(js inflight .first_attempts), errors $(jq -c .errors "$work/inflight/summary.json"), shed $(js inflight .shed)"
echo "in flight: max RSS $(calc "$rss / 1048576") MiB = $(calc "$rss / $peak") bytes per attempt in flight; at 100,000: ~$(calc "$rss / $peak * 100000 / 1048576") MiB (target < 1536)"
echo "in flight: timeout lateness p50 $(js inflight '.timeout_lateness_seconds.p50 * 1000') ms, p99 $(js inflight '.timeout_lateness_seconds.p99 * 1000') ms, p99.9 $(js inflight '.timeout_lateness_seconds.p99_9 * 1000') ms, max $(js inflight '.timeout_lateness_seconds.max * 1000') ms (target: within 5 ms)"
echo "in flight: send-lag p99 $(js inflight '.send_lag_seconds.p99 * 1000') ms"
