//! `falsification local-cluster-flags` (hidden): the one-machine cluster's controller-manager and
//! metrics-server settings at a time scale, for `scripts/local-cluster-up.sh`, so the upstream
//! defaults and their scaling are defined once, in Rust; `falsification kind-config` (hidden):
//! the kind cluster's config from the same settings, for `scripts/cluster-up.sh`.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use serde::Serialize;

use crate::kube::kind;
use crate::kube::scale::{LocalClusterFlags, RecordedHpa};
use crate::runner::record;

#[derive(Debug, Args)]
pub struct LocalClusterFlagsArgs {
    /// The HPA controller's sync period at S = 1.
    #[arg(long, default_value = "15s", value_parser = humantime::parse_duration)]
    pub hpa_sync: Duration,
    /// Divides the sync period, the downscale stabilization, the initial readiness delay, the
    /// CPU initialization period and metrics-server's resolution.
    #[arg(long, default_value_t = 1.0, value_parser = super::time_scale)]
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
    let flags = LocalClusterFlags::new(args.hpa_sync.as_secs_f64(), args.time_scale);
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

#[derive(Debug, Args)]
pub struct KindConfigArgs {
    /// The cluster's name.
    #[arg(long, default_value = "retry-debt")]
    pub name: String,
    /// The HPA controller's sync period at S = 1.
    #[arg(long, default_value = "15s", value_parser = humantime::parse_duration)]
    pub hpa_sync: Duration,
    /// Divides the controller's periods, as on the one-machine cluster.
    #[arg(long, default_value_t = 1.0, value_parser = super::time_scale)]
    pub time_scale: f64,
    /// Every node's image (default: upstream's kindest/node for v1.36.4, by digest).
    #[arg(long, default_value = kind::UPSTREAM_NODE_IMAGE)]
    pub node_image: String,
    /// The host runs cgroup v1: tell the kubelet to accept it.
    #[arg(long)]
    pub cgroup_v1: bool,
    /// The node image is the kit's (scripts/kind-node-image.sh): its control plane images'
    /// repository; with --etcd-tag and --coredns-tag, and no default CNI.
    #[arg(long, requires_all = ["etcd_tag", "coredns_tag"])]
    pub image_repository: Option<String>,
    #[arg(long, requires = "image_repository")]
    pub etcd_tag: Option<String>,
    #[arg(long, requires = "image_repository")]
    pub coredns_tag: Option<String>,
    /// The pods' range instead of kind's 10.244.0.0/16; with --service-subnet.
    #[arg(long, requires = "service_subnet")]
    pub pod_subnet: Option<String>,
    /// The Services' range instead of kind's 10.96.0.0/16; with --pod-subnet.
    #[arg(long, requires = "pod_subnet")]
    pub service_subnet: Option<String>,
}

pub fn kind_config(args: &KindConfigArgs) -> anyhow::Result<()> {
    let config = kind::KindConfig {
        name: args.name.clone(),
        flags: LocalClusterFlags::new(args.hpa_sync.as_secs_f64(), args.time_scale),
        node_image: args.node_image.clone(),
        cgroup_v1: args.cgroup_v1,
        kit_node: match (&args.image_repository, &args.etcd_tag, &args.coredns_tag) {
            (Some(r), Some(e), Some(c)) => Some(kind::KitNode {
                image_repository: r.clone(),
                etcd_tag: e.clone(),
                coredns_tag: c.clone(),
            }),
            _ => None,
        },
        subnets: match (&args.pod_subnet, &args.service_subnet) {
            (Some(p), Some(s)) => Some(kind::Subnets {
                pods: p.clone(),
                services: s.clone(),
            }),
            _ => None,
        },
    };
    print!("{}", config.yaml());
    Ok(())
}
