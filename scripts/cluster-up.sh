#!/usr/bin/env bash
# Bring up a kind cluster for the kit and load the kit's image into it.
#   scripts/cluster-up.sh            # cluster "retry-debt", image tagged with the git commit
# Needs: docker, kind v0.33.0 exactly, kubectl, and the internet (metrics-server's release
# manifest). Then: scripts/deploy.sh first|ingress|paired|cpu
# The node image (kindest/node:v1.36.4 by digest) is pinned in k8s/kind/cluster.yaml; kind
# supports a node image only with the kind release that built it.
set -euo pipefail
cd "$(dirname "$0")/.."

cluster=${CLUSTER:-retry-debt}
tag=${TAG:-$(git rev-parse --short HEAD 2>/dev/null || echo dev)}
image="retry-debt-kit:${tag}"

for tool in docker kind kubectl; do
  command -v "$tool" >/dev/null || { echo "cluster-up: '$tool' is not on PATH" >&2; exit 1; }
done

config=k8s/kind/cluster.yaml
want_kind=v0.33.0
want_k8s=v1.36.4
# `kind version` prints e.g. "kind v0.33.0 go1.26.1 linux/amd64"; a pre-release (v0.33.0-alpha...)
# is not the release the node image was built with.
have_kind=$(kind version 2>/dev/null | awk '{print $2}')
if [[ "$have_kind" != "$want_kind" ]]; then
  echo "cluster-up: needs kind $want_kind, found '${have_kind:-unknown}' ($(command -v kind))." >&2
  echo "cluster-up: the node image kindest/node:$want_k8s is pinned by digest in $config and is" >&2
  echo "cluster-up: supported only with kind $want_kind. Install it, e.g.:" >&2
  echo "cluster-up:   go install sigs.k8s.io/kind@$want_kind" >&2
  exit 1
fi

if kind get clusters 2>/dev/null | grep -qx "$cluster"; then
  echo "cluster-up: kind cluster '$cluster' exists, reusing it"
  # A cluster left from an older config would be reused silently; refuse it instead.
  have_k8s=$(kubectl --context "kind-$cluster" get nodes \
    -o jsonpath='{range .items[*]}{.status.nodeInfo.kubeletVersion}{"\n"}{end}' | sort -u) || have_k8s=""
  if [[ "$have_k8s" != "$want_k8s" ]]; then
    shown=${have_k8s//$'\n'/ }
    echo "cluster-up: cluster '$cluster' runs kubelet '${shown:-unreachable}', not $want_k8s ($config);" >&2
    echo "cluster-up: delete it (kind delete cluster --name $cluster) and run this again." >&2
    exit 1
  fi
else
  kind create cluster --name "$cluster" --config "$config" --wait 120s
fi

# The cpu overlay's HPA reads the resource metrics API: metrics-server v0.8.0 from its upstream
# release manifest, plus --kubelet-insecure-tls for kind's self-signed kubelet certificates (the
# documented kind setting). One already registered (someone else's) is left as it is.
ms_manifest=https://github.com/kubernetes-sigs/metrics-server/releases/download/v0.8.0/components.yaml
if ! kubectl --context "kind-$cluster" get apiservice v1beta1.metrics.k8s.io >/dev/null 2>&1; then
  echo "cluster-up: installing metrics-server v0.8.0 ($ms_manifest)"
  kubectl --context "kind-$cluster" apply -f "$ms_manifest"
  kubectl --context "kind-$cluster" -n kube-system patch deployment metrics-server --type=json \
    -p '[{"op":"add","path":"/spec/template/spec/containers/0/args/-","value":"--kubelet-insecure-tls"}]'
  kubectl --context "kind-$cluster" -n kube-system rollout status deployment/metrics-server --timeout=180s
fi

echo "cluster-up: building $image"
docker build -f k8s/Dockerfile -t "$image" .
# A unique tag plus imagePullPolicy: IfNotPresent means the nodes use exactly this build.
kind load docker-image "$image" --name "$cluster"
echo "cluster-up: ready. Deploy with: TAG=$tag scripts/deploy.sh first"
