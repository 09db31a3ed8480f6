#!/usr/bin/env bash
# Bring up a kind cluster for the kit and load the kit's image into it.
#   scripts/cluster-up.sh                  # cluster "retry-debt", image tagged with the git commit
#   scripts/cluster-up.sh --time-scale 5   # the HPA's periods divided by 5, for compressed runs
# Needs: docker (or podman), kind v0.33.0 exactly, kubectl, cargo, and the internet
# (metrics-server's release manifest). Then: scripts/deploy.sh first|ingress|paired|cpu
# The node image (kindest/node:v1.36.4 by digest) is pinned in k8s/kind/cluster.yaml; kind
# supports a node image only with the kind release that built it.
#
# The config is k8s/kind/cluster.yaml as `falsification kind-config` writes it, with what the
# host needs: failCgroupV1: false on a cgroup v1 host (Kubernetes 1.35+ refuses it otherwise),
# and the periods divided by --time-scale. Env:
#   KIND_NODE_IMAGE   a node image to use instead (scripts/kind-node-image.sh builds one from
#                     the kit's builds where kindest/node cannot be pulled; scripts/kind-local-up.sh
#                     runs this script with it)
#   KIND_SUBNETS      "PODS SERVICES": the pods' and Services' ranges instead of kind's defaults
#   METRICS_SERVER_IMAGE_ARCHIVE  a metrics-server v0.8.0 image archive built here: loaded, and
#                     upstream's manifest applied from k8s/kind/metrics-server-v0.8.0.yaml
#   KIT_IMAGE_ARCHIVE an archive of the kit's image (scripts/image-build.sh), loaded instead of
#                     building k8s/Dockerfile; TAG must name its tag
set -euo pipefail
cd "$(dirname "$0")/.."

time_scale=1
while (($#)); do
  case $1 in
    --time-scale) time_scale=${2:?--time-scale needs a number, e.g. 5}; shift ;;
    *) echo "cluster-up: unknown argument '$1' (--time-scale S)" >&2; exit 2 ;;
  esac
  shift
done

cluster=${CLUSTER:-retry-debt}
tag=${TAG:-$(git rev-parse --short HEAD 2>/dev/null || echo dev)}
image="retry-debt-kit:${tag}"

# kind's docker provider where a Docker daemon answers; its podman provider where it does not
# and podman is installed, or where KIND_EXPERIMENTAL_PROVIDER=podman says so.
engine=docker
if [[ ${KIND_EXPERIMENTAL_PROVIDER:-} == podman ]] ||
  { ! docker info >/dev/null 2>&1 && command -v podman >/dev/null; }; then
  engine=podman
  export KIND_EXPERIMENTAL_PROVIDER=podman
fi
for tool in "$engine" kind kubectl cargo; do
  command -v "$tool" >/dev/null || { echo "cluster-up: '$tool' is not on PATH" >&2; exit 1; }
done

config=k8s/kind/cluster.yaml
want_kind=v0.33.0
want_k8s=v1.36.4
# `kind version` prints e.g. "kind v0.33.0 go1.26.1 linux/amd64"; a pre-release (v0.33.0-alpha...)
# is not the release the node image was built with.
have_kind=$(kind version 2>/dev/null | awk '{print $2}')
if [[ "$have_kind" != "$want_kind" ]]; then
  echo "cluster-up: needs kind $want_kind, found '${have_kind:-unknown}' ($(command -v kind))." >&2
  echo "cluster-up: the node image kindest/node:$want_k8s is pinned by digest in $config and is" >&2
  echo "cluster-up: supported only with kind $want_kind. Install it, e.g.:" >&2
  echo "cluster-up:   go install sigs.k8s.io/kind@$want_kind" >&2
  exit 1
fi

cargo build --release --locked -q -p falsification
falsification=${CARGO_TARGET_DIR:-target}/release/falsification
args=(--name "$cluster" --time-scale "$time_scale")
[[ $(stat -fc %T /sys/fs/cgroup) == cgroup2fs ]] || args+=(--cgroup-v1)
# A node image from scripts/kind-node-image.sh says in its labels what kubeadm must be told.
kit_node=false
if [[ -n ${KIND_NODE_IMAGE:-} ]]; then
  args+=(--node-image "$KIND_NODE_IMAGE")
  label() { "$engine" image inspect --format "{{index .Labels \"io.retry-debt-kit.$1\"}}" "$KIND_NODE_IMAGE"; }
  repo=$(label image-repository) || { echo "cluster-up: no image $KIND_NODE_IMAGE in $engine" >&2; exit 1; }
  if [[ -n $repo && $repo != "<no value>" ]]; then
    kit_node=true
    etcd_tag=$(label etcd-tag)
    coredns_tag=$(label coredns-tag)
    args+=(--image-repository "$repo" --etcd-tag "$etcd_tag" --coredns-tag "$coredns_tag")
  fi
