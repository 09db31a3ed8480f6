#!/usr/bin/env bash
# Checks the kit on the one-machine cluster (CI runs it after local-cluster-up.sh): the real
# node and release, deploy.sh refusing someone else's APIService, the kit deployed with the
# same overlays and script as on kind, the meter behind the real aggregator (and only behind
# it), its rate within 10% of what a loadgen in the cluster sends through the Service, the
# real HPA reading it and scaling, the meter counting not-ready pods, metrics-server serving
# the kit's pods' CPU (the cpu overlay's signal), and a pod removed by scale-down stopping
# through its SIGTERM path. Prints one line per check; exits 1 on the
# first that fails (leaving the kit deployed, to look at). When all pass it removes the kit
# (namespace, APIService, RBAC), so `falsification run --cluster kube` finds a clean cluster.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/local-cluster.sh
. scripts/lib/local-cluster.sh

export KUBECONFIG=$LC_STATE/kubeconfig
LC_BIN=$(scripts/local-cluster-build.sh --print)
export PATH=$LC_BIN:$PATH
ns=retry-debt
apiservice=v1beta1.external.metrics.k8s.io
image=$(cat "$LC_STATE/image")
t0=$SECONDS
ok() { echo "check ok ($((SECONDS - t0)) s): $*"; }
fail() { echo "check FAILED: $*" >&2; kubectl -n "$ns" get pods,hpa 2>&1 | sed 's/^/  /' >&2 || true; exit 1; }
metric() { kubectl get --raw "/apis/external.metrics.k8s.io/v1beta1/namespaces/$ns/$1" | jq -r '.items[0].value'; }
# A resource.Quantity as a number: 1500m -> 1.5.
quantity() { awk -v q="$1" 'BEGIN{ if (q ~ /m$/) { sub(/m$/, "", q); print q / 1000 } else print q + 0 }'; }
meter_gauge() {
  kubectl get --raw "/api/v1/namespaces/$ns/services/meter:metrics/proxy/metrics" | awk -v n="$1" '$1 == n {print $2}'
}
lc_apt_install jq

# 1. The node runs the pinned release.
version=$(kubectl get node "$LC_NODE_NAME" -o jsonpath='{.status.nodeInfo.kubeletVersion}')
[[ $version == "$LC_K8S_VERSION" ]] || fail "node reports kubeletVersion '$version', expected $LC_K8S_VERSION"
kubectl wait --for=condition=Ready "node/$LC_NODE_NAME" --timeout=10s >/dev/null || fail "node not Ready"
ok "node $LC_NODE_NAME Ready, kubeletVersion $version"

# 2. deploy.sh never replaces an external metrics APIService that points elsewhere.
kubectl apply -f - >/dev/null <<EOF
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: $apiservice}
spec: {group: external.metrics.k8s.io, version: v1beta1, groupPriorityMinimum: 100, versionPriority: 100,
       insecureSkipTLSVerify: true, service: {name: someone-elses-adapter, namespace: someone-else, port: 443}}
