#!/usr/bin/env bash
# One experiment against the upstream HPA of the one-machine cluster, compressed at the time
# scale the cluster runs at (local-cluster-up.sh --time-scale S), through `falsification run
# --cluster kube`. Checks what CI needs of each case's record: the predicted verdict held,
# `hpa: upstream v1.36.4`, and nothing of the run left in the cluster (the runner checks its
# namespace is gone; this checks it again).
#   scripts/local-cluster-run.sh EXPERIMENT [run flags]    e.g. F3 --signal first
#   scripts/local-cluster-run.sh --kind EXPERIMENT [run flags]
# --kind runs against the kind cluster of scripts/kind-local-up.sh instead, and also checks that
# the record names kind and its node image. The time scale is the one the cluster records.
# Records go to runs/local-cluster/ or runs/kind/ (env OUT to change it).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/local-cluster.sh
. scripts/lib/local-cluster.sh

kind=false
if [[ ${1-} == --kind ]]; then
  kind=true
  shift
fi
(($#)) || lc_die "usage: scripts/local-cluster-run.sh [--kind] EXPERIMENT [falsification run flags], e.g. F3 --signal first"
if $kind; then
  # shellcheck source=scripts/lib/kind.sh
  . scripts/lib/kind.sh
  out=${OUT:-runs/kind}
  export KUBECONFIG=$KIND_KUBECONFIG
  [[ -f $KUBECONFIG ]] || lc_die "no kind cluster (run scripts/kind-local-up.sh --time-scale 5)"
else
  out=${OUT:-runs/local-cluster}
  export KUBECONFIG=$LC_STATE/kubeconfig
  [[ -f $KUBECONFIG ]] || lc_die "no local cluster (run scripts/local-cluster-up.sh --time-scale 5)"
fi
falsification=${CARGO_TARGET_DIR:-target}/release/falsification
cargo build --release --locked -q -p falsification
fail() { echo "local-cluster-run: $*" >&2; exit 1; }

run() {
  local label t0=$SECONDS session dir summary verdict hpa
  label=$(echo "$*" | tr -c 'A-Za-z0-9-' '-' | sed 's/-*$//')
  "$falsification" run "$@" --cluster kube --out "$out/$label" >"$out/$label.log" 2>&1 ||
    fail "$label: the run failed (see $out/$label.log): $(tail -2 "$out/$label.log")"
  session=$(find "$out/$label" -mindepth 1 -maxdepth 1 -type d | sort | tail -1)
  for summary in "$session"/*/summary.json; do
    dir=$(dirname "$summary")
    verdict=$(jq -r .verdict "$summary")
    hpa=$(jq -r .hpa "$summary")
    [[ $verdict == held ]] || fail "$(basename "$dir"): verdict $verdict: $(jq -r .reason "$summary")"
    [[ $hpa == "upstream $LC_K8S_VERSION"* ]] || fail "$(basename "$dir"): hpa is '$hpa', not upstream $LC_K8S_VERSION"
    jq -e '.cleanup | test("checked gone")' "$dir/cluster.json" >/dev/null || fail "$(basename "$dir"): cleanup not checked: $(jq -c .cleanup "$dir/cluster.json")"
    if $kind && ! jq -e '(.cluster // "" | startswith("kind ")) and .node_image != null' "$dir/cluster.json" >/dev/null; then
      fail "$(basename "$dir"): the record does not name kind and its node image: $(jq -c '[.cluster, .node_image]' "$dir/cluster.json")"
    fi
    echo "local-cluster-run: $(basename "$dir") held on $hpa in $((SECONDS - t0)) s: $(jq -r .reason "$summary")"
  done
  [[ -z $(kubectl get namespace -l app.kubernetes.io/managed-by=retry-debt-kit -o name) ]] ||
    fail "$label: a namespace of the run is left: $(kubectl get namespace -l app.kubernetes.io/managed-by=retry-debt-kit -o name)"
}

mkdir -p "$out"
run "$@"
