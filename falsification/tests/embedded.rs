//! End-to-end runs on the embedded cluster with the real `service`, `meter` and `loadgen`
//! binaries (built here if missing), compressed: time scale 10, rate scale 0.25 (25 req/s per
//! pod, so the timeout is still 25 service times), shortened horizons.
//!
//! The bands are around the PER-POD fluid prediction for the configuration that ran: the
//! embedded cluster runs one FIFO per pod, new pods start empty and the loadgen's connections
//! route the attempts, which is what that model describes (the pooled model is one shared FIFO,
//! which no cluster of pods runs).
//!
//! Minutes each: `#[ignore]`d in `scripts/test.sh`, run by `scripts/verify.sh embedded`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

mod common;
use common::{SERIAL, bin_dir, ensure_binaries, session_dir};

fn kit_processes(dir: &Path) -> Vec<(u32, String)> {
    // The kernel names a process's binary by its real path: `target` may be a symlink (CI keeps
    // it in a cache outside the clone).
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let ours: Vec<PathBuf> = ["service", "meter", "loadgen"]
        .iter()
        .map(|b| dir.join(b))
        .collect();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc") {
        let Ok(entry) = entry else { continue };
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(exe) = std::fs::read_link(entry.path().join("exe"))
            && ours.contains(&exe)
        {
            found.push((pid, exe.display().to_string()));
        }
    }
    found
}

/// No `service`, `meter` or `loadgen` of this build is left running (a few seconds to exit).
fn assert_no_process_left() {
    assert_none_left_of(&bin_dir());
}

/// No `service`, `meter` or `loadgen` from `dir` is left running (a few seconds to exit).
fn assert_none_left_of(dir: &Path) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = kit_processes(dir);
        if left.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "processes left behind: {left:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn falsification(args: &[&str], out: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_falsification"));
    c.args(args)
        .args(["--time-scale", "10", "--rate-scale", "0.25", "--out"])
        .arg(out)
        .stdin(Stdio::null());
    c
}

/// The single case directory of a session under `out`.
fn case_dir(out: &Path) -> PathBuf {
    let session = session_dir(out);
    assert!(session.join("index.md").is_file());
    std::fs::read_dir(&session)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.is_dir())
        .expect("a case directory")
}

fn read_json(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn run_case(args: &[&str]) -> (tempfile::TempDir, PathBuf, Value) {
    ensure_binaries(&["service", "meter", "loadgen"]);
    let out = tempfile::tempdir().unwrap();
    let result = falsification(args, out.path()).output().unwrap();
    assert!(
        result.status.success(),
        "run failed: {}",
        String::from_utf8_lossy(&result.stderr)
    );
    let stdout = String::from_utf8_lossy(&result.stdout);
    assert!(stdout.contains("recovery  measured") && stdout.contains("record "));
    assert_no_process_left();
    let dir = case_dir(out.path());
    let summary = read_json(&dir.join("summary.json"));
    check_files(&dir);
    (out, dir, summary)
}

fn check_files(dir: &Path) {
    let config: toml::Value =
        toml::from_str(&std::fs::read_to_string(dir.join("experiment.toml")).unwrap()).unwrap();
    assert_eq!(config["time_scale"].as_float(), Some(10.0));
    assert!(
        config["versions"]["service"]
            .as_str()
            .unwrap()
            .contains("service")
    );
    let csv = std::fs::read_to_string(dir.join("timeseries.csv")).unwrap();
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    for col in [
        "first_attempts",
        "attempts",
        "successes",
        "timeouts_sent",
        "lost_started",
        "pods_desired",
        "pods_ready",
        "queue_total",
        "queue_max",
        "meter_ingress_rate",
        "hpa_recommendation",
    ] {
        assert!(header.contains(&col), "column {col} missing");
    }
    for line in csv.lines().skip(1) {
        assert_eq!(line.split(',').count(), header.len(), "row {line}");
    }
    assert!(
        std::fs::read_to_string(dir.join("report.md"))
            .unwrap()
            .contains("Verdict")
    );
    // The page: its plots inline, the models' curves beside the measurement.
    let page = std::fs::read_to_string(dir.join("report.html")).unwrap();
    for plot in ["Pods:", "Goodput", "Largest wait", "Every pod's wait"] {
        assert!(page.contains(plot), "{plot} missing from the page");
    }
    assert!(page.contains("<svg") && page.contains("polyline"));
    assert!(dir.join("models.csv").is_file());
}

fn within(measured: f64, predicted: f64, rel: f64, abs: f64) -> bool {
    (measured - predicted).abs() <= (rel * predicted).max(abs)
}

#[test]
#[ignore = "slow: minutes of real processes; scripts/verify.sh embedded"]
fn the_record_has_every_pods_arrivals_queue_and_readiness_per_row() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (_out, dir, _) = run_case(&["run", "F3", "--signal", "first", "--horizon", "150s"]);
    let csv = std::fs::read_to_string(dir.join("pods.csv")).unwrap();
    let mut lines = csv.lines();
    let header = lines.next().unwrap();
    assert_eq!(
        header,
        "t_run_s,t_exp_s,pod,ready,arrivals,first_arrivals,answered,abandoned,queue,wait_s"
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    // The 4 initial pods from the first row on, and those the HPA ordered, seen starting (not
    // ready) and then ready.
    let initial: Vec<&str> = rows
        .iter()
        .take_while(|r| r[0] == rows[0][0])
        .map(|r| r[2])
        .collect();
    assert_eq!(initial.len(), 4, "{initial:?}");
    let ordered = |ready: &str| {
        rows.iter()
            .any(|r| r[3] == ready && !initial.contains(&r[2]))
    };
    assert!(
        ordered("0") && ordered("1"),
        "new pods starting, then ready"
    );
    let arrivals: f64 = rows.iter().map(|r| r[4].parse::<f64>().unwrap()).sum();
    assert!(arrivals > 0.0);
}

#[test]
#[ignore = "slow: minutes of real processes; scripts/verify.sh embedded"]
fn f3_first_attempt_stays_trapped_at_twenty_pods() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (_out, _dir, s) = run_case(&["run", "F3", "--signal", "first", "--horizon", "300s"]);
    let m = &s["measured"];
    let p = &s["predicted_experiment_time"]["fluid_per_pod"];
    assert_eq!(s["complete"], true);
    assert_eq!(s["verdict"], "held", "{s}");
    assert_eq!(s["pacing"]["held"], true, "{}", s["pacing"]);
    assert_eq!(m["trapped"], p["trapped"]);
    assert_eq!(m["trapped"], true);
    for f in ["peak_pods", "final_pods"] {
        let (a, b) = (m[f].as_f64().unwrap(), p[f].as_f64().unwrap());
        assert!(within(a, b, 0.1, 1.0), "{f}: measured {a}, per pod {b}");
    }
    // The dead time the predictions used is the measured one, near the configured 90 s.
    let dead = m["dead_time_s"].as_f64().unwrap();
    assert!((88.0..100.0).contains(&dead), "dead time {dead}");
    assert!(s["predicted"]["cases"][0]["fluid_per_pod"].is_object());
}

