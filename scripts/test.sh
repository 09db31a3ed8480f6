#!/usr/bin/env bash
# The kit's tests, on a fresh machine: installs what they need when it is missing (promtool
# checks the metrics of the pod, loadgen and meter; shellcheck checks scripts/; perf counts the
# loadgen's system calls per request; HAProxy is F5's gateway; nginx serves the loadgen's TLS
# test; kubectl with kustomize renders the manifests; Chromium renders the report pages and the
# Nu HTML checker, a jar cached outside the clone, validates them), then runs the tests of the
# workspace.
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
command -v chromium >/dev/null || need_apt+=(chromium)
command -v java >/dev/null || need_apt+=(default-jre-headless)

# The Nu HTML checker (vnu) of falsification/tests/page.rs: the jar of the npm package vnu-jar,
# pinned by version and integrity, cached outside the clone (a user without /var/cache gets one
# in their home). The test finds it through RETRYDEBT_VNU_JAR.
vnu_version=26.9.27
vnu_integrity=sha512-TkQd5DFfOaWC9ebtvozTsrH2Vaod3jYg+vrOeREzIXxBexLz9+rS2DNtjn7+RPUiZhgli0SghgBX6RJRNea0KA==
cache=${RDK_CACHE:-/var/cache/retry-debt-kit}
if [[ -z ${RDK_CACHE:-} && $(id -u) != 0 && ! -w $cache ]]; then
  cache=${XDG_CACHE_HOME:-$HOME/.cache}/retry-debt-kit
fi
vnu_jar=$cache/vnu-jar/$vnu_version/vnu.jar
[[ -f $vnu_jar ]] || command -v npm >/dev/null || need_apt+=(npm)
if ((${#need_apt[@]})); then
  sudo=()
  [[ $(id -u) == 0 ]] || sudo=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi
if [[ ! -f $vnu_jar ]]; then
  echo "test.sh: fetching vnu-jar $vnu_version into ${vnu_jar%/*}" >&2
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  npm pack --silent --pack-destination "$tmp" "vnu-jar@$vnu_version" >/dev/null
  tgz=$tmp/vnu-jar-$vnu_version.tgz
  got=sha512-$(openssl dgst -sha512 -binary "$tgz" | base64 -w0)
  [[ $got == "$vnu_integrity" ]] || { echo "test.sh: vnu-jar $vnu_version: integrity $got, pinned $vnu_integrity" >&2; exit 1; }
  tar -xzf "$tgz" -C "$tmp" package/build/dist/vnu.jar
  mkdir -p "${vnu_jar%/*}"
  # Renamed into place once whole: a run that stopped halfway leaves no jar to trust.
  mv "$tmp/package/build/dist/vnu.jar" "$vnu_jar.$$"
  mv -f "$vnu_jar.$$" "$vnu_jar"
  rm -rf "$tmp"
  trap - EXIT
fi
export RETRYDEBT_VNU_JAR=$vnu_jar
command -v kubectl >/dev/null || { echo "test.sh: kubectl is not on PATH (the meter's tests and the manifest checks render with kubectl kustomize)" >&2; exit 1; }

# The release profile: after the README's main job (a release build) only the kit's own crates
# compile again, where a debug build would compile every dependency a second time.
(($#)) || set -- --workspace
cargo test --release --locked "$@"
