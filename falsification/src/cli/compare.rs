//! `falsification compare`: the same cases under the kit's HPA emulation (embedded cluster) and
//! under the upstream HPA (a Kubernetes cluster), side by side: desired and ready pods over
//! time, recovery, peak and final pods, lost demand, dead time, each against a stated band.

use std::fmt::Write as _;
use std::path::Path;

use clap::Args;
use serde::Serialize;

use super::run::{CommonArgs, Selection};
use crate::kube::{ClusterFacts, Kube};
use crate::page;
use crate::runner::intervention::Outage;
use crate::runner::judge::{BAND, LOST_BAND};
use crate::runner::{CaseResult, RunOptions, Session, record, run_all};
use falsification_model::experiment::{Case, Experiment};

#[derive(Debug, Args)]
pub struct CompareArgs {
    #[command(flatten)]
    pub select: Selection,
    /// The flags of `run`; --cluster is ignored (both run), --time-scale applies to both.
    #[command(flatten)]
    pub common: CommonArgs,
}

/// One figure of a case under both HPAs.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Figure {
    pub figure: String,
    pub emulated: String,
    pub upstream: String,
    pub within_band: bool,
}

/// The figures of one case (experiment time) and whether each is within the band.
pub fn figures(emulated: &CaseResult, upstream: &CaseResult, time_scale: f64) -> Vec<Figure> {
    let (m, u) = (&emulated.measured, &upstream.measured);
    let close =
        |a: f64, b: f64, floor: f64| (a - b).abs() <= (BAND * a.abs().max(b.abs())).max(floor);
    let secs = |v: Option<f64>| v.map_or("never".to_string(), |s| format!("{s:.0} s"));
    let pct = |v: Option<f64>| v.map_or("-".to_string(), |f| format!("{:.1}%", 100.0 * f));
    // Two rows of the coarser (kube: 1 s run) record, in experiment seconds.
    let row_slack = 2.0 * time_scale;
    let recovery = |figure: &str, a: Option<f64>, b: Option<f64>| Figure {
        figure: figure.into(),
        emulated: secs(a),
        upstream: secs(b),
        within_band: match (a, b) {
            (Some(a), Some(b)) => close(a, b, row_slack),
            (None, None) => true,
            _ => false,
        },
    };
    vec![
        recovery("recovery", m.recovery_s, u.recovery_s),
        recovery(
            "goodput recovery",
            m.goodput_recovery_s,
            u.goodput_recovery_s,
        ),
        Figure {
            figure: "state".into(),
            emulated: m.state_text(),
            upstream: u.state_text(),
            within_band: m.state() == u.state(),
        },
        Figure {
            figure: "peak pods".into(),
            emulated: m.peak_pods.to_string(),
            upstream: u.peak_pods.to_string(),
            within_band: close(f64::from(m.peak_pods), f64::from(u.peak_pods), 1.0),
        },
        Figure {
            figure: "final pods".into(),
            emulated: m.final_pods.to_string(),
            upstream: u.final_pods.to_string(),
            within_band: close(f64::from(m.final_pods), f64::from(u.final_pods), 1.0),
        },
        Figure {
            figure: "lost demand".into(),
            emulated: pct(m.lost_fraction),
            upstream: pct(u.lost_fraction),
            within_band: match (m.lost_fraction, u.lost_fraction) {
                (Some(a), Some(b)) => (a - b).abs() <= LOST_BAND,
                _ => true,
            },
        },
        Figure {
            figure: "replicas while the meter was down".into(),
            emulated: outage_cell(emulated.outage.as_ref()),
            upstream: outage_cell(upstream.outage.as_ref()),
            // Both HPAs hold (upstream: `computeReplicasForMetrics` fails, the scale is left).
            within_band: emulated.outage.map(|o| o.held) == upstream.outage.map(|o| o.held),
        },
        Figure {
            figure: "dead time (decision to ready)".into(),
            emulated: secs(emulated.dead_time_s),
            upstream: secs(upstream.dead_time_s),
            // Reported, not judged: the predictions of each run use its own.
            within_band: true,
        },
    ]
}

