#!/usr/bin/env bash
# The input series of k8s/prometheus/retry-debt-rules.test.yaml, from a real embedded run of the
# kit: what a Prometheus scraping the run's pods and meter would have stored, in promtool's
# `input_series` notation. Two steps:
#
#   scripts/prometheus-series.sh capture PID OUT [EVERY_S]
#       While the embedded run PID (`falsification run ...`, started just before) lives, read the
#       /metrics of each of its `service` children (the pods, starting and terminating ones too)
#       and of its `meter` child every EVERY_S seconds of run time (default 0.25) and append one
#       line per sample to OUT: `UNIX_S NAME INSTANCE SERIES VALUE`, NAME the pod's --pod-name or
#       `meter`. Only the series the rules read are kept.
#
#   scripts/prometheus-series.sh convert OUT S FROM_UNIX_S STEP_S POINTS [NAMESPACE]
#       Print the `input_series` entries of POINTS scrapes STEP_S seconds of experiment time
#       apart, the first at FROM_UNIX_S (run time, a UNIX_S of OUT). Each point takes the
#       capture round nearest to it (within half a step), so a point is one real scrape, never
#       an interpolation. The run is stretched back to experiment time, so that rules written
#       for real time (5m windows, `for: 10m`) read it: times x S (the scrape grid; the wait
#       gauge and the busy-seconds counter, both in seconds); the meter's rates (per run second)
#       / S; counts as counted. So A, utilization and wait / timeout are the run's own, and
#       rates read 1/S of the run's. A pod absent from a round before its first scrape is `_`;
#       one gone after scrapes is `stale` (as Prometheus marks a vanished target), then `_`.
#       Labels are those a PodMonitor in NAMESPACE (default retry-debt) would attach: namespace,
#       job (`NAMESPACE/service` or `NAMESPACE/meter`), instance (the loopback address the
#       process listened on) and pod. Seconds keep 2 decimals, rates 4; repeats are written in
#       promtool's expanding notation (`5x3`, `_x2`). With AS_HTTP_REQUESTS=1 every pod's
#       arrivals counter is given again, the same values (a YAML alias), as
#       `http_requests_total{attempt=...}`: the generic form's label convention.
#
# Needs curl and awk; Linux /proc (the children of PID and their command lines).
set -euo pipefail

