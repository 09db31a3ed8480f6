//! The trigger test's I/O: the plan on stdout, the loadgen child and its stdout rows, the pods'
//! arrivals, the stop on the base-phase check, the maximum duration or Ctrl-C, and the record's
//! files and plot.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, bail};
use plotters::style::{BLACK, BLUE, RED};
use serde::Serialize;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use super::TriggerConfig;
use super::measure::{
    LoadRow, Measured, Watched, base_health, load_row, measure, measured_record, parse_timeseries,
};
use super::plan::{self, LoadgenRun, Plan};
use super::report::{plan_text, report_md};
use crate::process::{self, Binaries};
use crate::runner::probe::Probe;
use crate::runner::{self, plot, record};
use falsification_model::outcome::Record;
use loadgen::record::StdoutLine;

/// `falsification trigger`: prints the plan; with a target and `--yes`, runs it and reports.
pub fn run(config: &TriggerConfig) -> anyhow::Result<()> {
    let p = plan::plan(&config.plan)?;
    say(&plan_text(&p, config.target.as_deref()))?;
    if config.dry_run {
        return Ok(());
    }
    let target = config.confirmed_target()?;
    let launch = launch(&p, target, config)?;
    let watched = tokio::runtime::Runtime::new()?.block_on(watch(&p, launch, config))?;
    finish(&p, target, &config.run.out, watched)
}

fn say(text: &str) -> std::io::Result<()> {
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes())?;
    stdout.flush()
}

/// The loadgen ready to start, and its bound.
struct Launch {
    command: Command,
    binary: PathBuf,
    max_duration: Duration,
}

/// Everything checked and written before any load: the schedule, the bound, the binary, the
/// record's directory with `plan.json`.
fn launch(p: &Plan, target: &str, config: &TriggerConfig) -> anyhow::Result<Launch> {
    let settings = &config.run;
    let schedule = plan::schedule(p)?;
    let max_duration = plan::max_duration(p, settings.max_duration)?;
    let binary = Binaries::find(settings.bin_dir.as_deref(), "loadgen")?;
    let out = &settings.out;
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    record::write(out, "plan.json", &record::json(p))?;
    say(&format!(
        "running: schedule {schedule}, max duration {} s\n",
        max_duration.as_secs_f64()
    ))?;
    let invocation = plan::loadgen(
        p,
        schedule,
        &LoadgenRun {
            target,
            retry_on: &settings.retry_on,
            seed: settings.seed,
            max_duration,
            out: &out.join("loadgen"),
        },
    );
    let mut command = Command::new(&binary);
    command.args(invocation.args());
    Ok(Launch {
        command,
        binary,
        max_duration,
    })
}

/// The rows the loadgen has printed so far, shared with the task that reads them.
type Rows = Arc<Mutex<Vec<LoadRow>>>;

/// Starts the loadgen, its log in `loadgen.log`, and a task collecting its stdout rows.
fn spawn_loadgen(launch: Launch, out: &Path) -> anyhow::Result<(Child, Rows)> {
    let log_path = out.join("loadgen.log");
    let log = std::fs::File::create(&log_path)
        .with_context(|| format!("creating {}", log_path.display()))?;
    let mut child = process::spawn_child_to(launch.command, log, Stdio::piped())
        .with_context(|| format!("starting {}", launch.binary.display()))?;
    let rows = Rows::default();
    if let Some(stdout) = child.stdout.take() {
        let rows = rows.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if let Ok(StdoutLine::Row(r)) = serde_json::from_str(&line) {
                    rows.lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(load_row(&r.row));
                }
            }
        });
    }
    Ok((child, rows))
}

/// The pods' arrivals summed; none unless every pod was read (only a full round is a total).
async fn pod_arrivals(probe: &Probe, pods: &[String]) -> Option<f64> {
    let urls = pods
        .iter()
        .map(|u| (u.clone(), u.trim_end_matches('/').to_string()))
        .collect();
    let read = probe.pods(urls).await;
    (read.len() == pods.len()).then(|| read.iter().map(|(_, q)| q.arrivals).sum())
}