/// What the HPA did while its meter was down: `held at N`, or the range it moved through.
fn outage_cell(o: Option<&Outage>) -> String {
    let n = |v: Option<i32>| v.map_or("-".into(), |v| v.to_string());
    match o {
        None => "-".into(),
        Some(o) if o.held => format!("held at {}", n(o.desired_before)),
        Some(o) => format!(
            "{} -> {}-{}",
            n(o.desired_before),
            n(o.desired_min),
            n(o.desired_max)
        ),
    }
}

/// `falsification compare`.
pub fn compare(args: &CompareArgs) -> anyhow::Result<()> {
    let list = args.select.cases(&args.common.overrides())?;
    let (kube, kube_opts) = args.common.kube(&list)?;
    let (emulated, upstream) = run_both(args, &list, &kube, &kube_opts)?;
    let dir = upstream.dir.with_file_name(format!(
        "{}-vs-emulated",
        upstream
            .dir
            .file_name()
            .map_or(String::new(), |n| n.to_string_lossy().into_owned())
    ));
    std::fs::create_dir_all(&dir)?;
    let md = write_comparison(
        &dir,
        &list[0].0.id,
        &kube.facts,
        kube_opts.time_scale,
        &emulated,
        &upstream,
    )?;
    print!("{md}");
    println!("\ncomparison: {}", dir.join("compare.md").display());
    // The comparison's page, both sessions' first (it links to them).
    println!("{}", page::write_and_say(&dir));
    for s in [&emulated, &upstream] {
        if !s.failures.is_empty() {
            anyhow::bail!(
                "{} case(s) failed: {}",
                s.failures.len(),
                s.failures.join("; ")
            );
        }
    }
    Ok(())
}

/// Runs `list` under the kit's HPA emulation (embedded cluster), with the cluster's sync period
/// and tolerance at the same scale, then under the upstream HPA (the Kubernetes cluster).
fn run_both(
    args: &CompareArgs,
    list: &[(Experiment, Case)],
    kube: &Kube,
    kube_opts: &RunOptions,
) -> anyhow::Result<(Session, Session)> {
    // The emulation runs what the cluster runs: its sync period and tolerance, the same scale.
    let emulated_list: Vec<_> = list
        .iter()
        .map(|(e, c)| {
            let mut c = c.clone();
            kube.facts
                .controller
                .apply(&mut c.scenario, kube_opts.time_scale);
            (e.clone(), c)
        })
        .collect();
    let (embedded, _) = args.common.embedded()?;
    let emb_opts = args.common.options(kube_opts.time_scale, false);
    let id = &list[0].0.id;
    let emulated = run_all(
        &embedded,
        &format!("compare-{id}-emulated"),
        &emulated_list,
        &emb_opts,
        1,
    )?;
    let upstream = run_all(kube, &format!("compare-{id}-upstream"), list, kube_opts, 1)?;
    Ok((emulated, upstream))
}

