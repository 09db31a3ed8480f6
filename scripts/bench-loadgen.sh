#!/usr/bin/env bash
# Benchmark of the loadgen side by side with oha, vegeta and wrk, pinned: the server on CPU 1
# (nginx with one worker and `worker_cpu_affinity 10`, or the kit's bench_server under
# `taskset -c 1` for the silent server), each generator alone on CPU 0 (`taskset -c 0`), one
# after another in one run, 64 keep-alive connections each, the same URL. Prints figures and
# ratios; it is not a pass/fail test. Usage:
#   scripts/bench-loadgen.sh [SECONDS_PER_RUN [PART]]     (default 10 all)
# PART: `all` (1. to 6.), `http` (1. to 5.) or `https` (6. alone, to rerun it quickly).
# Measures:
#   1. cost per request at 10,000/s and 30,000/s open loop: system calls (perf stat,
#      raw_syscalls:sys_enter) and CPU (task-clock) of the generator's process, divided by the
#      requests nginx served (its own counter), for the loadgen, oha and vegeta; latency p99;
#      and the loadgen's rate accuracy at 10,000/s (constant and Poisson arrivals);
#   2. wrk's closed-loop maximum on CPU 0 (-t1 -c64), and its cost per request there;
#   3. the highest open-loop rate the loadgen holds (all sent, all answered, send-lag p99
#      < 2 ms) and the highest oha holds (all sent, latency p99 < 2 ms with
#      --latency-correction), each also as a fraction of wrk's maximum;
#   4. overload: 1.5 times the loadgen's highest held rate (10,000/s if none) for 10 s, then
#      half of it for 10 s:
#      what it sent, the connections it opened, and when it is back on schedule;
#   5. timeouts at 10,000 new connections/s against a server that never answers: lateness,
#      and memory per attempt in flight. The open-files hard limit here (20,000) cannot be
#      raised, so the timeout is scaled to ~18,000 in flight and memory is projected to
#      100,000 (said so in the output);
#   6. HTTPS: a second nginx server (the same worker on CPU 1) speaking TLS 1.3 with session
#      tickets, its ECDSA P-256 certificate for 127.0.0.1 signed by a test CA made here with
#      openssl, serving the same body: cost per request at 10,000/s (as in 1., HTTP/1.1,
#      64 keep-alive connections) for the loadgen, oha and vegeta (each checking the
#      certificate with the test CA), the loadgen's TLS handshakes (full and resumed), wrk's
#      closed-loop maximum over HTTPS, and the highest HTTPS rates the loadgen and oha hold
#      (as in 3., up to wrk's HTTPS maximum).
# Needs 2 cores and root (apt-get, perf). Peers installed if missing: oha (cargo install, pinned
# version), vegeta (built from its Go module), wrk, nginx and openssl (Debian).
set -euo pipefail
cd "$(dirname "$0")/.."

secs=${1:-10}
part=${2:-all}
case $part in
  all | http | https) ;;
  *)
    echo "bench-loadgen: PART is all, http or https, not '$part'" >&2
    exit 1
    ;;
esac
oha_version=1.16.0
vegeta_version=v12.12.0
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}

if (($(nproc) < 2)); then
  echo "bench-loadgen: needs 2 cores (server on CPU 1, generator on CPU 0); this machine has $(nproc)" >&2
  exit 1
fi

