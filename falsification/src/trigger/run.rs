//! The trigger test's I/O: the capacity probe, the plan on stdout, the load (a local loadgen
//! child, or a Job in a namespace of its own with `--cluster kube`) and its rows, the layers'
//! arrivals, the stop rules, the stop once the state is decided (or at the maximum duration, or
//! on Ctrl-C), the read-only watch after an abort, and the record's files and plot.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, bail};
use plotters::style::{BLACK, BLUE, CYAN, GREEN, MAGENTA, RED};
use serde::Serialize;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use super::capacity::{self, CapacityProbe};
use super::cluster::ClusterLoad;
use super::measure::{
    self, Ended, LayerSeries, LoadRow, Measured, SeriesKind, Watched, base_health, load_row,
    measured_record,
};
use super::metrics::{self, Reader};
use super::plan::{self, LoadgenRun, Plan};
use super::report::{after_abort_text, plan_text, report_md};
use super::stop::{Check, Fired, Rule, StopWatch};
use super::{RunEnd, TriggerConfig, Watching};
use crate::kube::shards::MergeCheck;
use crate::process::{self, Binaries};
use crate::runner::{self, plot, record};
use falsification_model::outcome::Record;
use loadgen::record::StdoutLine;

/// `falsification trigger`: probes the capacity when asked, prints the plan; with a target and
/// `--yes`, runs it and reports.
pub fn run(config: &TriggerConfig) -> anyhow::Result<RunEnd> {
    let rt = tokio::runtime::Runtime::new()?;
    let mut input = config.plan.clone();
    let mut probed = None;
    if let Some(probe) = &config.run.capacity_probe {
        if config.dry_run {
            say(&format!(
                "capacity: auto (measured before the test by a closed-loop probe of {} workers \
                 for {} s; nothing is sent in a dry run)\n",
                probe.concurrency,
                probe.duration.as_secs_f64()
            ))?;
            if input.rho.is_none() {
                say("the plan follows from the measured capacity: give --rho to see it now\n")?;
                return Ok(RunEnd::Judged);
            }
        } else {
            let target = config.confirmed_target()?;
            say(&format!(
                "probing the capacity of {target}: {} workers back to back for {} s\n",
                probe.concurrency,
                probe.duration.as_secs_f64()
            ))?;
            let found = rt.block_on(capacity::probe(
                target,
                probe.concurrency,
                probe.duration,
                input.timeout,
            ))?;
            say(&format!(
                "capacity: {:.1} answers/s measured ({} answered, {} failed)\n",
                found.capacity, found.answered, found.failed
            ))?;
            input.capacity = Some(found.capacity);
            probed = Some(found);
        }
    }
    let p = plan::plan(&input)?;
    say(&plan_text(&p, config.target.as_deref(), &config.run))?;
    if config.dry_run {
        return Ok(RunEnd::Judged);
    }
    let target = config.confirmed_target()?;
    let reader = Reader::new(
        config.run.watching.prometheus.clone(),
        Duration::from_millis(800),
    )?;
    rt.block_on(preflight(&reader, config))?;
    let launch = launch(&p, target, config)?;
    let seen = rt.block_on(watch(&p, launch, config, &reader))?;
    finish(&p, target, config, seen, probed)
}

fn say(text: &str) -> std::io::Result<()> {
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes())?;
    stdout.flush()
}

/// Every query and pod read once before any load: a clear error instead of a blind run.
async fn preflight(reader: &Reader, config: &TriggerConfig) -> anyhow::Result<()> {
    let w = &config.run.watching;
    let rule_queries: Vec<&str> = config
        .run
        .stop
        .rules
        .iter()
        .filter_map(|r| match r {
            Rule::Query { promql, .. } => Some(promql.as_str()),
            _ => None,
        })
        .collect();
    let pods = (!w.pods.is_empty()).then_some((w.pods.as_slice(), &w.arrivals_metric));
    metrics::preflight(reader, &w.arrivals_queries, &rule_queries, pods).await
}

