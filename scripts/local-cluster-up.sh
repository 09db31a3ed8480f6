#!/usr/bin/env bash
# A real single-node Kubernetes (v1.36.4, built from the Go modules by local-cluster-build.sh)
# on this machine, without Docker: etcd, kube-apiserver with its aggregator, the
# controller-manager with the real HPA, the scheduler, containerd + runc, the kubelet,
# kube-proxy (iptables), CoreDNS and metrics-server (the resource metrics API the HPA's cpu
# signal reads), plus the kit's image imported into containerd.
#
#   scripts/local-cluster-up.sh [--hpa-sync 15s] [--time-scale S]   bring it up (or reuse it)
#   scripts/local-cluster-up.sh status [--cpu SECONDS]               say what runs [and its CPU]
#   scripts/local-cluster-down.sh                                    remove everything
#
# --hpa-sync is the HPA controller's sync period at S = 1 (default 15s, the upstream default).
# --time-scale S divides the sync period, the downscale stabilization, the initial readiness
# delay and the CPU initialization period by S; the tolerance stays 0.1. What the controller
# runs with is written to $LC_STATE/hpa.json and to ConfigMap kube-system/retry-debt-kit-cluster,
# where the runner reads it. metrics-server's --metric-resolution is upstream's 15 s divided by
# S, but never below upstream's minimum of 10 s (recorded in the same ConfigMap, key
# metrics-server.json).
#
# Addresses are inside 198.18.0.0/15 (see scripts/lib/local-cluster.sh); every listener binds to
# loopback or the node address, pods reach only the cluster's own ranges (guard rules), and
# CoreDNS has no upstream. Needs root. Env: RDK_CACHE, LC_STATE.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/local-cluster.sh
. scripts/lib/local-cluster.sh

hpa_sync=15s
time_scale=1
cmd=up
cpu_secs=0
while (($#)); do
  case $1 in
    status) cmd=status ;;
    --cpu) cpu_secs=${2:?--cpu needs a number of seconds}; shift ;;
    --hpa-sync) hpa_sync=${2:?--hpa-sync needs a duration, e.g. 15s}; shift ;;
    --time-scale) time_scale=${2:?--time-scale needs a number, e.g. 5}; shift ;;
    -h | --help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) lc_die "unknown argument '$1' (try --help)" ;;
  esac
  shift
done

# The controller-manager's and metrics-server's settings at this scale come from the kit's one
# definition of the upstream defaults (`falsification local-cluster-flags`, in Rust): lines
# name=value, durations in milliseconds. With --records it also writes hpa.json and
# metrics-server.json.
cluster_flags() {
  cargo build --release --locked -q -p falsification >&2
  target/release/falsification local-cluster-flags --hpa-sync "$hpa_sync" --time-scale "$time_scale" "$@"
}
declare -A flag
read_flags() {
  local k v
  while IFS='=' read -r k v; do flag[$k]=$v; done < <(cluster_flags "$@")
  [[ -n ${flag[sync_period]:-} ]] || lc_die "falsification local-cluster-flags gave no sync period"
}
# True once metrics-server serves a CPU usage for kube-system's pods, through the aggregator and
# as `kubectl top` reads it.
pod_metrics_served() {
  lc_kubectl get --raw /apis/metrics.k8s.io/v1beta1/namespaces/kube-system/pods | grep -q '"cpu"' &&
    lc_kubectl top pods -n kube-system --no-headers | grep -q .
}
metrics_api_available() {
  [[ $(lc_kubectl get apiservice v1beta1.metrics.k8s.io \
    -o jsonpath='{.status.conditions[?(@.type=="Available")].status}' 2>/dev/null) == True ]]
}

