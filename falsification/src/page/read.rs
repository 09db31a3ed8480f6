//! A record read back from its files, for its page: what a case, a session, a comparison and a
//! trigger test wrote. Lenient where records grew over time (a field an older record lacks is
//! `None`, and the page says what it cannot show), strict where a page would otherwise lie (a
//! case without its `summary.json` is an error naming the file).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Deserialize;

use crate::runner::fidelity::RecordSummary;
use crate::runner::lag::Lag;
use crate::runner::record::MODELS_CSV;
use crate::table::Table;
use crate::trigger::{Decision, Ended, LayerSeries};
use falsification_model::experiment::{HpaSignal, Published};
use falsification_model::outcome::Outcome;

/// One case's record.
pub struct CaseRecord {
    pub dir: PathBuf,
    pub summary: RecordSummary,
    pub extra: SummaryExtra,
    pub config: Option<ExperimentFile>,
    /// `timeseries.csv`, experiment time.
    pub rows: Vec<Row>,
    /// Run seconds one row covers.
    pub row_step_run_s: f64,
    /// The HPA's decisions that changed the desired pods, experiment time.
    pub rescales: Vec<(f64, f64)>,
    /// `events.csv`.
    pub events: Vec<RunEvent>,
    /// Every pod's wait over time, experiment seconds, by pod name.
    pub pod_waits: BTreeMap<String, Vec<(f64, f64)>>,
    /// The fluid models' curves; `None` for a record written before `models.csv`.
    pub models: Option<Vec<ModelRow>>,
    /// The record's own Markdown report (the details below the page's summary).
    pub report_md: Option<String>,
}