/// The loadgen ready to start: here, or in the cluster.
enum Launch {
    Local { command: Command, binary: PathBuf },
    Cluster(loadgen::Invocation),
}

/// Everything checked and written before any load: the schedule, the binary, the record's
/// directory with `plan.json`.
fn launch(p: &Plan, target: &str, config: &TriggerConfig) -> anyhow::Result<Launch> {
    let settings = &config.run;
    let schedule = plan::schedule(p)?;
    let out = &settings.out;
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    record::write(out, "plan.json", &record::json(p))?;
    say(&format!(
        "running: schedule {schedule}; the load stops once the state is decided, at most after \
         {} s\n",
        p.max_duration_s
    ))?;
    let invocation = plan::loadgen(
        p,
        schedule,
        &LoadgenRun {
            target,
            retry_on: &settings.retry_on,
            seed: settings.seed,
            out: &out.join("loadgen"),
        },
    );
    if settings.cluster.is_some() {
        return Ok(Launch::Cluster(invocation));
    }
    let binary = Binaries::find(settings.bin_dir.as_deref(), "loadgen")?;
    let mut command = Command::new(&binary);
    command.args(invocation.args());
    Ok(Launch::Local { command, binary })
}

/// The load, running.
enum Load {
    Local(Child),
    Cluster(ClusterLoad),
}

/// Where the cluster's load ran, for the record.
#[derive(Debug, Clone, Serialize)]
pub struct ClusterRun {
    pub namespace: String,
    pub shards: u32,
    pub image: String,
    pub image_source: String,
    /// The merged seconds against the shards' own summaries.
    pub merge: MergeCheck,
}

impl Load {
    /// Resolves when the load has ended by itself (at its bound): an error if it failed.
    async fn wait(&mut self, out: &Path) -> anyhow::Result<()> {
        match self {
            Load::Local(child) => {
                let status = child.wait().await?;
                if !status.success() {
                    let log = out.join("loadgen.log");
                    bail!("loadgen failed ({status}): see {}", log.display());
                }
                Ok(())
            }
            Load::Cluster(c) => c.wait().await,
        }
    }

    /// Stops all load at once; attempts in flight are abandoned.
    async fn stop(&mut self) {
        match self {
            // The loadgen has no drain: it stops at once and writes its files.
            Load::Local(child) => process::stop(child, Duration::from_secs(5)).await,
            Load::Cluster(c) => c.stop(Duration::from_secs(1)).await,
        }
    }

