#!/usr/bin/env bash
# The slow checks, what a release runs after `.ci/run`: each group runs on its own, prints its
# time and one pass/fail line, and a failing group does not stop the next. Exit 1 if any failed.
#
#   scripts/verify.sh                 every group, in this order
#   scripts/verify.sh GROUP...        some of them
#
# Groups (times on 2 cores with warm caches; scripts/README.md has the figures of the last run):
#   embedded  the experiment tests on the embedded cluster: real service, meter, loadgen and
#             HAProxy processes at S = 10 (falsification/tests/embedded.rs)
#   stack     the trigger test against an off-the-shelf staging stack on loopback: waitress,
#             nginx and Prometheus (falsification/tests/stack.rs)
#   requests  the trigger test with real requests on loopback: an HTTPS POST through nginx with
#             mutual TLS and a bearer token, and gRPC calls to grpcio, each at a recovering and
#             a trapped rho (falsification/tests/secure.rs, scripts/secure-stack.sh)
#   cluster   the one-machine cluster (upstream v1.36.4): up, F4 paired with the step, F9's
#             meter outage and F0's CPU case through the upstream HPA, the kube tests (F4 on 2
#             loadgen shards, the trigger from inside the cluster), down with nothing left. F3 on
#             the first-attempt signal is CI's own run (.ci/run).
#   kind      the kind path as a user runs it, on podman (scripts/kind-local-check.sh)
#   disciplines  the trigger names the discipline of the kit's own pod (fifo, sharing, lifo,
#             bounded, codel) on loopback and predicts with it (falsification/tests/trigger_discipline.rs)
set -uo pipefail
cd "$(dirname "$0")/.."

groups=(embedded stack requests disciplines cluster kind)
(($#)) || set -- "${groups[@]}"
for g in "$@"; do
  [[ " ${groups[*]} " == *" $g "* ]] || { echo "verify.sh: unknown group '$g' (groups: ${groups[*]})" >&2; exit 2; }
done


# The release binaries first, as the README's main job builds them: some tests build them
# themselves, and a build beside a running experiment starves it of the 2 cores.
embedded() {
  cargo build --release --workspace --locked &&
    scripts/test.sh -p falsification --test embedded -- --ignored
}
stack() { scripts/test.sh -p falsification --test stack -- --ignored; }
requests() { scripts/test.sh -p falsification --test secure -- --ignored --nocapture; }
# The release pod and loadgen the test starts: a stale `service` has no --discipline.
disciplines() {
  cargo build --release --locked -p service -p loadgen &&
    scripts/test.sh -p falsification --test trigger_discipline -- --ignored --nocapture --test-threads 1
}

cluster() (
  set -e
  scripts/local-cluster-build.sh >/dev/null
  scripts/check-image.sh
  trap 'scripts/local-cluster-down.sh' EXIT
  scripts/local-cluster-up.sh --time-scale 5
  # F4 paired with the step (predicted: recovers). Dead times of 110-200 s on 2 cores put the
  # per-pod prediction near 1,100 s after the step: a 1,500 s horizon lets it finish.
  scripts/local-cluster-run.sh F4 --case paired-step --horizon 1500s
  # F9's meter outage: the trapped first-attempt HPA loses its meter (its Deployment at 0
  # replicas) for 120 s and keeps its 20 pods (ScalingActive False), then the trap goes on.
  scripts/local-cluster-run.sh F9 --case meter-outage-trapped --horizon 600s
  # F0's CPU case: metrics-server reads the pods' real CPU under a 20m CFS quota. At --rate-scale
  # 0.1 the pod's HTTP path stays within it even at the step's peak of retries. Horizon 1,100 s:
  # before the first scale-down, whose reconnections the model does not see (RESULTS.md).
  scripts/local-cluster-run.sh F0 --case cpu --rate-scale 0.1 --horizon 1100s
  # F11's LIFO, CoDel and throttling against the first-attempt trap, on the upstream HPA.
  scripts/local-cluster-run.sh F11 --case step-lifo
  scripts/local-cluster-run.sh F11 --case step-codel
  scripts/local-cluster-run.sh F11 --case step-throttling
  # F4 paired without a step on 2 loadgen shards, and the trigger test from inside the cluster.
  cargo test --locked -p falsification --test kube -- --nocapture --test-threads 1
  trap - EXIT
  scripts/local-cluster-down.sh
)

kind() { scripts/kind-local-check.sh; }

failed=()
for g in "$@"; do
  echo "verify.sh: $g ..."
  t=$SECONDS
  # Not in an `if`: bash would ignore the group's own `set -e` there.
  "$g"
  rc=$?
  if ((rc == 0)); then result=pass; else result=FAIL; failed+=("$g"); fi
  echo "verify.sh: $g: $result in $((SECONDS - t)) s"
done
if ((${#failed[@]})); then
  echo "verify.sh: failed: ${failed[*]}" >&2
  exit 1
fi
echo "verify.sh: all passed: $*"
