//! The kind cluster's config (`k8s/kind/cluster.yaml` and its variants), written from the one
//! definition of the controller's flags the one-machine cluster starts with
//! ([`LocalClusterFlags`]), so a compressed kind cluster runs the same HPA settings as a
//! compressed one-machine cluster. `falsification kind-config` prints it for
//! `scripts/cluster-up.sh`; at time scale 1 with upstream's node image it is the checked-in file
//! (a test keeps the two equal).

use std::fmt::Write;
use std::time::Duration;

use super::scale::LocalClusterFlags;

/// kind v0.33.0's node image for Kubernetes v1.36.4, by digest: what users get.
pub const UPSTREAM_NODE_IMAGE: &str =
    "kindest/node:v1.36.4@sha256:099e049362a1526b2db71494e1947aae99bd16290d7c895f2b7ea312e3cbfaed";

/// A node image built by `scripts/kind-node-image.sh` from the kit's own builds: its control
/// plane images are under the kit's name and its etcd and CoreDNS are the releases the kit
/// pins (kubeadm would ask for its own defaults), and it carries no CNI manifest (kindnetd
/// is not served by the Go module proxy), so `scripts/cluster-up.sh` sets up the pod network.
#[derive(Debug, Clone, PartialEq)]
pub struct KitNode {
    pub image_repository: String,
    pub etcd_tag: String,
    pub coredns_tag: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct KindConfig {
    pub name: String,
    pub flags: LocalClusterFlags,
    pub node_image: String,
    /// The host runs cgroup v1, which Kubernetes 1.35+ refuses unless the kubelet is told.
    pub cgroup_v1: bool,
    pub kit_node: Option<KitNode>,
    /// The pods' and Services' ranges, when kind's defaults (10.244.0.0/16, 10.96.0.0/16) may
    /// not be used: on this machine all test traffic stays in 198.18.0.0/15.
    pub subnets: Option<Subnets>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Subnets {
    pub pods: String,
    pub services: String,
}

impl KindConfig {
    /// The config as YAML, one node pair: a control plane and a worker.
    pub fn yaml(&self) -> String {
        let f = &self.flags;
        let mut y = String::new();
        let mut line = |s: &str| {
            y.push_str(s);
            y.push('\n');
        };
        line("kind: Cluster");
        line("apiVersion: kind.x-k8s.io/v1alpha4");
        line(&format!("name: {}", self.name));
        if self.kit_node.is_some() || self.subnets.is_some() {
            line("networking:");
        }
        if self.kit_node.is_some() {
            line("  disableDefaultCNI: true");
        }
        if let Some(n) = &self.subnets {
            line(&format!("  podSubnet: {}", n.pods));
            line(&format!("  serviceSubnet: {}", n.services));
        }
        line("nodes:");
        line("  - role: control-plane");
        line(&format!("    image: {}", self.node_image));
        line("    kubeadmConfigPatches:");
        line("      - |");
        line("        kind: ClusterConfiguration");
        if let Some(k) = &self.kit_node {
            line(&format!("        imageRepository: {}", k.image_repository));
            line("        etcd:");
            line("          local:");
            line(&format!(
                "            imageRepository: {}",
                k.image_repository
            ));
            line(&format!("            imageTag: \"{}\"", k.etcd_tag));
            line("        dns:");
            line(&format!(
                "          imageRepository: {}",
                k.image_repository
            ));
            line(&format!("          imageTag: \"{}\"", k.coredns_tag));
        }
        line("        controllerManager:");
        line(
            "          # The HPA's settings, stated so a run records what it ran with (SPEC: sync",
        );
        line("          # 15 s, tolerance 0.1, downscale stabilization 5 min, initial readiness");
        line("          # delay 30 s, CPU initialization 5 min; divided by the time scale).");
        line("          extraArgs:");
        for (name, value) in [
            ("sync-period", go_duration(f.sync_period)),
            ("tolerance", f.tolerance.to_string()),
            (
                "downscale-stabilization",
                go_duration(f.downscale_stabilization),
            ),
            (
                "initial-readiness-delay",
                go_duration(f.initial_readiness_delay),
            ),
            (
                "cpu-initialization-period",
                go_duration(f.cpu_initialization_period),
            ),
        ] {
            line(&format!(
                "            - name: horizontal-pod-autoscaler-{name}"
            ));
            line(&format!("              value: \"{value}\""));
        }
        if self.cgroup_v1 {
            line("      - |");
            line("        kind: KubeletConfiguration");
            line("        failCgroupV1: false");
        }
        line("  - role: worker");
        line(&format!("    image: {}", self.node_image));
        if self.cgroup_v1 {
            line("    kubeadmConfigPatches:");
            line("      - |");
            line("        kind: KubeletConfiguration");
            line("        failCgroupV1: false");
        }
        y
    }
}

/// A duration as Go's `time.Duration.String()` writes it (`5m0s`, `3s`, `1.5s`, `200ms`), the
/// form the controller-manager's flags are documented in.
pub fn go_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        return "0s".into();
    }
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let mut s = String::new();
    let (h, m) = (ms / 3_600_000, ms / 60_000 % 60);
    if h > 0 {
        let _ = write!(s, "{h}h");
    }
    if h > 0 || m > 0 {
        let _ = write!(s, "{m}m");
    }
    let (secs, frac) = (ms / 1000 % 60, ms % 1000);
    if frac == 0 {
        let _ = write!(s, "{secs}s");
    } else {
        let frac = format!("{frac:03}");
        let _ = write!(s, "{secs}.{}s", frac.trim_end_matches('0'));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(time_scale: f64) -> KindConfig {
        KindConfig {
            name: "retry-debt".into(),
            flags: LocalClusterFlags::new(15.0, time_scale),
            node_image: UPSTREAM_NODE_IMAGE.into(),
            cgroup_v1: false,
            kit_node: None,
            subnets: None,
        }
    }

    fn settings(yaml: &str) -> Vec<&str> {
        yaml.lines()
            .map(str::trim_end)
            .filter(|l| !l.is_empty() && !l.trim_start().starts_with('#'))
            .collect()
    }

    #[test]
    fn the_checked_in_kind_config_is_the_one_written_at_time_scale_one() {
        let file = include_str!("../../../k8s/kind/cluster.yaml");
        assert_eq!(settings(file), settings(&config(1.0).yaml()));
    }

    #[test]
    fn a_compressed_config_divides_the_controllers_periods() {
        let y = config(5.0).yaml();
        for want in [
            "- name: horizontal-pod-autoscaler-sync-period\n              value: \"3s\"",
            "- name: horizontal-pod-autoscaler-downscale-stabilization\n              value: \"1m0s\"",
            "- name: horizontal-pod-autoscaler-initial-readiness-delay\n              value: \"6s\"",
            "- name: horizontal-pod-autoscaler-cpu-initialization-period\n              value: \"1m0s\"",
            "- name: horizontal-pod-autoscaler-tolerance\n              value: \"0.1\"",
        ] {
            assert!(y.contains(want), "{want} not in\n{y}");
        }
        assert!(!y.contains("failCgroupV1") && !y.contains("networking"));
    }

    #[test]
    fn a_kit_node_on_cgroup_v1_gets_its_images_no_default_cni_and_the_kubelet_setting() {
        let c = KindConfig {
            cgroup_v1: true,
            node_image: "localhost/retry-debt-kit/kind-node:v1.36.4".into(),
            kit_node: Some(KitNode {
                image_repository: "localhost/retry-debt-kit".into(),
                etcd_tag: "3.6.16".into(),
                coredns_tag: "1.15.0".into(),
            }),
            subnets: Some(Subnets {
                pods: "198.19.128.0/17".into(),
                services: "198.19.96.0/20".into(),
            }),
            ..config(5.0)
        };
        let y = c.yaml();
        assert_eq!(y.matches("failCgroupV1: false").count(), 2, "{y}");
        assert_eq!(
            y.matches("image: localhost/retry-debt-kit/kind-node:v1.36.4")
                .count(),
            2
        );
        for want in [
            "networking:\n  disableDefaultCNI: true\n  podSubnet: 198.19.128.0/17\n  serviceSubnet: 198.19.96.0/20\n",
            "        imageRepository: localhost/retry-debt-kit\n        etcd:",
            "imageTag: \"3.6.16\"",
            "imageTag: \"1.15.0\"",
        ] {
            assert!(y.contains(want), "{want} not in\n{y}");
        }
    }

    #[test]
    fn durations_are_written_as_go_writes_them() {
        let ms = Duration::from_millis;
        assert_eq!(go_duration(ms(300_000)), "5m0s");
        assert_eq!(go_duration(ms(15_000)), "15s");
        assert_eq!(go_duration(ms(1_500)), "1.5s");
        assert_eq!(go_duration(ms(200)), "200ms");
        assert_eq!(go_duration(ms(3_723_250)), "1h2m3.25s");
        assert_eq!(go_duration(ms(0)), "0s");
    }
}
