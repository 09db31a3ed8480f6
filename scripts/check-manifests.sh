#!/usr/bin/env bash
# Static checks of the Kubernetes path (CI cannot run kind here): every overlay renders,
# every HPA sets behavior explicitly and reads only metrics the meter serves (or, in the cpu
# overlay, the pods' CPU from metrics-server, with l = r, spinning pods told their limit, and
# room for the HPA's ceiling on 2 cores), and the meter and pods agree on ports; the gateway
# overlay (F5) runs HAProxy from the kit's image with retries, retry-on, a server timeout,
# maxconn under the open-files limit, and one server slot per pod up to the HPA's ceiling,
# resolved from a headless Service of the ready pods only.
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

check_gateway() {
  local out=$1 cfg dep ready gw max slots ns maxconn
  cfg=$(object "$out" ConfigMap gateway | sed -n '/^  haproxy.cfg: |/,/^[a-z]/p' | sed '1d;$d' | sed 's/^    //')
  [[ -n $cfg ]] || fail "gateway: no ConfigMap gateway with haproxy.cfg"
  grep -Eq '^ *retries [0-9]+$' <<<"$cfg" || fail "gateway: haproxy.cfg sets no 'retries N'"
  grep -q '^ *retry-on response-timeout conn-failure$' <<<"$cfg" || fail "gateway: haproxy.cfg must retry on response-timeout conn-failure"
  grep -Eq '^ *timeout server [0-9]+m?s$' <<<"$cfg" || fail "gateway: haproxy.cfg sets no 'timeout server'"
  maxconn=$(awk '$1 == "maxconn" {print $2}' <<<"$cfg" | sort -n | tail -1)
  if [[ -z $maxconn ]] || ((maxconn >= 9000)); then
    fail "gateway: maxconn '${maxconn:-unset}' must be under 9,000: HAProxy needs 2 sockets a connection and a pod may open 20,000 files"
  fi
  grep -q '^ *parse-resolv-conf$' <<<"$cfg" || fail "gateway: the resolvers must read the pod's /etc/resolv.conf (parse-resolv-conf)"
  ns=$(object "$out" Namespace retry-debt | awk '$1 == "name:" {print $2; exit}')
  max=$(awk '$1 == "maxReplicas:" {print $2}' <<<"$(object "$out" HorizontalPodAutoscaler service)")
  slots=$(sed -n "s/^ *server-template pod 1-\([0-9]*\) service-ready\.$ns\.svc\.cluster\.local:8080 .*resolvers kube.*/\1/p" <<<"$cfg")
  [[ -n $slots ]] || fail "gateway: no 'server-template pod 1-N service-ready.$ns.svc.cluster.local:8080 ... resolvers kube'"
  [[ $slots == "$max" ]] || fail "gateway: $slots server slots, but the HPA can make $max pods"
  grep -q '^ *stats uri /stats$' <<<"$cfg" || fail "gateway: no stats page at /stats (the runner reads /stats;csv)"
  ready=$(object "$out" Service service-ready)
  grep -q 'clusterIP: None' <<<"$ready" || fail "gateway: Service service-ready must be headless"
  ! grep -q 'publishNotReadyAddresses: true' <<<"$ready" || fail "gateway: service-ready must list only ready pods"
  gw=$(object "$out" Service gateway)
  grep -q 'port: 8080' <<<"$gw" || fail "gateway: Service gateway needs port 8080 (http)"
  grep -q 'port: 8404' <<<"$gw" || fail "gateway: Service gateway needs port 8404 (stats)"
  dep=$(object "$out" Deployment gateway)
  [[ $(tr -s ' \n' ' ' <<<"$dep") == *"command: - /usr/sbin/haproxy - -db - -f - /etc/haproxy/haproxy.cfg"* ]] ||
    fail "gateway: the Deployment must run /usr/sbin/haproxy -db -f /etc/haproxy/haproxy.cfg"
  grep -q 'image: retry-debt-kit:' <<<"$dep" || fail "gateway: the Deployment must run the kit's image"
  if command -v haproxy >/dev/null; then
    haproxy -c -q -f /dev/stdin <<<"$cfg" || fail "gateway: haproxy -c refuses haproxy.cfg"
  fi
}

for overlay in first ingress paired cpu gateway; do
  out=$(kubectl kustomize "k8s/overlays/$overlay") || fail "$overlay does not render"
  grep -q '^  behavior:' <<<"$out" || fail "$overlay: HPA without explicit behavior"
  grep -q 'name: v1beta1.external.metrics.k8s.io' <<<"$out" || fail "$overlay: no APIService"
  grep -q 'publishNotReadyAddresses: true' <<<"$out" || fail "$overlay: meter would miss not-ready pods"
  while read -r metric; do
    [[ " $served " == *" $metric "* ]] || fail "$overlay: HPA reads '$metric', which the meter does not serve"
  done < <(awk '/metric:/{getline; if ($1 == "name:") print $2}' <<<"$out")
  [[ $overlay != cpu ]] || check_cpu "$out"
  [[ $overlay != gateway ]] || check_gateway "$out"
  echo "check-manifests: $overlay ok ($(grep -c '^kind:' <<<"$out") objects)"
done
