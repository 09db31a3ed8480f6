#!/usr/bin/env bash
# Removes the one-machine cluster and everything it left on the host, then checks: no
# process, mount, iptables rule, link or cgroup of it remains (each named if one does), the
# sysctl it changed is restored, and the host paths upstream writes regardless of its flags
# are gone. Safe to run twice: the second run finds nothing. The build cache stays.
#
#   scripts/local-cluster-down.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/local-cluster.sh
. scripts/lib/local-cluster.sh
lc_need_root

bin_dir=$(scripts/local-cluster-build.sh --print)

# Processes started from the kit's binaries that are not in a PID file (a shim, a process whose
# PID file a failed up never wrote).
strays() {
  local d pid exe
  for d in /proc/[0-9]*; do
    pid=${d#/proc/}
    exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || continue
    [[ $exe == "$RDK_CACHE"/local-cluster/* ]] && echo "$pid"
  done
  return 0
}

if [[ -d $LC_RUN ]]; then
  # The kubelet first, so nothing restarts what is removed next.
  lc_stop kube-proxy 5
  lc_stop kubelet 10
  # Pods go while containerd still runs (their grace already passed in the API, or not needed).
  sock=$LC_STATE/run/containerd/containerd.sock
  if lc_pid containerd >/dev/null && [[ -S $sock ]]; then
    "$bin_dir/crictl" --runtime-endpoint "unix://$sock" --timeout 20s rmp -fa >/dev/null 2>&1 || true
  fi
  lc_stop containerd 10
  lc_stop kube-scheduler 5
  lc_stop kube-controller-manager 5
  lc_stop kube-apiserver 10
  lc_stop etcd 10
fi
for pid in $(strays); do kill -KILL "$pid" 2>/dev/null || true; done
# Containers whose shim is gone (a killed session) still run in the pods' cgroups.
for pid in $(find /sys/fs/cgroup/*/kubepods* -name tasks -exec cat {} + 2>/dev/null | sort -u); do
  kill -KILL "$pid" 2>/dev/null || true
done
sleep 0.2

# iptables: kube-proxy's own cleanup, then every chain named for the cluster (kube-proxy's and
# the kubelet's KUBE-*, the CNI plugins' CNI-*, the kit's guard RDK-*) with the jumps to them.
if [[ -x $bin_dir/kube-proxy ]]; then "$bin_dir/kube-proxy" --cleanup >/dev/null 2>&1 || true; fi
lc_purge_chains iptables '(KUBE|CNI|RDK)-.*'
! command -v ip6tables >/dev/null || lc_purge_chains ip6tables '(KUBE|CNI|RDK)-.*'

# Mounts under the state folder (projected tokens, the kubelet root, sandbox shm, netns),
# deepest first, lazily: a mount still busy goes when its last user does.
if [[ -d $LC_STATE ]]; then
  awk -v s="$LC_STATE" '$2 == s || index($2, s "/") == 1 {print $2}' /proc/self/mounts | sort -r |
    while read -r m; do umount -l "$m" 2>/dev/null || true; done
fi

# Links: the two bridges (the pods' veths went with their network namespaces).
for link in "$LC_POD_BR" "$LC_NODE_BR"; do ip link del "$link" 2>/dev/null || true; done
for link in $(ip -o link show type veth 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1); do
  [[ $(ip -o link show "$link" 2>/dev/null) == *"master $LC_POD_BR"* ]] && ip link del "$link"
done

if [[ -f $LC_STATE/ip_forward.before ]]; then sysctl -qw "net.ipv4.ip_forward=$(cat "$LC_STATE/ip_forward.before")"; fi

# The kubelet's cgroups (cgroupfs driver), deepest first, in every v1 hierarchy.
find /sys/fs/cgroup/*/kubepods* -depth -type d -exec rmdir {} \; 2>/dev/null || true

# Host paths written whatever the flags say, removed when up created them.
if [[ -f $LC_STATE/created-host-paths ]]; then
  while read -r p; do [[ -n $p ]] && rm -rf "$p"; done <"$LC_STATE/created-host-paths"
fi
# The links to the pods' logs and the libcni cache entries are per pod, also in folders that
# existed before: remove those that point into the state folder or name our network.
find /var/log/containers -maxdepth 1 -type l -lname "$LC_STATE/*" -delete 2>/dev/null || true
rm -rf /var/lib/cni/results/rdk-* /var/lib/kubelet/device-plugins/kubelet.sock 2>/dev/null || true

rm -rf "$LC_STATE"

# --- check ----------------------------------------------------------------------------------
left=()
for pid in $(strays); do left+=("process $pid ($(readlink "/proc/$pid/exe" 2>/dev/null))"); done
while read -r m; do left+=("mount $m"); done < <(awk -v s="$LC_STATE" 'index($2, s) == 1 {print $2}' /proc/self/mounts)
for ipt in iptables ip6tables; do
  command -v "$ipt" >/dev/null || continue
  for table in raw mangle nat filter; do
    while read -r r; do left+=("$ipt -t $table: $r"); done < <("$ipt" -t "$table" -S 2>/dev/null | grep -E '(KUBE-|CNI-|RDK-)' || true)
  done
done
for link in "$LC_POD_BR" "$LC_NODE_BR"; do ip link show "$link" >/dev/null 2>&1 && left+=("link $link"); done
while read -r d; do left+=("cgroup $d"); done < <(find /sys/fs/cgroup/*/kubepods* -maxdepth 0 -type d 2>/dev/null)
if ((${#left[@]})); then
  printf 'local-cluster-down: left behind: %s\n' "${left[@]}" >&2
  exit 1
fi
lc_log "local cluster down; nothing of it is left (processes, mounts, rules, links, cgroups checked)"
