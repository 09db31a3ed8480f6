#!/usr/bin/env bash
# The falsification suite on the embedded local cluster, with a table of measured figures against
# the per-pod and pooled fluid predictions (ratios), every verdict, and the CPU of runner + meter.
#
#   scripts/embedded-suite.sh                 # F1-F4 at S = 10 (about 50 min on 2 cores)
#   ONLY=F2 HORIZON=12000s scripts/embedded-suite.sh     # part of it
#   TIME_SCALE=20 RATE_SCALE=0.5 ONLY=F3,F4 scripts/embedded-suite.sh
#   SESSIONS=runs/A-suite,runs/B-suite scripts/embedded-suite.sh   # only the table, of records
#
# The light fixed-capacity experiments (F1, F2: 4 pods, 20,000 s of experiment time per case)
# run side by side, LIGHT_JOBS at once (default 4); the autoscaled ones (F3, F4: up to 50 pods)
# run one at a time after them, so they do not share the machine.
#
# Targets (issue 7): F2 at 30% recovers within 10% of the per-pod prediction; every verdict as
# predicted; runner and meter together under 10% of one core.
set -euo pipefail

cd "$(dirname "$0")/.."
TIME_SCALE="${TIME_SCALE:-10}"
RATE_SCALE="${RATE_SCALE:-1}"
ONLY="${ONLY:-F1,F2,F3,F4}"
LIGHT_JOBS="${LIGHT_JOBS:-4}"
OUT="${OUT:-runs}"
TARGET="${CARGO_TARGET_DIR:-target}"

command -v jq >/dev/null || { echo "embedded-suite: needs jq (apt-get install jq)" >&2; exit 1; }

# suite IDS JOBS: runs those experiments, appends the session directory to $sessions.
sessions=()
suite() {
  local args=(suite --only "$1" --jobs "$2" --time-scale "$TIME_SCALE" --rate-scale "$RATE_SCALE" --out "$OUT")
  if [[ -n "${HORIZON:-}" ]]; then
    args+=(--horizon "$HORIZON")
  fi
  local log
  log="$(mktemp)"
  "$TARGET/release/falsification" "${args[@]}" | tee "$log"
  sessions+=("$(sed -n 's/^index: \(.*\)\/index.md .*/\1/p' "$log")")
  rm -f "$log"
}

if [[ -n "${SESSIONS:-}" ]]; then
  IFS=, read -ra sessions <<<"$SESSIONS"
else
  cargo build --release --workspace
  IFS=, read -ra wanted <<<"$ONLY"
  light=() heavy=()
  for id in "${wanted[@]}"; do
    case "$id" in
      F1 | F2) light+=("$id") ;;
      *) heavy+=("$id") ;;
    esac
  done
  if ((${#light[@]})); then
    suite "$(IFS=,; echo "${light[*]}")" "$LIGHT_JOBS"
  fi
  if ((${#heavy[@]})); then
    suite "$(IFS=,; echo "${heavy[*]}")" 1
  fi
fi
indexes=()
for s in "${sessions[@]}"; do
  [[ -f "$s/index.json" ]] || { echo "embedded-suite: no index in '$s'" >&2; exit 1; }
  indexes+=("$s/index.json")
done
all="$(jq -s add "${indexes[@]}")"

echo
echo "S = $TIME_SCALE, rate scale $RATE_SCALE; figures in experiment time; ratio = measured / predicted"
echo
echo "| case | verdict | recovery measured | per pod | pooled | ratio per pod | ratio pooled | peak pods m/pp/po | final pods m/pp/po | lost m/pp/po | matches | CPU runner+meter |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
jq -r '
  def rec(o): if o.triggered | not then "not triggered" elif o.recovery_s == null then "never" else "\(o.recovery_s | round) s" end;
  def ratio(a; b): if a.recovery_s != null and b.recovery_s != null and b.recovery_s > 0
                   then "\((a.recovery_s / b.recovery_s * 100 | round) / 100)"
                   elif a.trapped == b.trapped then "both \(if a.trapped then "trapped" else "ok" end)"
                   else "differ" end;
  def pct(x): if x == null then "-" else "\((x * 1000 | round) / 10)%" end;
  .[] | "| \(.experiment) \(.case) | \(.verdict) | \(rec(.measured)) | \(rec(.fluid_per_pod)) | \(rec(.fluid_pooled)) | \(ratio(.measured; .fluid_per_pod)) | \(ratio(.measured; .fluid_pooled)) | \(.measured.peak_pods)/\(.fluid_per_pod.peak_pods)/\(.fluid_pooled.peak_pods) | \(.measured.final_pods)/\(.fluid_per_pod.final_pods)/\(.fluid_pooled.final_pods) | \(pct(.measured.lost_fraction))/\(pct(.fluid_per_pod.lost_fraction))/\(pct(.fluid_pooled.lost_fraction)) | \(.matches) | \(((.runner_cpu + .meter_cpu) * 1000 | round) / 10)% |"
' <<<"$all"

echo
jq -r '
  .[] | select(.experiment == "F2" and .case == "rho-30") |
  if .measured.recovery_s != null and .fluid_per_pod.recovery_s != null then
    (.measured.recovery_s / .fluid_per_pod.recovery_s - 1) as $d |
    "F2 rho-30: measured \(.measured.recovery_s | round) s vs per pod \(.fluid_per_pod.recovery_s | round) s: \(($d * 1000 | round) / 10)% (target within 10%: \(if ($d | fabs) <= 0.1 then "met" else "NOT met" end))"
  else "F2 rho-30: no recovery time to compare (measured \(.measured.recovery_s), per pod \(.fluid_per_pod.recovery_s))" end
' <<<"$all"
jq -r '
  (map(.runner_cpu + .meter_cpu) | max) as $cpu |
  "largest runner + meter CPU over the cases: \(($cpu * 1000 | round) / 10)% of one core (target < 10%: \(if $cpu < 0.1 then "met" else "NOT met" end))"
' <<<"$all"
echo "records: ${sessions[*]}"