fi
if [[ -n ${KIND_SUBNETS:-} ]]; then
  read -r pods services <<<"$KIND_SUBNETS"
  [[ -n ${services:-} ]] || { echo "cluster-up: KIND_SUBNETS must be \"PODS SERVICES\", got '$KIND_SUBNETS'" >&2; exit 2; }
  args+=(--pod-subnet "$pods" --service-subnet "$services")
fi
generated=$(mktemp "${TMPDIR:-/tmp}/kind-config.XXXXXX.yaml")
records=$(mktemp -d "${TMPDIR:-/tmp}/kind-records.XXXXXX")
trap 'rm -f "$generated"; rm -rf "$records"' EXIT
"$falsification" kind-config "${args[@]}" >"$generated"
node_image=$(awk '/^    image:/ {print $2; exit}' "$generated")
# What the runner will read of this cluster (hpa.json, metrics-server.json), from the same flags;
# the flags' values (metrics-server's below) as lines name=value.
declare -A flag
while IFS='=' read -r k v; do flag[$k]=$v; done < <("$falsification" local-cluster-flags \
  --time-scale "$time_scale" --records "$records" --kubernetes "$want_k8s")
echo "cluster-up: node image $node_image; HPA periods at time scale $time_scale ($engine)"

# What the runner records about this cluster (kube-system/retry-debt-kit-cluster, as the
# one-machine cluster writes it): the controller's flags, which kind this is, and the image once
# loaded. Written as soon as the cluster exists, so a reuse can check what it was made with.
write_record() {
  kubectl "${ctx[@]}" -n kube-system create configmap retry-debt-kit-cluster --from-file=hpa.json="$records/hpa.json" \
    --from-file=metrics-server.json="$records/metrics-server.json" --from-literal=node-image="$node_image" \
    --from-literal=cluster="kind $cluster ($engine, kind $want_kind)" ${1:+--from-literal="$1"} \
    --dry-run=client -o yaml | kubectl "${ctx[@]}" apply -f - >/dev/null
}