/// Runs the loadgen to its end, or stops it: when the target is not healthy at base load, at the
/// maximum duration, or on Ctrl-C.
async fn watch(p: &Plan, launch: Launch, config: &TriggerConfig) -> anyhow::Result<Watched> {
    let settings = &config.run;
    let max_duration = launch.max_duration;
    let (mut child, rows) = spawn_loadgen(launch, &settings.out)?;
    let mut interrupt = runner::interrupt_signal();
    let started = tokio::time::Instant::now();
    let mut pods_tick = tokio::time::interval(Duration::from_secs(1));
    let probe = Probe::new(Duration::from_millis(800))?;
    // A stopped loadgen may let attempts in flight finish for one timeout, then writes files.
    let grace = Duration::from_secs_f64(p.timeout_s + 5.0);
    let expiry = tokio::time::sleep(max_duration);
    // Half a second before the spike: the seconds closed by then are the base phase's.
    let check = tokio::time::sleep(Duration::from_secs_f64((p.before_s - 0.5).max(0.0)));
    tokio::pin!(expiry, check);
    let mut watched = Watched::default();
    let stop = loop {
        tokio::select! {
            status = child.wait() => {
                let status = status?;
                if !status.success() {
                    let log = settings.out.join("loadgen.log");
                    bail!("loadgen failed ({status}): see {}", log.display());
                }
                watched.complete = max_duration.as_secs_f64() >= p.length_s;
                return Ok(watched);
            }
            _ = pods_tick.tick(), if !settings.pods.is_empty() => {
                if let Some(total) = pod_arrivals(&probe, &settings.pods).await {
                    // In the record's time: seconds from the spike's start.
                    let t = started.elapsed().as_secs_f64() - p.before_s;
                    watched.pod_arrivals.push((t, total));
                }
            }
            _ = &mut check, if watched.health_before.is_none() => {
                let h = base_health(&rows.lock().unwrap_or_else(|e| e.into_inner()));
                let healthy = h.healthy;
                watched.health_before = Some(h);
                if !healthy {
                    break "the target is not healthy at base load: stopping before the spike"
                        .to_string();
                }
            }
            _ = &mut expiry => {
                break format!("max duration {} s reached: stopping all load",
                    max_duration.as_secs_f64());
            }
            _ = interrupt.changed() => {
                break "interrupted: stopping all load, keeping the record".to_string();
            }
        }
    };
    eprintln!("{stop}");
    process::stop(&mut child, grace).await;
    Ok(watched)
}

/// Judges the loadgen's `timeseries.csv`, writes `record.json`, `report.md` and `trigger.svg`,
/// and prints the report; an error when the run stopped before the spike.
fn finish(p: &Plan, target: &str, out: &Path, watched: Watched) -> anyhow::Result<()> {
    let csv_path = out.join("loadgen").join(loadgen::TIMESERIES_FILE);
    let text = std::fs::read_to_string(&csv_path)
        .with_context(|| format!("reading {} (see loadgen.log)", csv_path.display()))?;
    let rows = parse_timeseries(&text)?;
    let rec = measured_record(&rows, p);
    let m = measure(&rec, p, watched);
    #[derive(Serialize)]
    struct RecordFile<'a> {
        target: &'a str,
        plan: &'a Plan,
        measured: &'a Measured,
        record: &'a Record,
    }
    let file = RecordFile {
        target,
        plan: p,
        measured: &m,
        record: &rec,
    };
    record::write(out, "record.json", &record::json(&file))?;
    let md = report_md(p, &m, target);
    record::write(out, "report.md", &md)?;
    draw(out, &rows, p)?;
    say(&md)?;
    if let Some(problem) = m.health_before.and_then(|h| h.problem) {
        bail!("stopped before the spike, nothing more sent: {problem}");
    }
    Ok(())
}

fn draw(dir: &Path, rows: &[LoadRow], p: &Plan) -> anyhow::Result<()> {
    let series = |f: &dyn Fn(&LoadRow) -> Option<f64>| -> Vec<(f64, f64)> {
        rows.iter()
            .filter_map(|r| Some((r.second - p.before_s, f(r)?)))
            .collect()
    };
    plot::chart(
        &dir.join("trigger.svg"),
        "Trigger test: success ratio and attempts per first attempt (t = 0 at the spike's start)",
        "ratio",
        &[
            (
                "successes / attempts",
                BLUE,
                series(&|r| (r.attempts > 0.0).then(|| r.successes / r.attempts)),
            ),
            (
                "attempts / first attempts",
                RED,
                series(&|r| (r.first_attempts > 0.0).then(|| r.attempts / r.first_attempts)),
            ),
            ("configured A", BLACK, series(&|_| Some(p.amplification))),
        ],
    )
}
