#!/usr/bin/env bash
# Builds a kind node image for Kubernetes v1.36.4 from the kit's own builds, for machines that
# cannot pull kindest/node (no container registry reachable), in the layout of kind v0.33.0's
# images/base (its files, units and containerd config, from the Go module) and
# pkg/build/nodeimage (/kind/version, kubeadm/kubelet/kubectl in /usr/bin, the control plane's
# images preloaded into containerd). Tagged localhost/retry-debt-kit/kind-node:v1.36.4, never
# upstream's name, and stored in podman's image store, where kind's podman provider finds it.
#
#   scripts/kind-node-image.sh      build (or reuse) the image; print its reference
#
# What differs from kindest/node, and why:
# - the binaries are the one-machine cluster's (scripts/local-cluster-build.sh: the same
#   upstream releases built here), and etcd and CoreDNS are the releases it pins, not kubeadm's
#   defaults: the image's labels say which, and scripts/cluster-up.sh tells kubeadm;
# - no kindnetd or local-path-provisioner (neither is served by the Go module proxy): no
#   /kind/manifests, so the cluster is made with disableDefaultCNI and cluster-up.sh gives each
#   node a bridge CNI config and routes; kind falls back to its host-path storage class;
# - packages: kind's list less curl, fuse-overlayfs, nfs-common, open-iscsi and e2fsprogs
#   (nothing the kit runs uses them); containerd may not lower a container's oom_score_adj
#   (restrict_oom_score_adj: root here lacks CAP_SYS_RESOURCE).
# The cache key is the binaries' folder, kind's version, the package list and this script.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/local-cluster.sh
. scripts/lib/local-cluster.sh
# shellcheck source=scripts/lib/kind.sh
. scripts/lib/kind.sh

