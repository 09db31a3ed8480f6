#!/usr/bin/env bash
# The kit's tests, on a fresh machine: installs what they need when it is missing (promtool
# checks the metrics of the pod, loadgen and meter; shellcheck checks scripts/; perf counts the
# loadgen's system calls per request; HAProxy is F5's gateway; nginx serves the loadgen's TLS
# test; kubectl with kustomize renders the manifests), then runs the tests of the workspace.
# The slow ones (the embedded experiments, the staging stacks) are #[ignore]d here and run by
# scripts/verify.sh.
#   scripts/test.sh                         every crate's tests
#   scripts/test.sh CARGO_TEST_ARGS...      instead of --workspace, e.g. -p loadgen
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v promtool >/dev/null || need_apt+=(prometheus)
command -v shellcheck >/dev/null || need_apt+=(shellcheck)
command -v perf >/dev/null || need_apt+=(linux-perf)
command -v haproxy >/dev/null || need_apt+=(haproxy)
[[ -x /usr/sbin/nginx ]] || need_apt+=(nginx-light)
if ((${#need_apt[@]})); then
  sudo=()
  [[ $(id -u) == 0 ]] || sudo=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi
command -v kubectl >/dev/null || { echo "test.sh: kubectl is not on PATH (the meter's tests and the manifest checks render with kubectl kustomize)" >&2; exit 1; }

# The release profile: after the README's main job (a release build) only the kit's own crates
# compile again, where a debug build would compile every dependency a second time.
(($#)) || set -- --workspace
cargo test --release --locked "$@"