/// The same trap with the loadgen held to a tenth of one CPU, as a CFS quota holds a container
/// (stopped for the rest of each 100 ms period), far below what the trapped phase's attempts
/// need: its clients fall behind the schedule, and the run gets no verdict, the lag named.
#[test]
#[ignore = "slow: minutes of real processes; scripts/verify.sh embedded"]
fn a_loadgen_starved_of_cpu_gives_no_verdict_and_names_its_lag() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    ensure_binaries(&["service", "meter", "loadgen"]);
    let bins = tempfile::tempdir().unwrap();
    for b in ["service", "meter"] {
        std::os::unix::fs::symlink(bin_dir().join(b), bins.path().join(b)).unwrap();
    }
    let starved = bins.path().join("loadgen");
    std::fs::write(
        &starved,
        format!(
            r#"#!/usr/bin/env bash
# The real loadgen, run 10 ms of every 100 ms.
"{}" "$@" &
child=$!
stopping=
trap 'stopping=1; kill -CONT "$child"; kill -TERM "$child"' TERM INT
while [ -z "$stopping" ] && kill -0 "$child" 2>/dev/null; do
  sleep 0.01; [ -z "$stopping" ] && kill -STOP "$child" 2>/dev/null
  sleep 0.09; kill -CONT "$child" 2>/dev/null
done
while kill -0 "$child" 2>/dev/null; do wait "$child"; done
"#,
            bin_dir().join("loadgen").display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        &starved,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let out = tempfile::tempdir().unwrap();
    let result = falsification(
        &["run", "F3", "--signal", "first", "--horizon", "300s"],
        out.path(),
    )
    .env("FALSIFICATION_BIN_DIR", bins.path())
    .output()
    .unwrap();
    assert!(
        result.status.success(),
        "run failed: {}",
        String::from_utf8_lossy(&result.stderr)
    );
    assert_no_process_left();
    let s = read_json(&case_dir(out.path()).join("summary.json"));
    assert_eq!(s["pacing"]["held"], false, "{}", s["pacing"]);
    assert_eq!(s["verdict"], "inconclusive", "{s}");
    let reason = s["reason"].as_str().unwrap();
    assert!(reason.contains("did not send the schedule"), "{reason}");
    assert!(reason.contains("send-lag p99"), "{reason}");
}

/// F9: the trapped first-attempt HPA loses its meter for 120 s and keeps its pods (upstream's
/// rule: every metric failed, the scale is left alone); the record says so, names the metric as
/// unavailable, and no row reads a zero the meter did not measure. Every autoscaled record also
/// carries the tolerances, the signal-to-replica lag and the pods' own dead times.
/// F9's meter-stale case, cut to 300 s: the meter stays up but its pods file lists no pod from
/// 20 s to 80 s; it must say it has nothing to serve (never a zero) and the HPA holds.
#[test]
#[ignore = "slow: minutes of real processes; scripts/verify.sh embedded"]
fn f9_a_meter_that_scrapes_no_pod_says_so_and_the_hpa_holds() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (_out, dir, s) = run_case(&["run", "F9", "--case", "meter-stale", "--horizon", "300s"]);
    let i = &s["interventions"];
    let o = &i["outage"];
    assert_eq!(o["what"], "the meter scraped no pod", "{i}");
    assert_eq!(o["held"], true, "{i}");
    assert_eq!(o["said_unavailable"], true, "{i}");
    // Blind within a few rounds of the unlisting, and up all along (its gauges answered).
    let blind = o["blind_from_s"].as_f64().unwrap();
    assert!((20.0..=30.0).contains(&blind), "{i}");
    assert!(o["rows_answered"].as_u64().unwrap() > 0, "{i}");
    assert_eq!(i["unmeasured_zeros"], 0, "{i}");
    let events = std::fs::read_to_string(dir.join("events.csv")).unwrap();
    assert!(
        events.contains(",meter,pods-unlisted,") && events.contains(",meter,pods-listed,"),
        "{events}"
    );
}

