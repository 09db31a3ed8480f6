//! The Prometheus rules the kit ships (k8s/prometheus/): `promtool check rules` on the rule file
//! and `promtool test rules` on its test, whose input series are scrapes of real runs of the kit
//! (the test file's header names the runs; scripts/prometheus-series.sh made them); the
//! operator's PrometheusRule carrying the same groups; the metric names the rules read being the
//! ones the pods and the meter export; and the PodMonitors and the plain scrape annotations
//! pointing at ports the kit's pods and meter serve.
//!
//! `PROMETHEUS_RULES_UPDATE=1 cargo test -p falsification --test prometheus_rules` rewrites
//! k8s/prometheus/operator/prometheusrule.yaml from the rule file.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

const RULES: &str = "k8s/prometheus/retry-debt-rules.yaml";
const RULES_TEST: &str = "k8s/prometheus/retry-debt-rules.test.yaml";
const OPERATOR: &str = "k8s/prometheus/operator";
const OPERATOR_RULE: &str = "k8s/prometheus/operator/prometheusrule.yaml";
/// Captures a run's scrapes and turns them into the test's input series.
const SERIES_SCRIPT: &str = "scripts/prometheus-series.sh";

/// The operator's PrometheusRule is this header, then the rule file from `groups:` on, indented
/// under `spec:` (comments kept, so the copy reads like the original).
const OPERATOR_RULE_HEADER: &str = "\
# Generated from ../retry-debt-rules.yaml (its groups, indented under spec:); edit that file, then
#   PROMETHEUS_RULES_UPDATE=1 cargo test -p falsification --test prometheus_rules
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: retry-debt
spec:
";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("reading {rel}: {e}"))
}

fn run(program: &str, args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .current_dir(repo())
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run `{program}` ({e}): install it (promtool: Debian package `prometheus`, \
                 as scripts/test.sh does; kubectl with kustomize)"
            )
        })
}

fn succeeds(program: &str, args: &[&str]) -> String {
    let out = run(program, args);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "`{program} {}` failed ({}):\n{text}",
        args.join(" "),
        out.status
    );
    text
}

fn yaml(rel: &str, text: &str) -> Value {
    serde_saphyr::from_str(text).unwrap_or_else(|e| panic!("{rel} does not parse: {e}"))
}

