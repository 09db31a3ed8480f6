# shellcheck shell=bash disable=SC2034 # the variables are used by the scripts that source this file
# Shared by the one-machine cluster's scripts (sourced, not run): paths, the address plan,
# logging, and the build cache key. The scripts cd to the repository root before sourcing it.

# Cache of built programs and images, outside the clone, and the running cluster's state.
RDK_CACHE=${RDK_CACHE:-/var/cache/retry-debt-kit}
LC_STATE=${LC_STATE:-/var/lib/retry-debt-kit/local-cluster}
LC_RUN=$LC_STATE/run

# Addresses: all inside 198.18.0.0/15 (RFC 2544, benchmark networks), so nothing here can
# collide with a user's 10/8, 172.16/12 or 192.168/16 networks.
LC_NODE_IP=198.18.0.1          # node, API server, kubelet; held by a port-less bridge
LC_POD_CIDR=198.18.16.0/24     # pods, on the pod bridge
LC_POD_GW=198.18.16.1
LC_SVC_CIDR=198.18.128.0/20    # Services
LC_API_SVC_IP=198.18.128.1     # kubernetes.default (first address of the Service range)
LC_DNS_IP=198.18.128.10        # kube-dns
LC_NODE_BR=rdkn0               # holds the node address (this kernel has no dummy links)
LC_POD_BR=rdkbr0               # the pods' bridge
LC_NODE_NAME=rdk-node
LC_GUARD_CHAIN=RDK-GUARD       # raw-table chain: what the pod bridge may reach
LC_K8S_VERSION=v1.36.4

lc_log() { echo "[$(date -u +%H:%M:%S)] $*" >&2; }
lc_die() { echo "$(basename "$0"): $*" >&2; exit 1; }
lc_need_root() { [[ $(id -u) == 0 ]] || lc_die "must run as root (it starts a kubelet, containerd and iptables rules)"; }

