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
use common::{assert_nowhere, session_dir};

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
        "report.html",
        "models.csv",
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

/// `kubectl --kubeconfig K ARGS` (split at spaces; none has one): its stdout, trimmed.
fn kubectl(kubeconfig: &Path, args: &str) -> String {
    let args: Vec<&str> = args.split_whitespace().collect();
    let o = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(&args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "kubectl {args:?}: {err}");
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// The trigger's namespaces (labelled as kube::load::SELECTOR says).
fn trigger_namespaces(kubeconfig: &Path) -> Vec<String> {
    kubectl(
        kubeconfig,
        "get namespace -o name -l app.kubernetes.io/managed-by=retry-debt-kit,\
         app.kubernetes.io/component=trigger-load",
    )
    .lines()
    .map(String::from)
    .collect()
}

/// A target in the cluster: one of the kit's pods at 100/s behind a Service, in a namespace of
/// its own, deleted however the test ends.
struct Target {
    kubeconfig: PathBuf,
    ns: String,
}

impl Target {
    fn deploy(kubeconfig: &Path, dir: &Path) -> Target {
        let image = kubectl(
            kubeconfig,
            "-n kube-system get configmap retry-debt-kit-cluster --ignore-not-found \
             -o jsonpath={.data.image}",
        );
        let image = if image.is_empty() {
            "retry-debt-kit:dev".into()
        } else {
            image
        };
        let ns = format!("rdk-trigger-target-{}", std::process::id());
        let yaml = dir.join("target.yaml");
        std::fs::write(
            &yaml,
            format!(
                r#"apiVersion: v1
kind: Namespace
metadata:
  name: {ns}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: service
  namespace: {ns}
spec:
  replicas: 1
  selector:
    matchLabels:
      app: service
  template:
    metadata:
      labels:
        app: service
    spec:
      containers:
        - name: service
          image: "{image}"
          imagePullPolicy: IfNotPresent
          command: [/usr/local/bin/service]
          args: ["--listen=0.0.0.0:8080", "--rate=100", "--ready-after=0s"]
          ports:
            - containerPort: 8080
          readinessProbe:
            httpGet:
              path: /readyz
              port: 8080
            periodSeconds: 1
---
apiVersion: v1
kind: Service
metadata:
  name: service
  namespace: {ns}
spec:
  selector:
    app: service
  ports:
    - port: 80
      targetPort: 8080
"#
            ),
        )
        .unwrap();
        let target = Target {
            kubeconfig: kubeconfig.to_path_buf(),
            ns,
        };
        kubectl(kubeconfig, &format!("apply -f {}", yaml.display()));
        kubectl(
            kubeconfig,
            &format!(
                "-n {} rollout status deploy/service --timeout=180s",
                target.ns
            ),
        );
        target
    }

    fn url(&self) -> String {
        format!("http://service.{}.svc.cluster.local/work", self.ns)
    }

    /// `trigger --cluster kube` against it at `rate`/s of its 100/s: the exit code and record.
    fn trigger(&self, rate: &str, extra: &[&str], out: &Path) -> (Option<i32>, Value) {
        let status = Command::new(env!("CARGO_BIN_EXE_falsification"))
            .env("KUBECONFIG", &self.kubeconfig)
            .env(SECRET_VAR, SECRET)
            .args(["trigger", "--cluster", "kube", "--target", &self.url()])
            .args(["--rate", rate, "--capacity", "100", "--timeout", "1s"])
            .args(["--retries", "2", "--yes", "--out"])
            .arg(out)
            .args(extra)
            .stdin(Stdio::null())
            .status()
            .unwrap();
        (status.code(), read_json(&out.join("record.json")))
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(["delete", "namespace", &self.ns, "--ignore-not-found"])
            .status();
    }
}

/// A secret the trigger's requests carry, planted to be looked for.
const SECRET: &str = "planted-kube-secret-5d2e";
const SECRET_VAR: &str = "RDK_KUBE_TEST_SECRET";

/// `trigger --cluster kube`: the loadgen as a Job in a namespace of its own against a service in
/// the cluster, its rows streamed back into the record; a recovering case that stops once decided
/// and a trapped one a stop rule ends; no trigger namespace left after either.
#[test]
fn trigger_in_the_cluster_records_rows_and_leaves_no_namespace() {
    let kubeconfig = match reachable() {
        Ok(p) => p,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    let before = trigger_namespaces(&kubeconfig);
    let dir = tempfile::tempdir().unwrap();
    let target = Target::deploy(&kubeconfig, dir.path());
    let left_behind = || -> Vec<String> {
        trigger_namespaces(&kubeconfig)
            .into_iter()
            .filter(|n| !before.contains(n))
            .collect()
    };

    // rho 0.2, A rho 0.6: the spike's failure ends by itself, and the load stops once decided.
    // Its requests carry a header from this process's environment, which reaches the shards
    // through the run's Secret (a shard that could not read it would fail the run), and a
    // literal one: neither value is in any file the run leaves.
    let (code, record) = target.trigger(
        "20",
        &[
            "-H",
            &format!("x-api-key: @env:{SECRET_VAR}"),
            "-H",
            &format!("x-tenant: {SECRET}-literal"),
        ],
        &dir.path().join("recovers"),
    );
    assert_eq!(code, Some(0), "{}", record["measured"]);
    let m = &record["measured"];
    assert_eq!(m["decision"], "recovered", "{m}");
    assert_eq!(m["ended"], "decided", "{m}");
    assert!(
        record["record"]["rows"]
            .as_array()
            .is_some_and(|r| !r.is_empty()),
        "no rows: {record}"
    );
    let cluster = &record["cluster"];
    assert!(
        cluster["namespace"]
            .as_str()
            .is_some_and(|n| n.starts_with("retry-debt-trigger-")),
        "{cluster}"
    );
    assert_eq!(cluster["merge"]["equal"], true, "{cluster}");
    assert_eq!(left_behind(), Vec::<String>::new());
    assert_nowhere(&dir.path().join("recovers"), SECRET);

    // rho 0.5, A rho 1.5: trapped, until the stop rule stops the Job's pods mid-run.
    let (code, record) = target.trigger(
        "50",
        &["--abort-if", "goodput<0.5 for 2s", "--after-abort", "3s"],
        &dir.path().join("aborted"),
    );
    assert_eq!(code, Some(3), "{}", record["measured"]);
    assert_eq!(record["measured"]["decision"], "aborted");
    assert_eq!(record["abort"]["rule"], "goodput<0.5 for 2s");
    assert_eq!(left_behind(), Vec::<String>::new());
}