/// F9's shard-died, cut to 700 s: 4 loadgen processes share the demand and the last is killed
/// at 300 s; the record names it, a quarter of the first attempts goes, the first-attempt HPA
/// scales in to 15 and the trap holds, as predicted for the demand that reached the service.
#[test]
#[ignore = "slow: minutes of real processes; scripts/verify.sh embedded"]
fn f9_a_dead_loadgen_shard_takes_its_share_and_the_verdict_says_so() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (_out, dir, s) = run_case(&["run", "F9", "--case", "shard-died", "--horizon", "700s"]);
    assert_eq!(s["verdict"], "held", "{}", explain(&dir));
    assert!(
        s["reason"]
            .as_str()
            .is_some_and(|r| r.contains("not the case as written after 300 s")),
        "{}",
        s["reason"]
    );
    let m = &s["measured"];
    assert_eq!(m["trapped"], true, "{}", explain(&dir));
    let f = m["final_pods"].as_f64().unwrap();
    assert!((14.0..=16.0).contains(&f), "final pods {f}");
    let d = &s["interventions"]["shard"];
    assert!(
        d["detail"]
            .as_str()
            .is_some_and(|x| x.contains("shard 3 of 4")),
        "{d}"
    );
    let ratio =
        d["first_per_s_after"].as_f64().unwrap() / d["first_per_s_before"].as_f64().unwrap();
    assert!(
        (0.65..=0.85).contains(&ratio),
        "first attempts after / before: {ratio}"
    );
    for i in 0..4 {
        assert!(
            dir.join("config")
                .join(format!("loadgen-shard-{i}.args"))
                .is_file()
        );
    }
    let events = std::fs::read_to_string(dir.join("events.csv")).unwrap();
    assert!(events.contains(",loadgen,shard-killed,"), "{events}");
}

#[test]
#[ignore = "slow: minutes of real processes; scripts/verify.sh embedded"]
fn f9_the_hpa_holds_its_pods_while_the_meter_is_gone() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (_out, dir, s) = run_case(&[
        "run",
        "F9",
        "--case",
        "meter-outage-trapped",
        "--horizon",
        "500s",
    ]);
    assert_eq!(s["verdict"], "held", "{s}");
    assert_eq!(s["measured"]["trapped"], true);
    let i = &s["interventions"];
    let o = &i["outage"];
    assert_eq!(o["held"], true, "{i}");
    assert_eq!(o["said_unavailable"], true, "{i}");
    assert_eq!(o["rows_answered"], 0, "{i}");
    assert!(o["answered_again_s"].as_f64().unwrap() >= 420.0, "{i}");
    assert_eq!(i["unmeasured_zeros"], 0, "{i}");
    let events = std::fs::read_to_string(dir.join("events.csv")).unwrap();
    assert!(
        events.contains(",meter,down,") && events.contains(",meter,up,"),
        "{events}"
    );
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(
        report.contains("## Fault") && report.contains("desired replicas held"),
        "{report}"
    );
    assert_eq!(s["tolerance"]["scale_up"], 0.1);
    assert!(
        s["lag"]["distribution"]["scale_ups"].as_u64().unwrap() >= 3,
        "{}",
        s["lag"]
    );
    let dead = &s["dead_time_effect"];
    assert!(dead["pods"].as_u64().unwrap() >= 16, "{dead}");
    let page = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(page.contains("Signal to replicas"));
}