# Peers and tools, from the registries.
need_apt=()
command -v wrk >/dev/null || need_apt+=(wrk)
command -v jq >/dev/null || need_apt+=(jq)
command -v curl >/dev/null || need_apt+=(curl)
command -v openssl >/dev/null || need_apt+=(openssl)
command -v nginx >/dev/null || need_apt+=(nginx-light)
command -v perf >/dev/null || need_apt+=(linux-perf)
if ((${#need_apt[@]})); then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi
if [[ $(oha --version 2>/dev/null) != "oha $oha_version" ]]; then
  # Its own target directory: the loadgen's builds stay as they are.
  CARGO_TARGET_DIR=$(mktemp -d) cargo install oha --version "$oha_version" --locked --quiet
fi
gobin=$(go env GOPATH)/bin
vegeta=$gobin/vegeta
if [[ $(go version -m "$vegeta" 2>/dev/null | awk '$1 == "mod" {print $3}') != "$vegeta_version" ]]; then
  GOBIN=$gobin go install "github.com/tsenart/vegeta/v12@$vegeta_version"
fi

cargo build --release --quiet -p loadgen --bins --examples
bin=$CARGO_TARGET_DIR/release/loadgen
bench_server=$CARGO_TARGET_DIR/release/examples/bench_server

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

calc() { awk "BEGIN { printf \"%s\", $1 }"; }
# fmt X DIGITS: X rounded.
fmt() { awk -v x="$1" -v d="$2" 'BEGIN { printf "%.*f", d, x }'; }
# ms SECONDS: in milliseconds, to the microsecond (JSON floats print as 1.1199999999999999).
ms() { awk -v x="$1" 'BEGIN { printf "%.3f", x * 1000 }'; }

# A test CA and, signed by it, a certificate for 127.0.0.1 (ECDSA P-256) for nginx's TLS server.
tls=$work/tls
tls_ca=$tls/ca.pem
mkdir -p "$tls"
printf '%s\n' 'subjectAltName = IP:127.0.0.1' 'basicConstraints = critical, CA:FALSE' \
  'keyUsage = critical, digitalSignature' 'extendedKeyUsage = serverAuth' >"$tls/server.ext"
# ossl ARGS...: openssl, its chatter kept in $tls/openssl.log.
ossl() {
  openssl "$@" 2>>"$tls/openssl.log" || {
    echo "bench-loadgen: openssl $1 failed: $(tail -3 "$tls/openssl.log")" >&2
    exit 1
  }
}
ossl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
  -subj "/CN=bench-loadgen test CA" -addext basicConstraints=critical,CA:TRUE \
  -addext keyUsage=critical,keyCertSign -keyout "$tls/ca.key" -out "$tls_ca"
ossl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=127.0.0.1 \
  -keyout "$tls/server.key" -out "$tls/server.csr"
ossl x509 -req -in "$tls/server.csr" -CA "$tls_ca" -CAkey "$tls/ca.key" -set_serial 2 -days 2 \
  -extfile "$tls/server.ext" -out "$tls/server.pem"

# nginx: one worker on CPU 1, 200 "ok" at once, keep-alive without a request limit, and a
# status page whose counters say how many connections and requests each run made; the same
# body over TLS 1.3 (session tickets on) on a second port, for 6.
port=$((20000 + RANDOM % 20000))
status_port=$((port + 1))
tls_port=$((port + 2))
mkdir -p "$work/nginx"
cat >"$work/nginx/nginx.conf" <<EOF
daemon off;
worker_processes 1;
worker_cpu_affinity 10;
worker_rlimit_nofile 20000;
pid $work/nginx/nginx.pid;
error_log $work/nginx/error.log warn;
events { worker_connections 19000; }
http {
  access_log off;
  keepalive_requests 1000000000;
  keepalive_timeout 300s;
  server { listen 127.0.0.1:$port backlog=4096; location / { return 200 "ok"; } }
  server { listen 127.0.0.1:$status_port; location / { stub_status; } }
  server {
    listen 127.0.0.1:$tls_port ssl backlog=4096;
    ssl_certificate $tls/server.pem;
    ssl_certificate_key $tls/server.key;
    ssl_protocols TLSv1.3;
    ssl_session_tickets on;
    location / { return 200 "ok"; }
  }
}
EOF
taskset -c 1 nginx -p "$work/nginx" -e "$work/nginx/error.log" -c "$work/nginx/nginx.conf" &
pids+=($!)
url="http://127.0.0.1:$port/work"
tls_url="https://127.0.0.1:$tls_port/work"
for _ in $(seq 100); do
  curl -sf "http://127.0.0.1:$status_port/" >/dev/null && break
  sleep 0.05
done
# served: "ACCEPTS REQUESTS" so far (the status page's own request included).
served() { curl -sf "http://127.0.0.1:$status_port/" | awk 'NR == 3 {print $1, $3}'; }

perf_syscalls=1
perf stat -e raw_syscalls:sys_enter -o /dev/null true 2>/dev/null || perf_syscalls=0
events=task-clock
((perf_syscalls)) && events+=,raw_syscalls:sys_enter

# measure NAME CMD...: runs CMD on CPU 0 under perf stat; sets conns and reqs (nginx's counts
# for the run), then per_request with them.
measure() {
  local name=$1
  shift
  local before after
  before=$(served)
  perf stat -x, -e "$events" -o "$work/$name.perf" -- taskset -c 0 "$@"
  after=$(served)
  conns=$(($(cut -d' ' -f1 <<<"$after") - $(cut -d' ' -f1 <<<"$before") - 1))
  reqs=$(($(cut -d' ' -f2 <<<"$after") - $(cut -d' ' -f2 <<<"$before") - 1))
  per_request "$name" "$reqs"
}
# per_request NAME COUNT: sets cpu_us and calls, the run's CPU and system calls per one of COUNT
# (calls n/a where perf has no syscall tracepoint).
per_request() {
  cpu_us=n/a calls=n/a
  (($2 > 0)) || return 0
  cpu_us=$(fmt "$(calc "$(awk -F, '$3 == "task-clock" {print $1}' "$work/$1.perf") * 1000 / $2")" 1)
  if ((perf_syscalls)); then
    calls=$(fmt "$(calc "$(awk -F, '$3 == "raw_syscalls:sys_enter" {print $1}' "$work/$1.perf") / $2")" 2)
  fi
}

# lg NAME ARGS...: one loadgen run on CPU 0, records in $work/NAME.
lg() {
  local name=$1
  shift
  measure "$name" "$bin" --out "$work/$name" --threads 1 "$@" >/dev/null 2>"$work/$name.log" || {
    echo "loadgen $name failed: $(tail -1 "$work/$name.log")" >&2
    exit 1
  }
}
# js NAME FILTER: a value from a loadgen run's summary.json.
js() { jq -r "$2" "$work/$1/summary.json"; }
# lg_rate NAME RATE [ARRIVALS [URL [FLAG...]]]: a keep-alive loadgen run at RATE for $secs
# against URL (constant arrivals and nginx over HTTP unless said), with FLAGs added.
lg_rate() {
  local name=$1 rate=$2 arrivals=${3:-constant} target=${4:-$url}
  shift $(($# < 4 ? $# : 4))
  lg "$name" --target "$target" --rate "$rate" --arrivals "$arrivals" --duration "${secs}s" \
    --timeout 2s --retries 0 --connections 64 --max-in-flight 15000 "$@"
}
# oha_rate NAME RATE [URL [FLAG...]]: oha -q at RATE for $secs against URL (nginx over HTTP
# unless said), with FLAGs added, JSON in $work/NAME.json.
oha_rate() {
  local name=$1 rate=$2 target=${3:-$url}
  shift $(($# < 3 ? $# : 3))
  measure "$name" oha -q "$rate" --latency-correction --worker-threads 1 -c 64 -z "${secs}s" \
    --no-tui --output-format json "$@" "$target" >"$work/$name.json"
}
oha_js() { jq -r "$2" "$work/$1.json"; }
# Requests oha got 200 for, per second of the run.
oha_ok_rate() { calc "$(oha_js "$1" '.statusCodeDistribution["200"] // 0') / $secs"; }

echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg); open files: soft $(ulimit -Sn) hard $(ulimit -Hn)"
echo "server: nginx $(nginx -v 2>&1 | sed 's/.*nginx\///'), one worker on CPU 1; generators on CPU 0; oha $oha_version, vegeta $vegeta_version, $(wrk -v 2>&1 | head -1 | cut -d' ' -f1-2); ${secs} s per run"
((perf_syscalls)) || echo "perf has no raw_syscalls:sys_enter here: system calls per request n/a"

# Highest held open-loop rates (3. and 6.): up in steps of 10,000/s from 10,000/s until a rate
# is not held (tried twice: the first try may meet a noisy moment), then the step between halved
# once. GEN_held RATE (GEN: lg, oha over HTTP; lg_tls, oha_tls over HTTPS): one try at RATE;
# sets last, and says whether RATE was held.
lg_held() { lg_held_at held_lg "$1"; }
lg_tls_held() { lg_held_at held_lg_tls "$1" "$tls_url" --cacert "$tls_ca"; }
oha_held() { oha_held_at held_oha "$1"; }
oha_tls_held() { oha_held_at held_oha_tls "$1" "$tls_url" "${oha_tls[@]}"; }
# lg_held_at PREFIX RATE [URL [FLAG...]]: run PREFIX_RATE, held if all sent, all answered and
# send-lag p99 < 2 ms.
lg_held_at() {
  local name=$1_$2 rate=$2 first
  shift 2
  lg_rate "$name" "$rate" constant "$@"
  first=$(js "$name" .first_attempts)
  last="sent $(calc "$first / $secs")/s, send-lag p99 $(ms "$(js "$name" '.send_lag_seconds.p99')") ms, latency p99 $(ms "$(js "$name" '.attempt_latency_seconds.p99')") ms, ${conns} connections"
  (($(calc "($first >= 0.99 * $rate * $secs && $(js "$name" .succeeded) == $first && $(js "$name" .send_lag_seconds.p99) < 0.002) ? 1 : 0")))
}
# oha_held_at PREFIX RATE [URL [FLAG...]]: run PREFIX_RATE, held if all sent and answered 200
# and latency p99 < 2 ms.
oha_held_at() {
  local name=$1_$2 rate=$2 p99
  shift 2
  oha_rate "$name" "$rate" "$@"
  p99=$(oha_js "$name" '.latencyPercentiles.p99')
  last="answered $(oha_ok_rate "$name")/s, latency p99 $(ms "$p99") ms, ${conns} connections"
  (($(calc "($(oha_ok_rate "$name") >= 0.99 * $rate && $p99 < 0.002) ? 1 : 0")))
}
# ladder GEN [CEILING]: the highest rate GEN holds, up to CEILING (wrk's maximum unless said);
# sets held.
ladder() {
  local gen=$1 ceiling=${2:-$wrk_rps} rate=10000 fail=0
  held=0
  while ((rate <= ceiling)); do
    if "${gen}_held" "$rate" || "${gen}_held" "$rate"; then
      echo "  $gen ${rate}/s: held ($last)"
      held=$rate
      rate=$((rate + 10000))
    else
      echo "  $gen ${rate}/s: not held ($last)"
      fail=$rate
      break
    fi
  done
  if ((fail > 0 && fail - held > 5000)); then
    rate=$((held + 5000))
    if "${gen}_held" "$rate"; then
      echo "  $gen ${rate}/s: held ($last)"
      held=$rate
    else
      echo "  $gen ${rate}/s: not held ($last)"
    fi
  fi
}

if [[ $part != https ]]; then
  # 1. Cost per request at 10,000/s and 30,000/s.
  echo
  echo "## cost per request, open loop, 64 connections (system calls and CPU of the generator / requests nginx served)"
  printf '%-8s %-8s %-10s %-10s %-8s %-12s %s\n' rate gen calls/req cpu_us/req conns lat_p99_ms lag_p99_ms
  declare -A cost_calls cost_cpu
  for rate in 10000 30000; do
    lg_rate "cost_lg_$rate" "$rate"
    printf '%-8s %-8s %-10s %-10s %-8s %-12s %s\n' "$rate" loadgen "$calls" "$cpu_us" "$conns" \
      "$(ms "$(js "cost_lg_$rate" '.attempt_latency_seconds.p99')")" "$(ms "$(js "cost_lg_$rate" '.send_lag_seconds.p99')")"
    cost_calls[lg_$rate]=$calls cost_cpu[lg_$rate]=$cpu_us

    oha_rate "cost_oha_$rate" "$rate"
    printf '%-8s %-8s %-10s %-10s %-8s %-12s %s\n' "$rate" oha "$calls" "$cpu_us" "$conns" \
      "$(ms "$(oha_js "cost_oha_$rate" '.latencyPercentiles.p99')")" -
    cost_calls[oha_$rate]=$calls cost_cpu[oha_$rate]=$cpu_us

    echo "GET $url" >"$work/vegeta.targets"
    GOMAXPROCS=1 measure "cost_vegeta_$rate" "$vegeta" attack -targets "$work/vegeta.targets" \
      -rate "$rate/1s" -duration "${secs}s" -connections 64 -max-connections 64 -workers 64 \
      -max-workers 64 -output "$work/vegeta_$rate.bin"
    "$vegeta" report -type json "$work/vegeta_$rate.bin" >"$work/vegeta_$rate.json"
    printf '%-8s %-8s %-10s %-10s %-8s %-12s %s\n' "$rate" vegeta "$calls" "$cpu_us" "$conns" \
      "$(ms "$(jq -r '.latencies["99th"] / 1e9' "$work/vegeta_$rate.json")")" -
  done
  for rate in 10000 30000; do
    ratio_calls=n/a
    ((perf_syscalls)) && ratio_calls=$(fmt "$(calc "${cost_calls[lg_$rate]} / ${cost_calls[oha_$rate]}")" 2)
    echo "at ${rate}/s loadgen/oha: system calls per request ${cost_calls[lg_$rate]}/${cost_calls[oha_$rate]} = ${ratio_calls} (target <= 1), CPU per request ${cost_cpu[lg_$rate]}/${cost_cpu[oha_$rate]} us = $(fmt "$(calc "${cost_cpu[lg_$rate]} / ${cost_cpu[oha_$rate]}")" 2) (target <= 1)"
  done

  # Rate accuracy at 10,000/s: the constant run above, and one Poisson run.
  lg_rate acc_poisson 10000 poisson
  for name in cost_lg_10000 acc_poisson; do
    first=$(js "$name" .first_attempts)
    echo "rate accuracy at 10000/s ($(js "$name" .arrival_process)): $(calc "$first / $secs")/s sent, error $(fmt "$(calc "($first / $secs - 10000) / 100")" 3) % (target within 1 %)"
  done

  # 2. wrk's closed-loop maximum on the same core.
  echo
  measure wrk wrk -t1 -c64 -d"${secs}s" --latency "$url" >"$work/wrk.txt"
  wrk_rps=$(awk '/^Requests\/sec/ {printf "%d", $2}' "$work/wrk.txt")
  echo "## wrk -t1 -c64, closed loop: ${wrk_rps} req/s, latency p99 $(awk '$1 == "99%" {print $2}' "$work/wrk.txt"), ${calls} system calls and ${cpu_us} us CPU per request"

  # 3. Highest held open-loop rates (the tries and the ladder are above).
  echo
  echo "## highest open-loop rate held, ${secs} s per step"
  ladder lg
  lg_max=$held
  ladder oha
  oha_max=$held
  echo "loadgen holds ${lg_max}/s with send-lag p99 < 2 ms ($(fmt "$(calc "$lg_max / $wrk_rps")" 2) of wrk's ${wrk_rps}/s); oha holds ${oha_max}/s with latency p99 < 2 ms ($(fmt "$(calc "$oha_max / $wrk_rps")" 2) of wrk); loadgen/oha $(fmt "$(calc "$lg_max / ($oha_max > 0 ? $oha_max : 1)")" 2) (target >= 1, and >= 60,000/s)"

  # 4. Overload and recovery.
  # overload BASE: 1.5 x BASE for 10 s, then BASE / 2 for 10 s.
  overload() {
    local over=$(($1 * 3 / 2)) half=$(($1 / 2))
    echo "## overload: ${over}/s (1.5 x ${1}) for 10 s, then ${half}/s for 10 s"
    lg overload --target "$url" --schedule "0s:$over,10s:$half,20s:end" --arrivals constant \
      --timeout 2s --retries 0 --connections 64 --max-in-flight 15000 --drain 3s
    echo "connections opened: ${conns}; in flight peak $(js overload .peak_in_flight); shed $(js overload .shed); timeouts $(js overload .timeouts); errors $(jq -c '.errors | with_entries(select(.value > 0))' "$work/overload/summary.json")"
    echo "per second: second first_attempts in_flight send_lag_p99_ms"
    local csv=$work/overload/timeseries.csv back
    awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
      { printf "  %s %s %s %s\n", $col["second"], $col["first_attempts"], $col["in_flight"], $col["send_lag_p99_ms"] }' "$csv"
    back=$(awk -F, -v half="$half" 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
      $col["second"] >= 10 && $col["second"] < 20 && $col["first_attempts"] >= 0.99 * half && $col["send_lag_p99_ms"] < 2 { print $col["second"] - 10; exit }' "$csv")
    if [[ -n $back ]]; then
      echo "back on schedule (a whole second sent with send-lag p99 < 2 ms) ${back} s after the rate dropped to ${half}/s"
    else
      echo "NOT back on schedule within 10 s at ${half}/s"
    fi
  }
  echo
  if ((lg_max > 0)); then
    overload "$lg_max"
  else
    # A busy machine may hold no rate: the overload still shows whether it recovers.
    echo "(no rate held: the base is 10,000/s instead)"
    overload 10000
  fi

  # 5. Timeouts against a server that never answers: 10,000 new connections/s.
  taskset -c 1 "$bench_server" silent >"$work/silent.addr" 2>"$work/silent.err" &
  pids+=($!)
  for _ in $(seq 200); do
    [[ -s $work/silent.addr ]] && break
    sleep 0.05
  done
  silent=$(head -1 "$work/silent.addr")
  hard=$(ulimit -Hn)
  timeout_ms=10000
  if [[ $hard != unlimited ]] && ((hard < 103000)); then
    timeout_ms=$(((hard - 2000) / 10))
    echo
    echo "open-files hard limit ${hard} < 103000 and this process cannot raise it: timeout scaled to ${timeout_ms} ms (in flight ~$((timeout_ms * 10))), memory projected to 100,000"
  fi
  lg inflight --target "http://$silent/work" --rate 10000 --arrivals constant \
    --duration "$((timeout_ms / 1000 + secs))s" --timeout "${timeout_ms}ms" --retries 0 \
    --bind 127.0.0.1-127.0.0.8 --max-in-flight 200000 --drain 0
  per_request inflight "$(js inflight .first_attempts)"
  peak=$(js inflight .peak_in_flight)
  rss=$(js inflight .max_rss_bytes)
  echo "## silent server, 10,000 new connections/s, ${timeout_ms} ms timeouts"
  echo "timeouts $(js inflight .timeouts) of $(js inflight .first_attempts) sent, errors $(jq -c '.errors | with_entries(select(.value > 0))' "$work/inflight/summary.json"), send-lag p99 $(ms "$(js inflight '.send_lag_seconds.p99')") ms, ${cpu_us} us CPU and ${calls} system calls per attempt"
  echo "timeout lateness p50 $(ms "$(js inflight '.timeout_lateness_seconds.p50')") ms, p99 $(ms "$(js inflight '.timeout_lateness_seconds.p99')") ms, p99.9 $(ms "$(js inflight '.timeout_lateness_seconds.p99_9')") ms, max $(ms "$(js inflight '.timeout_lateness_seconds.max')") ms (target: p99 within 5 ms)"
  echo "memory: peak ${peak} in flight, max RSS $(fmt "$(calc "$rss / 1048576")" 1) MiB = $(fmt "$(calc "$rss / $peak")" 0) bytes per attempt in flight; projected at 100,000: ~$(fmt "$(calc "$rss / $peak * 100000 / 1048576")" 0) MiB (target < 1536)"
fi

# 6. HTTPS: the same server, body, cores and connections over TLS 1.3.
if [[ $part != http ]]; then
  # oha 1.16 checks the certificate with --cacert; an oha without it gets --insecure (said so).
  if [[ $(oha --help) == *--cacert* ]]; then
    oha_tls=(--cacert "$tls_ca")
    oha_tls_how="checks it with the test CA (--cacert)"
  else
    oha_tls=(--insecure)
    oha_tls_how="has no --cacert here: --insecure, no certificate check"
  fi
  curl -sf --cacert "$tls_ca" "$tls_url" >/dev/null || {
    echo "bench-loadgen: nginx does not answer over HTTPS at $tls_url: $(tail -2 "$work/nginx/error.log")" >&2
    exit 1
  }
  echo
  echo "## HTTPS (TLS 1.3, session tickets on, ECDSA P-256 certificate for 127.0.0.1 from a test CA; HTTP/1.1), cost per request, open loop, 64 connections (system calls and CPU of the generator / requests nginx served)"
  echo "nginx $(nginx -V 2>&1 | sed -n 's/^built with //p'); loadgen checks the certificate with the test CA (--cacert); oha ${oha_tls_how}; vegeta with the test CA (-root-certs, -http2=false)"
  printf '%-8s %-8s %-10s %-10s %-8s %-12s %s\n' rate gen calls/req cpu_us/req conns lat_p99_ms lag_p99_ms
  rate=10000
  lg_rate "tls_lg_$rate" "$rate" constant "$tls_url" --cacert "$tls_ca"
  printf '%-8s %-8s %-10s %-10s %-8s %-12s %s\n' "$rate" loadgen "$calls" "$cpu_us" "$conns" \
    "$(ms "$(js "tls_lg_$rate" '.attempt_latency_seconds.p99')")" "$(ms "$(js "tls_lg_$rate" '.send_lag_seconds.p99')")"
  tls_lg_calls=$calls tls_lg_cpu=$cpu_us

  oha_rate "tls_oha_$rate" "$rate" "$tls_url" "${oha_tls[@]}"
  printf '%-8s %-8s %-10s %-10s %-8s %-12s %s\n' "$rate" oha "$calls" "$cpu_us" "$conns" \
    "$(ms "$(oha_js "tls_oha_$rate" '.latencyPercentiles.p99')")" -
  tls_oha_calls=$calls tls_oha_cpu=$cpu_us

  echo "GET $tls_url" >"$work/vegeta_tls.targets"
  GOMAXPROCS=1 measure "tls_vegeta_$rate" "$vegeta" attack -targets "$work/vegeta_tls.targets" \
    -root-certs "$tls_ca" -http2=false \
    -rate "$rate/1s" -duration "${secs}s" -connections 64 -max-connections 64 -workers 64 \
    -max-workers 64 -output "$work/vegeta_tls_$rate.bin"
  "$vegeta" report -type json "$work/vegeta_tls_$rate.bin" >"$work/vegeta_tls_$rate.json"
  printf '%-8s %-8s %-10s %-10s %-8s %-12s %s\n' "$rate" vegeta "$calls" "$cpu_us" "$conns" \
    "$(ms "$(jq -r '.latencies["99th"] / 1e9' "$work/vegeta_tls_$rate.json")")" -

  ratio_calls=n/a
  ((perf_syscalls)) && ratio_calls=$(fmt "$(calc "$tls_lg_calls / $tls_oha_calls")" 2)
  echo "at ${rate}/s over HTTPS loadgen/oha: system calls per request ${tls_lg_calls}/${tls_oha_calls} = ${ratio_calls} (target <= 1), CPU per request ${tls_lg_cpu}/${tls_oha_cpu} us = $(fmt "$(calc "$tls_lg_cpu / $tls_oha_cpu")" 2) (target <= 1)"
  echo "loadgen at ${rate}/s over HTTPS: sent $(calc "$(js "tls_lg_$rate" .first_attempts) / $secs")/s, $(js "tls_lg_$rate" .succeeded) succeeded; TLS handshakes $(js "tls_lg_$rate" '.tls_handshakes | if . then "full \(.full), resumed \(.resumed)" else "n/a (not in summary.json)" end'); errors $(jq -c '.errors | with_entries(select(.value > 0))' "$work/tls_lg_$rate/summary.json")"
  echo "errors: oha $(oha_js "tls_oha_$rate" '.errorDistribution // {}' | jq -c .), vegeta $(jq -c '.errors // []' "$work/vegeta_tls_$rate.json")"

  # wrk's closed-loop maximum over HTTPS: the ceiling of the ladders below.
  echo
  measure wrk_tls wrk -t1 -c64 -d"${secs}s" --latency "$tls_url" >"$work/wrk_tls.txt"
  wrk_tls_rps=$(awk '/^Requests\/sec/ {printf "%d", $2}' "$work/wrk_tls.txt")
  echo "## wrk -t1 -c64 over HTTPS (no certificate check), closed loop: ${wrk_tls_rps} req/s, latency p99 $(awk '$1 == "99%" {print $2}' "$work/wrk_tls.txt"), ${calls} system calls and ${cpu_us} us CPU per request"

  echo
  echo "## highest open-loop HTTPS rate held, ${secs} s per step"
  ladder lg_tls "$wrk_tls_rps"
  lg_tls_max=$held
  ladder oha_tls "$wrk_tls_rps"
  oha_tls_max=$held
  ratio=n/a
  ((oha_tls_max > 0)) && ratio=$(fmt "$(calc "$lg_tls_max / $oha_tls_max")" 2)
  echo "over HTTPS loadgen holds ${lg_tls_max}/s with send-lag p99 < 2 ms ($(fmt "$(calc "$lg_tls_max / $wrk_tls_rps")" 2) of wrk's ${wrk_tls_rps}/s); oha holds ${oha_tls_max}/s with latency p99 < 2 ms ($(fmt "$(calc "$oha_tls_max / $wrk_tls_rps")" 2) of wrk); loadgen/oha ${ratio} (target >= 1)"
fi