fn kustomize(rel: &str) -> Vec<Value> {
    let out = run("kubectl", &["kustomize", rel]);
    assert!(
        out.status.success(),
        "`kubectl kustomize {rel}` failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let docs: Vec<Value> = serde_saphyr::from_multiple(&String::from_utf8(out.stdout).unwrap())
        .unwrap_or_else(|e| panic!("`kubectl kustomize {rel}` does not parse: {e}"));
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

#[test]
fn the_rules_pass_promtool_check() {
    let out = succeeds("promtool", &["check", "rules", RULES]);
    assert!(out.contains("SUCCESS"), "{out}");
}

#[test]
fn the_rules_pass_their_promtool_tests_on_real_runs() {
    let out = succeeds("promtool", &["test", "rules", RULES_TEST]);
    assert!(out.contains("SUCCESS"), "{out}");
}

/// The PrometheusRule the operator loads is the rule file: the same text under `spec:`, and so
/// the same groups once parsed.
#[test]
fn the_operator_rule_carries_the_same_groups() {
    let plain = read(RULES);
    let start = plain
        .find("\ngroups:")
        .map(|i| i + 1)
        .unwrap_or_else(|| panic!("{RULES} has no top-level `groups:`"));
    let mut expected = OPERATOR_RULE_HEADER.to_string();
    for line in plain[start..].lines() {
        if !line.is_empty() {
            expected.push_str("  ");
        }
        expected.push_str(line);
        expected.push('\n');
    }
    if std::env::var_os("PROMETHEUS_RULES_UPDATE").is_some() {
        std::fs::write(repo().join(OPERATOR_RULE), &expected).unwrap();
    }
    let operator = read(OPERATOR_RULE);
    assert!(
        operator == expected,
        "{OPERATOR_RULE} is not {RULES} under `spec:`: regenerate it with \
         `PROMETHEUS_RULES_UPDATE=1 cargo test -p falsification --test prometheus_rules`"
    );
    let (plain, operator) = (yaml(RULES, &plain), yaml(OPERATOR_RULE, &operator));
    assert_eq!(operator["kind"], "PrometheusRule");
    assert_eq!(operator["apiVersion"], "monitoring.coreos.com/v1");
    assert!(plain["groups"].as_array().is_some_and(|g| !g.is_empty()));
    assert_eq!(operator["spec"]["groups"], plain["groups"]);
}

/// Every `retrydebt_*` series the rules read is one the pods or the meter export, by the
/// producers' own constants, with the labels they export; and the capture keeps each of them.
#[test]
fn the_rules_read_the_names_the_pods_and_the_meter_export() {
    use meter::state as m;
    use service::metrics as s;
    let exported = [
        s::ARRIVALS_TOTAL,
        s::COMPLETIONS_TOTAL,
        s::BUSY_SECONDS_TOTAL,
        s::WAIT_SECONDS,
        s::READY,
        m::FIRST_ATTEMPT_RATE,
        m::INGRESS_RATE,
        m::PUBLISHED,
    ];
    let exprs: String = yaml(RULES, &read(RULES))["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().into_iter().flatten())
        .filter_map(|r| r["expr"].as_str())
        .collect::<Vec<_>>()
        .join("\n");
    let rules = exprs.as_str();
    let mut read_names: Vec<&str> = rules
        .match_indices("retrydebt_")
        .map(|(i, _)| {
            let rest = &rules[i..];
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            &rest[..end]
        })
        .collect();
    read_names.sort_unstable();
    read_names.dedup();
    for name in &read_names {
        assert!(
            exported.contains(name),
            "{RULES} reads {name}, which neither the pods (service::metrics) nor the meter \
             (meter::state) export"
        );
    }
    let series = read(SERIES_SCRIPT);
    for name in exported {
        assert!(read_names.contains(&name), "{RULES} no longer reads {name}");
        assert!(
            series.contains(name),
            "{SERIES_SCRIPT} does not keep {name}, which the rules read"
        );
    }
    let first = format!("{}{{{}=\"0\"}}", s::ARRIVALS_TOTAL, s::ATTEMPT_LABEL);
    assert!(rules.contains(&first), "{RULES} should select {first}");
    let served = format!(
        "{}{{{}=~\"{}|{}\"}}",
        s::COMPLETIONS_TOTAL,
        s::OUTCOME_LABEL,
        s::Outcome::Answered.label(),
        s::Outcome::Abandoned.label()
    );
    assert!(rules.contains(&served), "{RULES} should select {served}");
}

/// The number of the container port named `port` in `deployment`'s pod template.
fn container_port(deployment: &Value, port: &str) -> Option<i64> {
    deployment["spec"]["template"]["spec"]["containers"]
        .as_array()?
        .iter()
        .flat_map(|c| c["ports"].as_array().into_iter().flatten())
        .find(|p| p["name"] == port)
        .and_then(|p| p["containerPort"].as_i64())
}

/// The PodMonitors select the base's pods and meter by their labels and scrape /metrics on a
/// port they name; the pod templates carry the plain `prometheus.io/*` annotations for the same
/// port; the operator's objects land in the kit's namespace.
#[test]
fn monitors_and_annotations_scrape_the_pods_and_the_meter() {
    let base = kustomize("k8s/base");
    let deployment = |name: &str| {
        base.iter()
            .find(|d| d["kind"] == "Deployment" && d["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("k8s/base has no Deployment {name}"))
            .clone()
    };
    for (name, port_name) in [("service", "http"), ("meter", "metrics")] {
        let d = deployment(name);
        let port = container_port(&d, port_name)
            .unwrap_or_else(|| panic!("Deployment {name} has no port named {port_name}"));
        let notes = &d["spec"]["template"]["metadata"]["annotations"];
        assert_eq!(notes["prometheus.io/scrape"], "true", "Deployment {name}");
        assert_eq!(
            notes["prometheus.io/port"],
            port.to_string().as_str(),
            "Deployment {name}: prometheus.io/port is not its {port_name} port"
        );
        assert_eq!(notes["prometheus.io/path"], "/metrics", "Deployment {name}");
    }

    let operator = kustomize(OPERATOR);
    let monitors: Vec<&Value> = operator
        .iter()
        .filter(|d| d["kind"] == "PodMonitor")
        .collect();
    assert_eq!(
        monitors.len(),
        2,
        "{OPERATOR}: a PodMonitor each for the pods and the meter"
    );
    let namespace = base
        .iter()
        .find(|d| d["kind"] == "Namespace")
        .map(|n| n["metadata"]["name"].clone())
        .expect("k8s/base has a Namespace");
    for doc in &operator {
        assert_eq!(doc["apiVersion"], "monitoring.coreos.com/v1");
        assert_eq!(
            doc["metadata"]["namespace"], namespace,
            "{}",
            doc["metadata"]["name"]
        );
    }
    assert!(operator.iter().any(|d| d["kind"] == "PrometheusRule"));
    for name in ["service", "meter"] {
        let d = deployment(name);
        let labels = &d["spec"]["template"]["metadata"]["labels"];
        let monitor = monitors
            .iter()
            .find(|m| {
                m["spec"]["selector"]["matchLabels"]
                    .as_object()
                    .is_some_and(|sel| !sel.is_empty() && sel.iter().all(|(k, v)| &labels[k] == v))
            })
            .unwrap_or_else(|| panic!("no PodMonitor selects the {name} pods"));
        for endpoint in monitor["spec"]["podMetricsEndpoints"].as_array().unwrap() {
            let port = endpoint["port"].as_str().unwrap_or_default();
            assert!(
                container_port(&d, port).is_some(),
                "PodMonitor {}: the {name} pods have no port named {port}",
                monitor["metadata"]["name"]
            );
            assert_eq!(endpoint["path"], "/metrics");
        }
    }
}
