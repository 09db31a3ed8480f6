#!/usr/bin/env bash
# Runs the kit's kind path on a machine like this one (no registry, no Docker engine able to
# start privileged containers): podman as kind's engine, kind v0.33.0 built from its Go
# module, a node image built from the kit's own builds, metrics-server built from its module,
# the nodes on a guarded network in 198.18.0.0/15; then scripts/cluster-up.sh, as users run it,
# with those as its overrides.
#
#   scripts/kind-local-up.sh [--time-scale S]   bring it up (or reuse it); prints the KUBECONFIG
#   scripts/kind-local-down.sh                  delete it and check that nothing is left
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/local-cluster-lib.sh
. scripts/local-cluster-lib.sh
# shellcheck source=scripts/kind-lib.sh
. scripts/kind-lib.sh

lc_need_root
t0=$SECONDS
kind_engine_setup
node_image=$(scripts/kind-node-image.sh)
kind_dir=$(kind_build)
infra=$(lc_infra_images "$(scripts/local-cluster-build.sh)")
mkdir -p "$KIND_STATE"
kind_network_up
# kind mounts the host's /lib/modules into each node; this VM's kernel has none and podman
# will not mount a missing path: an empty one, removed by down when it made it.
if [[ ! -e /lib/modules ]]; then
  mkdir /lib/modules
  echo /lib/modules >"$KIND_STATE/created-host-paths"
fi
# The pods' and Services' ranges: beside the nodes', apart from the one-machine cluster's.
PATH=$kind_dir:$PATH KUBECONFIG=$KIND_KUBECONFIG KIND_EXPERIMENTAL_PROVIDER=podman \
  KIND_NODE_IMAGE=$node_image KIND_SUBNETS="$KIND_POD_SUBNET $KIND_SERVICE_SUBNET" \
  METRICS_SERVER_IMAGE_ARCHIVE=$infra/metrics-server.tar scripts/cluster-up.sh "$@"
lc_log "kind cluster up in $((SECONDS - t0)) s"
echo "export KUBECONFIG=$KIND_KUBECONFIG"
