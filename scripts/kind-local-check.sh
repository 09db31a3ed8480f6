#!/usr/bin/env bash
# The kit's kind path end to end on this machine, as a user runs it: the cluster at time scale 5
# (scripts/kind-local-up.sh, which runs scripts/cluster-up.sh), scripts/deploy.sh with each
# overlay, F4 paired-no-step and F3 first-attempt through the upstream HPA with their verdicts
# and records checked (scripts/local-cluster-run.sh --kind), and the cluster deleted with
# nothing left (scripts/kind-local-down.sh), also when a step fails. Prints each step's time.
# About 25 minutes with the node image cached; not in CI (its 40 minutes are spent).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/local-cluster.sh
. scripts/lib/local-cluster.sh
# shellcheck source=scripts/lib/kind.sh
. scripts/lib/kind.sh

lc_need_root
t0=$SECONDS
step() { lc_log "kind check: $1 in $((SECONDS - t1)) s"; t1=$SECONDS; }
t1=$SECONDS
trap 'scripts/kind-local-down.sh' EXIT
scripts/kind-local-up.sh --time-scale 5
step "up"
export KUBECONFIG=$KIND_KUBECONFIG
image=$(kubectl -n kube-system get configmap retry-debt-kit-cluster -o jsonpath='{.data.image}')
for overlay in first ingress paired cpu gateway; do
  TAG=${image#retry-debt-kit:} scripts/deploy.sh "$overlay"
  step "deploy.sh $overlay"
done
# What deploy.sh made goes before a run: the APIService first, since while it names a Service
# that is gone the namespace cannot finish deleting (its discovery fails).
kubectl delete apiservice v1beta1.external.metrics.k8s.io --ignore-not-found
kubectl delete namespace retry-debt --timeout=120s
step "deploy.sh's objects deleted"
scripts/local-cluster-run.sh --kind F4 --case paired-no-step
step "F4 paired-no-step"
scripts/local-cluster-run.sh --kind F3 --signal first
step "F3 first-attempt"
trap - EXIT
scripts/kind-local-down.sh
step "down"
lc_log "kind check passed in $((SECONDS - t0)) s"