# CPU of the cluster's processes (by program; the shims summed) and of all pods (the kubepods
# cgroup) over SECONDS, as % of one core.
cpu_report() {
  local secs=$1 d exe name hz pods0 pods1
  declare -A t0 t1 prog
  hz=$(getconf CLK_TCK)
  sample() {
    local -n into=$1
    for d in /proc/[0-9]*; do
      exe=$(readlink "$d/exe" 2>/dev/null) || continue
      [[ $exe == "$LC_BIN"/* ]] || continue
      prog[${d#/proc/}]=${exe##*/}
      # shellcheck disable=SC2034 # a nameref to t0 or t1
      into[${d#/proc/}]=$(awk '{print $14 + $15}' "$d/stat" 2>/dev/null || echo 0)
    done
  }
  sample t0; pods0=$(cat /sys/fs/cgroup/cpuacct/kubepods/cpuacct.usage 2>/dev/null || echo 0)
  sleep "$secs"
  sample t1; pods1=$(cat /sys/fs/cgroup/cpuacct/kubepods/cpuacct.usage 2>/dev/null || echo 0)
  for d in "${!t1[@]}"; do
    [[ -n ${t0[$d]-} ]] && echo "${prog[$d]} $((t1[$d] - t0[$d]))"
  done | awk -v hz="$hz" -v s="$secs" -v pods="$((pods1 - pods0))" '
    { ticks[$1] += $2; total += $2 }
    END {
      for (p in ticks) printf "  %-28s %5.2f %% of one core\n", p, 100 * ticks[p] / hz / s
      printf "  %-28s %5.2f %%\n  %-28s %5.2f %% of one core\n", "all pods (kubepods cgroup)", 100 * pods / 1e9 / s,
        "cluster processes, total", 100 * total / hz / s
    }'
}

running() { lc_pid kube-apiserver >/dev/null && [[ -f $LC_STATE/kubeconfig ]] && lc_kubectl get --raw /readyz >/dev/null 2>&1; }

status() {
  local name pid bin_dir
  bin_dir=$(scripts/local-cluster-build.sh --print)
  LC_BIN=$bin_dir
  if [[ ! -d $LC_STATE ]]; then echo "local cluster: down (no state in $LC_STATE)"; return 3; fi
  for name in etcd kube-apiserver kube-controller-manager kube-scheduler containerd kubelet kube-proxy; do
    if pid=$(lc_pid "$name"); then printf '  %-24s pid %s\n' "$name" "$pid"; else printf '  %-24s NOT RUNNING\n' "$name"; fi
  done
  if running; then
    echo "local cluster: up; export KUBECONFIG=$LC_STATE/kubeconfig"
    lc_kubectl get nodes -o wide 2>/dev/null || true
    lc_kubectl get pods -A 2>/dev/null || true
    echo "HPA controller: $(cat "$LC_STATE/hpa.json" 2>/dev/null)"
    echo "kit image: $(cat "$LC_STATE/image" 2>/dev/null)"
    if metrics_api_available; then
      echo "metrics-server: $(cat "$LC_STATE/metrics-server.json" 2>/dev/null); APIService v1beta1.metrics.k8s.io Available"
      lc_kubectl top pods -A 2>/dev/null || true
    else
      echo "metrics-server: APIService v1beta1.metrics.k8s.io NOT Available"
    fi
    if ((cpu_secs > 0)); then echo "CPU over $cpu_secs s:"; cpu_report "$cpu_secs"; fi
    echo "guard drops (pod bridge to anything outside the cluster's ranges; uplink forwarding):"
    iptables -t raw -L "$LC_GUARD_CHAIN" -v -n -x 2>/dev/null | awk '$3 == "DROP" {print "  raw " $0}'
    iptables -L "$LC_GUARD_CHAIN" -v -n -x 2>/dev/null | awk '$3 == "DROP" {print "  filter " $0}'
    return 0
  fi
  echo "local cluster: state in $LC_STATE but the API server does not answer (run local-cluster-down.sh)"
  return 1
}

if [[ $cmd == status ]]; then status; exit $?; fi

lc_need_root
lc_apt_install iptables conntrack buildah debootstrap openssl bind9-dnsutils curl
read_flags

LC_BIN=$(scripts/local-cluster-build.sh | tail -1)
export PATH=$LC_BIN:$PATH

if running; then
  want=${flag[sync_period]}
  have=$(grep -o '"sync_period_ms": *[0-9]*' "$LC_STATE/hpa.json" | grep -o '[0-9]*$')
  [[ ${want%ms} == "$have" ]] || lc_log "note: running with an HPA sync period of ${have} ms, not ${want}; down and up again to change it"
  metrics_api_available || lc_log "note: no Available resource metrics API (an up from before metrics-server?); down and up again to add it"
  lc_log "the local cluster is already up; reusing it"
  echo "export KUBECONFIG=$LC_STATE/kubeconfig"
  exit 0
fi
if [[ -d $LC_STATE ]]; then
  lc_log "state from an earlier run in $LC_STATE; cleaning it up first"
  scripts/local-cluster-down.sh
fi

# The loopback ports the cluster's programs listen on must be free (etcd, the controllers'
# and the kubelet's and kube-proxy's health and metrics ports).
for port in 2379 2380 2381 10248 10249 10256 10257 10259; do
  owner=$(ss -Hltnp "sport = :$port" 2>/dev/null | grep -o 'users:(("[^"]*' | cut -d'"' -f2 | head -1 || true)
  [[ -z $owner ]] || lc_die "port $port is in use by '$owner'; the cluster needs it on 127.0.0.1 (stop that, or run local-cluster-down.sh if it is an old cluster)"
done
# A failed up leaves nothing behind.
on_exit() {
  local rc=$? logs=/tmp/rdk-local-cluster-logs
  ((rc)) || return 0
  lc_log "up failed (exit $rc); cleaning up (the logs are kept in $logs)"
  rm -rf "$logs"
  cp -r "$LC_STATE/logs" "$logs" 2>/dev/null || true
  scripts/local-cluster-down.sh >&2 || true
}
trap on_exit EXIT

t0=$SECONDS
mark() { lc_log "$1 after $((SECONDS - t0)) s"; }
mkdir -p "$LC_STATE"/{pki,data,logs,run,cni/net.d,config} "$LC_RUN"
chmod 700 "$LC_STATE"

# Host paths outside the state folder that upstream programs write to regardless of their
# flags; down removes the ones that did not exist before.
host_paths=(/run/containerd /var/lib/kubelet /var/log/containers /var/log/pods /var/lib/cni /run/netns /run/mount /var/lib/containers /etc/cni)
for p in "${host_paths[@]}"; do [[ -e $p ]] || echo "$p"; done >"$LC_STATE/created-host-paths"
sysctl -n net.ipv4.ip_forward >"$LC_STATE/ip_forward.before"

# --- images (cached by the binaries and the image definitions) ------------------------------
infra=$(lc_infra_images "$LC_BIN")
kit_archive=$(scripts/image-build.sh --archive)
kit_image=${kit_archive##*/}
kit_image=${kit_image%.tar}
kit_image=retry-debt-kit:${kit_image#retry-debt-kit-}
echo "$kit_image" >"$LC_STATE/image"
mark "images ready"

# --- network --------------------------------------------------------------------------------
# The node address lives on a bridge with no ports (this kernel has no dummy links).
ip link add "$LC_NODE_BR" type bridge
ip addr add "$LC_NODE_IP/32" dev "$LC_NODE_BR"
ip link set "$LC_NODE_BR" up
sysctl -qw net.ipv4.ip_forward=1
uplinks=$(ip -o route show default | awk '{for (i = 1; i < NF; i++) if ($i == "dev") print $(i + 1)}' | sort -u)
# The pod bridge may only reach pods, Services and the node; nothing is forwarded to or from
# the machine's uplink.
iptables -t raw -N "$LC_GUARD_CHAIN"
for dst in "$LC_POD_CIDR" "$LC_SVC_CIDR" "$LC_NODE_IP/32"; do iptables -t raw -A "$LC_GUARD_CHAIN" -d "$dst" -j RETURN; done
iptables -t raw -A "$LC_GUARD_CHAIN" -j DROP
iptables -t raw -I PREROUTING -i "$LC_POD_BR" -j "$LC_GUARD_CHAIN"
iptables -N "$LC_GUARD_CHAIN"
for up in $uplinks; do
  iptables -A "$LC_GUARD_CHAIN" -i "$up" -j DROP
  iptables -A "$LC_GUARD_CHAIN" -o "$up" -j DROP
done
iptables -I FORWARD -j "$LC_GUARD_CHAIN"

cat >"$LC_STATE/cni/net.d/10-rdk.conflist" <<EOF
{
  "cniVersion": "1.1.0",
  "name": "rdk",
  "plugins": [
    {
      "type": "bridge", "bridge": "$LC_POD_BR", "isGateway": true, "ipMasq": false, "hairpinMode": true,
      "ipam": {
        "type": "host-local", "dataDir": "$LC_STATE/data/cni-ipam",
        "ranges": [[{ "subnet": "$LC_POD_CIDR", "gateway": "$LC_POD_GW" }]],
        "routes": [{ "dst": "0.0.0.0/0" }]
      }
    },
    { "type": "portmap", "capabilities": { "portMappings": true } }
  ]
}
EOF

# --- certificates ---------------------------------------------------------------------------
pki=$LC_STATE/pki
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$pki/$1.key" 2>/dev/null; }
ca() { key "$1"; openssl req -x509 -new -key "$pki/$1.key" -subj "/CN=$2" -days 3650 -out "$pki/$1.crt" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature"; }
# cert NAME SUBJECT CA USAGE [SANS]
cert() {
  local name=$1 subj=$2 signer=$3 usage=$4 sans=${5-}
  key "$name"
  openssl req -new -key "$pki/$name.key" -subj "$subj" -out "$pki/$name.csr"
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=$usage"
    [[ -n $sans ]] && echo "subjectAltName=$sans"
  } >"$pki/$name.ext"
  openssl x509 -req -in "$pki/$name.csr" -CA "$pki/$signer.crt" -CAkey "$pki/$signer.key" -CAcreateserial \
    -days 3650 -extfile "$pki/$name.ext" -out "$pki/$name.crt" 2>/dev/null
}
ca ca rdk-cluster-ca
ca front-proxy-ca rdk-front-proxy-ca
cert apiserver "/CN=kube-apiserver" ca serverAuth \
  "IP:$LC_NODE_IP,IP:$LC_API_SVC_IP,IP:127.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" ca clientAuth
cert kubelet-serving "/CN=$LC_NODE_NAME" ca serverAuth "IP:$LC_NODE_IP,DNS:$LC_NODE_NAME"
cert front-proxy-client "/CN=front-proxy-client" front-proxy-ca clientAuth
cert admin "/O=system:masters/CN=rdk-admin" ca clientAuth
cert controller-manager "/CN=system:kube-controller-manager" ca clientAuth
cert scheduler "/CN=system:kube-scheduler" ca clientAuth
cert kube-proxy "/CN=system:kube-proxy" ca clientAuth
cert kubelet "/O=system:nodes/CN=system:node:$LC_NODE_NAME" ca clientAuth
openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$pki/sa.key" 2>/dev/null
openssl pkey -in "$pki/sa.key" -pubout -out "$pki/sa.pub"
chmod 600 "$pki"/*.key

kubeconfig() {
  local file=$LC_STATE/$1.kubeconfig who=$2
  kubectl config --kubeconfig "$file" set-cluster rdk --server "https://$LC_NODE_IP:6443" \
    --certificate-authority "$pki/ca.crt" --embed-certs >/dev/null
  kubectl config --kubeconfig "$file" set-credentials "$who" --client-certificate "$pki/$who.crt" \
    --client-key "$pki/$who.key" --embed-certs >/dev/null
  kubectl config --kubeconfig "$file" set-context rdk --cluster rdk --user "$who" >/dev/null
  kubectl config --kubeconfig "$file" use-context rdk >/dev/null
}
for who in admin controller-manager scheduler kube-proxy kubelet; do kubeconfig "$who" "$who"; done
mv "$LC_STATE/admin.kubeconfig" "$LC_STATE/kubeconfig"
mark "certificates made"

# --- control plane --------------------------------------------------------------------------
lc_start etcd etcd --name rdk --data-dir "$LC_STATE/data/etcd" \
  --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
  --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
  --initial-cluster rdk=http://127.0.0.1:2380 --listen-metrics-urls http://127.0.0.1:2381
lc_wait "etcd healthy" 30 curl -fsS http://127.0.0.1:2381/health

# The API server reaches the kubelet (logs, exec) by the node's address: a host name would go
# to the machine's own resolver, off the machine.
lc_start kube-apiserver kube-apiserver \
  --advertise-address "$LC_NODE_IP" --bind-address "$LC_NODE_IP" --secure-port 6443 \
  --etcd-servers http://127.0.0.1:2379 \
  --service-cluster-ip-range "$LC_SVC_CIDR" --service-node-port-range 30000-32767 \
  --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
  --client-ca-file "$pki/ca.crt" --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
  --kubelet-client-certificate "$pki/apiserver-kubelet-client.crt" --kubelet-client-key "$pki/apiserver-kubelet-client.key" \
  --service-account-issuer https://kubernetes.default.svc.cluster.local \
  --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
  --requestheader-client-ca-file "$pki/front-proxy-ca.crt" --requestheader-allowed-names front-proxy-client \
  --requestheader-username-headers X-Remote-User --requestheader-group-headers X-Remote-Group \
  --requestheader-extra-headers-prefix X-Remote-Extra- \
  --proxy-client-cert-file "$pki/front-proxy-client.crt" --proxy-client-key-file "$pki/front-proxy-client.key" \
  --enable-aggregator-routing=true \
  --kubelet-preferred-address-types InternalIP
lc_wait "kube-apiserver /readyz" 90 lc_kubectl get --raw /readyz
mark "API server ready"

lc_start kube-controller-manager kube-controller-manager \
  --kubeconfig "$LC_STATE/controller-manager.kubeconfig" \
  --authentication-kubeconfig "$LC_STATE/controller-manager.kubeconfig" \
  --authorization-kubeconfig "$LC_STATE/controller-manager.kubeconfig" \
  --bind-address 127.0.0.1 --leader-elect=false --use-service-account-credentials \
  --root-ca-file "$pki/ca.crt" --service-account-private-key-file "$pki/sa.key" \
  --cluster-signing-cert-file "$pki/ca.crt" --cluster-signing-key-file "$pki/ca.key" \
  --horizontal-pod-autoscaler-sync-period "${flag[sync_period]}" \
  --horizontal-pod-autoscaler-tolerance "${flag[tolerance]}" \
  --horizontal-pod-autoscaler-downscale-stabilization "${flag[downscale_stabilization]}" \
  --horizontal-pod-autoscaler-initial-readiness-delay "${flag[initial_readiness_delay]}" \
  --horizontal-pod-autoscaler-cpu-initialization-period "${flag[cpu_initialization_period]}"
lc_start kube-scheduler kube-scheduler --kubeconfig "$LC_STATE/scheduler.kubeconfig" \
  --authentication-kubeconfig "$LC_STATE/scheduler.kubeconfig" \
  --authorization-kubeconfig "$LC_STATE/scheduler.kubeconfig" \
  --bind-address 127.0.0.1 --leader-elect=false
read_flags --records "$LC_STATE" --kubernetes "$LC_K8S_VERSION"

# --- containerd and the kubelet -------------------------------------------------------------
cat >"$LC_STATE/config/containerd.toml" <<EOF
version = 4
root = '$LC_STATE/data/containerd'
state = '$LC_STATE/run/containerd'
imports = []
disabled_plugins = ['io.containerd.nri.v1.nri', 'io.containerd.internal.v1.opt', 'io.containerd.image-verifier.v1.bindir']
[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = 'localhost/rdk/pause:1'
[plugins.'io.containerd.cri.v1.runtime']
  # This VM's root has no CAP_SYS_RESOURCE: runc cannot lower oom_score_adj below its own.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
  runtime_type = 'io.containerd.runc.v2'
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
  BinaryName = '$LC_BIN/runc'
  Root = '$LC_STATE/run/runc'
  SystemdCgroup = false
[plugins.'io.containerd.cri.v1.runtime'.cni]
  bin_dirs = ['$LC_BIN/cni']
  conf_dir = '$LC_STATE/cni/net.d'
[plugins.'io.containerd.server.v1.grpc']
  address = '$LC_STATE/run/containerd/containerd.sock'
[plugins.'io.containerd.server.v1.ttrpc']
  address = '$LC_STATE/run/containerd/containerd.sock.ttrpc'
EOF
lc_start containerd containerd --config "$LC_STATE/config/containerd.toml"
sock=$LC_STATE/run/containerd/containerd.sock
# ctr repeats containerd's cgroup v1 deprecation warning on every call: keep it in the log.
lc_wait "containerd socket" 30 ctr --address "$sock" version
for archive in "$infra/pause.tar" "$infra/coredns.tar" "$infra/metrics-server.tar" "$kit_archive"; do
  ctr --address "$sock" -n k8s.io images import --all-platforms "$archive" >/dev/null 2>>"$LC_STATE/logs/ctr.log"
done
mark "containerd up, images imported"

echo "nameserver $LC_DNS_IP" >"$LC_STATE/config/resolv.conf"
cat >"$LC_STATE/config/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# Kubernetes 1.35+ refuses cgroup v1 hosts unless told otherwise.
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://$sock
address: $LC_NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $pki/ca.crt}
authorization: {mode: Webhook}
tlsCertFile: $pki/kubelet-serving.crt
tlsPrivateKeyFile: $pki/kubelet-serving.key
clusterDomain: cluster.local
clusterDNS: [$LC_DNS_IP]
resolvConf: $LC_STATE/config/resolv.conf
podLogsDir: $LC_STATE/data/pod-logs
failSwapOn: false
serializeImagePulls: false
# The kit's image is imported, not pulled: image GC (default at 85% disk use) would delete it
# before a run on a busy developer disk, and disk-pressure eviction would then refuse the pods.
# Seen here at 83% use (a second Rust target dir): every image but pause was collected.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
EOF
lc_start kubelet kubelet --config "$LC_STATE/config/kubelet.yaml" --kubeconfig "$LC_STATE/kubelet.kubeconfig" \
  --hostname-override "$LC_NODE_NAME" --node-ip "$LC_NODE_IP" --root-dir "$LC_STATE/data/kubelet"
lc_wait "node $LC_NODE_NAME Ready" 120 lc_kubectl wait --for=condition=Ready "node/$LC_NODE_NAME" --timeout=1s
mark "node Ready"

cat >"$LC_STATE/config/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clusterCIDR: $LC_POD_CIDR
bindAddress: $LC_NODE_IP
nodePortAddresses: [$LC_NODE_IP/32]
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
hostnameOverride: $LC_NODE_NAME
clientConnection: {kubeconfig: $LC_STATE/kube-proxy.kubeconfig}
# Leave the host's conntrack sysctls alone.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF
lc_start kube-proxy kube-proxy --config "$LC_STATE/config/kube-proxy.yaml"

# --- CoreDNS, metrics-server and the record of the controller's flags -----------------------
sed "s|@DNS_IP@|$LC_DNS_IP|" k8s/local/coredns.yaml | lc_kubectl apply -f - >/dev/null
sed -e "s|@METRIC_RESOLUTION@|${flag[metric_resolution]}|" -e "s|@KUBELET_REQUEST_TIMEOUT@|${flag[kubelet_request_timeout]}|" k8s/local/metrics-server.yaml |
  lc_kubectl apply -f - >/dev/null
lc_kubectl -n kube-system create configmap retry-debt-kit-cluster --from-file=hpa.json="$LC_STATE/hpa.json" \
  --from-file=metrics-server.json="$LC_STATE/metrics-server.json" \
  --from-literal=image="$kit_image" --dry-run=client -o yaml | lc_kubectl apply -f - >/dev/null
lc_kubectl -n kube-system rollout status deployment/coredns --timeout=120s >/dev/null
lc_wait "CoreDNS answering for kubernetes.default" 60 \
  sh -c "dig +short +time=1 @$LC_DNS_IP kubernetes.default.svc.cluster.local | grep -qx $LC_API_SVC_IP"
mark "CoreDNS answers"
# metrics-server's /readyz waits for its first scrape; the pods' CPU needs a second one (a rate
# between two of the kubelet's cAdvisor samples, which come every 10-15 s).
lc_kubectl -n kube-system rollout status deployment/metrics-server --timeout=120s >/dev/null
lc_wait "APIService v1beta1.metrics.k8s.io Available" 60 metrics_api_available
mark "resource metrics API Available"
lc_wait "metrics-server serving kube-system's pods' CPU (kubectl top)" 120 pod_metrics_served
mark "kubectl top pods answers"

trap - EXIT
echo "$((SECONDS - t0))" >"$LC_STATE/up-seconds"
lc_log "local cluster up in $((SECONDS - t0)) s; HPA sync ${flag[sync_period]} (time scale $time_scale); metrics-server resolution ${flag[metric_resolution]}; image $kit_image"
echo "export KUBECONFIG=$LC_STATE/kubeconfig"