/// F10's switch-to-drop, cut to 700 s: the trapped pods are rolled out at 300 s to pods that
/// drop abandoned work, 15 of 20 ready at the fewest (the default 25% unavailable), and the
/// service gets out once the new pods serve, as the per-pod fluid predicts.
#[test]
#[ignore = "slow: minutes of real processes; scripts/verify.sh embedded"]
fn f10_rolling_out_pods_that_drop_abandoned_work_gets_out() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (_out, dir, s) = run_case(&[
        "run",
        "F10",
        "--case",
        "switch-to-drop",
        "--horizon",
        "700s",
    ]);
    assert_eq!(s["verdict"], "held", "{}", explain(&dir));
    let (m, p) = (
        &s["measured"],
        &s["predicted_experiment_time"]["fluid_per_pod"],
    );
    assert_eq!(m["trapped"], false, "{}", explain(&dir));
    let (g, gp) = (
        m["goodput_recovery_s"].as_f64().unwrap(),
        p["goodput_recovery_s"].as_f64().unwrap(),
    );
    assert!(
        g > 390.0 && within(g, gp, 0.15, 30.0),
        "goodput {g} s, per pod {gp} s"
    );
    let r = &s["interventions"]["rollout"];
    assert_eq!(r["abandoned"], "drop", "{r}");
    let (before, least) = (
        r["ready_before"].as_u64().unwrap(),
        r["ready_least_after"].as_u64().unwrap(),
    );
    assert!(before >= 19 && (14..=16).contains(&least), "{r}");
    let events = std::fs::read_to_string(dir.join("events.csv")).unwrap();
    assert!(events.contains(",deployment,rolled-out,"), "{events}");
    let pods = std::fs::read_to_string(dir.join("pods.csv")).unwrap();
    // From the end of the second wave on, the pods serve what someone waits for: abandoned
    // work only where a client gave up during its service, under 1% of what they answer.
    let late: Vec<(f64, f64)> = pods
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect::<Vec<_>>())
        .filter(|r| r[1].parse::<f64>().unwrap() > 500.0)
        .map(|r| (r[6].parse().unwrap(), r[7].parse().unwrap()))
        .collect();
    let (answered, abandoned) = late
        .iter()
        .fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
    assert!(
        answered > 0.0 && abandoned <= 0.01 * answered,
        "answered {answered}, abandoned {abandoned} after 500 s"
    );
}

#[test]
#[ignore = "slow: minutes of real processes; scripts/verify.sh embedded"]
fn f4_paired_step_follows_the_per_pod_prediction() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (_out, dir, s) = run_case(&["run", "F4", "--case", "paired-step", "--horizon", "500s"]);
    let m = &s["measured"];
    let p = &s["predicted_experiment_time"]["fluid_per_pod"];
    assert_eq!(s["complete"], true);
    // The verdict is whatever the per-pod model predicts for this configuration: held if it
    // recovers, refuted if trapped; if still draining at the horizon, held when the failure is
    // over (debt served, 99% succeeding) or when run and prediction both serve 99% again for
    // good while the debt drains past the horizon, else inconclusive.
    for state in ["recovered", "trapped"] {
        assert_eq!(m[state], p[state], "{state}: {s}");
    }
    let served_again = |o: &Value| o["goodput_recovery_s"].is_f64();
    let failure_over = m["debt_served_s"].is_f64() && served_again(m);
    let expected = match (p["recovered"].as_bool(), p["trapped"].as_bool()) {
        (Some(true), _) => "held",
        (_, Some(true)) => "refuted",
        _ if failure_over || (served_again(m) && served_again(p)) => "held",
        _ => "inconclusive",
    };
    assert_eq!(s["verdict"], expected, "{s}");
    if let (Some(a), Some(b)) = (m["recovery_s"].as_f64(), p["recovery_s"].as_f64()) {
        assert!(within(a, b, 0.15, 20.0), "recovery {a} vs per pod {b}");
    }
    let (peak, peak_p) = (
        m["peak_pods"].as_f64().unwrap(),
        p["peak_pods"].as_f64().unwrap(),
    );
    assert!(within(peak, peak_p, 0.1, 1.0), "peak {peak} vs {peak_p}");
    let (fin, fin_p) = (
        m["final_pods"].as_f64().unwrap(),
        p["final_pods"].as_f64().unwrap(),
    );
    assert!(within(fin, fin_p, 0.15, 3.0), "final {fin} vs {fin_p}");
    let (lost, lost_p) = (
        m["lost_fraction"].as_f64().unwrap(),
        p["lost_fraction"].as_f64().unwrap(),
    );
    assert!(
        (lost - lost_p).abs() < 0.1,
        "lost {lost} vs per pod {lost_p}"
    );
    // The controller read the meter's API and scaled: decisions were recorded.
    let decisions = std::fs::read_to_string(dir.join("decisions.csv")).unwrap();
    assert!(decisions.lines().any(|l| l.contains(",true,")));
}

