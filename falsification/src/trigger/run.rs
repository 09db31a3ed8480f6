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

use serde::Serialize;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use super::capacity::{self, CapacityProbe};
use super::cluster::ClusterLoad;
use super::measure::{
    self, Decision, Ended, LayerSeries, LoadRow, Measured, SeriesKind, Watched, base_health,
    load_row, measured_record,
};
use super::metrics::{self, Reader};
use super::plan::{self, LoadgenRun, Plan, PlanInput};
use super::report::{after_abort_text, plan_text, report_md};
use super::stop::{AfterAbort, Check, Fired, Rule, StopWatch};
use super::{RunEnd, TriggerConfig, Watching};
use crate::kube::shards::MergeCheck;
use crate::kube::unix_now;
use crate::page;
use crate::process::{self, Binaries};
use crate::progress::Status;
use crate::runner::{self, record};
use falsification_model::outcome::Record;
use loadgen::record::StdoutLine;
use loadgen::request::HeaderFlag;

/// `falsification trigger`: probes the capacity when asked, prints the plan; with a target and
/// `--yes`, runs it and reports.
pub fn run(config: &TriggerConfig) -> anyhow::Result<RunEnd> {
    let rt = tokio::runtime::Runtime::new()?;
    let reader = Reader::new(
        config.run.watching.prometheus.clone(),
        Duration::from_millis(800),
    )?;
    let mut input = config.plan.clone();
    let probe = config.run.capacity_probe;
    if probe.is_some() && config.run.cluster.is_some() {
        bail!(
            "--capacity auto: the probe runs from here, where an in-cluster --target does not \
             resolve; give --capacity (measured in the cluster) with --cluster kube"
        );
    }
    if let (Some(probe), true) = (probe, config.dry_run) {
        say(&format!(
            "capacity: auto (measured before the test by a closed-loop probe of {} workers for \
             {} s; nothing is sent in a dry run)\n",
            probe.concurrency,
            probe.duration.as_secs_f64()
        ))?;
        if input.rho.is_none() {
            say("the plan follows from the measured capacity: give --rho to see it now\n")?;
            return Ok(RunEnd::Judged);
        }
    }
    let mut probed = None;
    if !config.dry_run {
        // Everything that can be refused is refused before the first request, the probe's too.
        let target = config.confirmed_target()?;
        if probe.is_some() {
            // The plan's other inputs, with a stand-in for the capacity the probe will give.
            let stand_in = input.rate.map_or(1.0, |r| 2.0 * r);
            plan::plan(&PlanInput {
                capacity: Some(stand_in),
                ..input.clone()
            })?;
        }
        if config.run.cluster.is_none() {
            Binaries::find(config.run.bin_dir.as_deref(), "loadgen")?;
        }
        rt.block_on(preflight(&reader, config))?;
        if let Some(probe) = probe {
            say(&format!(
                "probing the capacity of {target}: {} workers back to back for {} s\n",
                probe.concurrency,
                probe.duration.as_secs_f64()
            ))?;
            let found = rt.block_on(capacity::probe(
                target,
                &config.run.requests,
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
    let launch = launch(&p, target, config)?;
    let seen = rt.block_on(watch(&p, launch, config, &reader))?;
    finish(&p, target, config, seen, probed)
}

/// The command line as a record keeps it: a header's literal secret value redacted as the
/// request's own rendering does (`-H 'authorization: <redacted, 10 bytes>'`), so a page shared
/// with a team carries no token.
fn recorded_command(argv: impl Iterator<Item = String>) -> Vec<String> {
    let redact = |v: &str| {
        v.parse::<HeaderFlag>()
            .map_or_else(|_| v.to_string(), |h| h.redacted())
    };
    let mut out: Vec<String> = Vec::new();
    let mut header_next = false;
    for arg in argv {
        let arg = if header_next {
            redact(&arg)
        } else if let Some(v) = arg.strip_prefix("--header=") {
            format!("--header={}", redact(v))
        } else if let Some(v) = arg.strip_prefix("-H").filter(|v| !v.is_empty()) {
            format!("-H{}", redact(v))
        } else {
            arg
        };
        header_next = arg == "-H" || arg == "--header";
        out.push(arg);
    }
    out
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
    Local {
        command: Box<Command>,
        binary: PathBuf,
    },
    Cluster(Box<loadgen::Invocation>),
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
            requests: &settings.requests,
        },
    );
    if settings.cluster.is_some() {
        return Ok(Launch::Cluster(Box::new(invocation)));
    }
    let binary = Binaries::find(settings.bin_dir.as_deref(), "loadgen")?;
    // Secret header values go to the child in its environment, not its argv.
    let (request, env) = invocation.request.literals_to_env();
    let invocation = loadgen::Invocation {
        request,
        ..invocation
    };
    let mut command = Command::new(&binary);
    command.args(invocation.args()).envs(env);
    Ok(Launch::Local {
        command: Box::new(command),
        binary,
    })
}

/// The load, running: a local loadgen and the task reading its stdout, or the cluster's Job.
enum Load {
    Local(Child, tokio::task::JoinHandle<()>),
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
            Load::Local(child, _) => {
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
            // The loadgen has no drain: it stops at once and writes its files; its last rows
            // are read before the record is made.
            Load::Local(child, reading) => {
                process::stop(child, Duration::from_secs(5)).await;
                let _ = tokio::time::timeout(Duration::from_secs(2), reading).await;
            }
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

/// Starts the load; with the rows it prints and the instant its second 0 begins (a cluster's
/// shards start together a lead after their Job is applied).
async fn start_load(
    launch: Launch,
    config: &TriggerConfig,
    interrupt: &mut tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<(Load, Rows, tokio::time::Instant)> {
    match launch {
        Launch::Local { command, binary } => {
            let (child, reading, rows) = spawn_loadgen(*command, &binary, &config.run.out)?;
            Ok((
                Load::Local(child, reading),
                rows,
                tokio::time::Instant::now(),
            ))
        }
        Launch::Cluster(invocation) => {
            let target = config.run.cluster.as_ref().context("no cluster")?;
            let rows = Rows::default();
            // Dropping the start on Ctrl-C deletes what it created.
            let load = tokio::select! {
                load = ClusterLoad::start(target, *invocation, rows.clone()) => load?,
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
fn spawn_loadgen(
    command: Command,
    binary: &Path,
    out: &Path,
) -> anyhow::Result<(Child, tokio::task::JoinHandle<()>, Rows)> {
    let log_path = out.join("loadgen.log");
    let log = std::fs::File::create(&log_path)
        .with_context(|| format!("creating {}", log_path.display()))?;
    let mut child = process::spawn_child_to(command, log, Stdio::piped())
        .with_context(|| format!("starting {}", binary.display()))?;
    let rows = Rows::default();
    let stdout = child.stdout.take().context("the loadgen's stdout")?;
    let reading = {
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
        })
    };
    Ok((child, reading, rows))
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

/// One second's reading of every layer (`None` where it gave no value), and what the
/// Prometheus reads came to: `None` when there were none, `Err` when every one failed to get an
/// answer (an answer without the series is an answer: the metrics are not lost).
async fn read_layers(
    reader: &Reader,
    w: &Watching,
) -> (Vec<Option<f64>>, Option<Result<(), String>>) {
    let queries = w
        .arrivals_queries
        .iter()
        .map(|q| async move { reader.query(&q.promql).await });
    let answers = futures::future::join_all(queries).await;
    let prometheus = (!answers.is_empty()).then(|| match answers.iter().find(|a| a.is_ok()) {
        Some(_) => Ok(()),
        None => Err(answers
            .iter()
            .find_map(|a| a.as_ref().err().cloned())
            .unwrap_or_default()),
    });
    let mut values: Vec<Option<f64>> = answers
        .iter()
        .zip(&w.arrivals_queries)
        .map(|(a, q)| metrics::one_value(a.as_ref().ok()?, &q.promql).ok())
        .collect();
    if !w.pods.is_empty() {
        values.push(reader.pods_counter(&w.pods, &w.arrivals_metric).await.ok());
    }
    (values, prometheus)
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

/// One second's check of every rule that reads the world, all at once (the clients' rules are
/// `None` here: they read each second of the loadgen once); and what the Prometheus reads came
/// to, as [`read_layers`] says.
async fn check_world(
    reader: &Reader,
    rules: &[Rule],
) -> (Vec<Option<Check>>, Option<Result<(), String>>) {
    let checks = futures::future::join_all(rules.iter().map(|rule| async move {
        match rule {
            Rule::Goodput { .. } | Rule::P99 { .. } => (None, None),
            Rule::Query { promql, .. } => match reader.query(promql).await {
                Ok(series) => {
                    let value = series
                        .iter()
                        .map(|s| format!("{}={}", s.labels, s.value))
                        .collect::<Vec<_>>()
                        .join(" ");
                    (
                        Some(Check::new(metrics::query_holds(&series), value)),
                        Some(Ok(())),
                    )
                }
                Err(e) => (Some(Check::unknown(&e)), Some(Err(e))),
            },
            Rule::Health { url, .. } => (
                Some(match reader.healthy(url).await {
                    Ok(()) => Check::new(false, "2xx".into()),
                    Err(e) => Check::new(true, e),
                }),
                None,
            ),
            Rule::Command { command, .. } => (Some(run_command(command).await), None),
        }
    }))
    .await;
    let reads: Vec<&Result<(), String>> = checks.iter().filter_map(|(_, r)| r.as_ref()).collect();
    let prometheus = (!reads.is_empty()).then(|| match reads.iter().find(|r| r.is_ok()) {
        Some(_) => Ok(()),
        None => Err(reads
            .iter()
            .find_map(|r| r.as_ref().err().cloned())
            .unwrap_or_default()),
    });
    (checks.into_iter().map(|(c, _)| c).collect(), prometheus)
}

/// The live status line: the last closed second at the clients, each layer's latest reading,
/// the state.
fn status_line(t: f64, last: Option<&LoadRow>, layers: &[LayerSeries], state: &str) -> String {
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
    format!(
        "t {t:+.0} s  first {:.0}/s  answered {:.0}/s  failed {:.0}/s{layers}  {state}",
        row.first_attempts, row.successes, row.failed_attempts
    )
}

/// What the watch saw: the rows, the layers, how it ended, the rule that fired, where the
/// cluster's load ran.
struct Seen {
    rows: Vec<LoadRow>,
    watched: Watched,
    fired: Option<Fired>,
    after_abort: Option<AfterAbort>,
    cluster: Option<ClusterRun>,
    /// Why the load failed, or its namespace could not be deleted: the record is written, then
    /// this is the command's error.
    error: Option<String>,
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
    let mut w = Seconds {
        layers: empty_layers(&settings.watching),
        stop: StopWatch::new(settings.stop.rules.clone(), settings.stop.on_metrics_loss),
        rows_read: 0,
        fired: None,
        decided: None,
    };
    let (mut health_before, mut error) = (None, None);
    let status = Status::spinning();
    let t_now = || started.elapsed().as_secs_f64() - p.before_s;
    let ended = loop {
        tokio::select! {
            ended = load.wait(&settings.out) => {
                if let Err(e) = ended {
                    error = Some(format!("{e:#}"));
                    break Ended::LoadFailed;
                }
                break Ended::MaxDuration;
            }
            _ = tick.tick() => {
                let t = t_now();
                let snapshot = rows_now(&rows);
                let phase = if t < 0.0 { "base" } else if t < p.spike_s { "SPIKE" } else { "watching" };
                status.step(|| status_line(t, snapshot.last(), &w.layers, phase));
                if let Some(ended) = w.second(p, reader, &settings.watching, &snapshot, t).await {
                    break ended;
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
    eprintln!(
        "{}",
        stop_message(ended, p, w.fired.as_ref(), error.as_deref())
    );
    load.stop().await;
    let stopped_at_s = t_now();
    let rows = rows_now(&rows);
    // The watch after an abort starts as the load stops; the namespace goes after it.
    let after_abort = match w.fired {
        Some(_) => Some(
            after_abort(
                p,
                config,
                reader,
                &mut w.layers,
                &mut interrupt,
                started,
                stopped_at_s,
            )
            .await,
        ),
        None => None,
    };
    let cluster = match load.finish(&settings.out).await {
        Ok(c) => c,
        Err(e) => {
            error = Some(error.map_or_else(|| format!("{e:#}"), |first| format!("{first}; {e:#}")));
            None
        }
    };
    Ok(Seen {
        rows,
        watched: Watched {
            ended,
            decided: w.decided,
            health_before,
            layers: w.layers,
        },
        fired: w.fired,
        after_abort,
        cluster,
        error,
    })
}

/// What the watch keeps from second to second.
struct Seconds {
    layers: Vec<LayerSeries>,
    stop: StopWatch,
    /// The loadgen's seconds the clients' rules have read.
    rows_read: usize,
    fired: Option<Fired>,
    decided: Option<Decision>,
}

impl Seconds {
    /// One second: the layers read, every stop rule checked (the clients' rules on each new
    /// second of the loadgen, once), the state decided if it can be; why the load stops, if it
    /// does.
    async fn second(
        &mut self,
        p: &Plan,
        reader: &Reader,
        watching: &Watching,
        snapshot: &[LoadRow],
        t: f64,
    ) -> Option<Ended> {
        let ((values, layers_read), (checks, rules_read)) = tokio::join!(
            read_layers(reader, watching),
            check_world(reader, self.stop.rules()),
        );
        for (series, v) in self.layers.iter_mut().zip(values) {
            if let Some(v) = v {
                series.readings.push((t, v));
            }
        }
        for row in &snapshot[self.rows_read.min(snapshot.len())..] {
            let checks: Vec<Option<Check>> =
                self.stop.rules().iter().map(|r| r.check_row(row)).collect();
            let fired = self.stop.observe(row.second - p.before_s, &checks, None);
            self.fired = self.fired.take().or(fired);
        }
        self.rows_read = snapshot.len();
        let prometheus = match (layers_read, rules_read) {
            (Some(Ok(())), _) | (_, Some(Ok(()))) => Some(Ok(())),
            (Some(Err(e)), _) | (_, Some(Err(e))) => Some(Err(e)),
            (None, None) => None,
        };
        let fired = self.stop.observe(t, &checks, prometheus);
        self.fired = self.fired.take().or(fired);
        if let Some(f) = &mut self.fired {
            // When the load stops: a clients' rule reads a second after it has closed.
            f.at_s = t;
            return Some(Ended::Aborted);
        }
        if t > p.spike_s {
            let service = self.layers.last();
            let rec = measured_record(snapshot, p, service);
            self.decided = measure::decided(&rec, p, service.map_or(0.0, |s| s.lag_s));
            if self.decided.is_some() {
                return Some(Ended::Decided);
            }
        }
        None
    }
}

/// What the run says when the load stops.
fn stop_message(ended: Ended, p: &Plan, fired: Option<&Fired>, error: Option<&str>) -> String {
    match ended {
        Ended::LoadFailed => format!(
            "the load failed: {}; stopping, keeping the record",
            error.unwrap_or("")
        ),
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

/// Watches the target without load for the configured time (Ctrl-C ends it): the layers'
/// arrivals go on into the same series, and every rule that reads the world is checked.
async fn after_abort(
    p: &Plan,
    config: &TriggerConfig,
    reader: &Reader,
    layers: &mut [LayerSeries],
    interrupt: &mut tokio::sync::watch::Receiver<bool>,
    started: tokio::time::Instant,
    stopped_at_s: f64,
) -> AfterAbort {
    let t_now = || started.elapsed().as_secs_f64() - p.before_s;
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
                let (checks, _) = check_world(reader, &config.run.stop.rules).await;
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

/// Judges the rows, writes `record.json`, `report.md` and `report.html`, and prints the report
/// and the page's path;
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
        /// The command that ran, to run it again (the request's secrets are references).
        command: Vec<String>,
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
        command: recorded_command(std::env::args()),
    };
    record::write(out, "record.json", &record::json(&file))?;
    let mut md = report_md(p, &m, target, probed.as_ref());
    if let (Some(f), Some(a)) = (&seen.fired, &seen.after_abort) {
        md.push_str(&after_abort_text(
            f,
            a,
            &config.run.stop.rules,
            &seen.watched.layers,
        ));
    }
    record::write(out, "report.md", &md)?;
    say(&md)?;
    say(&format!("{}\n", page::write_and_say(out)))?;
    if let Some(e) = seen.error {
        bail!("{e} (the record is in {})", out.display());
    }
    if let Some(problem) = m.health_before.and_then(|h| h.problem) {
        bail!("stopped before the spike, nothing more sent: {problem}");
    }
    Ok(match m.ended {
        Ended::Aborted => RunEnd::Aborted,
        Ended::Interrupted => RunEnd::Interrupted,
        _ => RunEnd::Judged,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_recorded_command_redacts_literal_header_secrets() {
        let argv = [
            "falsification",
            "trigger",
            "-H",
            "authorization: Bearer 1234567890",
            "--header=x-api-key: secret",
            "-Hx-token: abc",
            "-H",
            "content-type: application/json",
            "-H",
            "authorization: @env:TOKEN",
            "--yes",
        ];
        let got = recorded_command(argv.iter().map(ToString::to_string)).join(" ");
        assert_eq!(
            got,
            "falsification trigger -H authorization: <redacted, 17 bytes> \
             --header=x-api-key: <redacted, 6 bytes> -Hx-token: <redacted, 3 bytes> \
             -H content-type: application/json -H authorization: @env:TOKEN --yes"
        );
    }
}
