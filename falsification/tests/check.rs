//! `falsification check` as a user runs it: the kit's own F5 configuration, exit codes, the JSON
//! contract, SARIF, and input errors that name the file and the field.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn check(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_falsification"))
        .arg("check")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap()
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: stdout {} stderr {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// The stack file of the kit's own loadgen as F5 runs it: 3 tries of 10 s, on timeouts and 5xx.
const KIT_CLIENT: &str = "[[client]]\nname = \"loadgen\"\nlibrary = \"kit-loadgen\"\n\
                          args = [\"--rate=40\", \"--timeout=10s\", \"--retries=2\", \
                          \"--retry-on=timeout,5xx\"]\n";

/// The kit's gateway overlay rendered as `kubectl kustomize` writes it (HAProxy's ConfigMap
/// holds its file; the HPA scales on first attempts at 50/s per pod).
fn rendered_gateway_overlay(dir: &Path) -> PathBuf {
    let out = Command::new("kubectl")
        .args(["kustomize"])
        .arg(repo().join("k8s/overlays/gateway"))
        .output()
        .expect("kubectl is on PATH (scripts/test.sh checks it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let path = dir.join("gateway-overlay.yaml");
    std::fs::write(&path, &out.stdout).unwrap();
    path
}

#[test]
fn the_kits_f5_stack_has_a_second_state_under_its_first_attempt_hpa() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("stack.toml"), KIT_CLIENT).unwrap();
    // The overlay alone: HAProxy's file is read from the ConfigMap that holds it.
    let overlay = rendered_gateway_overlay(dir.path());
    let out = check(
        &[
            overlay.to_str().unwrap(),
            "--stack",
            "stack.toml",
            "--pod-capacity",
            "100",
            "--format",
            "json",
        ],
        dir.path(),
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = json(&out);
    let timeout = &r["classes"][0];
    assert_eq!(timeout["class"], "timeout");
    // 3 client tries x 3 HAProxy tries (its 504 at 9 s comes before the client's 10 s).
    assert_eq!(timeout["a"].as_f64(), Some(9.0));
    assert_eq!(r["hpa"]["signal_sees"], "first-attempts");
    assert_eq!(r["hpa"]["target"].as_f64(), Some(0.5));
    assert_eq!(r["second_state"], true);
    let reason = r["reasons"][0].as_str().unwrap();
    assert!(
        reason.contains("the target u* = 0.50 is at or above 1/A = 0.11 for timeouts"),
        "{reason}"
    );
    // The contract's keys, and fixes that say the A they give.
    for key in [
        "layers",
        "classes",
        "hpa",
        "second_state",
        "reasons",
        "fixes",
    ] {
        assert!(r.get(key).is_some(), "{key} missing");
    }
    let classes: Vec<&str> = r["classes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["class"].as_str().unwrap())
        .collect();
    assert_eq!(classes, ["timeout", "connect-failure", "5xx"]);
    let fixes = r["fixes"].as_array().unwrap();
    assert!(
        fixes[0]["change"]
            .as_str()
            .unwrap()
            .starts_with("drop abandoned work")
    );
    assert!(fixes.iter().all(|f| f["a"].as_f64().is_some()));
    let layers = r["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 2);
    assert!(
        layers[1]["source"]["file"]
            .as_str()
            .unwrap()
            .ends_with("gateway-overlay.yaml#ConfigMap/gateway/haproxy.cfg"),
        "{}",
        layers[1]
    );
}

#[test]
fn a_client_that_ignores_the_gateways_504_gets_a_lower_a_and_exit_codes_follow_rho() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("stack.toml"),
        "[[client]]\nname = \"web\"\nattempts = 3\ntimeout = \"10s\"\nretry_on = [\"timeout\"]\n",
    )
    .unwrap();
    let haproxy = repo().join("k8s/overlays/gateway/haproxy.cfg");
    let run = |rho: &str| {
        check(
            &[
                haproxy.to_str().unwrap(),
                "--stack",
                "stack.toml",
                "--rho",
                rho,
                "--format",
                "json",
            ],
            dir.path(),
        )
    };
    // HAProxy answers 504 at 9 s; the client retries only its own timeouts: A = 3.
    let low = run("0.2");
    assert_eq!(
        low.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&low.stderr)
    );
    assert_eq!(json(&low)["classes"][0]["a"].as_f64(), Some(3.0));
    let high = run("0.4");
    assert_eq!(high.status.code(), Some(1));
    assert_eq!(json(&high)["second_state"], true);
}

