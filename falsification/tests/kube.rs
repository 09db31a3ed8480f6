//! `run --cluster kube` against a real cluster, when one answers: the kubeconfig in
//! `FALSIFICATION_KUBECONFIG`, else the one-machine cluster's. With no cluster reachable each
//! test prints why and passes (CI wires cluster runs on its own).
//!
//! The run: F4 paired without a step (the quickest case: no pod is added) at time scale 5 with
//! a short horizon and 2 loadgen shards, in a namespace of its own. It checks the record (the
//! same files as the embedded cluster, plus cluster.json), `hpa: upstream`, the merged
//! per-second totals against the shards' summaries, and that nothing of the run is left.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

mod common;
use common::session_dir;

const LOCAL_KUBECONFIG: &str = "/var/lib/retry-debt-kit/local-cluster/kubeconfig";

/// The kubeconfig of a cluster whose API server answers, or why there is none.
fn reachable() -> Result<PathBuf, String> {
    let path = std::env::var_os("FALSIFICATION_KUBECONFIG")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(LOCAL_KUBECONFIG));
    if !path.is_file() {
        return Err(format!("no kubeconfig at {}", path.display()));
    }
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&path)
        .args(["get", "--raw", "/readyz", "--request-timeout=5s"])
        .output()
        .map_err(|e| format!("kubectl: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "the API server of {} does not answer: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    // Only one external metrics API can exist: a cluster whose APIService serves another
    // namespace (KEDA, prometheus-adapter, scripts/deploy.sh) is not one to run on.
    let owner = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&path)
        .args([
            "get",
            "apiservice",
            "v1beta1.external.metrics.k8s.io",
            "--ignore-not-found",
            "-o",
            "jsonpath={.spec.service.namespace}",
        ])
        .output()
        .map_err(|e| format!("kubectl: {e}"))?;
    let owner = String::from_utf8_lossy(&owner.stdout).trim().to_string();
    if !owner.is_empty() {
        return Err(format!(
            "the external metrics APIService of {} serves namespace {owner}",
            path.display()
        ));
    }
    Ok(path)
}

fn read_json(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

#[test]
fn f4_without_a_step_on_the_upstream_hpa_leaves_nothing_behind() {
    let kubeconfig = match reachable() {
        Ok(p) => p,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    let out = tempfile::tempdir().unwrap();
    let ns = format!("rdk-test-{}", std::process::id());
    let status = Command::new(env!("CARGO_BIN_EXE_falsification"))
        .args(["run", "F4", "--case", "paired-no-step", "--cluster", "kube"])
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["--namespace", &ns, "--time-scale", "5", "--horizon", "100s"])
        .args(["--loadgen-shards", "2", "--out"])
        .arg(out.path())
        .stdin(Stdio::null())
        .status()
        .unwrap();
    let dir = session_dir(out.path()).join("F4-paired-no-step");
    for f in [
        "experiment.toml",
        "timeseries.csv",
        "decisions.csv",
        "events.csv",
        "summary.json",
        "report.md",
        "pods.svg",
        "cluster.json",
    ] {
        assert!(dir.join(f).is_file(), "{f} missing in {}", dir.display());
    }
    let summary = read_json(&dir.join("summary.json"));
    assert!(
        summary["hpa"].as_str().unwrap().starts_with("upstream v"),
        "{summary}"
    );
    let cluster = read_json(&dir.join("cluster.json"));
    assert_eq!(cluster["merge"]["equal"], true, "{cluster}");
    assert_eq!(cluster["merge"]["shards"], 2);
    assert!(
        cluster["cleanup"]
            .as_str()
            .unwrap()
            .contains("checked gone"),
        "{cluster}"
    );
    assert!(status.success(), "the run failed: see {}", dir.display());
    assert_eq!(summary["verdict"], "held", "{summary}");
    let left = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["get", "namespace", &ns, "--ignore-not-found", "-o", "name"])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&left.stdout).trim().is_empty(),
        "namespace {ns} left behind"
    );
}