# Installs the Debian packages named, only those missing.
lc_apt_install() {
  local missing=() p
  for p in "$@"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p"); done
  ((${#missing[@]})) || return 0
  lc_log "installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# The build key: the wrapper modules, the build script and the Go version. Any change builds
# into a new folder; the Go build cache keeps a rebuild short.
lc_build_key() {
  { find k8s/local/build -type f | LC_ALL=C sort | xargs cat; cat scripts/local-cluster-build.sh; go version; } |
    sha256sum | cut -c1-16
}
lc_bin_dir() { echo "$RDK_CACHE/local-cluster/bin-$(lc_build_key)"; }

# Processes: each one the scripts start runs in its own session, its PID in $LC_RUN/NAME.pid
# and its output in $LC_STATE/logs/NAME.log; nothing is started through a service manager.
lc_pid() { local f=$LC_RUN/$1.pid; [[ -f $f ]] && kill -0 "$(cat "$f")" 2>/dev/null && cat "$f"; }
lc_start() {
  local name=$1; shift
  mkdir -p "$LC_RUN" "$LC_STATE/logs"
  setsid "$@" >>"$LC_STATE/logs/$name.log" 2>&1 </dev/null &
  echo $! >"$LC_RUN/$name.pid"
}
# Stops NAME by its PID: SIGTERM, then SIGKILL after GRACE seconds.
lc_stop() {
  local name=$1 grace=${2:-10} pid i
  pid=$(lc_pid "$name") || { rm -f "$LC_RUN/$name.pid"; return 0; }
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < grace * 10; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && { lc_log "$name did not stop in ${grace} s: SIGKILL"; kill -KILL "$pid" 2>/dev/null || true; }
  rm -f "$LC_RUN/$name.pid"
}
# Waits up to SECONDS for a command to succeed.
lc_wait() {
  local what=$1 secs=$2 i; shift 2
  for ((i = 0; i < secs * 4; i++)); do "$@" >/dev/null 2>&1 && return 0; sleep 0.25; done
  lc_die "$what not within ${secs} s (logs: $LC_STATE/logs)"
}
# The one teardown of iptables chains (the cluster's, the CNI plugins'): in every table of IPT
# (iptables or ip6tables), the jumps from the built-in chains to chains matching the extended
# regex PATTERN, then those chains' rules, then the chains. xargs keeps quoted comments whole.
lc_purge_chains() {
  local ipt=$1 pattern=$2 table chains chain
  for table in raw mangle nat filter; do
    "$ipt" -w -t "$table" -S >/dev/null 2>&1 || continue
    # Not a pipeline: under the callers' pipefail a grep that finds nothing would end them.
    while read -r rule; do
      echo "${rule/-A/-D}" | xargs "$ipt" -w -t "$table" 2>/dev/null || true
    done < <("$ipt" -w -t "$table" -S | grep -E "^-A (PREROUTING|INPUT|FORWARD|OUTPUT|POSTROUTING) .*-j ($pattern)( |$)")
    chains=$("$ipt" -w -t "$table" -S | awk -v p="^($pattern)$" '$1 == "-N" && $2 ~ p {print $2}')
    for chain in $chains; do "$ipt" -w -t "$table" -F "$chain" 2>/dev/null || true; done
    for chain in $chains; do "$ipt" -w -t "$table" -X "$chain" 2>/dev/null || true; done
  done
}
lc_kubectl() { "$LC_BIN/kubectl" --kubeconfig "$LC_STATE/kubeconfig" "$@"; }

# buildah with its storage in the cache (overlay works in this VM). It also writes a blob
# cache and a CNI lock outside that folder whatever --root says; lc_buildah removes them
# when they did not exist before.
lc_buildah() {
  local p new=() rc=0
  for p in /var/lib/containers /etc/cni; do [[ -e $p ]] || new+=("$p"); done
  buildah --root "$RDK_CACHE/buildah/storage" --runroot "$RDK_CACHE/buildah/run" --storage-driver overlay "$@" || rc=$?
  ((${#new[@]} == 0)) || rm -rf "${new[@]}"
  return "$rc"
}
# An image from scratch holding FILES at /, with an entrypoint and a user, as an OCI archive
# at ARCHIVE named REF: the cluster's pause and CoreDNS images (no registry to pull them from).
lc_image_from_scratch() {
  local ref=$1 archive=$2 entrypoint=$3 user=$4; shift 4
  local c
  c=$(lc_buildah from scratch)
  lc_buildah copy "$c" "$@" / >/dev/null
  lc_buildah config --entrypoint "[\"$entrypoint\"]" --user "$user" "$c"
  lc_buildah commit --quiet --rm "$c" "$ref" >/dev/null
  rm -f "$archive.tmp"
  lc_buildah push --quiet "$ref" "oci-archive:$archive.tmp:$ref"
  lc_buildah rmi "$ref" >/dev/null
  mv "$archive.tmp" "$archive"
}

# The pause, CoreDNS and metrics-server images for the binaries in BIN, as OCI archives in a
# folder keyed by them (made once); prints the folder. The one-machine cluster imports them
# into its containerd, the kind node image holds the first two and cluster-up loads the third.
lc_infra_images() {
  local bin=$1 infra
  infra=$RDK_CACHE/images/infra-${bin##*/bin-}
  mkdir -p "$infra"
  [[ -f $infra/pause.tar ]] || lc_image_from_scratch localhost/rdk/pause:1 "$infra/pause.tar" /pause 65535:65535 "$bin/pause"
  [[ -f $infra/coredns.tar ]] || lc_image_from_scratch localhost/rdk/coredns:1.15.0 "$infra/coredns.tar" /coredns 0:0 "$bin/coredns"
  # metrics-server runs as upstream's manifest says (user 1000, read-only root, /tmp an emptyDir).
  [[ -f $infra/metrics-server.tar ]] ||
    lc_image_from_scratch localhost/rdk/metrics-server:v0.8.0 "$infra/metrics-server.tar" /metrics-server 1000:1000 "$bin/metrics-server"
  echo "$infra"
}
