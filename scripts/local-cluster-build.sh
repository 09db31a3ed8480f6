#!/usr/bin/env bash
# Builds the one-machine cluster's programs from their pinned upstream Go modules
# (k8s/local/build/<name>/go.mod): Kubernetes v1.36.4 (the release of kind v0.33.0's node
# image), etcd, containerd with its runc shim, runc, the CNI plugins, CoreDNS, metrics-server,
# crictl, the pause program, and kubeadm (for scripts/kind-node-image.sh). Binaries go to a
# cache folder outside the clone, keyed by the pinned set and the Go version; a second run
# with the same key reuses them.
#
#   scripts/local-cluster-build.sh            build (or reuse) and print the bin folder
#   scripts/local-cluster-build.sh --print    print the bin folder the current key uses
#
# Env: RDK_CACHE (default /var/cache/retry-debt-kit), the cache root.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/local-cluster.sh
. scripts/lib/local-cluster.sh

bin_dir=$(lc_bin_dir)
if [[ ${1-} == --print ]]; then
  echo "$bin_dir"
  exit 0
fi
if [[ -f $bin_dir/.complete ]]; then
  lc_log "reusing $bin_dir"
  echo "$bin_dir"
  exit 0
fi

lc_need_root
lc_apt_install iptables conntrack buildah debootstrap libseccomp-dev pkg-config openssl gcc libc6-dev
command -v go >/dev/null || lc_die "go is not on PATH (the build uses the machine's Go and the Go module proxy)"

mkdir -p "$bin_dir.partial/cni"
out=$bin_dir.partial
build=k8s/local/build
t0=$SECONDS
step() { lc_log "built $1 in $((SECONDS - t1)) s"; t1=$SECONDS; }
t1=$SECONDS

# Kubernetes: the version ldflags make the Node and `kubectl version` report the release
# (without them every binary says v0.0.0-master+$Format:%H$ and kubectl cannot parse it).
k8s_version=v1.36.4
ldflags="-s -w"
for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
  ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=36"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
(cd "$build/kubernetes" && go build -ldflags "$ldflags" -o "$out/" \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet \
  k8s.io/kubernetes/cmd/kube-proxy k8s.io/kubernetes/cmd/kubectl k8s.io/kubernetes/cmd/kubeadm)
step kubernetes

(cd "$build/etcd" && go build -ldflags "-s -w" -o "$out/etcd" go.etcd.io/etcd/server/v3)
step etcd

# containerd without the snapshotters this node does not use (they need cgo or kernel headers).
(cd "$build/containerd" && CGO_ENABLED=0 go build -ldflags "-s -w" -tags "no_btrfs no_devmapper no_zfs" -o "$out/" \
  github.com/containerd/containerd/v2/cmd/containerd \
  github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
  github.com/containerd/containerd/v2/cmd/ctr)
step containerd

(cd "$build/runc" && CGO_ENABLED=1 go build -ldflags "-s -w" -tags seccomp -o "$out/runc" github.com/opencontainers/runc)
step runc

(cd "$build/cni" && go build -ldflags "-s -w" -o "$out/cni/" \
  github.com/containernetworking/plugins/plugins/main/bridge \
  github.com/containernetworking/plugins/plugins/ipam/host-local \
  github.com/containernetworking/plugins/plugins/main/loopback \
  github.com/containernetworking/plugins/plugins/meta/portmap)
step cni

(cd "$build/crictl" && go build -ldflags "-s -w" -o "$out/crictl" sigs.k8s.io/cri-tools/cmd/crictl)
step crictl

(cd "$build/coredns" && CGO_ENABLED=0 go build -ldflags "-s -w" -o "$out/coredns" github.com/coredns/coredns)
step coredns

# metrics-server, the resource metrics API (metrics.k8s.io) behind the HPA's cpu signal: static,
# -trimpath and the version ldflags as upstream's Makefile builds it (without them it reports
# v0.0.0-master+$Format:%H$). The version is the one the wrapper pins.
ms_version=$(cd "$build/metrics-server" && go list -m -f '{{.Version}}' sigs.k8s.io/metrics-server)
ms_ldflags="-s -w"
for kv in "gitVersion=$ms_version" gitTreeState=clean buildDate=1970-01-01T00:00:00Z; do
  ms_ldflags+=" -X k8s.io/client-go/pkg/version.$kv"
done
(cd "$build/metrics-server" && CGO_ENABLED=0 go build -trimpath -ldflags "$ms_ldflags" -o "$out/metrics-server" \
  sigs.k8s.io/metrics-server/cmd/metrics-server)
step metrics-server

# The pod sandbox's pause program, from the same Kubernetes module (there is no registry to
# pull registry.k8s.io/pause from).
pause_src=$(cd "$build/kubernetes" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)/build/pause/linux/pause.c
gcc -Os -static -DVERSION="$k8s_version" -o "$out/pause" "$pause_src"
strip "$out/pause"
step pause

touch "$out/.complete"
rm -rf "$bin_dir"
mv "$out" "$bin_dir"
lc_log "all built in $((SECONDS - t0)) s -> $bin_dir"
echo "$bin_dir"