/// `compare.md` (returned) and `compare.json` (the two sessions and each case's figures) in `dir`.
fn write_comparison(
    dir: &Path,
    id: &str,
    facts: &ClusterFacts,
    time_scale: f64,
    emulated: &Session,
    upstream: &Session,
) -> anyhow::Result<String> {
    let mut md = format!(
        "# {id}: the kit's HPA emulation vs the upstream HPA ({})\n\n\
         Time scale S = {}, HPA sync {} s and tolerance {} on both ({}). Figures in experiment \
         time. Band: {:.0}% (at least one pod; at least two rows, {:.0} s, for recovery) for \
         times and pods, {:.0} points for lost demand; a figure outside it is a defect of the \
         emulation or a difference explained below.\n\n\
         Records: {} (emulated), {} (upstream).\n",
        facts.server,
        time_scale,
        facts.controller.sync_period_s * time_scale,
        facts.controller.tolerance,
        facts.controller.source,
        BAND * 100.0,
        2.0 * time_scale,
        LOST_BAND * 100.0,
        emulated.dir.display(),
        upstream.dir.display(),
    );
    let mut all = Vec::new();
    for (em, up) in emulated.results.iter().zip(&upstream.results) {
        let f = figures(em, up, time_scale);
        case_section(&mut md, em, up, &f);
        all.push((em.case.clone(), f));
    }
    if emulated.results.len() != upstream.results.len() {
        let _ = writeln!(
            md,
            "\nNot every case ran on both: {} emulated, {} upstream (see the failures above).",
            emulated.results.len(),
            upstream.results.len()
        );
    }
    let _ = writeln!(
        md,
        "\nKnown differences: the upstream dead time adds scheduling and container start to \
         the pods' --ready-after (each run's prediction uses its own measured dead time); the \
         upstream HPA's first sync falls anywhere in its period, the emulation's at the case's \
         phase; kube-proxy picks a ready pod per connection at random, as the embedded loadgen \
         does per new connection; the upstream record's rows are 1 s of run time."
    );
    record::write(dir, "compare.md", &md)?;
    #[derive(Serialize)]
    struct CompareFile<'a> {
        emulated: &'a Path,
        upstream: &'a Path,
        cases: Vec<(String, Vec<Figure>)>,
        /// The command line that ran the comparison (the page's way to run it again).
        command: Vec<String>,
    }
    let file = CompareFile {
        emulated: &emulated.dir,
        upstream: &upstream.dir,
        cases: all,
        command: std::env::args().collect(),
    };
    record::write(dir, "compare.json", &record::json(&file))?;
    Ok(md)
}

/// One case's figures under both HPAs, and both verdicts.
fn case_section(md: &mut String, em: &CaseResult, up: &CaseResult, figures: &[Figure]) {
    let _ = writeln!(
        md,
        "\n## {} {}\n\n| figure | emulated (embedded) | upstream (kube) | within band |\n|---|---|---|---|",
        em.experiment, em.case
    );
    for x in figures {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} |",
            x.figure,
            x.emulated,
            x.upstream,
            if x.within_band { "yes" } else { "**no**" }
        );
    }
    let _ = writeln!(
        md,
        "\nVerdicts: emulated {}, upstream {}.",
        em.verdict, up.verdict
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::judge::Matches;
    use falsification_model::outcome::{Judgement, Outcome};

    fn result(recovery: Option<f64>, peak: u32, lost: f64) -> CaseResult {
        let o = Outcome {
            recovery_s: recovery,
            goodput_recovery_s: recovery,
            debt_served_s: recovery,
            recovered: recovery.is_some(),
            trapped: recovery.is_none(),
            horizon_s: 1000.0,
            peak_pods: peak,
            final_pods: 20,
            lost_fraction: Some(lost),
            triggered: true,
            first_timeout_s: None,
            base_refused: None,
            provisioning: Default::default(),
        };
        CaseResult {
            experiment: "F3".into(),
            case: "ingress".into(),
            dir: Default::default(),
            complete: true,
            verdict: Judgement::Held,
            reason: String::new(),
            measured: o,
            fluid_pooled: o,
            fluid_per_pod: o,
            published: Default::default(),
            matches: Matches::Both,
            dead_time_s: Some(92.0),
            hpa: String::new(),
            runner_cpu: 0.0,
            meter_cpu: 0.0,
            stack: None,
            sweep: None,
            outage: None,
        }
    }

    #[test]
    fn figures_within_and_outside_the_band() {
        let f = figures(
            &result(Some(700.0), 50, 0.30),
            &result(Some(760.0), 48, 0.33),
            5.0,
        );
        assert!(f.iter().all(|x| x.within_band), "{f:?}");
        let f = figures(&result(Some(700.0), 50, 0.30), &result(None, 30, 0.99), 5.0);
        let out: Vec<&str> = f
            .iter()
            .filter(|x| !x.within_band)
            .map(|x| x.figure.as_str())
            .collect();
        assert_eq!(
            out,
            [
                "recovery",
                "goodput recovery",
                "state",
                "peak pods",
                "lost demand"
            ]
        );
    }
}
