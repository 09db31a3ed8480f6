#!/usr/bin/env bash
# Runs the kit's kind path on a machine like this one (no registry, no Docker engine able to
# start privileged containers): podman as kind's engine, kind v0.33.0 built from its Go
# module, a node image built from the kit's own builds, metrics-server built from its module,
# the kit's image made without Docker, the nodes on a guarded network in 198.18.0.0/15; then
# scripts/cluster-up.sh, as users run it, with those as its overrides.
#
#   scripts/kind-local-up.sh [--time-scale S]   bring it up (or reuse it); prints the KUBECONFIG
#   scripts/kind-local-down.sh                  delete it and check that nothing is left
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/local-cluster.sh
. scripts/lib/local-cluster.sh
# shellcheck source=scripts/lib/kind.sh
. scripts/lib/kind.sh

lc_need_root
t0=$SECONDS
kind_engine_setup
node_image=$(scripts/kind-node-image.sh)
kind_dir=$(kind_build)
bin=$(scripts/local-cluster-build.sh)
infra=$(lc_infra_images "$bin")
kit_archive=$(scripts/image-build.sh --archive)
kit_tag=${kit_archive##*/retry-debt-kit-}
# podman's CNI makes /run/netns and bind-mounts it onto itself; down undoes what was not there.
[[ -e /run/netns ]] || echo /run/netns >>"$KIND_STATE/created-host-paths"
mountpoint -q /run/netns || echo /run/netns >"$KIND_STATE/mounted-by-us"
kind_network_up
# kind mounts the host's /lib/modules into each node; this VM's kernel has none and podman
# will not mount a missing path: an empty one, removed by down when it made it.
if [[ ! -e /lib/modules ]]; then
  mkdir /lib/modules
  echo /lib/modules >>"$KIND_STATE/created-host-paths"
fi
PATH=$kind_dir:$PATH KUBECONFIG=$KIND_KUBECONFIG KIND_EXPERIMENTAL_PROVIDER=podman \
  KIND_EXPERIMENTAL_PODMAN_NETWORK=$KIND_NET KIND_NODE_IMAGE=$node_image \
  KIND_SUBNETS="$KIND_POD_SUBNET $KIND_SERVICE_SUBNET" METRICS_SERVER_IMAGE_ARCHIVE=$infra/metrics-server.tar \
  KIT_IMAGE_ARCHIVE=$kit_archive TAG=${kit_tag%.tar} scripts/cluster-up.sh "$@"
lc_log "kind cluster up in $((SECONDS - t0)) s"
echo "export KUBECONFIG=$KIND_KUBECONFIG"