EOF
before=$(kubectl get apiservice "$apiservice" -o jsonpath='{.metadata.resourceVersion}')
if TAG=${image#*:} scripts/deploy.sh first >/tmp/rdk-deploy-refused.log 2>&1; then fail "deploy.sh replaced another APIService"; fi
grep -q "refusing to replace" /tmp/rdk-deploy-refused.log || fail "deploy.sh failed without saying why: $(tail -1 /tmp/rdk-deploy-refused.log)"
after=$(kubectl get apiservice "$apiservice" -o jsonpath='{.metadata.resourceVersion}/{.spec.service.namespace}')
[[ $after == "$before/someone-else" ]] || fail "the other APIService changed ($before -> $after)"
kubectl delete apiservice "$apiservice" >/dev/null
ok "deploy.sh refused to replace an APIService pointing at namespace someone-else, and left it untouched"

# 3. The kit, with the script and overlays kind uses; only the image reference differs.
TAG=${image#*:} scripts/deploy.sh first >/tmp/rdk-deploy.log 2>&1 || fail "deploy.sh first: $(tail -3 /tmp/rdk-deploy.log)"
ok "deployed overlay 'first' with $image; APIService $(kubectl get apiservice "$apiservice" -o jsonpath='{.status.conditions[?(@.type=="Available")].status}')"

# 3b. metrics-server serves the kit's pods' CPU through the aggregator (what the cpu overlay's
# HPA reads), as `kubectl top` shows it. The pods ran their dead time, so a rate exists.
top=$(kubectl -n "$ns" top pods -l app.kubernetes.io/name=service --no-headers 2>&1) ||
  fail "kubectl top pods in $ns: $top"
served=$(kubectl get --raw "/apis/metrics.k8s.io/v1beta1/namespaces/$ns/pods?labelSelector=app.kubernetes.io%2Fname%3Dservice" |
  jq '[.items[] | select(.containers[0].usage.cpu != null)] | length')
((served >= 4)) || fail "metrics.k8s.io has CPU for $served of the 4 service pods"
ok "metrics-server serves CPU for $served service pods: $(awk '{printf "%s ", $2}' <<<"$top")(kubectl top)"

# 4. Only the aggregator may read the meter's API: a client without its certificate is refused.
meter_ip=$(kubectl -n "$ns" get pod -l app.kubernetes.io/name=meter -o jsonpath='{.items[0].status.podIP}')
code=$(curl -sk -o /dev/null -w '%{http_code}' -H 'X-Remote-User: system:kube-aggregator' \
  "https://$meter_ip:6443/apis/external.metrics.k8s.io/v1beta1/namespaces/$ns/first_attempt_rate" || true)
[[ $code == 401 || $code == 403 || $code == 000 ]] || fail "the meter answered $code to a client without the aggregator's certificate"
ok "the meter refuses a client without the aggregator's certificate (HTTP $code)"

# 5. A known rate through the Service, read back through the aggregator within 10%.
rate=300
kubectl -n "$ns" run loadgen-check --image "$image" --image-pull-policy IfNotPresent --restart Never \
  --command -- /usr/local/bin/loadgen --target "http://service.$ns.svc.cluster.local/work" \
  --rate "$rate" --arrivals constant --timeout 10s --duration 100s >/dev/null
kubectl -n "$ns" wait --for=condition=Ready pod/loadgen-check --timeout=60s >/dev/null || fail "loadgen pod not running"
sleep 45 # the meter's window is 30 s
value=$(quantity "$(metric first_attempt_rate)")
awk -v v="$value" -v r="$rate" 'BEGIN{exit !(v >= 0.9 * r && v <= 1.1 * r)}' ||
  fail "first_attempt_rate through the API server is $value, the loadgen sends $rate/s"
ok "first_attempt_rate through the aggregator: $value/s for $rate/s sent through the Service"

# 6. The real HPA reads it (ValidMetricFound) and scales: 300/s at 50 per pod wants 6 pods.
for _ in $(seq 60); do
  desired=$(kubectl -n "$ns" get hpa service -o jsonpath='{.status.desiredReplicas}')
  [[ ${desired:-0} -ge 6 ]] && break
  sleep 1
done
kubectl -n "$ns" describe hpa service | grep -q ValidMetricFound || fail "the HPA has not found the external metric"
[[ ${desired:-0} -ge 6 ]] || fail "the HPA did not scale up (desired ${desired:-none} at $value/s)"
ok "HPA ValidMetricFound; desired $desired replicas at $value first attempts/s"

# 7. The meter lists every pod, ready or not (new pods wait out their 90 s dead time).
for _ in $(seq 30); do
  listed=$(meter_gauge retrydebt_meter_pods_listed)
  ready=$(kubectl -n "$ns" get deploy service -o jsonpath='{.status.readyReplicas}')
  [[ ${listed%.*} -ge 6 ]] && break
  sleep 1
done
[[ ${listed%.*} -ge 6 && ${ready:-0} -lt ${listed%.*} ]] || fail "the meter lists ${listed:-none} pods with $ready ready"
ok "the meter lists $listed pods through the headless Service, $ready of them ready"

# 8. Scale-down (the HPA, capped at 4): a removed pod stops through its SIGTERM path.
newest=$(kubectl -n "$ns" get pods -l app.kubernetes.io/name=service --sort-by=.metadata.creationTimestamp -o name | tail -1)
kubectl -n "$ns" logs -f "$newest" >/tmp/rdk-scaled-down-pod.log 2>&1 &
logs=$!
kubectl -n "$ns" patch hpa service --type merge -p '{"spec":{"maxReplicas":4}}' >/dev/null
kubectl -n "$ns" wait --for=delete "$newest" --timeout=120s >/dev/null || fail "$newest was not removed"
wait "$logs" || true
grep -q "SIGTERM received" /tmp/rdk-scaled-down-pod.log || fail "$newest's log has no SIGTERM"
grep -q "stopped" /tmp/rdk-scaled-down-pod.log || fail "$newest did not reach its clean stop (killed?)"
ok "$newest, removed by scale-down, logged 'SIGTERM received' ... 'stopped'"
# What deploy.sh applied, named by the same overlay (the namespace takes the rest with it).
kubectl kustomize k8s/overlays/first | kubectl delete --timeout=120s -f - >/dev/null || fail "the kit was not removed"
echo "local-cluster-check: all checks passed in $((SECONDS - t0)) s; the kit is removed again"
