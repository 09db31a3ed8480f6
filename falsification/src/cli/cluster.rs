//! `falsification local-cluster-flags` (hidden): the one-machine cluster's controller-manager and
//! metrics-server settings at a time scale, for `scripts/local-cluster-up.sh`, so the upstream
//! defaults and their scaling are defined once, in Rust.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use serde::Serialize;

use crate::kube::scale::{LocalClusterFlags, RecordedHpa};
use crate::runner::record;

#[derive(Debug, Args)]
pub struct LocalClusterFlagsArgs {
    /// The HPA controller's sync period at S = 1.
    #[arg(long, default_value = "15s", value_parser = humantime::parse_duration)]
    pub hpa_sync: Duration,
    /// Divides the sync period, the downscale stabilization, the initial readiness delay, the
    /// CPU initialization period and metrics-server's resolution.
    #[arg(long, default_value_t = 1.0)]
    pub time_scale: f64,
    /// Also write `hpa.json` and `metrics-server.json`, the records the runner reads, here.
    #[arg(long, requires = "kubernetes")]
    pub records: Option<PathBuf>,
    /// The cluster's Kubernetes version, for `hpa.json`.
    #[arg(long)]
    pub kubernetes: Option<String>,
}

/// `hpa.json`: what the controller runs with, and its sync period in the flag's milliseconds
/// (the script compares it when it reuses a running cluster).
#[derive(Serialize)]
struct HpaRecord {
    sync_period_ms: u128,
    #[serde(flatten)]
    recorded: RecordedHpa,
}

/// `metrics-server.json`.
#[derive(Serialize)]
struct MetricsServerRecord {
    version: &'static str,
    metric_resolution_s: f64,
    kubelet_request_timeout_s: f64,
    kubelet_housekeeping_s: u32,
}

pub fn local_cluster_flags(args: &LocalClusterFlagsArgs) -> anyhow::Result<()> {
    let flags = LocalClusterFlags::new(args.hpa_sync.as_secs_f64(), args.time_scale)?;
    if let (Some(dir), Some(kubernetes)) = (&args.records, &args.kubernetes) {
        let hpa = HpaRecord {
            sync_period_ms: flags.sync_period.as_millis(),
            recorded: flags.recorded(kubernetes),
        };
        record::write(dir, "hpa.json", &record::json(&hpa))?;
        let metrics_server = MetricsServerRecord {
            // k8s/local/build/metrics-server pins it.
            version: "v0.8.0",
            metric_resolution_s: flags.metric_resolution.as_secs_f64(),
            kubelet_request_timeout_s: flags.kubelet_request_timeout.as_secs_f64(),
            kubelet_housekeeping_s: 10,
        };
        record::write(dir, "metrics-server.json", &record::json(&metrics_server))?;
    }
    print!("{}", flags.shell());
    Ok(())
}