#[test]
fn text_and_sarif_name_the_verdict_and_the_layers() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("stack.toml"), KIT_CLIENT).unwrap();
    let haproxy = repo().join("k8s/overlays/gateway/haproxy.cfg");
    let base = [
        haproxy.to_str().unwrap(),
        "--stack",
        "stack.toml",
        "--rho",
        "0.3",
    ];
    let text = check(
        &[&base[..], &["--spike", "5x60s", "--predict"]].concat(),
        dir.path(),
    );
    let t = String::from_utf8_lossy(&text.stdout);
    assert!(
        t.contains("Layers, outermost first:") && t.contains("second state exists"),
        "{t}"
    );
    assert!(
        t.contains("a 5x spike for 60 s: trapped (A rho >= 1: it never recovers)"),
        "{t}"
    );
    let sarif = check(&[&base[..], &["--format", "sarif"]].concat(), dir.path());
    let s = json(&sarif);
    assert_eq!(s["version"], "2.1.0");
    let results = s["runs"][0]["results"].as_array().unwrap();
    assert_eq!(results[0]["ruleId"], "retry-debt/second-state");
    assert_eq!(results[0]["level"], "error");
    let located = results
        .iter()
        .filter(|r| r["ruleId"] == "retry-debt/layer")
        .filter_map(|r| r["locations"][0]["physicalLocation"]["region"]["startLine"].as_u64())
        .count();
    assert!(located >= 1, "{s}");
}

#[test]
fn a_recovering_spike_is_predicted_by_the_closed_form_and_the_fluid_model() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("stack.toml"),
        "[[client]]\nname = \"web\"\nattempts = 3\ntimeout = \"10s\"\n",
    )
    .unwrap();
    // F2's 30% case: A rho = 0.9 < 1, no second state at this utilization (exit 0); published
    // recovery about 9,756 s after a 5x300s spike.
    let out = check(
        &[
            "--stack",
            "stack.toml",
            "--rho",
            "0.3",
            "--spike",
            "5x300s",
            "--predict",
            "--format",
            "json",
        ],
        dir.path(),
    );
    assert_eq!(out.status.code(), Some(0));
    let spike = &json(&out)["trigger"]["spike"];
    let closed = spike["recovery_closed_s"].as_f64().unwrap();
    let fluid = spike["recovery_fluid_s"].as_f64().unwrap();
    assert!((closed / 9_756.0 - 1.0).abs() < 0.02, "{spike}");
    assert!((fluid / closed - 1.0).abs() < 0.1, "{spike}");
}

#[test]
fn bad_input_exits_2_naming_the_file_and_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        std::fs::write(dir.path().join(name), text).unwrap();
        name.to_string()
    };
    let cases = [
        (write("notes.txt", "hello\n"), "notes.txt"),
        (
            write(
                "bad.yaml",
                "apiVersion: v1\nkind: ConfigMap\nmetadata: [unclosed\n",
            ),
            "bad.yaml",
        ),
        (
            write("bad.cfg", "defaults\n    timeout server 3x\n"),
            "timeout",
        ),
    ];
    for (file, named) in &cases {
        let out = check(&[file], dir.path());
        assert_eq!(out.status.code(), Some(2), "{file}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(named) && err.lines().count() == 1,
            "{file}: {err}"
        );
    }
    let missing = check(&["absent.yaml"], dir.path());
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("absent.yaml"));
    let huge = dir.path().join("huge.cfg");
    std::fs::write(&huge, "#".repeat(5 << 20)).unwrap();
    let out = check(&["huge.cfg"], dir.path());
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("larger than"));
    let rho = check(&["--stack", "x.toml", "--rho", "-1"], dir.path());
    assert_eq!(rho.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&rho.stderr).contains("--rho"));
}

#[test]
fn routes_of_one_proxy_are_alternatives_and_route_picks_one() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("stack.toml"),
        "[[client]]\nname = \"web\"\nattempts = 3\ntimeout = \"10s\"\nretry_on = [\"timeout\", \"5xx\"]\n",
    )
    .unwrap();
    // Two backends: `api` retries twice on a 3 s timeout, `static` never.
    std::fs::write(
        dir.path().join("haproxy.cfg"),
        "defaults\n    mode http\n    timeout server 3s\n    retries 2\n    \
         retry-on response-timeout conn-failure\nbackend api\n    server a 10.0.0.1:80\n\
         backend static\n    retries 0\n    server s 10.0.0.2:80\n",
    )
    .unwrap();
    let run = |extra: &[&str]| {
        let mut args = vec!["haproxy.cfg", "--stack", "stack.toml", "--format", "json"];
        args.extend_from_slice(extra);
        json(&check(&args, dir.path()))
    };
    let worst = run(&[]);
    assert_eq!(worst["classes"][0]["a"].as_f64(), Some(9.0), "{worst}");
    assert_eq!(worst["layers"].as_array().unwrap().len(), 2);
    assert_eq!(worst["other_routes"][0], "haproxy backend static");
    let picked = run(&["--route", "static"]);
    assert_eq!(picked["classes"][0]["a"].as_f64(), Some(3.0), "{picked}");
    let none = check(&["haproxy.cfg", "--route", "nope"], dir.path());
    assert_eq!(none.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&none.stderr).contains("backend api"));
}

