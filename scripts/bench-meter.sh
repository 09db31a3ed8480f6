#!/usr/bin/env bash
# Benchmark of the meter (release build), printing figures:
#  1. CPU: the meter scraping 50 fake pods every second, measured from
#     /proc/PID/stat over 30 s; target under 5% of one core.
#  2. Step response: the pods' arrival rates step x5; once one window (30 s) and one
#     scrape interval have passed, the published rates must be within 2% of the
#     new values (checked on /history and on the external metrics API).
# Needs: cargo, curl, jq. Takes about 90 s. Exits 1 if a target is missed.
#   scripts/bench-meter.sh
set -euo pipefail
cd "$(dirname "$0")/.."

for tool in cargo curl jq; do
  command -v "$tool" >/dev/null || { echo "bench-meter: '$tool' is not on PATH" >&2; exit 1; }
done

pods=${PODS:-50}
rate=${RATE:-20}           # first attempts/s per pod before the step
factor=${FACTOR:-5}        # step multiple
window_s=30
interval_s=1
cpu_s=${CPU_SECONDS:-30}
step_after_s=$((cpu_s + 15))

export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/work/targets/meter}
cargo build --release --quiet -p meter --bin meter --example fake_pods
bin="$CARGO_TARGET_DIR/release"

work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

"$bin/examples/fake_pods" --pods "$pods" --rate "$rate" --step-factor "$factor" \
  --step-after "${step_after_s}s" --pods-file "$work/pods" --step-file "$work/step" \
  --duration "$((step_after_s + window_s + 30))s" &
pids+=($!)
for _ in $(seq 100); do [[ -s $work/pods && -s $work/step ]] && break; sleep 0.1; done
[[ -s $work/pods ]] || { echo "bench-meter: fake pods did not start" >&2; exit 1; }

RUST_LOG=meter=info NO_COLOR=1 "$bin/meter" --pods-file "$work/pods" \
  --scrape-interval "${interval_s}s" --window "${window_s}s" \
  --listen 127.0.0.1:0 --api-listen 127.0.0.1:0 2>"$work/meter.log" &
meter_pid=$!
pids+=("$meter_pid")
for _ in $(seq 100); do grep -q 'meter running' "$work/meter.log" && break; sleep 0.1; done
http=$(sed -n 's/.*listen=\([0-9.:]*\) api_listen=.*/\1/p' "$work/meter.log" | head -n1)
api=$(sed -n 's/.*api_listen=\([0-9.:]*\).*/\1/p' "$work/meter.log" | head -n1)
[[ -n $http && -n $api ]] || { echo "bench-meter: meter did not start:" >&2; cat "$work/meter.log" >&2; exit 1; }

# CPU ticks (utime + stime) of the meter process.
ticks() { awk '{ print $14 + $15 }' "/proc/$meter_pid/stat"; }
hz=$(getconf CLK_TCK)

sleep 3 # let connections and the first rounds settle
t0=$(ticks); s0=$(date +%s.%N)
sleep "$cpu_s"
t1=$(ticks); s1=$(date +%s.%N)
cpu_pct=$(awk -v d="$((t1 - t0))" -v hz="$hz" -v a="$s0" -v b="$s1" 'BEGIN { printf "%.2f", 100 * d / hz / (b - a) }')
rss_kib=$(awk '/VmRSS/ { print $2 }' "/proc/$meter_pid/status")
errors=$(curl -fsS "http://$http/metrics" | awk '/^retrydebt_meter_scrape_errors_total/ { s += $2 } END { print s + 0 }')
scrapes=$(curl -fsS "http://$http/metrics" | awk '/^retrydebt_meter_scrapes_total/ { print $2 }')

step_ms=$(cat "$work/step")
settle_ms=$(((window_s + interval_s) * 1000))
now_ms=$(date +%s%3N)
wait_s=$(awk -v s="$step_ms" -v w="$settle_ms" -v n="$now_ms" 'BEGIN { d = (s + w - n) / 1000 + 1.5; print (d > 0 ? d : 0) }')
sleep "$wait_s"

want_first=$(awk -v p="$pods" -v r="$rate" -v f="$factor" 'BEGIN { print p * r * f }')
want_ingress=$(awk -v w="$want_first" 'BEGIN { print w * 1.75 }')
# The first reading taken once window + interval have passed since the step.
reading=$(curl -fsS "http://$http/history?seconds=$((window_s + 60))" |
  jq -c --argjson t "$((step_ms + settle_ms))" '[.readings[] | select(.unix_ms >= $t)][0]')
[[ $reading != null ]] || { echo "bench-meter: no reading after the step" >&2; exit 1; }
got_first=$(jq -r .first_attempt_rate <<<"$reading")
got_ingress=$(jq -r .ingress_rate <<<"$reading")
api_value=$(curl -fsSk "https://$api/apis/external.metrics.k8s.io/v1beta1/namespaces/default/first_attempt_rate" |
  jq -r '.items[0].value')
err() { awk -v g="$1" -v w="$2" 'BEGIN { e = (g - w) / w * 100; printf "%.3f", (e < 0 ? -e : e) }'; }
err_first=$(err "$got_first" "$want_first")
err_ingress=$(err "$got_ingress" "$want_ingress")

ok=1
verdict() { if awk -v v="$1" -v lim="$2" 'BEGIN { exit !(v < lim) }'; then echo pass; else ok=0; echo FAIL; fi; }
echo "bench-meter: $pods pods, scrape every ${interval_s}s, window ${window_s}s, step x$factor"
echo "cpu:   ${cpu_pct}% of one core over ${cpu_s}s (target < 5%): $(verdict "$cpu_pct" 5)"
echo "       rss ${rss_kib} KiB, ${scrapes} scrapes, ${errors} scrape errors"
echo "step:  reading at step + $((settle_ms / 1000))s ($(jq -r .timestamp <<<"$reading")):"
echo "       first_attempt_rate ${got_first} vs ${want_first}: ${err_first}% off (target < 2%): $(verdict "$err_first" 2)"
echo "       ingress_rate ${got_ingress} vs ${want_ingress}: ${err_ingress}% off (target < 2%): $(verdict "$err_ingress" 2)"
echo "       external metrics API now: first_attempt_rate value \"$api_value\""
((ok)) || exit 1