#[test]
#[ignore = "slow: minutes of real processes; scripts/verify.sh embedded"]
fn a_run_too_short_to_recover_is_not_recovered_within_its_horizon() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // F2 at 30% recovers some 9,700 s after its spike; 500 s after it the debt is still draining.
    let (_out, dir, s) = run_case(&["run", "F2", "--case", "rho-30", "--horizon", "800s"]);
    let m = &s["measured"];
    assert_eq!(s["complete"], true);
    assert_eq!(
        (m["triggered"].as_bool(), m["recovered"].as_bool()),
        (Some(true), Some(false))
    );
    assert_eq!(m["trapped"], false, "A rho = 0.9 drains: {s}");
    assert_eq!(m["horizon_s"].as_f64(), Some(800.0));
    assert_eq!(s["verdict"], "inconclusive", "{s}");
    let reason = s["reason"].as_str().unwrap();
    assert!(
        reason.contains("not recovered within the 800 s it ran (predicted recovery at"),
        "{reason}"
    );
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(
        report.contains("not recovered within the 800 s horizon"),
        "{report}"
    );
}

/// F7 at a short horizon: pods that drop abandoned work get out of F2's trapped spike (the
/// publication's reversal), while the same spike with a backoff of up to 5 s (2.5 s, then 5 s)
/// stays trapped (backoff does not change A).
#[test]
#[ignore = "slow: minutes of real processes; scripts/verify.sh embedded"]
fn f7_dropping_abandoned_work_reverses_the_trap_and_a_backoff_does_not() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for (case, trapped) in [("reversal-spike", false), ("backoff-5s", true)] {
        let (_out, dir, s) = run_case(&["run", "F7", "--case", case, "--horizon", "400s"]);
        let m = &s["measured"];
        assert_eq!(s["complete"], true);
        assert_eq!(s["verdict"], "held", "{case}: {}", explain(&dir));
        assert_eq!(m["triggered"], true, "{case}: the spike triggers");
        assert_eq!(m["trapped"], trapped, "{case}: {s}");
    }
}

#[test]
#[ignore = "slow: minutes of real processes; scripts/verify.sh embedded"]
fn ctrl_c_keeps_a_readable_partial_record() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    ensure_binaries(&["service", "meter", "loadgen"]);
    let out = tempfile::tempdir().unwrap();
    let mut child = falsification(&["run", "F2", "--case", "rho-30"], out.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Into the spike (warm-up 6 s run), then Ctrl-C.
    std::thread::sleep(Duration::from_secs(14));
    assert!(
        !kit_processes(&bin_dir()).is_empty(),
        "the run started its processes"
    );
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    let status = child.wait().unwrap();
    assert!(!status.success(), "an interrupted run exits non-zero");
    assert_no_process_left();
    let dir = case_dir(out.path());
    let s = read_json(&dir.join("summary.json"));
    assert_eq!(s["complete"], false);
    assert_eq!(s["verdict"], "incomplete");
    let csv = std::fs::read_to_string(dir.join("timeseries.csv")).unwrap();
    assert!(
        csv.lines().count() > 20,
        "rows kept: {}",
        csv.lines().count()
    );
    assert!(dir.join("report.html").is_file());
}

#[test]
#[ignore = "slow: minutes of real processes; scripts/verify.sh embedded"]
fn failing_cases_side_by_side_are_each_reported_and_leave_nothing_behind() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    ensure_binaries(&["service", "meter", "loadgen"]);
    // The real meter and loadgen, and a pod binary that exits at once (a crash loop): every
    // case fails to get its initial pods ready.
    let bins = tempfile::tempdir().unwrap();
    let service = bins.path().join("service");
    std::fs::write(&service, "#!/bin/sh\nexit 3\n").unwrap();
    std::fs::set_permissions(
        &service,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    for b in ["meter", "loadgen"] {
        std::os::unix::fs::symlink(bin_dir().join(b), bins.path().join(b)).unwrap();
    }
    let out = tempfile::tempdir().unwrap();
    let bin_arg = bins.path().to_str().unwrap();
    let result = falsification(
        &["suite", "--only", "F4", "--jobs", "2", "--bin-dir", bin_arg],
        out.path(),
    )
    .output()
    .unwrap();
    assert!(!result.status.success(), "failed cases exit non-zero");
    let err = String::from_utf8_lossy(&result.stderr);
    assert!(err.contains("2 of 2 cases failed"), "{err}");
    for case in ["F4 paired-step", "F4 paired-no-step"] {
        assert!(
            err.contains(&format!("{case}: only 0 of 4 initial pods became ready")),
            "{err}"
        );
    }
    assert_no_process_left();
    let session = session_dir(out.path());
    let index = std::fs::read_to_string(session.join("index.md")).unwrap();
    assert!(index.contains("0 of 2 cases run"), "{index}");
}