[[ $# == 0 ]] || lc_die "takes no arguments"
lc_need_root
kind_engine_setup
bin=$(scripts/local-cluster-build.sh)
packages=(systemd conntrack iptables nftables iproute2 ethtool util-linux mount kmod libseccomp2 pigz
  bash ca-certificates jq procps)
key=$( { echo "${bin##*/} $KIND_VERSION ${packages[*]}"; cat "$0"; } | sha256sum | cut -c1-16)
if [[ $(podman image inspect --format '{{index .Labels "io.retry-debt-kit.key"}}' "$KIND_NODE_REF" 2>/dev/null) == "$key" ]]; then
  lc_log "reusing $KIND_NODE_REF (key $key)"
  echo "$KIND_NODE_REF"
  exit 0
fi
t0=$SECONDS
kind_src=$(GOFLAGS='' go mod download -json "sigs.k8s.io/kind@$KIND_VERSION" | jq -r .Dir)
base=$kind_src/images/base/files
repo=localhost/rdk
etcd_tag=$(cd k8s/local/build/etcd && go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)
etcd_tag=${etcd_tag#v}
coredns_tag=1.15.0 # lc_infra_images names it so
infra=$(lc_infra_images "$bin")
work=$(mktemp -d "$RDK_CACHE/kind-node.XXXXXX")
node=""
cleanup() {
  [[ -z $node ]] || buildah rm "$node" >/dev/null 2>&1 || true
  [[ ! -f $work/containerd.pid ]] || kill "$(cat "$work/containerd.pid")" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# The root: Debian bookworm minbase with kind's packages, made once per package list.
root_tar=$RDK_CACHE/images/kind-node-root-$(echo "${packages[*]}" | sha256sum | cut -c1-8).tar
if [[ ! -f $root_tar ]]; then
  mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  lc_log "debootstrap bookworm for the node (about 3 minutes, once)"
  debootstrap --variant=minbase --include="$(IFS=,; echo "${packages[*]}")" bookworm "$work/root" \
    "${mirror:-http://deb.debian.org/debian}" >"$work/debootstrap.log" 2>&1 ||
    { cp "$work/debootstrap.log" "$RDK_CACHE/images/kind-node-debootstrap.log"; lc_die "debootstrap failed; see $RDK_CACHE/images/kind-node-debootstrap.log"; }
  chmod 755 "$work/root"
  rm -rf "$work/root"/var/cache/apt/archives/*.deb "$work/root"/var/lib/apt/lists/*
  tar -C "$work/root" --exclude=./dev --exclude=./proc --exclude=./sys -cf "$root_tar.tmp" .
  rm -rf "$work/root"
  mv "$root_tar.tmp" "$root_tar"
fi

# The control plane's images, as kubeadm names them under imageRepository $repo: the node's
# root (kube-proxy needs its iptables and conntrack) plus the binary on PATH.
mkdir -p "$work/images"
cp "$infra/pause.tar" "$infra/coredns.tar" "$work/images/"
cbase=$(lc_buildah from scratch)
lc_buildah add "$cbase" "$root_tar" / >/dev/null
lc_buildah commit --quiet --rm "$cbase" "$repo/kind-control-plane-base:$key" >/dev/null
for image in kube-apiserver:$LC_K8S_VERSION kube-controller-manager:$LC_K8S_VERSION kube-scheduler:$LC_K8S_VERSION \
  kube-proxy:$LC_K8S_VERSION etcd:$etcd_tag; do
  name=${image%%:*}
  c=$(lc_buildah from "$repo/kind-control-plane-base:$key")
  lc_buildah copy "$c" "$bin/$name" /usr/local/bin/ >/dev/null
  lc_buildah config --entrypoint '[]' "$c"
  lc_buildah commit --quiet --rm "$c" "$repo/$image" >/dev/null
  lc_buildah push --quiet "$repo/$image" "oci-archive:$work/images/$name.tar:$repo/$image"
  lc_buildah rmi "$repo/$image" >/dev/null
done
lc_buildah rmi "$repo/kind-control-plane-base:$key" >/dev/null

# The node: kind's base files and steps (images/base/Dockerfile), then the binaries.
node=$(buildah from scratch)
buildah add "$node" "$root_tar" / >/dev/null
mnt=$(buildah mount "$node")
install -m 0755 "$base"/usr/local/bin/* "$mnt/usr/local/bin/"
mkdir -p "$mnt/kind/bin" "$mnt/LICENSES" "$mnt/etc/kubernetes/manifests" "$mnt/opt/cni/bin" "$mnt/usr/local/sbin"
install -m 0644 "$base/kind/README.txt" "$mnt/kind/"
install -m 0755 "$base"/kind/bin/* "$mnt/kind/bin/"
install -m 0644 "$base"/LICENSES/* "$mnt/LICENSES/"
(cd "$base/etc" && find . -type f) | while read -r f; do install -D -m 0644 "$base/etc/$f" "$mnt/etc/$f"; done
chmod 755 "$mnt/kind" "$mnt/kind/bin"
find "$mnt/lib/systemd/system/sysinit.target.wants/" -name systemd-tmpfiles-setup.service -delete
rm -f "$mnt"/lib/systemd/system/multi-user.target.wants/* "$mnt"/etc/systemd/system/*.wants/* \
  "$mnt"/lib/systemd/system/local-fs.target.wants/* "$mnt"/lib/systemd/system/sockets.target.wants/*udev* \
  "$mnt"/lib/systemd/system/sockets.target.wants/*initctl* "$mnt"/lib/systemd/system/basic.target.wants/*
echo "ReadKMsg=no" >>"$mnt/etc/systemd/journald.conf"
ln -sf /usr/lib/systemd/systemd "$mnt/sbin/init"
install -m 0755 "$bin/containerd" "$bin/containerd-shim-runc-v2" "$bin/ctr" "$bin/crictl" "$mnt/usr/local/bin/"
install -m 0755 "$bin/runc" "$mnt/usr/local/sbin/"
install -m 0755 "$bin/kubelet" "$bin/kubeadm" "$bin/kubectl" "$mnt/usr/bin/"
for p in host-local loopback portmap bridge; do install -m 0755 "$bin/cni/$p" "$mnt/opt/cni/bin/"; done
chroot "$mnt" systemctl enable kubelet.service containerd.service undo-mount-hacks.service >/dev/null 2>&1
chroot "$mnt" systemctl mask systemd-binfmt.service >/dev/null 2>&1
"$bin/ctr" oci spec | jq '.hooks.createContainer[.hooks.createContainer | length] |= . + {"path": "/kind/bin/mount-product-files.sh"}' |
  jq 'del(.process.rlimits)' >"$mnt/etc/containerd/cri-base.json"
# The pause image this node preloads, and oom_score_adj not lowered (see above).
sed -i -e "s|^\( *sandbox_image = \).*|\1\"$repo/pause:1\"|" \
  -e 's|^\( *restrict_oom_score_adj = \).*|\1true|' "$mnt/etc/containerd/config.toml"
{ grep -q "sandbox_image = \"$repo/pause:1\"" "$mnt/etc/containerd/config.toml" &&
  grep -q 'restrict_oom_score_adj = true' "$mnt/etc/containerd/config.toml"; } ||
  lc_die "kind $KIND_VERSION's containerd config no longer has sandbox_image and restrict_oom_score_adj"
echo "$LC_K8S_VERSION" >"$mnt/kind/version"

# Preload the images into the node's containerd store, as kind's node image builder does: a
# containerd run here on the node's /var/lib/containerd, its socket and state in $work.
cat >"$work/containerd.toml" <<EOF
version = 3
root = '$mnt/var/lib/containerd'
state = '$work/state'
disabled_plugins = ['io.containerd.grpc.v1.cri', 'io.containerd.cri.v1.runtime', 'io.containerd.cri.v1.images', 'io.containerd.internal.v1.opt', 'io.containerd.nri.v1.nri']
[grpc]
  address = '$work/containerd.sock'
[ttrpc]
  address = '$work/containerd.sock.ttrpc'
EOF
"$bin/containerd" --config "$work/containerd.toml" >"$work/containerd.log" 2>&1 &
echo $! >"$work/containerd.pid"
lc_wait "the image builder's containerd" 30 "$bin/ctr" --address "$work/containerd.sock" version
for archive in "$work"/images/*.tar; do
  "$bin/ctr" --address "$work/containerd.sock" -n k8s.io images import --all-platforms --no-unpack \
    --label io.cri-containerd.pinned=pinned "$archive" >/dev/null 2>>"$work/ctr.log"
done
"$bin/ctr" --address "$work/containerd.sock" -n k8s.io images ls -q >"$work/preloaded" 2>>"$work/ctr.log"
kill "$(cat "$work/containerd.pid")"
wait "$(cat "$work/containerd.pid")" 2>/dev/null || true
rm -f "$work/containerd.pid"

buildah umount "$node" >/dev/null
buildah config --env container=docker --stop-signal SIGRTMIN+3 \
  --entrypoint '["/usr/local/bin/entrypoint", "/sbin/init"]' \
  --label "io.retry-debt-kit.key=$key" --label "io.retry-debt-kit.image-repository=$repo" \
  --label "io.retry-debt-kit.etcd-tag=$etcd_tag" --label "io.retry-debt-kit.coredns-tag=$coredns_tag" \
  --label "io.retry-debt-kit.kind=$KIND_VERSION" "$node"
buildah commit --quiet --rm "$node" "$KIND_NODE_REF" >/dev/null
node=""
lc_log "built $KIND_NODE_REF in $((SECONDS - t0)) s, preloaded: $(tr '\n' ' ' <"$work/preloaded")"
echo "$KIND_NODE_REF"
