#!/usr/bin/env bash
# Deletes the kind cluster scripts/kind-local-up.sh made, then what that script added (the
# nodes' network and its guard, kind's podman settings, an empty /lib/modules), and checks that
# nothing of it is left: containers, volumes, the network and its link, iptables rules naming
# it, and mounts. Exit 1 names what is left. Idempotent; leaves the one-machine cluster alone.
#
#   scripts/kind-local-down.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/local-cluster.sh
. scripts/lib/local-cluster.sh
# shellcheck source=scripts/lib/kind.sh
. scripts/lib/kind.sh

[[ $# == 0 ]] || lc_die "takes no arguments"
lc_need_root
cluster=${CLUSTER:-retry-debt}
command -v podman >/dev/null || { lc_log "podman is not installed: nothing of a kind cluster here"; exit 0; }
[[ ! -f $KIND_STATE/containers.conf ]] || export CONTAINERS_CONF=$KIND_STATE/containers.conf

if [[ -x $KIND_BIN_DIR/kind ]]; then
  KIND_EXPERIMENTAL_PROVIDER=podman KIND_EXPERIMENTAL_PODMAN_NETWORK=$KIND_NET KUBECONFIG=$KIND_KUBECONFIG \
    "$KIND_BIN_DIR/kind" delete cluster --name "$cluster"
fi
nodes=("$cluster-control-plane" "$cluster-worker")
# kind's podman provider leaves the volumes of nodes that never started (a failed create).
for node in "${nodes[@]}"; do
  podman volume ls -q --filter "label=$node" | xargs -r podman volume rm >/dev/null
done
# The network's bridge, as up recorded it (the network may be gone already).
bridge=$(cat "$KIND_STATE/bridge" 2>/dev/null || kind_bridge || true)
if iptables -w -t raw -C PREROUTING -j "$KIND_GUARD_CHAIN" 2>/dev/null; then
  iptables -w -t raw -D PREROUTING -j "$KIND_GUARD_CHAIN"
fi
if iptables -w -t raw -F "$KIND_GUARD_CHAIN" 2>/dev/null; then iptables -w -t raw -X "$KIND_GUARD_CHAIN"; fi
if podman network exists "$KIND_NET"; then podman network rm "$KIND_NET" >/dev/null; fi
# dnsname's rule letting the nodes ask its dnsmasq, which removing the network leaves.
if [[ -n $bridge ]] && iptables -w -C INPUT -i "$bridge" -p udp -m udp --dport 53 -j ACCEPT 2>/dev/null; then
  iptables -w -D INPUT -i "$bridge" -p udp -m udp --dport 53 -j ACCEPT
fi
# /run/netns, mounted by podman's CNI, once no container's namespace is in it.
netns_ours=false
[[ ! -f $KIND_STATE/mounted-by-us ]] || netns_ours=true
if $netns_ours && [[ -z $(podman ps -aq) ]] && mountpoint -q /run/netns && [[ -z $(ls -A /run/netns) ]]; then
  umount /run/netns
fi
if [[ -f $KIND_STATE/created-host-paths ]]; then
  while read -r path; do
    [[ ! -d $path ]] || mountpoint -q "$path" || rmdir "$path" 2>/dev/null || true
  done <"$KIND_STATE/created-host-paths"
fi
unset CONTAINERS_CONF # its file goes with the state folder
rm -rf "$KIND_STATE"
# The CNI plugins' shared chains (firewall, portmap) outlive the last container. With no podman
# container left and the one-machine cluster (whose plugins use them too) not running, they are
# podman's empty scaffolding, made again by the next container; CNI-ADMIN only if still empty
# (it is the administrator's).
if [[ -z $(podman ps -aq) ]] && ! lc_pid containerd >/dev/null; then
  lc_purge_chains iptables 'CNI-FORWARD|CNI-HOSTPORT-(DNAT|MASQ|SETMARK)'
  if [[ $(iptables -w -S CNI-ADMIN 2>/dev/null | wc -l) == 1 ]]; then iptables -w -X CNI-ADMIN; fi
fi

left=()
[[ -z $(podman ps -aq --filter "label=io.x-k8s.kind.cluster=$cluster") ]] || left+=("containers of kind cluster $cluster")
for node in "${nodes[@]}"; do
  [[ -z $(podman volume ls -q --filter "label=$node") ]] || left+=("volumes of $node")
done
! podman network exists "$KIND_NET" || left+=("podman network $KIND_NET")
[[ -z $bridge ]] || ! ip link show "$bridge" >/dev/null 2>&1 || left+=("link $bridge")
# podman's CNI plugins name the network in their rules' comments and match its subnet.
pattern="$KIND_GUARD_CHAIN|${KIND_NET_SUBNET%/*}|${KIND_POD_SUBNET%/*}|name: \"$KIND_NET\"${bridge:+|$bridge}"
for ipt in iptables ip6tables; do
  ! "$ipt"-save 2>/dev/null | grep -qE "$pattern" || left+=("$ipt rules: $("$ipt"-save | grep -E "$pattern" | head -3 | tr '\n' ' ')")
done
! $netns_ours || ! mountpoint -q /run/netns || left+=("the /run/netns mount podman made")
! grep -qE "${nodes[0]}|${nodes[1]}" /proc/mounts || left+=("mounts: $(grep -E "${nodes[0]}|${nodes[1]}" /proc/mounts | cut -d' ' -f2 | tr '\n' ' ')")
if ((${#left[@]})); then
  printf 'kind-local-down: left behind: %s\n' "${left[@]}" >&2
  exit 1
fi
lc_log "kind cluster $cluster deleted; nothing of it is left (containers, volumes, network, iptables, mounts)"
