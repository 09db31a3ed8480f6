//! The command line and the JSON contract of `predict --format json`.

use clap::Parser;
use falsification::cli::{self, Cli, Command};
use falsification::runner::command::ClusterArg;
use falsification::{predict, report};

fn args(argv: &[&str]) -> cli::PredictArgs {
    match Cli::try_parse_from(argv).unwrap().command {
        Command::Predict(a) => a,
        other => panic!("not predict: {other:?}"),
    }
}

#[test]
fn run_and_suite_parse_with_their_defaults() {
    let Command::Run(r) = Cli::try_parse_from(["falsification", "run", "F3", "--signal", "first"])
        .unwrap()
        .command
    else {
        panic!("not run");
    };
    // The time scale defaults per cluster: 10 embedded, the cluster's own on Kubernetes.
    assert_eq!(
        (r.select.experiment.as_str(), r.common.time_scale),
        ("F3", None)
    );
    assert_eq!(r.common.rate_scale, 1.0);
    assert_eq!(r.common.cluster, ClusterArg::Embedded);
    let Command::Run(k) = Cli::try_parse_from([
        "falsification",
        "run",
        "F3",
        "--cluster",
        "kube",
        "--kubeconfig",
        "/tmp/kc",
        "--loadgen-shards",
        "2",
        "--time-scale",
        "5",
        "--keep",
    ])
    .unwrap()
    .command
    else {
        panic!("not run");
    };
    assert_eq!(k.common.cluster, ClusterArg::Kube);
    let t = k.common.kube.target().unwrap();
    assert_eq!(
        (t.namespace.as_str(), t.shards, t.hpa_sync_s, t.keep),
        ("retry-debt-run", 2, 15.0, true)
    );
    let Command::Suite(s) = Cli::try_parse_from(["falsification", "suite", "--only", "F2,F3"])
        .unwrap()
        .command
    else {
        panic!("not suite");
    };
    assert_eq!(s.only, Some(vec!["F2".to_string(), "F3".to_string()]));
}

#[test]
fn json_contract_has_every_model_and_field() {
    let a = args(&[
        "falsification",
        "predict",
        "--pods",
        "4",
        "--rate-per-pod",
        "100",
        "--rho",
        "0.25",
        "--spike",
        "5x300s",
        "--retries",
        "2",
        "--timeout",
        "10s",
        "--horizon",
        "4000s",
        "--fluid-dt",
        "100ms",
        "--seeds",
        "1,2,3",
        "--time-scale",
        "10",
    ]);
    let experiments = cli::experiments(&a).unwrap();
    let p = predict::predict(&experiments[0], a.time_scale).unwrap();
    let v: serde_json::Value = serde_json::from_str(&report::json(&[p]).unwrap()).unwrap();
    let case = &v["cases"][0];
    for model in [
        "closed_form",
        "fluid_pooled",
        "fluid_per_pod",
        "request_level",
    ] {
        for field in [
            "recovery_s",
            "trapped",
            "triggered",
            "peak_pods",
            "final_pods",
            "lost_fraction",
        ] {
            assert!(case[model].get(field).is_some(), "{model}.{field} missing");
        }
    }
    assert_eq!(case["request_level"]["seeds"].as_array().unwrap().len(), 3);
    assert!(case["request_level"]["spread"]["recovery_s"].is_array());
    assert_eq!(case["parameters"]["rho"], 0.25);
    assert_eq!(case["parameters"]["timeout_s"], 1.0);
    assert!(case.get("published").is_some());
    // rho 0.25, 5x for 30 s (run time): A rho = 0.75, recovers.
    assert_eq!(case["fluid_pooled"]["trapped"], false);
    assert!(case["fluid_pooled"]["recovery_s"].as_f64().unwrap() > 0.0);
}

#[test]
fn named_experiment_takes_overrides_and_skips_the_request_level() {
    let a = args(&[
        "falsification",
        "predict",
        "F3",
        "--dead-time",
        "93s",
        "--no-request-level",
        "--fluid-dt",
        "100ms",
    ]);
    let e = cli::experiments(&a).unwrap();
    assert_eq!(e[0].cases.len(), 2);
    for c in &e[0].cases {
        assert_eq!(c.scenario.hpa.as_ref().unwrap().dead_time_s, 93.0);
        assert!(c.scenario.seeds.is_empty());
    }
    let p = predict::predict(&e[0], 1.0).unwrap();
    assert!(p.cases.iter().all(|c| c.request_level.is_none()));
    assert!(report::text(&[p]).contains("fluid per-pod"));
}

#[test]
fn bad_input_names_the_field() {
    let a = args(&[
        "falsification",
        "predict",
        "--rho",
        "0.3",
        "--spike",
        "5y300s",
    ]);
    let e = cli::experiments(&a).unwrap_err().to_string();
    assert!(e.contains("`spike`") && e.contains("5y300s"), "{e}");
    let a = args(&["falsification", "predict", "--spike", "5x300s"]);
    assert!(
        cli::experiments(&a)
            .unwrap_err()
            .to_string()
            .contains("`rho`")
    );
    let a = args(&["falsification", "predict", "F7"]);
    assert!(cli::experiments(&a).unwrap_err().to_string().contains("F7"));
    assert!(Cli::try_parse_from(["falsification", "predict", "--format", "xml"]).is_err());
}