ctx=(--context "kind-$cluster")
if kind get clusters 2>/dev/null | grep -qx "$cluster"; then
  echo "cluster-up: kind cluster '$cluster' exists, reusing it"
  # A cluster left from an older config would be reused silently; refuse it instead.
  have_k8s=$(kubectl "${ctx[@]}" get nodes \
    -o jsonpath='{range .items[*]}{.status.nodeInfo.kubeletVersion}{"\n"}{end}' | sort -u) || have_k8s=""
  if [[ "$have_k8s" != "$want_k8s" ]]; then
    shown=${have_k8s//$'\n'/ }
    echo "cluster-up: cluster '$cluster' runs kubelet '${shown:-unreachable}', not $want_k8s ($config);" >&2
    echo "cluster-up: delete it (kind delete cluster --name $cluster) and run this again." >&2
    exit 1
  fi
  # Its controller flags and node image are fixed at creation: reusing it at another time scale
  # or with another image would record settings it does not run.
  recorded() { kubectl "${ctx[@]}" -n kube-system get configmap retry-debt-kit-cluster -o jsonpath="{.data.$1}" 2>/dev/null; }
  if [[ $(recorded 'hpa\.json') != "$(cat "$records/hpa.json")" || $(recorded 'node-image') != "$node_image" ]]; then
    echo "cluster-up: cluster '$cluster' was made with other HPA settings or another node image than" >&2
    echo "cluster-up: --time-scale $time_scale and $node_image ask for; delete it and run this again." >&2
    exit 1
  fi
elif $kit_node; then
  # No default CNI in the kit's node image: the nodes are Ready once it is set up below.
  kind create cluster --name "$cluster" --config "$generated"
  write_record
else
  kind create cluster --name "$cluster" --config "$generated" --wait 120s
  write_record
fi

if $kit_node; then
  # The pod network kindnetd would make, set up once: each node bridges its own pod range
  # (bridge + host-local on the node's podCIDR) and routes the other nodes' ranges to them.
  # Each node's podCIDR is set by the controller-manager shortly after it registers.
  kubectl "${ctx[@]}" wait --for=jsonpath='{.spec.podCIDR}' nodes --all --timeout=120s >/dev/null
  mapfile -t nodes < <(kubectl "${ctx[@]}" get nodes -o jsonpath='{range .items[*]}{.metadata.name} {.spec.podCIDR} {.status.addresses[?(@.type=="InternalIP")].address}{"\n"}{end}')
  for n in "${nodes[@]}"; do
    read -r name cidr _ <<<"$n"
    "$engine" exec -i "$name" sh -c 'cat >/etc/cni/net.d/10-kit-bridge.conflist' <<EOF
{"cniVersion": "1.0.0", "name": "kit-bridge", "plugins": [
  {"type": "bridge", "bridge": "kitbr0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "$cidr"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
EOF
    for m in "${nodes[@]}"; do
      read -r other other_cidr other_ip <<<"$m"
      [[ $other == "$name" ]] || "$engine" exec "$name" ip route replace "$other_cidr" via "$other_ip"
    done
  done
  kubectl "${ctx[@]}" wait --for=condition=Ready nodes --all --timeout=180s
fi

# The cpu overlay's HPA reads the resource metrics API: metrics-server v0.8.0 from its upstream
# release manifest, plus --kubelet-insecure-tls for kind's self-signed kubelet certificates (the
# documented kind setting) and the resolution at this time scale. One already registered
# (someone else's) is left as it is.
ms_manifest=https://github.com/kubernetes-sigs/metrics-server/releases/download/v0.8.0/components.yaml
ms_patch='{"op":"add","path":"/spec/template/spec/containers/0/args/-","value":"--kubelet-insecure-tls"},
  {"op":"add","path":"/spec/template/spec/containers/0/args/-","value":"--metric-resolution='${flag[metric_resolution]}'"},
  {"op":"add","path":"/spec/template/spec/containers/0/args/-","value":"--kubelet-request-timeout='${flag[kubelet_request_timeout]}'"}'
if [[ -n ${METRICS_SERVER_IMAGE_ARCHIVE:-} ]]; then
  ms_manifest=k8s/kind/metrics-server-v0.8.0.yaml
  ms_image=localhost/rdk/metrics-server:v0.8.0 # scripts/lib/local-cluster.sh's lc_infra_images
  kind load image-archive "$METRICS_SERVER_IMAGE_ARCHIVE" --name "$cluster"
  ms_patch+=',{"op":"replace","path":"/spec/template/spec/containers/0/image","value":"'$ms_image'"},
  {"op":"replace","path":"/spec/template/spec/containers/0/imagePullPolicy","value":"Never"}'
fi
# Installed when no resource metrics API is registered, and again when it is this manifest's but
# without the patch (an earlier run stopped between the two): apply resets the args, then patch.
ms_args=$(kubectl "${ctx[@]}" -n kube-system get deployment metrics-server -o jsonpath='{.spec.template.spec.containers[0].args}' 2>/dev/null || true)
if ! kubectl "${ctx[@]}" get apiservice v1beta1.metrics.k8s.io >/dev/null 2>&1 ||
  [[ -n $ms_args && $ms_args != *--kubelet-insecure-tls* ]]; then
  echo "cluster-up: installing metrics-server v0.8.0 ($ms_manifest)"
  kubectl "${ctx[@]}" apply -f "$ms_manifest"
  kubectl "${ctx[@]}" -n kube-system patch deployment metrics-server --type=json -p "[$ms_patch]"
  kubectl "${ctx[@]}" -n kube-system rollout status deployment/metrics-server --timeout=180s
fi

# The kit's image: built from k8s/Dockerfile with the engine and loaded, or an archive made
# without one (scripts/image-build.sh, as scripts/kind-local-up.sh passes it).
if [[ -n ${KIT_IMAGE_ARCHIVE:-} ]]; then
  [[ -n ${TAG:-} ]] || { echo "cluster-up: KIT_IMAGE_ARCHIVE needs TAG, the archive's tag" >&2; exit 2; }
  kind load image-archive "$KIT_IMAGE_ARCHIVE" --name "$cluster"
elif [[ $engine == docker ]]; then
  echo "cluster-up: building $image"
  docker build -f k8s/Dockerfile -t "$image" .
  # A unique tag plus imagePullPolicy: IfNotPresent means the nodes use exactly this build.
  kind load docker-image "$image" --name "$cluster"
else
  echo "cluster-up: building $image"
  podman build -f k8s/Dockerfile -t "$image" .
  podman save -o "$records/image.tar" "$image"
  kind load image-archive "$records/image.tar" --name "$cluster"
fi

write_record image="$image"
echo "cluster-up: ready. Deploy with: TAG=$tag scripts/deploy.sh first"