/// The release binaries, built as the README builds them: the whole workspace, outside `cargo
/// test`'s environment (with it, cargo rebuilt kube and falsification, 3.5 min in CI, and again at
/// the next build). Returns their directory.
fn release_binaries() -> PathBuf {
    let mut cargo = Command::new(env!("CARGO"));
    cargo.env_clear();
    for keep in [
        "PATH",
        "HOME",
        "RUSTUP_HOME",
        "CARGO_HOME",
        "RUSTUP_TOOLCHAIN",
    ] {
        if let Some(v) = std::env::var_os(keep) {
            cargo.env(keep, v);
        }
    }
    let status = cargo
        .args(["build", "--release", "--workspace", "--locked"])
        .status()
        .expect("running cargo build");
    assert!(status.success(), "building the release binaries failed");
    bin_dir().parent().unwrap().join("release")
}

/// A record's CSV file by column name (empty when the file is missing).
struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    fn read(path: &Path) -> Table {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let mut lines = text
            .lines()
            .map(|l| l.split(',').map(str::to_owned).collect());
        Table {
            header: lines.next().unwrap_or_default(),
            rows: lines.collect(),
        }
    }

    /// `row`'s value in `column`: "-" where the column or the cell is missing.
    fn get<'a>(&self, row: &'a [String], column: &str) -> &'a str {
        self.header
            .iter()
            .position(|c| c == column)
            .and_then(|i| row.get(i))
            .map_or("-", String::as_str)
    }

    fn num(&self, row: &[String], column: &str) -> f64 {
        self.get(row, column).parse().unwrap_or(f64::NAN)
    }
}

/// What a case's record says about a verdict nobody expected, short enough for a CI log: the
/// verdict and its reason, every rescaling decision with the readings behind it, the loadgen's
/// first attempts against the meter's reading per second of run time over the first 12 s after
/// the load event, the seconds the loadgen ran behind its schedule, and pods that crashed.
fn explain(case: &Path) -> String {
    let summary = read_json(&case.join("summary.json"));
    let mut out = format!(
        "{}: {} ({})\nmeasured: {}\ndecisions that rescaled (t_run_s,t_exp_s,readings,...):\n",
        case.display(),
        summary["verdict"],
        summary["reason"],
        summary["measured"]
    );
    let decisions = Table::read(&case.join("decisions.csv"));
    for row in decisions
        .rows
        .iter()
        .filter(|r| decisions.get(r, "rescale") == "true")
    {
        out += &format!("  {}\n", row.join(","));
    }
    out += "per second (t_run_s: loadgen first attempts, meter first-attempt rate, desired/ready pods):\n";
    let series = Table::read(&case.join("timeseries.csv"));
    for second in series.rows.chunks(4) {
        let t = series.num(&second[0], "t_run_s");
        if (-1.0..12.0).contains(&t) {
            let first: f64 = second.iter().map(|r| series.num(r, "first_attempts")).sum();
            let last = &second[second.len() - 1];
            out += &format!(
                "  {t:.2}: {first:.0}, {:.0}, {}/{}\n",
                series.num(last, "meter_first_attempt_rate"),
                series.get(last, "pods_desired"),
                series.get(last, "pods_ready")
            );
        }
    }
    let load = Table::read(&case.join("loadgen/timeseries.csv"));
    let behind: Vec<String> = load
        .rows
        .iter()
        .filter(|r| load.num(r, "send_lag_p99_ms") > 20.0)
        .map(|r| {
            let (second, ms) = (load.get(r, "second"), load.get(r, "send_lag_p99_ms"));
            format!("second {second}: {ms} ms")
        })
        .collect();
    out += &format!("loadgen send lag p99 over 20 ms: {behind:?}\n");
    let events = Table::read(&case.join("events.csv"));
    let crashes: Vec<String> = events
        .rows
        .iter()
        .filter(|r| events.get(r, "event") == "crashed")
        .map(|r| r.join(","))
        .collect();
    out += &format!("pod crashes: {crashes:?}\n");
    out
}