usage() {
  sed -n '2,/^# Needs/p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

# The series the rules read; everything else a pod or the meter exports is left out.
KEEP='^(retrydebt_arrivals_total|retrydebt_completions_total|retrydebt_busy_seconds_total|retrydebt_wait_seconds|retrydebt_ready|retrydebt_meter_first_attempt_rate|retrydebt_meter_ingress_rate|retrydebt_meter_published)([{ ]|$)'

capture() {
  (($# >= 2)) || usage
  local pid=$1 out=$2 every=${3:-0.25}
  kill -0 "$pid" 2>/dev/null || { echo "prometheus-series: no process $pid" >&2; exit 1; }
  : >"$out"
  # A child's listen address and name, read once per child process from its command line
  # (keyed by pid and start time, so a reused pid is read again).
  declare -A addr name
  local child key arg comm t urls names st
  while kill -0 "$pid" 2>/dev/null; do
    t=$EPOCHREALTIME
    urls=() names=""
    for child in $(pgrep -P "$pid" || true); do
      read -r -a st 2>/dev/null <"/proc/$child/stat" || continue
      key=$child:${st[21]}
      if [[ -z ${addr[$key]:-} ]]; then
        comm=${st[1]//[()]/}
        [[ $comm == service || $comm == meter ]] || { addr[$key]=-; continue; }
        name[$key]=$comm
        while IFS= read -r -d '' arg; do
          case $arg in
            --listen=*) addr[$key]=${arg#--listen=} ;;
            --pod-name=*) name[$key]=${arg#--pod-name=} ;;
          esac
        done 2>/dev/null <"/proc/$child/cmdline" || continue
        [[ -n ${addr[$key]:-} ]] || addr[$key]=-
      fi
      [[ ${addr[$key]} != - ]] || continue
      urls+=("http://${addr[$key]}/metrics")
      names+=" ${addr[$key]}=${name[$key]}"
    done
    if ((${#urls[@]})); then
      # One curl for the round; a marker line after each body says whose it was.
      curl -s --max-time 1 -w '\n#@ %{url_effective}\n' "${urls[@]}" 2>/dev/null |
        awk -v t="$t" -v keep="$KEEP" -v names="$names" '
          BEGIN { split(names, m, " "); for (i in m) { split(m[i], p, "="); who[p[1]] = p[2] } }
          /^#@ / { a = $2; sub(/^http:\/\//, "", a); sub(/\/metrics$/, "", a)
                   for (i = 1; i <= n; i++) print t, who[a], a, line[i]; n = 0; next }
          /^#/ || NF == 0 { next }
          $0 ~ keep { line[++n] = $0 }' >>"$out" || true
    fi
    sleep "$every"
  done
}

convert() {
  (($# >= 5)) || usage
  local out=$1 scale=$2 from=$3 step=$4 points=$5 ns=${6:-retry-debt}
  awk -v scale="$scale" -v from="$from" -v step="$step" -v points="$points" -v ns="$ns" \
    -v http="${AS_HTTP_REQUESTS:-}" '
    # Fields: UNIX_S NAME INSTANCE SERIES VALUE.
    {
      t = $1
      if (!(t in seen)) { seen[t] = 1; rounds[++nr] = t }
      metric = $4; labels = ""
      if (match(metric, /\{.*\}/)) { labels = substr(metric, RSTART + 1, RLENGTH - 2); metric = substr(metric, 1, RSTART - 1) }
      job = ($2 == "meter") ? ns "/meter" : ns "/service"
      extra = "namespace=\"" ns "\",job=\"" job "\",instance=\"" $3 "\",pod=\"" $2 "\""
      key = metric "{" (labels == "" ? "" : labels ",") extra "}"
      if (!(key in known)) { known[key] = 1; order[++nk] = key; kind[key] = metric }
      v[key, t] = $5
    }
    END {
      # The capture round nearest each grid point (run time), if within half a step.
      half = step / scale / 2
      for (k = 0; k < points; k++) {
        g = from + k * step / scale; best = ""
        for (i = 1; i <= nr; i++) {
          d = rounds[i] - g; if (d < 0) d = -d  # string keys, numeric distance
          if (d <= half && (best == "" || d < bestd)) { best = rounds[i]; bestd = d }
        }
        at[k] = best
      }
      for (j = 1; j <= nk; j++) {
        key = order[j]; m = kind[key]; vals = ""; any = 0; was = 0; gone = 0
        for (k = 0; k < points; k++) {
          if (at[k] != "" && ((key, at[k]) in v)) {
            x = v[key, at[k]] + 0
            if (m == "retrydebt_wait_seconds" || m == "retrydebt_busy_seconds_total") x = x * scale
            else if (m ~ /^retrydebt_meter_.*_rate$/) x = x / scale
            # Seconds to the hundredth (half a millisecond of run time at S = 20), rates to 4 places.
            s = (x == int(x)) ? sprintf("%d", x) : sprintf(m ~ /seconds/ ? "%.2f" : "%.4f", x)
            if (index(s, ".")) { sub(/0+$/, "", s); sub(/\.$/, "", s) }
            any = 1; was = 1; gone = 0
          } else if (was && !gone) { s = "stale"; gone = 1 }
          else s = "_"
          tok[k] = s
        }
        # Runs in the expanding notation of promtool: `VxN` is V and N more of it, `_xN` N gaps.
        vals = ""
        for (k = 0; k < points; k = e) {
          for (e = k + 1; e < points && tok[e] == tok[k]; e++) {}
          n = e - k
          if (n == 1 || tok[k] == "stale") r = tok[k]
          else if (tok[k] == "_") r = "_x" n
          else r = tok[k] "x" (n - 1)
          if (tok[k] == "stale") for (i = 1; i < n; i++) r = r " stale"
          vals = vals (k ? " " : "") r
        }
        if (!any) continue
        anchor = ""
        if (http && m == "retrydebt_arrivals_total") { anchor = "&a" j " "; alias[j] = key }
        printf "      - series: %c%s%c\n        values: %s%c%s%c\n", 39, key, 39, anchor, 39, vals, 39
      }
      for (j = 1; j <= nk; j++) if (j in alias) {
        key = alias[j]; sub(/^retrydebt_arrivals_total/, "http_requests_total", key)
        printf "      - series: %c%s%c\n        values: *a%d\n", 39, key, 39, j
      }
    }' "$out"
}

case ${1:-} in
  capture) shift; capture "$@" ;;
  convert) shift; convert "$@" ;;
  *) usage ;;
esac
