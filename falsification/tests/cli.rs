//! The command line and the JSON contract of `predict --format json`.

use clap::Parser;
use falsification::cli::ClusterArg;
use falsification::cli::{self, Cli, Command};
use falsification_model::{predict, report};

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
    let t = k.common.kube.target();
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
fn every_time_scale_is_checked_where_it_is_parsed() {
    for argv in [
        &["falsification", "predict", "F3", "--time-scale=0"][..],
        &["falsification", "run", "F3", "--time-scale=-2"],
        &["falsification", "manifests", "F3", "--time-scale=inf"],
        &["falsification", "local-cluster-flags", "--time-scale=NaN"],
    ] {
        let e = Cli::try_parse_from(argv).unwrap_err().to_string();
        assert!(e.contains("--time-scale") && e.contains("positive"), "{e}");
    }
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
            "goodput_recovery_s",
            "debt_served_s",
            "recovered",
            "trapped",
            "horizon_s",
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

/// The pooled fluid of an ad-hoc `predict` with these flags (and the default horizon).
fn ad_hoc_pooled(flags: &[&str]) -> (f64, serde_json::Value) {
    let mut argv = vec!["falsification", "predict", "--no-request-level"];
    argv.extend_from_slice(flags);
    let a = args(&argv);
    let e = cli::experiments(&a).unwrap();
    let p = predict::predict(&e[0], 1.0).unwrap();
    let v: serde_json::Value = serde_json::from_str(&report::json(&[p]).unwrap()).unwrap();
    (
        e[0].cases[0].scenario.horizon_s,
        v["cases"][0]["fluid_pooled"].clone(),
    )
}

#[test]
fn a_slow_recovery_is_not_called_trapped() {
    // A rho = 0.9: the closed form says 9,814 s. The default horizon covers it, and the fluid
    // recovers at about 9,733 s (it said "never, trapped" with the old 3,600 s horizon).
    let (horizon, o) = ad_hoc_pooled(&[
        "--pods",
        "4",
        "--rate-per-pod",
        "100",
        "--rho",
        "0.3",
        "--retries",
        "2",
        "--timeout",
        "10s",
        "--spike",
        "5x300s",
        "--fluid-dt",
        "100ms",
    ]);
    assert!(
        (horizon - (300.0 + 1.5 * 9814.0 + 10.0)).abs() < 20.0,
        "{horizon}"
    );
    let r = o["recovery_s"].as_f64().expect("recovers");
    assert!((r - 9733.0).abs() <= 0.01 * 9733.0, "{r}");
    assert_eq!(
        (o["trapped"].as_bool(), o["recovered"].as_bool()),
        (Some(false), Some(true))
    );
    // A budget of 0.1 at rho 0.8: A rho = 0.88, slow but not trapped.
    let (_, o) = ad_hoc_pooled(&[
        "--rho",
        "0.8",
        "--spike",
        "10x300s",
        "--retry-budget",
        "0.1",
        "--fluid-dt",
        "100ms",
    ]);
    assert_eq!(o["trapped"], false, "{o}");
    // A first-attempt HPA at 33% (31 pods for 1,000/s): settles at A rho = 0.97, drains too slowly for the 3,600 s
    // horizon, which says so instead of "trapped".
    let (horizon, o) = ad_hoc_pooled(&[
        "--hpa",
        "first",
        "--target",
        "0.33",
        "--step",
        "10x",
        "--rho",
        "0.25",
        "--fluid-dt",
        "100ms",
    ]);
    assert_eq!(horizon, 3600.0);
    assert_eq!(o["trapped"], false, "{o}");
    // A rho = 1.2 stays trapped whatever the horizon.
    let (_, o) = ad_hoc_pooled(&["--rho", "0.4", "--spike", "5x300s", "--fluid-dt", "100ms"]);
    assert_eq!(
        (o["trapped"].as_bool(), o["recovered"].as_bool()),
        (Some(true), Some(false))
    );
    // The cap holds a long horizon back, and says where to lift it.
    let a = args(&[
        "falsification",
        "predict",
        "--rho",
        "0.3",
        "--spike",
        "5x300s",
        "--max-horizon",
        "5000s",
    ]);
    assert_eq!(
        cli::experiments(&a).unwrap()[0].cases[0].scenario.horizon_s,
        5000.0
    );
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
    // A value that does not parse fails at parse time, one line naming the flag and the value.
    for argv in [
        &["predict", "--spike", "5y300s"][..],
        &["predict", "--step", "5"],
        &["predict", "--timeout", "ten"],
        &["predict", "--backoff", "lin"],
        &["predict", "--max-horizon", "soon"],
        &["predict", "F3", "--dead-time", "9O s"],
        &["run", "F3", "--warmup", "a minute"],
        &["run", "F3", "--hpa-sync", "fast"],
        &["suite", "--gateway-timeout", "3"],
    ] {
        let e = Cli::try_parse_from(["falsification"].iter().chain(argv))
            .unwrap_err()
            .to_string();
        let (flag, value) = (argv[argv.len() - 2], argv[argv.len() - 1]);
        let first = e.lines().next().unwrap_or_default();
        assert!(
            first.contains(&format!("'{value}'")) && first.contains(flag),
            "{e}"
        );
    }
    // A value that parses but does not fit is named with its field when resolved.
    let a = args(&[
        "falsification",
        "predict",
        "--rho",
        "0.3",
        "--timeout",
        "0s",
    ]);
    let e = cli::experiments(&a).unwrap_err().to_string();
    assert_eq!(e, "ad-hoc: field `timeout`: must be positive, got `0`");
    let a = args(&["falsification", "predict", "--spike", "5x300s"]);
    assert!(
        cli::experiments(&a)
            .unwrap_err()
            .to_string()
            .contains("`rho`")
    );
    let a = args(&["falsification", "predict", "F99"]);
    assert!(
        cli::experiments(&a)
            .unwrap_err()
            .to_string()
            .contains("F99")
    );
    assert!(Cli::try_parse_from(["falsification", "predict", "--format", "xml"]).is_err());
}

#[test]
fn fidelity_names_a_path_that_holds_no_record() {
    let empty = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_falsification"))
        .arg("fidelity")
        .arg(empty.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&empty.path().display().to_string())
            && err.contains("neither a case record (no summary.json) nor a session"),
        "{err}"
    );
    let bad = empty.path().join("case");
    std::fs::create_dir(&bad).unwrap();
    std::fs::write(bad.join("summary.json"), r#"{"complete": false}"#).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_falsification"))
        .arg("fidelity")
        .arg(&bad)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not a complete record's summary"), "{err}");
}

#[test]
fn a_cluster_flags_name_is_claps() {
    use clap::ValueEnum;
    for c in [ClusterArg::Embedded, ClusterArg::Kube] {
        assert_eq!(ClusterArg::from_str(c.name(), false), Ok(c));
    }
}