/// `falsification <args>` on the release binaries into a fresh directory: it must succeed and
/// leave no process behind. Returns the directory and the session in it.
fn run_released(args: &[&str]) -> (tempfile::TempDir, PathBuf) {
    let release = release_binaries();
    let out = tempfile::tempdir().unwrap();
    let result = Command::new(env!("CARGO_BIN_EXE_falsification"))
        .args(args)
        .arg("--bin-dir")
        .arg(&release)
        .arg("--out")
        .arg(out.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        result.status.success(),
        "run failed: {}",
        String::from_utf8_lossy(&result.stderr)
    );
    assert_none_left_of(&release);
    let session = session_dir(out.path());
    (out, session)
}

#[test]
#[ignore = "slow: minutes of real processes; scripts/verify.sh embedded"]
fn f0_cpu_and_ingress_escape_while_first_attempts_stay_failed() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // The README's main-job compression (S = 20, half the rates): CPU's recovery is predicted
    // near 1,400 s after the step, so the case's 1,500 s horizon is kept. At S = 20 the pods and
    // the meter run as released: a debug meter took 38% of a core, its readings lagged, and the
    // first-attempt case climbed to 24 pods and drained (CI has built them for the main job).
    let (_out, session) = run_released(&["run", "F0", "--time-scale", "20", "--rate-scale", "0.5"]);
    let case = |name: &str| session.join(format!("F0-{name}"));
    let summary = |name: &str| read_json(&case(name).join("summary.json"));
    let (cpu, ingress, first) = (summary("cpu"), summary("ingress"), summary("first-attempt"));
    for (name, s) in [
        ("cpu", &cpu),
        ("ingress", &ingress),
        ("first-attempt", &first),
    ] {
        assert_eq!(s["verdict"], "held", "{}", explain(&case(name)));
    }
    assert_eq!(first["measured"]["trapped"], true);
    // CPU climbs slower than ingress (a round at most doubles the pods that count), so it loses
    // more of the stepped demand before capacity meets it.
    let met = |s: &Value| {
        s["measured"]["provisioning"]["capacity_met_s"]
            .as_f64()
            .unwrap()
    };
    assert!(
        met(&cpu) > met(&ingress),
        "capacity met: cpu {} vs ingress {}",
        met(&cpu),
        met(&ingress)
    );
    let lost = |s: &Value| s["measured"]["lost_fraction"].as_f64().unwrap();
    assert!(lost(&cpu) > lost(&ingress) && lost(&first) > 0.9);
    // The controller read the pods' CPU: utilization in percent was recorded with its decisions.
    let decisions = std::fs::read_to_string(session.join("F0-cpu").join("decisions.csv")).unwrap();
    assert!(
        decisions
            .lines()
            .skip(1)
            .any(|l| l.contains(",100,") || l.contains(",true,"))
    );
    // The signals side by side: the Definition 9 table and the three plots.
    let index = std::fs::read_to_string(session.join("index.md")).unwrap();
    assert!(index.contains("Definition 9") && index.contains("F0 cpu | measured"));
    let page = std::fs::read_to_string(session.join("report.html")).unwrap();
    for plot in [
        "Ready pods, one line per case",
        "Goodput, one line per case",
        "Achievable region",
    ] {
        assert!(
            page.contains(plot),
            "{plot} missing from the session's page"
        );
    }
}

/// F6 through a routing-only HAProxy (`balance leastconn`) at S = 20: at a target of 0.45, above
/// the publication's 1/A = 0.33, the first-attempt HPA still gets the service out, as the per-pod
/// models predict for least connections (the trapped pods get only what their in-flight count
/// allows, and drain).
#[test]
#[ignore = "slow: minutes of real processes; scripts/verify.sh embedded"]
fn f6_least_connections_gets_out_above_one_over_a() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (_out, session) = run_released(&[
        "run",
        "F6",
        "--case",
        "lc-45",
        "--time-scale",
        "20",
        "--rate-scale",
        "0.5",
        "--horizon",
        "1800s",
    ]);
    let case = session.join("F6-lc-45");
    let s = read_json(&case.join("summary.json"));
    let (m, p) = (
        &s["measured"],
        &s["predicted_experiment_time"]["fluid_per_pod"],
    );
    assert_eq!(
        p["trapped"], false,
        "the per-pod fluid predicts an escape: {s}"
    );
    assert_eq!(m["triggered"], true);
    assert_eq!(m["trapped"], false, "{}", explain(&case));
    // Refuted (recovered above 1/A) or still draining at the horizon: never the trap.
    assert!(
        s["verdict"] == "refuted" || s["verdict"] == "inconclusive",
        "{}",
        explain(&case)
    );
    let peak = m["peak_pods"].as_f64().unwrap();
    assert!((36.0..=44.0).contains(&peak), "peak {peak}");
    let haproxy = std::fs::read_to_string(case.join("config").join("haproxy.cfg")).unwrap();
    assert!(haproxy.contains("balance leastconn") && haproxy.contains("retries 0"));
}

