#!/usr/bin/env bash
# Deletes the kind cluster scripts/kind-local-up.sh made, then what that script added (the
# nodes' network and its guard, an empty /lib/modules), and checks that nothing is left:
# containers, volumes, networks, iptables chains, network namespaces and mounts. Exit 1 names
# what is left. Idempotent. With --purge it also removes podman's ulimits drop-in.
#
#   scripts/kind-local-down.sh [--purge]
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/local-cluster-lib.sh
. scripts/local-cluster-lib.sh
# shellcheck source=scripts/kind-lib.sh
. scripts/kind-lib.sh

purge=false
case ${1-} in
  "") ;;
  --purge) purge=true ;;
  *) lc_die "unknown argument '$1' (--purge)" ;;
esac
lc_need_root
cluster=${CLUSTER:-retry-debt}
command -v podman >/dev/null || { lc_log "podman is not installed: nothing of a kind cluster here"; exit 0; }

if [[ -x $KIND_BIN_DIR/kind ]]; then
  KIND_EXPERIMENTAL_PROVIDER=podman KUBECONFIG=$KIND_KUBECONFIG "$KIND_BIN_DIR/kind" delete cluster --name "$cluster"
fi
# kind's podman provider leaves the volumes of nodes that never started (a failed create).
for node in "$cluster-control-plane" "$cluster-worker"; do
  podman volume ls -q --filter "label=$node" | xargs -r podman volume rm >/dev/null
done
bridge=$(kind_bridge || true)
if iptables -w -C FORWARD -j "$KIND_GUARD_CHAIN" 2>/dev/null; then iptables -w -D FORWARD -j "$KIND_GUARD_CHAIN"; fi
iptables -w -F "$KIND_GUARD_CHAIN" 2>/dev/null && iptables -w -X "$KIND_GUARD_CHAIN"
! podman network exists "$KIND_NET" || podman network rm "$KIND_NET" >/dev/null
if [[ -f $KIND_STATE/created-host-paths ]]; then
  xargs -r rmdir <"$KIND_STATE/created-host-paths"
fi
rm -rf "$KIND_STATE"
# The CNI plugins' shared chains (firewall, portmap) outlive the last container; with no
# container left they are empty scaffolding, made again by the next one.
if [[ -z $(podman ps -aq) ]]; then
  if iptables -w -C FORWARD -m comment --comment "CNI firewall plugin rules" -j CNI-FORWARD 2>/dev/null; then
    iptables -w -D FORWARD -m comment --comment "CNI firewall plugin rules" -j CNI-FORWARD
  fi
  for chain in CNI-FORWARD CNI-ADMIN; do iptables -w -F "$chain" 2>/dev/null && iptables -w -X "$chain"; done
  for hook in PREROUTING OUTPUT; do
    if iptables -w -t nat -C "$hook" -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT 2>/dev/null; then
      iptables -w -t nat -D "$hook" -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT
    fi
  done
  if iptables -w -t nat -C POSTROUTING -m comment --comment "CNI portfwd requiring masquerade" -j CNI-HOSTPORT-MASQ 2>/dev/null; then
    iptables -w -t nat -D POSTROUTING -m comment --comment "CNI portfwd requiring masquerade" -j CNI-HOSTPORT-MASQ
  fi
  for chain in CNI-HOSTPORT-DNAT CNI-HOSTPORT-MASQ CNI-HOSTPORT-SETMARK; do
    iptables -w -t nat -F "$chain" 2>/dev/null && iptables -w -t nat -X "$chain"
  done
fi
$purge && rm -f "$KIND_ENGINE_CONF"

left=()
[[ -z $(podman ps -aq --filter "label=io.x-k8s.kind.cluster=$cluster") ]] || left+=("containers of kind cluster $cluster")
for node in "$cluster-control-plane" "$cluster-worker"; do
  [[ -z $(podman volume ls -q --filter "label=$node") ]] || left+=("volumes of $node")
done
! podman network exists "$KIND_NET" || left+=("podman network $KIND_NET")
[[ -z $bridge ]] || ! ip link show "$bridge" >/dev/null 2>&1 || left+=("link $bridge")
for ipt in iptables ip6tables; do
  ! "$ipt"-save 2>/dev/null | grep -qE "$KIND_GUARD_CHAIN|$KIND_NET_SUBNET|name: \"$KIND_NET\"|CNI-" || left+=("$ipt rules for $KIND_NET or CNI's chains")
done
! grep -qE "$cluster|/run/netns/cni-" /proc/mounts || left+=("mounts: $(grep -E "$cluster|/run/netns/cni-" /proc/mounts | cut -d' ' -f2 | tr '\n' ' ')")
if ((${#left[@]})); then
  printf 'kind-local-down: left behind: %s\n' "${left[@]}" >&2
  exit 1
fi
lc_log "kind cluster $cluster deleted; nothing of it is left (containers, volumes, network, iptables, mounts)"
