# shellcheck shell=bash disable=SC2034 # the variables are used by the scripts that source this file
# Shared by the scripts that run kind on this kind of machine (sourced after
# lib/local-cluster.sh): the container engine, kind itself, and the network the nodes live on.
#
# The engine is podman: Debian bookworm's docker.io (20.10) cannot start a --privileged
# container in a VM whose capability bounding set lacks CAP_SYS_RESOURCE ("unable to apply caps:
# operation not permitted", moby/moby#42906, fixed in Docker 23 by moby/moby#42933), and a kind
# node is a privileged container. Podman 4.3 starts it once its default ulimits fit under the
# machine's hard limits (open files 20,000).

KIND_VERSION=v0.33.0
KIND_BIN_DIR=$RDK_CACHE/kind/$KIND_VERSION
KIND_NODE_REF=localhost/retry-debt-kit/kind-node:$LC_K8S_VERSION
# The nodes' network: inside 198.18.0.0/15 like the one-machine cluster's, apart from its
# addresses (198.18.0.1, 198.18.16.0/24, 198.18.128.0/20).
KIND_NET=rdk-kind
KIND_NET_SUBNET=198.19.64.0/24
KIND_NET_GATEWAY=198.19.64.1
KIND_GUARD_CHAIN=RDK-KIND-GUARD
# The pods' and Services' ranges: beside the nodes', apart from the one-machine cluster's.
KIND_POD_SUBNET=198.19.128.0/17
KIND_SERVICE_SUBNET=198.19.96.0/20
KIND_STATE=/var/lib/retry-debt-kit/kind
KIND_KUBECONFIG=$KIND_STATE/kubeconfig

# podman, with ulimits the VM allows (its defaults ask for nofile 1048576 and nproc 4194304,
# which a container here may not raise to) and runc as its runtime (crun 1.8 refuses a hybrid
# cgroup host: "cgroups in hybrid mode not supported"), and buildah for the node image. The
# settings are kind's only: a config file of its own (CONTAINERS_CONF, which the scripts export
# to kind and its podman calls), not the machine's podman configuration.
kind_engine_setup() {
  lc_apt_install podman runc golang-github-containernetworking-plugin-dnsname buildah debootstrap jq
  mkdir -p "$KIND_STATE"
  cat >"$KIND_STATE/containers.conf" <<EOF
# Written by retry-debt-kit's scripts/lib/kind.sh for the kind cluster's podman calls.
# The machine's hard limits are 20,000 open files: a container asking for more does not start.
# DNS: only the nodes' network's own resolver (podman's dnsname, which knows the node names and
# asks the host's resolver for the rest); the host's nameservers, which podman would add, are
# beyond the network's guard, and CoreDNS forwarding to them waits out its timeout (one lookup
# in six took 2 s).
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
dns_servers = ["$KIND_NET_GATEWAY"]
[engine]
runtime = "runc"
EOF
  export CONTAINERS_CONF=$KIND_STATE/containers.conf
}

# kind, built from its Go module (the release the node image layout follows).
kind_build() {
  if [[ ! -x $KIND_BIN_DIR/kind ]]; then
    lc_log "building kind $KIND_VERSION from its Go module"
    GOFLAGS='' GOBIN=$KIND_BIN_DIR go install "sigs.k8s.io/kind@$KIND_VERSION"
  fi
  echo "$KIND_BIN_DIR"
}

# The nodes' network, made before kind would make its own: podman's default for kind NATs a
# 10.89.0.0/24 network to the machine's uplink. This one has its own name (kind is told it with
# KIND_EXPERIMENTAL_PODMAN_NETWORK), is in the benchmark range, and a raw-table guard drops
# whatever arrives from its bridge for an address outside 198.18.0.0/15, before routing: no node
# or pod reaches the uplink, whatever the CNI plugins put in FORWARD; the host still reaches the
# nodes (the API server's port).
kind_network_up() {
  local bridge subnet
  if podman network exists "$KIND_NET"; then
    subnet=$(podman network inspect "$KIND_NET" --format '{{range .Subnets}}{{.Subnet}}{{end}}')
    [[ $subnet == "$KIND_NET_SUBNET" ]] ||
      lc_die "podman network $KIND_NET exists with subnet '$subnet', not $KIND_NET_SUBNET: not this kit's; remove it or rename it"
  else
    podman network create --subnet "$KIND_NET_SUBNET" --gateway "$KIND_NET_GATEWAY" "$KIND_NET" >/dev/null
  fi
  bridge=$(kind_bridge)
  [[ -n $bridge ]] || lc_die "podman network $KIND_NET has no bridge interface"
  echo "$bridge" >"$KIND_STATE/bridge"
  iptables -w -t raw -N "$KIND_GUARD_CHAIN" 2>/dev/null || iptables -w -t raw -F "$KIND_GUARD_CHAIN"
  iptables -w -t raw -A "$KIND_GUARD_CHAIN" -i "$bridge" ! -d 198.18.0.0/15 -j DROP
  iptables -w -t raw -C PREROUTING -j "$KIND_GUARD_CHAIN" 2>/dev/null ||
    iptables -w -t raw -I PREROUTING 1 -j "$KIND_GUARD_CHAIN"
}
kind_bridge() { podman network inspect "$KIND_NET" --format '{{.NetworkInterface}}' 2>/dev/null; }