/// F5 at S = 20 behind a real HAProxy: the three predicted verdicts, A = 9 at the pods in the
/// failed phase (3 client attempts x 3 gateway tries), and the meter's first attempts counted
/// once per logical request while the `x-attempt: 0` header arrives 3 times.
#[test]
#[ignore = "slow: minutes of real processes; scripts/verify.sh embedded"]
fn f5_a_retrying_gateway_multiplies_the_clients_amplification() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let haproxy = Command::new("haproxy").arg("-v").output();
    assert!(
        haproxy.is_ok_and(|o| o.status.success()),
        "F5 needs HAProxy on PATH (scripts/test.sh installs Debian's haproxy)"
    );
    // The three cases are 4 pods each at 10-20% of their capacity: side by side on 2 cores.
    let (_out, session) = run_released(&["run", "F5", "--time-scale", "20", "--jobs", "3"]);
    let case = |name: &str| session.join(format!("F5-{name}"));
    let summary = |name: &str| read_json(&case(name).join("summary.json"));
    for name in ["a9-rho-10", "a9-rho-15", "budget-rho-20"] {
        let s = summary(name);
        assert_eq!(
            s["verdict"],
            "held",
            "{}\nstack: {}",
            explain(&case(name)),
            s["stack"]
        );
    }
    let a15 = summary("a9-rho-15");
    assert_eq!(a15["measured"]["trapped"], true);
    let stack = &a15["stack"];
    let f = |k: &str| stack[k].as_f64().unwrap_or(f64::NAN);
    assert!(
        (f("pods") / 9.0 - 1.0).abs() <= 0.05,
        "A at the pods: {stack}"
    );
    assert!((f("client") - 3.0).abs() <= 0.15, "{stack}");
    assert!((f("gateway") - 3.0).abs() <= 0.15, "{stack}");
    // The header arrives with every gateway try; the meter counts each request id once.
    assert!((f("header_first") - 3.0).abs() <= 0.15, "{stack}");
    assert!((f("meter_first") - 1.0).abs() <= 0.15, "{stack}");
    assert!((f("meter_header_first") - 3.0).abs() <= 0.45, "{stack}");
    let index = std::fs::read_to_string(session.join("index.md")).unwrap();
    assert!(index.contains("## Retry stacks") && index.contains("| F5 a9-rho-15 | 9.00 |"));
    let report = std::fs::read_to_string(session.join("F5-a9-rho-15").join("report.md")).unwrap();
    assert!(report.contains("## Retry stack") && report.contains("Gateway: haproxy"));
    // `check` on the files the run kept (HAProxy's configuration, the loadgen's flags) predicts
    // the A measured at the pods.
    let predicted = check_amplification(&case("a9-rho-15"));
    assert!(
        (f("pods") / predicted - 1.0).abs() <= 0.05,
        "check said A = {predicted}, the pods measured {stack}"
    );
    assert_eq!(predicted, 9.0);

    // The client leaves during the gateway's second try and HAProxy stops when it does: the
    // product of the retry counts (9) is not reached; `check` gives 3 x 2 = 6, F5 measured 5.9.
    let (_out, session) = run_released(&[
        "run",
        "F5",
        "--case",
        "a9-rho-15",
        "--timeout",
        "5s",
        "--gateway-abort-on-close",
        "true",
        "--horizon",
        "900s",
        "--time-scale",
        "20",
    ]);
    let case = session.join("F5-a9-rho-15");
    let stack = read_json(&case.join("summary.json"))["stack"].clone();
    let predicted = check_amplification(&case);
    assert_eq!(predicted, 6.0);
    let pods = stack["pods"].as_f64().unwrap_or(f64::NAN);
    assert!(
        (pods / predicted - 1.0).abs() <= 0.05,
        "check said A = {predicted}, the pods measured {stack}"
    );
}

/// The timeout class's A that `falsification check` computes from a run's kept configuration:
/// the gateway's file and the loadgen's flags as the stack file's client.
fn check_amplification(case: &Path) -> f64 {
    let config = case.join("config");
    let args = std::fs::read_to_string(config.join("loadgen.args")).unwrap();
    let quoted: Vec<String> = args.lines().map(|a| format!("{a:?}")).collect();
    let stack = config.join("stack.toml");
    std::fs::write(
        &stack,
        format!(
            "[[client]]\nname = \"loadgen\"\nlibrary = \"kit-loadgen\"\nargs = [{}]\n",
            quoted.join(", ")
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_falsification"))
        .arg("check")
        .arg(config.join("haproxy.cfg"))
        .arg("--stack")
        .arg(&stack)
        .args(["--format", "json"])
        .output()
        .unwrap();
    // No autoscaler and no utilization given: a second state exists above 1/A (exit 1).
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["classes"][0]["class"], "timeout");
    report["classes"][0]["a"].as_f64().unwrap()
}
