#!/usr/bin/env bash
# Benchmark and full-length checks of the falsification models (prints figures; not a test).
#  1. `falsification predict` for every built-in experiment (`all`, F0-F10): closed forms + fluid (target: under 2 s), and with the
#     request-level model at three seeds over the full horizons.
#  2. Request-level events per second of one thread (target: well over 1,000,000).
#  3. F1 at full length: 20,000 s at 4 pods, A rho from 1.5 to 2.85, pooled and per pod: no timeout.
#  4. The published-vs-model table (pooled fluid, per-pod fluid, request level).
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/work/targets/falsification}"
cargo build --release --quiet -p falsification
bin="$CARGO_TARGET_DIR/release/falsification"

# Wall time of a command in seconds (its output discarded).
wall() {
  local TIMEFORMAT=%R
  { time "$@" >/dev/null; } 2>&1
}

echo "== predict all (every built-in experiment)"
echo "closed forms + pooled and per-pod fluid: $(wall "$bin" predict all --no-request-level) s (target < 2 s)"
echo "with request level, 3 seeds, full horizons: $(wall "$bin" predict all) s"

echo
# Python helpers that summarize `predict --format json` (quoted heredocs keep the quotes intact).
read -r -d '' events_py <<'PY' || true
import json, sys
d = json.load(sys.stdin)
for c in d["cases"]:
    r = c["request_level"]
    print("{} {:<15} {:>11,} events {:6.1f} M events/s".format(
        d["experiment"], c["name"], r["events"], r["events_per_s"] / 1e6))
PY
read -r -d '' f1_py <<'PY' || true
import json, sys
c = json.load(sys.stdin)["cases"][0]
r, s = c["request_level"], c["parameters"]
print("{:<8} A rho = {:.2f}: triggered={} lost={} events={:,}".format(
    s["topology"], 3 * s["rho"], r["triggered"], r["lost_fraction"], r["events"]))
PY
read -r -d '' table_py <<'PY' || true
import json, sys
def fmt(o):
    if o is None:
        return "-"
    if not o["triggered"]:
        rec = "no trigger"
    elif o["recovery_s"] is None:
        rec = "never"
    else:
        rec = "{:.0f} s".format(o["recovery_s"])
    lost = "-" if o["lost_fraction"] is None else "{:.2f}%".format(100 * o["lost_fraction"])
    return "{} {}->{} {}".format(rec, o["peak_pods"], o["final_pods"], lost)
print("{:<18} {:<50} {:<24} {:<24} {}".format("case", "published", "fluid pooled", "fluid per-pod", "request level (median)"))
for e in json.load(sys.stdin):
    for c in e["cases"]:
        print("{:<18} {:<50} {:<24} {:<24} {}".format(e["experiment"] + " " + c["name"], c["published"]["text"][:48],
              fmt(c["fluid_pooled"]), fmt(c["fluid_per_pod"]), fmt(c["request_level"])))
PY

echo
echo "== request-level events per second (one thread, one seed)"
for exp in F1 F2 F3; do
  "$bin" predict "$exp" --seeds 1 --format json | python3 -c "$events_py"
done

echo
echo "== F1 at full length: 20,000 s, 4 pods, no spike (expect no timeout at all)"
for topology in pooled per-pod; do
  for rho in 0.50 0.55 0.60 0.65 0.70 0.75 0.80 0.85 0.90 0.95; do
    "$bin" predict --rho "$rho" --horizon 20000s --warmup 0s --seeds 1 --topology "$topology" --format json |
      python3 -c "$f1_py"
  done
done

echo
echo "== published vs model"
"$bin" predict all --format json | python3 -c "$table_py"
