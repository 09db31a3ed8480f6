#!/usr/bin/env bash
# Deploy the kit (pods, meter, APIService, HPA) with one of the HPA signals.
#   TAG=abc1234 scripts/deploy.sh first|ingress|paired|cpu|gateway
# gateway is first with F5's HAProxy in front of the pods (Service gateway, port 8080; its
# stats as CSV on port 8404 at /stats;csv); it needs an image with haproxy (k8s/Dockerfile).
# cpu scales on the pods' CPU: it needs metrics-server (the resource metrics API
# v1beta1.metrics.k8s.io, Available); the one-machine cluster's up installs it.
# Refuses to replace an external metrics APIService that belongs to someone else
# (KEDA and prometheus-adapter register the same name; only one can exist).
set -euo pipefail
cd "$(dirname "$0")/.."

overlay=${1:?usage: scripts/deploy.sh first|ingress|paired|cpu|gateway}
tag=${TAG:-dev}
ns=retry-debt
apiservice=v1beta1.external.metrics.k8s.io

case "$overlay" in
  first | ingress | paired | cpu | gateway) ;;
  *) echo "deploy: overlay must be first, ingress, paired, cpu or gateway, got '$overlay'" >&2; exit 2 ;;
esac
if [[ $overlay == cpu ]] && ! kubectl get apiservice v1beta1.metrics.k8s.io \
  -o jsonpath='{.status.conditions[?(@.type=="Available")].status}' 2>/dev/null | grep -qx True; then
  echo "deploy: the cpu overlay's HPA reads metrics.k8s.io, and APIService v1beta1.metrics.k8s.io is" >&2
  echo "deploy: missing or not Available: install metrics-server first (kind: upstream's v0.8.0 components.yaml)." >&2
  exit 1
fi

owner=$(kubectl get apiservice "$apiservice" -o jsonpath='{.spec.service.namespace}' 2>/dev/null || true)
if [[ -n "$owner" && "$owner" != "$ns" ]]; then
  echo "deploy: APIService $apiservice already points at namespace '$owner' (KEDA? prometheus-adapter?)." >&2
  echo "deploy: refusing to replace it; use a cluster without another external metrics provider." >&2
  exit 1
fi

kubectl get namespace "$ns" >/dev/null 2>&1 || kubectl create namespace "$ns"

# The meter only serves the aggregator: copy the front-proxy client CA next to it.
ca=$(kubectl -n kube-system get configmap extension-apiserver-authentication \
  -o jsonpath='{.data.requestheader-client-ca-file}')
[[ -n "$ca" ]] || { echo "deploy: kube-system/extension-apiserver-authentication has no requestheader-client-ca-file" >&2; exit 1; }
kubectl -n "$ns" create configmap meter-client-ca \
  --from-literal=requestheader-client-ca-file="$ca" --dry-run=client -o yaml | kubectl apply -f -

kubectl kustomize "k8s/overlays/$overlay" \
  | sed "s|image: retry-debt-kit:dev|image: retry-debt-kit:${tag}|" \
  | kubectl apply -f -

kubectl -n "$ns" rollout status deployment/meter --timeout=120s
kubectl -n "$ns" rollout status deployment/service --timeout=300s
[[ $overlay != gateway ]] || kubectl -n "$ns" rollout status deployment/gateway --timeout=120s
kubectl wait --for=condition=Available "apiservice/$apiservice" --timeout=120s
kubectl get --raw "/apis/external.metrics.k8s.io/v1beta1/namespaces/$ns/first_attempt_rate" >/dev/null
echo "deploy: '$overlay' is up; HPA: kubectl -n $ns get hpa service -w"
[[ $overlay != gateway ]] ||
  echo "deploy: clients call http://gateway.$ns.svc.cluster.local:8080/work; counters: kubectl get --raw '/api/v1/namespaces/$ns/services/gateway:stats/proxy/stats;csv'"