/// What `summary.json` holds beyond the fidelity table's fields.
#[derive(Debug, Clone, Deserialize)]
pub struct SummaryExtra {
    #[serde(default)]
    pub reason: String,
    #[serde(default = "complete")]
    pub complete: bool,
    #[serde(default)]
    pub hpa: String,
    #[serde(default)]
    pub published: Option<Published>,
    #[serde(default)]
    pub lag: Option<LagFile>,
    /// What the run knew of the drained threshold, run seconds (`measured.drained_wait_run_s`).
    #[serde(default)]
    pub measured: Option<MeasuredExtra>,
    /// The command line of the run (records from before it was kept have none).
    #[serde(default)]
    pub command: Option<Vec<String>>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct MeasuredExtra {
    #[serde(default)]
    pub drained_wait_run_s: Option<f64>,
}

/// Older records wrote `complete` only when a run was cut short.
fn complete() -> bool {
    true
}

#[derive(Debug, Clone, Deserialize)]
pub struct LagFile {
    /// Experiment seconds.
    pub decisions: Vec<Lag>,
}

/// What `experiment.toml` gives the page.
#[derive(Debug, Clone, Deserialize)]
pub struct ExperimentFile {
    pub title: String,
    pub condition: String,
    pub refuted_if: String,
    #[serde(default)]
    pub seed: Option<u64>,
    pub scenario_experiment_time: ScenarioFile,
}

/// The case's configuration in experiment time (the one-line-each part of the page).
#[derive(Debug, Clone, Deserialize)]
pub struct ScenarioFile {
    pub pods: u32,
    pub rate_per_pod: f64,
    pub rho: f64,
    pub timeout_s: f64,
    pub retries: u32,
    pub event: toml::Value,
    #[serde(default)]
    pub hpa: Option<HpaFile>,
    #[serde(default)]
    pub discipline: Option<toml::Value>,
    #[serde(default)]
    pub routing: Option<String>,
    pub horizon_s: f64,
}

#[derive(Debug, Clone, Deserialize)]
pub struct HpaFile {
    pub signal: HpaSignal,
    pub target_utilization: f64,
    pub min_replicas: u32,
    pub max_replicas: u32,
    pub dead_time_s: f64,
}

/// One row of `timeseries.csv`.
#[derive(Debug, Clone, Copy)]
pub struct Row {
    pub t: f64,
    pub first_attempts: f64,
    pub successes: f64,
    pub pods_desired: f64,
    pub pods_ready: f64,
    /// Run seconds.
    pub wait_sustained_s: f64,
    /// Per run second.
    pub meter_first: Option<f64>,
    pub meter_ingress: Option<f64>,
}

/// One row of `events.csv`: a pod's event or the case's action.
#[derive(Debug, Clone)]
pub struct RunEvent {
    pub t: f64,
    pub who: String,
    pub what: String,
    pub detail: String,
}

/// One row of `models.csv`, experiment time: a model's ready pods, goodput (per run second)
/// and largest wait (experiment seconds).
#[derive(Debug, Clone)]
pub struct ModelRow {
    pub model: String,
    pub t: f64,
    pub pods_ready: f64,
    pub goodput: f64,
    pub wait_s: f64,
}

fn read(path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

fn table(path: &Path) -> anyhow::Result<Option<Table>> {
    if !path.is_file() {
        return Ok(None);
    }
    Ok(Some(
        Table::parse(&read(path)?).with_context(|| path.display().to_string())?,
    ))
}

impl CaseRecord {
    pub fn read(dir: &Path) -> anyhow::Result<CaseRecord> {
        let path = dir.join("summary.json");
        let value: serde_json::Value = serde_json::from_str(&read(&path)?)
            .with_context(|| format!("{}: not JSON", path.display()))?;
        let summary = RecordSummary::deserialize(&value)
            .with_context(|| format!("{}: not a complete record's summary", path.display()))?;
        let extra = SummaryExtra::deserialize(&value)
            .with_context(|| format!("{}: not a complete record's summary", path.display()))?;
        let config = match read(&dir.join("experiment.toml")) {
            Ok(text) => toml::from_str(&text).ok(),
            Err(_) => None,
        };
        let rows = timeseries(&dir.join("timeseries.csv"))?;
        let row_step_run_s = value
            .pointer("/measured/row_step_run_s")
            .and_then(serde_json::Value::as_f64)
            .unwrap_or(1.0);
        Ok(CaseRecord {
            dir: dir.to_path_buf(),
            rescales: rescales(&dir.join("decisions.csv"))?,
            events: events(&dir.join("events.csv"))?,
            pod_waits: pod_waits(&dir.join("pods.csv"), summary.time_scale)?,
            models: models(&dir.join(MODELS_CSV))?,
            report_md: read(&dir.join("report.md")).ok(),
            summary,
            extra,
            config,
            rows,
            row_step_run_s,
        })
    }

    pub fn name(&self) -> String {
        format!("{} {}", self.summary.experiment, self.summary.case)
    }
}

fn timeseries(path: &Path) -> anyhow::Result<Vec<Row>> {
    let Some(t) = table(path)? else {
        return Ok(vec![]);
    };
    let col = |name: &str| t.column(name).with_context(|| path.display().to_string());
    let at = col("t_exp_s")?;
    let first = col("first_attempts")?;
    let successes = col("successes")?;
    let desired = col("pods_desired")?;
    let ready = col("pods_ready")?;
    let wait = col("wait_sustained_s")?;
    let meter_first = t.column("meter_first_attempt_rate").ok();
    let meter_ingress = t.column("meter_ingress_rate").ok();
    Ok(t.rows()
        .filter_map(|r| {
            Some(Row {
                t: r.number(at)?,
                first_attempts: r.number(first)?,
                successes: r.number(successes)?,
                pods_desired: r.number(desired)?,
                pods_ready: r.number(ready)?,
                wait_sustained_s: r.number(wait)?,
                meter_first: meter_first.and_then(|c| r.number(c)),
                meter_ingress: meter_ingress.and_then(|c| r.number(c)),
            })
        })
        .collect())
}

fn rescales(path: &Path) -> anyhow::Result<Vec<(f64, f64)>> {
    let Some(t) = table(path)? else {
        return Ok(vec![]);
    };
    let col = |name: &str| t.column(name).with_context(|| path.display().to_string());
    let (at, desired, rescale) = (col("t_exp_s")?, col("desired")?, col("rescale")?);
    Ok(t.rows()
        .filter(|r| r.text(rescale) == "true")
        .filter_map(|r| Some((r.number(at)?, r.number(desired)?)))
        .collect())
}

fn events(path: &Path) -> anyhow::Result<Vec<RunEvent>> {
    let Some(t) = table(path)? else {
        return Ok(vec![]);
    };
    let col = |name: &str| t.column(name).with_context(|| path.display().to_string());
    let (at, who, what, detail) = (col("t_exp_s")?, col("pod")?, col("event")?, col("detail")?);
    Ok(t.rows()
        .filter_map(|r| {
            Some(RunEvent {
                t: r.number(at)?,
                who: r.text(who).into(),
                what: r.text(what).into(),
                detail: r.text(detail).into(),
            })
        })
        .collect())
}

fn pod_waits(path: &Path, time_scale: f64) -> anyhow::Result<BTreeMap<String, Vec<(f64, f64)>>> {
    let mut out: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    let Some(t) = table(path)? else {
        return Ok(out);
    };
    let col = |name: &str| t.column(name).with_context(|| path.display().to_string());
    let (at, pod, wait) = (col("t_exp_s")?, col("pod")?, col("wait_s")?);
    for r in t.rows() {
        if let (Some(x), Some(w)) = (r.number(at), r.number(wait)) {
            out.entry(r.text(pod).into())
                .or_default()
                .push((x, w * time_scale));
        }
    }
    Ok(out)
}

fn models(path: &Path) -> anyhow::Result<Option<Vec<ModelRow>>> {
    let Some(t) = table(path)? else {
        return Ok(None);
    };
    let col = |name: &str| t.column(name).with_context(|| path.display().to_string());
    let (model, at, ready, goodput, wait) = (
        col("model")?,
        col("t_exp_s")?,
        col("pods_ready")?,
        col("goodput_per_s")?,
        col("max_wait_exp_s")?,
    );
    Ok(Some(
        t.rows()
            .filter_map(|r| {
                Some(ModelRow {
                    model: r.text(model).into(),
                    t: r.number(at)?,
                    pods_ready: r.number(ready)?,
                    goodput: r.number(goodput)?,
                    wait_s: r.number(wait)?,
                })
            })
            .collect(),
    ))
}

/// A session: its cases in the index's order, then any case record the index does not list yet
/// (a run killed before it rewrote its index), in name order.
pub struct SessionRecord {
    pub dir: PathBuf,
    pub cases: Vec<CaseRecord>,
    /// Cases whose record could not be read, and why.
    pub unreadable: Vec<(String, String)>,
    /// The session's own Markdown index (its Definition 9, threshold and stack tables).
    pub index_md: Option<String>,
}

#[derive(Deserialize)]
struct IndexEntry {
    dir: PathBuf,
}

impl SessionRecord {
    pub fn read(dir: &Path) -> anyhow::Result<SessionRecord> {
        let path = dir.join("index.json");
        let index: Vec<IndexEntry> = serde_json::from_str(&read(&path)?)
            .with_context(|| format!("{}: not a session index", path.display()))?;
        // The index names each record as the run saw it; the session holds it by name.
        let mut names: Vec<PathBuf> = index
            .iter()
            .filter_map(|e| e.dir.file_name().map(PathBuf::from))
            .collect();
        let mut unlisted: Vec<PathBuf> = std::fs::read_dir(dir)
            .with_context(|| format!("reading {}", dir.display()))?
            .flatten()
            .filter(|e| e.path().join("summary.json").is_file())
            .map(|e| PathBuf::from(e.file_name()))
            .filter(|n| !names.contains(n))
            .collect();
        unlisted.sort();
        names.extend(unlisted);
        let mut cases = Vec::new();
        let mut unreadable = Vec::new();
        for name in names {
            match CaseRecord::read(&dir.join(&name)) {
                Ok(c) => cases.push(c),
                Err(e) => unreadable.push((name.display().to_string(), format!("{e:#}"))),
            }
        }
        Ok(SessionRecord {
            dir: dir.to_path_buf(),
            cases,
            unreadable,
            index_md: read(&dir.join("index.md")).ok(),
        })
    }
}

/// Which kind of record a directory holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Case,
    Session,
    Compare,
    Trigger,
}

impl Kind {
    pub fn of(dir: &Path) -> anyhow::Result<Kind> {
        let has = |name: &str| dir.join(name).is_file();
        Ok(if has("summary.json") {
            Kind::Case
        } else if has("index.json") {
            Kind::Session
        } else if has("compare.json") {
            Kind::Compare
        } else if has("record.json") && has("plan.json") {
            Kind::Trigger
        } else {
            anyhow::bail!(
                "{}: not a record (no summary.json, index.json, compare.json, or trigger \
                 record.json with plan.json)",
                dir.display()
            )
        })
    }
}

/// What a trigger test's `record.json` gives its page.
#[derive(Debug, Clone, Deserialize)]
pub struct TriggerRecord {
    pub target: String,
    pub plan: TriggerPlan,
    #[serde(default)]
    pub stop_rules: Vec<String>,
    pub measured: TriggerMeasured,
    #[serde(default)]
    pub abort: Option<TriggerFired>,
    #[serde(default)]
    pub load_rows: Vec<LoadRow>,
    #[serde(default)]
    pub layers: Vec<LayerSeries>,
    /// The command that ran (records from before it was kept have none).
    #[serde(default)]
    pub command: Option<Vec<String>>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct TriggerPlan {
    pub rho: f64,
    pub rate: f64,
    pub timeout_s: f64,
    pub retries: u32,
    pub amplification: f64,
    #[serde(default)]
    pub client_amplification: Option<f64>,
    pub threshold: f64,
    pub k: f64,
    pub spike_s: f64,
    pub trapped: bool,
    pub recovery_closed_s: Option<f64>,
    pub recovery_fluid_s: Option<f64>,
    pub before_s: f64,
    pub max_duration_s: f64,
    pub max_rate: f64,
    #[serde(default)]
    pub warnings: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct TriggerMeasured {
    pub outcome: Outcome,
    pub decision: Decision,
    pub amplification: Option<f64>,
    #[serde(default)]
    pub layers: Vec<TriggerLayer>,
    pub ended: Ended,
    #[serde(default)]
    pub failing_at_end: bool,
    /// The target at base load before the spike.
    #[serde(default)]
    pub health_before: Option<BaseHealth>,
    #[serde(default)]
    pub discipline: Option<TriggerDiscipline>,
    #[serde(default)]
    pub failed_phase: Option<(f64, f64)>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct BaseHealth {
    pub seconds: u32,
    pub first_attempts: f64,
    pub successes: f64,
    pub healthy: bool,
}

#[derive(Debug, Clone, Deserialize)]
pub struct TriggerLayer {
    pub layer: String,
    pub per_first_attempt: Option<f64>,
    pub over_s: f64,
}

#[derive(Debug, Clone, Deserialize)]
pub struct TriggerDiscipline {
    pub named: String,
    pub why: String,
}

#[derive(Debug, Clone, Deserialize)]
pub struct TriggerFired {
    pub rule: String,
    pub at_s: f64,
    #[serde(default)]
    pub values: Vec<String>,
}

/// One second of the loadgen's rows.
#[derive(Debug, Clone, Deserialize)]
pub struct LoadRow {
    pub second: f64,
    pub first_attempts: f64,
    pub attempts: f64,
    pub successes: f64,
}

impl TriggerRecord {
    pub fn read(dir: &Path) -> anyhow::Result<(TriggerRecord, Option<String>)> {
        let path = dir.join("record.json");
        let record = serde_json::from_str(&read(&path)?)
            .with_context(|| format!("{}: not a trigger record", path.display()))?;
        Ok((record, read(&dir.join("report.md")).ok()))
    }
}

/// A comparison's `compare.json`: per case, its figures under both HPAs.
#[derive(Debug, Clone, Deserialize)]
pub struct CompareFigure {
    pub figure: String,
    pub emulated: String,
    pub upstream: String,
    pub within_band: bool,
}

pub struct CompareRecord {
    pub dir: PathBuf,
    pub cases: Vec<(String, Vec<CompareFigure>)>,
    /// The two sessions, when the comparison names them (older ones do not): emulated, upstream.
    pub sessions: Option<(SessionRecord, SessionRecord)>,
    /// The command line that ran the comparison, when it keeps one.
    pub command: Option<Vec<String>>,
    pub report_md: Option<String>,
}

/// `compare.json` as written now, and as older comparisons wrote it (the cases alone).
#[derive(Deserialize)]
#[serde(untagged)]
enum CompareFile {
    Sessions {
        emulated: PathBuf,
        upstream: PathBuf,
        cases: Vec<(String, Vec<CompareFigure>)>,
        #[serde(default)]
        command: Option<Vec<String>>,
    },
    Cases(Vec<(String, Vec<CompareFigure>)>),
}

impl CompareRecord {
    pub fn read(dir: &Path) -> anyhow::Result<CompareRecord> {
        let path = dir.join("compare.json");
        let file: CompareFile = serde_json::from_str(&read(&path)?)
            .with_context(|| format!("{}: not a comparison", path.display()))?;
        let (cases, sessions, command) = match file {
            CompareFile::Cases(cases) => (cases, None, None),
            CompareFile::Sessions {
                emulated,
                upstream,
                cases,
                command,
            } => {
                // The sessions sit beside the comparison; the file names them as the run saw them.
                let beside = |p: &Path| {
                    let name = p.file_name().map(PathBuf::from).unwrap_or_default();
                    SessionRecord::read(&dir.parent().unwrap_or(dir).join(name))
                };
                // Sessions moved away leave the figures; the page says what it cannot show.
                let both = beside(&emulated).ok().zip(beside(&upstream).ok());
                (cases, both, command)
            }
        };
        Ok(CompareRecord {
            dir: dir.to_path_buf(),
            cases,
            sessions,
            command,
            report_md: read(&dir.join("compare.md")).ok(),
        })
    }
}