#[test]
fn the_trigger_plan_uses_the_stacks_a_and_says_where_it_comes_from() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("stack.toml"), KIT_CLIENT).unwrap();
    let haproxy = repo().join("k8s/overlays/gateway/haproxy.cfg");
    let plan = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_falsification"))
            .args([
                "trigger",
                "--rho",
                "0.2",
                "--timeout",
                "10s",
                "--retries",
                "2",
                "--dry-run",
            ])
            .args(extra)
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let alone = plan(&[]);
    assert!(
        alone.contains("amplification A:  3.000") && alone.contains("unknown unless measured"),
        "{alone}"
    );
    let stacked = plan(&[
        "--stack",
        "stack.toml",
        "--config",
        haproxy.to_str().unwrap(),
    ]);
    assert!(stacked.contains("amplification A:  9.000"), "{stacked}");
    assert!(
        stacked.contains("computed by `falsification check`; the client alone: 3.000"),
        "{stacked}"
    );
    // A = 9 at rho 0.2: trapped, where the client alone predicts a recovery.
    assert!(stacked.contains("A rho = 1.800"), "{stacked}");
}

#[test]
fn defenses_change_the_verdict_and_each_layer_gets_its_room() {
    let dir = tempfile::tempdir().unwrap();
    // The kit's client behind a first-attempt HPA at 50%: A = 3, trapped.
    let client = "[[client]]\nname = \"web\"\nattempts = 3\ntimeout = \"10s\"\n";
    let hpa = "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata: {name: web}\n\
               spec:\n  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}\n  \
               maxReplicas: 10\n  metrics:\n  - type: External\n    external:\n      metric: \
               {name: first_attempts_per_second}\n      target: {type: AverageValue, averageValue: \
               \"50\"}\n";
    std::fs::write(dir.path().join("hpa.yaml"), hpa).unwrap();
    let run = |stack: &str| {
        std::fs::write(dir.path().join("stack.toml"), stack).unwrap();
        check(
            &["hpa.yaml", "--stack", "stack.toml", "--format", "json"],
            dir.path(),
        )
    };
    let fifo = run(&format!("{client}[service]\npod_capacity = 100.0\n"));
    assert_eq!(
        fifo.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&fifo.stderr)
    );
    let r = json(&fifo);
    // A budget below 1 retry per request keeps 1/A above 0.5; one retry (A = 2) does not.
    let room = &r["retry_allowances"]["layers"][0];
    assert_eq!(r["retry_allowances"]["held"], "target");
    assert_eq!(room["budget_below"].as_f64(), Some(1.0));
    assert_eq!(room["retries_at_most"].as_u64(), Some(0));
    // 50 waiting at 10 ms each is 500 ms of wait: no attempt reaches its 10 s timeout.
    let bounded = run(&format!(
        "{client}[service]\npod_capacity = 100.0\ndiscipline = {{ kind = \"bounded\", limit = 50 }}\n"
    ));
    assert_eq!(bounded.status.code(), Some(0));
    let r = json(&bounded);
    assert_eq!(r["service"]["discipline"]["kind"], "bounded");
    let reason = r["reasons"][0].as_str().unwrap();
    assert!(
        reason.starts_with("no second state from the queue"),
        "{reason}"
    );
    // A breaker keeps the verdict and says what it cuts, and where that is measured.
    let breaker = run(&format!(
        "{client}circuit_breaker = {{ failures = 5 }}\n[service]\npod_capacity = 100.0\n"
    ));
    assert_eq!(breaker.status.code(), Some(1));
    let text = String::from_utf8_lossy(&breaker.stdout).to_string();
    let r: Value = serde_json::from_str(&text).unwrap();
    assert!(
        r["reasons"][1]
            .as_str()
            .unwrap()
            .contains("measured in F11"),
        "{text}"
    );
    // A bad discipline is an input error naming the field and the value.
    let bad = run(&format!("{client}[service]\ndiscipline = \"random\"\n"));
    assert_eq!(bad.status.code(), Some(2));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("service.discipline") && err.contains("random") && err.lines().count() == 1,
        "{err}"
    );
}
