#!/usr/bin/env bash
# Static checks of the Kubernetes path (CI cannot run kind here): every overlay renders,
# every HPA sets behavior explicitly and reads only metrics the meter serves (or, in the cpu
# overlay, the pods' CPU from metrics-server, with l = r, spinning pods told their limit, and
# room for the HPA's ceiling on 2 cores), and the meter and pods agree on ports.
set -euo pipefail
cd "$(dirname "$0")/.."

fail() { echo "check-manifests: $*" >&2; exit 1; }
served="first_attempt_rate ingress_rate retry_rate"

# One object of the rendered stream, by kind and name.
object() { awk -v k="kind: $2" -v n="  name: $3" 'BEGIN {RS = "\n---\n"} index($0 "\n", "\n" k "\n") || index($0, k "\n") == 1 {
  if (index($0 "\n", "\n" n "\n")) print }' <<<"$1"; }
# A container's cpu under resources.limits or resources.requests ("" when unset).
cpu_of() { awk -v s="$2:" '$1 == "resources:" {r = 1} r && $1 ~ /:$/ && $1 != "cpu:" && $1 != "memory:" {in_s = ($1 == s)}
  in_s && $1 == "cpu:" {print $2; exit}' <<<"$1"; }
# Millicores from a CPU quantity (20m, 0.02, 1).
millis() { awk -v q="$1" 'BEGIN { if (q ~ /m$/) { sub(/m$/, "", q); print q + 0 } else print q * 1000 }'; }

check_cpu() {
  local out=$1 hpa dep limit request max spin
  hpa=$(object "$out" HorizontalPodAutoscaler service)
  [[ $(tr -s ' \n' ' ' <<<"$hpa") == *" metrics: - resource: name: cpu target: averageUtilization: 50 type: Utilization type: Resource minReplicas:"* ]] ||
    fail "cpu: the HPA must read one metric, Resource cpu with target Utilization 50%"
  dep=$(object "$out" Deployment service)
  limit=$(cpu_of "$dep" limits) request=$(cpu_of "$dep" requests)
  [[ -n $limit && $(millis "$limit") == "$(millis "$request")" ]] ||
    fail "cpu: the service pods need limits.cpu = requests.cpu (l = r), have limit '$limit', request '$request'"
  grep -qx -- ' *- --work=spin' <<<"$dep" || fail "cpu: the service pods must spin (--work=spin) so their work is CPU"
  spin=$(sed -n 's/^ *- --cpu-limit=//p' <<<"$dep")
  [[ -n $spin && $(millis "$spin") == "$(millis "$limit")" ]] ||
    fail "cpu: --cpu-limit '${spin:-unset}' must be the pods' CPU limit $limit in cores"
  max=$(awk '$1 == "maxReplicas:" {print $2}' <<<"$hpa")
  ((max * $(millis "$request") <= 1000)) ||
    fail "cpu: $max pods at $request request more than 1 core (half of a 2-core machine)"
}

for overlay in first ingress paired cpu; do
  out=$(kubectl kustomize "k8s/overlays/$overlay") || fail "$overlay does not render"
  grep -q '^  behavior:' <<<"$out" || fail "$overlay: HPA without explicit behavior"
  grep -q 'name: v1beta1.external.metrics.k8s.io' <<<"$out" || fail "$overlay: no APIService"
  grep -q 'publishNotReadyAddresses: true' <<<"$out" || fail "$overlay: meter would miss not-ready pods"
  while read -r metric; do
    [[ " $served " == *" $metric "* ]] || fail "$overlay: HPA reads '$metric', which the meter does not serve"
  done < <(awk '/metric:/{getline; if ($1 == "name:") print $2}' <<<"$out")
  [[ $overlay != cpu ]] || check_cpu "$out"
  echo "check-manifests: $overlay ok ($(grep -c '^kind:' <<<"$out") objects)"
done