    /// The shards' logs into `out/loadgen/`, and the namespace deleted and checked gone.
    async fn finish(self, out: &Path) -> anyhow::Result<Option<ClusterRun>> {
        let Load::Cluster(c) = self else {
            return Ok(None);
        };
        let logs = c.write_logs(&out.join("loadgen"));
        let (image, image_source) = c.image();
        let run = ClusterRun {
            namespace: c.namespace().to_string(),
            shards: c.shards(),
            image: image.to_string(),
            image_source: image_source.to_string(),
            merge: c.merge_check(),
        };
        let namespace = run.namespace.clone();
        c.cleanup()
            .await
            .with_context(|| format!("deleting namespace {namespace}"))?;
        eprintln!("namespace {namespace} deleted and gone");
        logs?;
        Ok(Some(run))
    }
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Starts the load; with the rows it prints and the instant its second 0 begins (a cluster's
/// shards start together a lead after their Job is applied).
async fn start_load(
    launch: Launch,
    config: &TriggerConfig,
    interrupt: &mut tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<(Load, Rows, tokio::time::Instant)> {
    match launch {
        Launch::Local { command, binary } => {
            let (child, rows) = spawn_loadgen(command, &binary, &config.run.out)?;
            Ok((Load::Local(child), rows, tokio::time::Instant::now()))
        }
        Launch::Cluster(invocation) => {
            let target = config.run.cluster.as_ref().context("no cluster")?;
            let rows = Rows::default();
            // Dropping the start on Ctrl-C deletes what it created.
            let load = tokio::select! {
                load = ClusterLoad::start(target, invocation, rows.clone()) => load?,
                _ = interrupt.changed() => bail!("interrupted while starting the load in the cluster: nothing was sent"),
            };
            let (image, source) = load.image();
            eprintln!(
                "load: {} loadgen shard(s) in namespace {} (image {image}, from {source})",
                load.shards(),
                load.namespace()
            );
            let lead = (load.start_unix() - unix_now()).max(0.0);
            let zero = tokio::time::Instant::now() + Duration::from_secs_f64(lead);
            Ok((Load::Cluster(load), rows, zero))
        }
    }
}

/// The rows the loadgen has printed so far, shared with the task that reads them.
type Rows = Arc<Mutex<Vec<LoadRow>>>;

fn rows_now(rows: &Rows) -> Vec<LoadRow> {
    rows.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Starts the loadgen, its log in `loadgen.log`, and a task collecting its stdout rows.
fn spawn_loadgen(command: Command, binary: &Path, out: &Path) -> anyhow::Result<(Child, Rows)> {
    let log_path = out.join("loadgen.log");
    let log = std::fs::File::create(&log_path)
        .with_context(|| format!("creating {}", log_path.display()))?;
    let mut child = process::spawn_child_to(command, log, Stdio::piped())
        .with_context(|| format!("starting {}", binary.display()))?;
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

/// The layers read every second, outermost first: the PromQL queries, then the pods' counter.
fn empty_layers(w: &Watching) -> Vec<LayerSeries> {
    let mut layers: Vec<LayerSeries> = w
        .arrivals_queries
        .iter()
        .map(|q| LayerSeries {
            layer: q.layer.clone(),
            kind: SeriesKind::Rate,
            lag_s: measure::query_window_s(&q.promql),
            readings: Vec::new(),
        })
        .collect();
    if !w.pods.is_empty() {
        layers.push(LayerSeries {
            layer: format!("pods ({})", w.arrivals_metric),
            kind: SeriesKind::Count,
            lag_s: 0.0,
            readings: Vec::new(),
        });
    }
    layers
}

/// One second's reading of every layer (`None` where the read failed), and why every
/// Prometheus read failed when all did.
async fn read_layers(reader: &Reader, w: &Watching) -> (Vec<Option<f64>>, Option<String>) {
    let queries = w.arrivals_queries.iter().map(|q| async move {
        let series = reader.query(&q.promql).await?;
        metrics::one_value(&series, &q.promql)
    });
    let answers = futures::future::join_all(queries).await;
    let mut failures = answers.iter().filter_map(|a| a.as_ref().err()).peekable();
    let all_failed = (!answers.is_empty() && answers.iter().all(Result::is_err))
        .then(|| failures.peek().map(|e| e.to_string()).unwrap_or_default());
    let mut values: Vec<Option<f64>> = answers.into_iter().map(Result::ok).collect();
    if !w.pods.is_empty() {
        values.push(reader.pods_counter(&w.pods, &w.arrivals_metric).await.ok());
    }
    (values, all_failed)
}

/// A team's alarm command: holds when it exits non-zero; unknown when it runs past 5 s.
async fn run_command(command: &str) -> Check {
    let child = Command::new("sh")
        .args(["-c", command])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .status();
    match tokio::time::timeout(Duration::from_secs(5), child).await {
        Ok(Ok(s)) => Check::new(!s.success(), format!("exit {}", s.code().unwrap_or(-1))),
        Ok(Err(e)) => Check::new(true, format!("could not run: {e}")),
        Err(_) => Check::unknown("still running after 5 s"),
    }
}

/// One second's check of every rule that reads the world (the clients' rules read `last`).
async fn check_rules(
    reader: &Reader,
    rules: &[Rule],
    last: Option<&LoadRow>,
) -> (Vec<Option<Check>>, usize, usize) {
    let (mut checks, mut asked, mut failed) = (Vec::new(), 0, 0);
    for rule in rules {
        let check = match rule {
            Rule::Goodput { .. } | Rule::P99 { .. } => last.and_then(|r| rule.check_row(r)),
            Rule::Query { promql, .. } => {
                asked += 1;
                Some(match reader.query(promql).await {
                    Ok(series) => Check::new(
                        metrics::query_holds(&series),
                        series
                            .iter()
                            .map(|s| format!("{}={}", s.labels, s.value))
                            .collect::<Vec<_>>()
                            .join(" "),
                    ),
                    Err(e) => {
                        failed += 1;
                        Check::unknown(&e)
                    }
                })
            }
            Rule::Health { url, .. } => Some(match reader.healthy(url).await {
                Ok(()) => Check::new(false, "2xx".into()),
                Err(e) => Check::new(true, e),
            }),
            Rule::Command { command, .. } => Some(run_command(command).await),
        };
        checks.push(check);
    }
    (checks, asked, failed)
}

/// The live status line on a terminal (quiet otherwise, as in CI).
struct Status(Option<indicatif::ProgressBar>);

impl Status {
    fn new() -> Status {
        use std::io::IsTerminal as _;
        Status(std::io::stderr().is_terminal().then(|| {
            let bar = indicatif::ProgressBar::new_spinner();
            bar.set_style(
                indicatif::ProgressStyle::with_template("{spinner} {msg}")
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
            );
            bar
        }))
    }

    /// The last closed second at the clients, each layer's latest reading, the state.
    fn update(&self, t: f64, last: Option<&LoadRow>, layers: &[LayerSeries], state: &str) {
        let Some(bar) = &self.0 else { return };
        let row = last.copied().unwrap_or_default();
        let layers: String = layers
            .iter()
            .filter_map(|l| {
                let (_, v) = l.readings.last()?;
                Some(format!(
                    "  {} {v:.0}{}",
                    l.layer,
                    if l.kind == SeriesKind::Rate { "/s" } else { "" }
                ))
            })
            .collect();
        bar.set_message(format!(
            "t {t:+.0} s  first {:.0}/s  answered {:.0}/s  failed {:.0}/s{layers}  {state}",
            row.first_attempts, row.successes, row.failed_attempts
        ));
        bar.tick();
    }

    fn finish(&self) {
        if let Some(bar) = &self.0 {
            bar.finish_and_clear();
        }
    }
}

/// What the watch saw: the rows, the layers, how it ended, the rule that fired, where the
/// cluster's load ran.
struct Seen {
    rows: Vec<LoadRow>,
    watched: Watched,
    fired: Option<Fired>,
    after_abort: Option<AfterAbort>,
    cluster: Option<ClusterRun>,
}

/// Runs the load until the state is decided, a stop rule fires, the target is unhealthy at base
/// load, the maximum duration, or Ctrl-C; then stops it at once.
async fn watch(
    p: &Plan,
    launch: Launch,
    config: &TriggerConfig,
    reader: &Reader,
) -> anyhow::Result<Seen> {
    let settings = &config.run;
    let mut interrupt = runner::interrupt_signal();
    let (mut load, rows, started) = start_load(launch, config, &mut interrupt).await?;
    let mut tick = tokio::time::interval_at(started, Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The loadgen stops itself at the bound; this is the backstop.
    let expiry =
        tokio::time::sleep_until(started + Duration::from_secs_f64(p.max_duration_s + 2.0));
    // Half a second before the spike: the seconds closed by then are the base phase's.
    let check =
        tokio::time::sleep_until(started + Duration::from_secs_f64((p.before_s - 0.5).max(0.0)));
    tokio::pin!(expiry, check);
    let mut layers = empty_layers(&settings.watching);
    let mut stop = StopWatch::new(settings.stop.rules.clone(), settings.stop.on_metrics_loss);
    let mut health_before = None;
    let mut fired = None;
    let status = Status::new();
    let t_now = || started.elapsed().as_secs_f64() - p.before_s;
    let ended = loop {
        tokio::select! {
            ended = load.wait(&settings.out) => {
                if let Err(e) = ended {
                    load.finish(&settings.out).await?;
                    return Err(e);
                }
                break Ended::MaxDuration;
            }
            _ = tick.tick() => {
                let t = t_now();
                let (values, prometheus_lost) = read_layers(reader, &settings.watching).await;
                for (series, v) in layers.iter_mut().zip(values) {
                    if let Some(v) = v {
                        series.readings.push((t, v));
                    }
                }
                let snapshot = rows_now(&rows);
                let (checks, asked, failed) =
                    check_rules(reader, stop.rules(), snapshot.last()).await;
                let rules_lost = (asked > 0 && failed == asked).then(|| "rule queries failed".to_string());
                if let Some(f) = stop.observe(t, &checks, prometheus_lost.or(rules_lost)) {
                    fired = Some(f);
                    break Ended::Aborted;
                }
                let phase = if t < 0.0 { "base" } else if t < p.spike_s { "SPIKE" } else { "watching" };
                status.update(t, snapshot.last(), &layers, phase);
                if t > p.spike_s {
                    let service = layers.last();
                    let rec = measured_record(&snapshot, p, service);
                    if measure::decided(&rec, p, service.map_or(0.0, |s| s.lag_s)).is_some() {
                        break Ended::Decided;
                    }
                }
            }
            _ = &mut check, if health_before.is_none() => {
                let h = base_health(&rows_now(&rows));
                let healthy = h.healthy;
                health_before = Some(h);
                if !healthy {
                    break Ended::Unhealthy;
                }
            }
            _ = &mut expiry => break Ended::MaxDuration,
            _ = interrupt.changed() => break Ended::Interrupted,
        }
    };
    status.finish();
    eprintln!("{}", stop_message(ended, p, fired.as_ref()));
    load.stop().await;
    let rows = rows_now(&rows);
    let cluster = load.finish(&settings.out).await?;
    let after_abort = match fired {
        Some(_) => Some(after_abort(p, config, reader, &mut layers, &mut interrupt, started).await),
        None => None,
    };
    Ok(Seen {
        rows,
        watched: Watched {
            ended,
            health_before,
            layers,
        },
        fired,
        after_abort,
        cluster,
    })
}

/// What the run says when the load stops.
fn stop_message(ended: Ended, p: &Plan, fired: Option<&Fired>) -> String {
    match ended {
        Ended::Decided => "the state is decided: stopping all load".to_string(),
        Ended::MaxDuration => format!(
            "max duration {} s reached: all load stopped",
            p.max_duration_s
        ),
        Ended::Interrupted => "interrupted: stopping all load, keeping the record".into(),
        Ended::Aborted => format!(
            "stop rule fired: {}; stopping all load now",
            fired.map_or("", |f| f.rule.as_str())
        ),
        Ended::Unhealthy => {
            "the target is not healthy at base load: stopping before the spike".into()
        }
    }
}

/// What the read-only watch after an abort saw, second by second.
#[derive(Debug, Clone, Serialize)]
pub struct AfterAbort {
    /// Seconds watched after the load stopped.
    pub watched_s: f64,
    /// Seconds from the spike's start at which the load stopped.
    pub stopped_at_s: f64,
    /// Per second: seconds from the spike's start, each world-reading rule's check.
    pub samples: Vec<(f64, Vec<Option<Check>>)>,
}

/// Watches the target without load for the configured time (Ctrl-C ends it): the layers'
/// arrivals go on into the same series, and every rule that reads the world is checked.
async fn after_abort(
    p: &Plan,
    config: &TriggerConfig,
    reader: &Reader,
    layers: &mut [LayerSeries],
    interrupt: &mut tokio::sync::watch::Receiver<bool>,
    started: tokio::time::Instant,
) -> AfterAbort {
    let t_now = || started.elapsed().as_secs_f64() - p.before_s;
    let stopped_at_s = t_now();
    let length = config.run.stop.after_abort;
    eprintln!(
        "watching the target without load for {} s (read-only; Ctrl-C ends it)",
        length.as_secs_f64()
    );
    let end = tokio::time::Instant::now() + length;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut samples = Vec::new();
    loop {
        tokio::select! {
            _ = tick.tick() => {
                if tokio::time::Instant::now() >= end {
                    break;
                }
                let t = t_now();
                let (values, _) = read_layers(reader, &config.run.watching).await;
                for (series, v) in layers.iter_mut().zip(values) {
                    if let Some(v) = v {
                        series.readings.push((t, v));
                    }
                }
                let (checks, _, _) = check_rules(reader, &config.run.stop.rules, None).await;
                samples.push((t, checks));
            }
            _ = interrupt.changed() => break,
        }
    }
    AfterAbort {
        watched_s: t_now() - stopped_at_s,
        stopped_at_s,
        samples,
    }
}

/// Judges the rows, writes `record.json`, `report.md` and `trigger.svg`, and prints the report;
/// an error when the run stopped before the spike.
fn finish(
    p: &Plan,
    target: &str,
    config: &TriggerConfig,
    seen: Seen,
    probed: Option<CapacityProbe>,
) -> anyhow::Result<RunEnd> {
    let out = &config.run.out;
    let (rec, m) = measure::measure(&seen.rows, p, &seen.watched);
    #[derive(Serialize)]
    struct RecordFile<'a> {
        target: &'a str,
        plan: &'a Plan,
        stop_rules: Vec<String>,
        capacity_probe: Option<&'a CapacityProbe>,
        cluster: Option<&'a ClusterRun>,
        measured: &'a Measured,
        abort: Option<&'a Fired>,
        after_abort: Option<&'a AfterAbort>,
        layers: &'a [LayerSeries],
        record: &'a Record,
        load_rows: &'a [LoadRow],
    }
    let file = RecordFile {
        target,
        plan: p,
        stop_rules: config
            .run
            .stop
            .rules
            .iter()
            .map(ToString::to_string)
            .collect(),
        capacity_probe: probed.as_ref(),
        cluster: seen.cluster.as_ref(),
        measured: &m,
        abort: seen.fired.as_ref(),
        after_abort: seen.after_abort.as_ref(),
        layers: &seen.watched.layers,
        record: &rec,
        load_rows: &seen.rows,
    };
    record::write(out, "record.json", &record::json(&file))?;
    let mut md = report_md(p, &m, target, probed.as_ref());
    if let (Some(f), Some(a)) = (&seen.fired, &seen.after_abort) {
        md.push_str(&after_abort_text(
            f,
            a,
            &config.run.stop.rules,
            &seen.watched.layers,
            p,
        ));
    }
    record::write(out, "report.md", &md)?;
    draw(out, &seen.rows, &seen.watched.layers, p)?;
    say(&md)?;
    if let Some(problem) = m.health_before.and_then(|h| h.problem) {
        bail!("stopped before the spike, nothing more sent: {problem}");
    }
    Ok(if seen.fired.is_some() {
        RunEnd::Aborted
    } else {
        RunEnd::Judged
    })
}

fn draw(dir: &Path, rows: &[LoadRow], layers: &[LayerSeries], p: &Plan) -> anyhow::Result<()> {
    let series = |f: &dyn Fn(&LoadRow) -> Option<f64>| -> Vec<(f64, f64)> {
        rows.iter()
            .filter_map(|r| Some((r.second - p.before_s, f(r)?)))
            .collect()
    };
    let names: Vec<String> = layers
        .iter()
        .map(|l| format!("arrivals at {} / first attempts", l.layer))
        .collect();
    let mut lines = vec![
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
    ];
    for ((layer, name), color) in layers
        .iter()
        .zip(&names)
        .zip([GREEN, MAGENTA, CYAN].iter().cycle())
    {
        lines.push((
            name,
            *color,
            series(&|r| {
                let t = r.second - p.before_s;
                let a = layer.arrivals(t, 1.0)?;
                (r.first_attempts > 0.0).then(|| a / r.first_attempts)
            }),
        ));
    }
    plot::chart(
        &dir.join("trigger.svg"),
        "Trigger test: success ratio and arrivals per first attempt (t = 0 at the spike's start)",
        "ratio",
        &lines,
    )
}
