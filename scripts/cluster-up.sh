#!/usr/bin/env bash
# Bring up a kind cluster for the kit and load the kit's image into it.
#   scripts/cluster-up.sh            # cluster "retry-debt", image tagged with the git commit
# Needs: docker, kind, kubectl. Then: scripts/deploy.sh first|ingress|paired
set -euo pipefail
cd "$(dirname "$0")/.."

cluster=${CLUSTER:-retry-debt}
tag=${TAG:-$(git rev-parse --short HEAD 2>/dev/null || echo dev)}
image="retry-debt-kit:${tag}"

for tool in docker kind kubectl; do
  command -v "$tool" >/dev/null || { echo "cluster-up: '$tool' is not on PATH" >&2; exit 1; }
done

if kind get clusters 2>/dev/null | grep -qx "$cluster"; then
  echo "cluster-up: kind cluster '$cluster' exists, reusing it"
else
  kind create cluster --name "$cluster" --config k8s/kind/cluster.yaml --wait 120s
fi

echo "cluster-up: building $image"
docker build -f k8s/Dockerfile -t "$image" .
# A unique tag plus imagePullPolicy: IfNotPresent means the nodes use exactly this build.
kind load docker-image "$image" --name "$cluster"
echo "cluster-up: ready. Deploy with: TAG=$tag scripts/deploy.sh first"
