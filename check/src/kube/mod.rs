//! Kubernetes YAML for `check`: multi-document files and `kubectl get -o yaml` Lists. Read:
//! HorizontalPodAutoscaler (autoscaling/v2, v2beta2, v1); Istio VirtualService and
//! DestinationRule (networking.istio.io v1, v1beta1, v1alpha3; Istio 1.30's defaults); Gateway
//! API HTTPRoute (gateway.networking.k8s.io v1, v1beta1; v1.6) with XBackendTrafficPolicy
//! (gateway.networking.x-k8s.io v1alpha1); ingress-nginx Ingress annotations and the controller
//! ConfigMap (controller v1.15); Linkerd's retry and timeout annotations on Service, HTTPRoute and
//! GRPCRoute (2.16 to 2.20) and ServiceProfile (linkerd.io/v1alpha2). Everything else is listed as
//! skipped. Each default a figure rests on is recorded with its version and where it is written.
//!
//! One file per reader (`hpa`, `istio`, `gateway_api`, `ingress_nginx`, `linkerd`), beside what
//! they share: `documents` (the YAML, Lists unpacked) and `objects` (typed reads of fields).

mod documents;
mod gateway_api;
mod hpa;
mod ingress_nginx;
mod istio;
mod linkerd;
mod objects;

use std::path::Path;

use crate::layer::{InputError, Parsed};
use documents::read;
use gateway_api::{BackendPolicies, http_route};
use hpa::hpa;
use ingress_nginx::{ingress, is_nginx_config};
use istio::{DestinationRules, virtual_service};
use linkerd::{grpc_route, service, service_profile};
use objects::Obj;

/// Reads Kubernetes YAML (multi-document, or a List): HPAs, Istio, Gateway API, ingress-nginx,
/// Linkerd.
pub fn parse(file: &Path, text: &str) -> Result<Parsed, InputError> {
    let (located, skipped) = read(file, text)?;
    let objects: Vec<Obj> = located.iter().map(|l| Obj::new(file, l)).collect();
    let mut out = Parsed {
        skipped,
        ..Parsed::default()
    };
    let mut rules = DestinationRules::collect(&objects)?;
    let mut policies = BackendPolicies::collect(&objects)?;
    let nginx = objects.iter().find(|o| is_nginx_config(o));
    for o in &objects {
        match (o.group, o.kind) {
            ("autoscaling", "HorizontalPodAutoscaler") => hpa(o, &mut out)?,
            (ISTIO, "VirtualService") => virtual_service(o, &mut rules, &mut out)?,
            (GATEWAY, "HTTPRoute") | ("policy.linkerd.io", "HTTPRoute") => {
                http_route(o, &mut policies, &mut out)?;
            }
            (GATEWAY, "GRPCRoute") => grpc_route(o, &mut out)?,
            ("networking.k8s.io" | "extensions", "Ingress") => ingress(o, nginx, &mut out)?,
            ("", "Service") => service(o, &mut out)?,
            ("linkerd.io", "ServiceProfile") => service_profile(o, &mut out)?,
            // Read with the objects they act on, below.
            (ISTIO, "DestinationRule") | (GATEWAY_X, "XBackendTrafficPolicy") => {}
            (GATEWAY_X, "BackendTrafficPolicy") => {}
            ("", "ConfigMap") if nginx.is_some_and(|c| std::ptr::eq(c, o)) => {}
            _ if o.kind.is_empty() => out.skipped.push(o.skip("no kind: not a Kubernetes object")),
            _ => out.skipped.push(o.skip("not a kind `check` reads")),
        }
    }
    rules.unused(&mut out)?;
    policies.unused(&mut out);
    let read_by_ingress = out.layers.iter().any(|l| l.software == "ingress-nginx");
    if let Some(config) = nginx.filter(|_| !read_by_ingress) {
        let why = "ingress-nginx controller ConfigMap: its keys are the defaults of Ingresses, and \
                   no ingress-nginx Ingress is in this file";
        out.skipped.push(config.skip(why));
    }
    Ok(out)
}

/// A proxy's file kept in a ConfigMap (the kit's own HAProxy is): `(name, key, text)`.
pub fn config_map_files(file: &Path, text: &str) -> Vec<(String, String, String)> {
    let objects = read(file, text)
        .map(|(objects, _)| objects)
        .unwrap_or_default();
    let mut out = Vec::new();
    for o in objects
        .iter()
        .map(|l| &l.value)
        .filter(|o| o["kind"] == "ConfigMap")
    {
        let name = o["metadata"]["name"].as_str().unwrap_or("");
        for (key, value) in o["data"].as_object().into_iter().flatten() {
            if let Some(v) = value.as_str() {
                out.push((name.to_string(), key.clone(), v.to_string()));
            }
        }
    }
    out
}

pub(super) const ISTIO: &str = "networking.istio.io";
pub(super) const GATEWAY: &str = "gateway.networking.k8s.io";
pub(super) const GATEWAY_X: &str = "gateway.networking.x-k8s.io";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layer::{Layer, RetryOn, Sees, Target, Tries};

    macro_rules! data {
        ($name:literal) => {
            (
                $name,
                include_str!(concat!("../../tests/data/kube/", $name)),
            )
        };
    }

    pub(super) use data;

    pub(super) const ALL: [(&str, &str); 26] = [
        data!("gateway-api-budget.yaml"),
        data!("gateway-api-gep3388-backendtrafficpolicy.yaml"),
        data!("gateway-api-retry-with-timeouts.yaml"),
        data!("gateway-api-retry.yaml"),
        data!("gateway-api-timeout-example.yaml"),
        data!("hostile-bad-yaml.yaml"),
        data!("hostile-negative-attempts.yaml"),
        data!("hostile-unknown-kinds.yaml"),
        data!("hpa-php-apache.yaml"),
        data!("hpa-walkthrough-multiple-metrics.yaml"),
        data!("ingress-nginx-configmap-and-ingresses.yaml"),
        data!("ingress-nginx-configmap.yaml"),
        data!("ingress-nginx-docker-registry.yaml"),
        data!("istio-bookinfo-gateway.yaml"),
        data!("istio-destination-rule-reviews.yaml"),
        data!("istio-docs-retries.yaml"),
        data!("istio-docs-timeout.yaml"),
        data!("istio-dr-budget.yaml"),
        data!("istio-ratings-test-delay.yaml"),
        data!("kit-gateway-kustomize.yaml"),
        data!("kubectl-get-list.yaml"),
        data!("linkerd-grpcroute-retries.yaml"),
        data!("linkerd-httproute-retries.yaml"),
        data!("linkerd-httproute-timeouts.yaml"),
        data!("linkerd-service-annotations.yaml"),
        data!("linkerd-serviceprofile.yaml"),
    ];

    pub(super) fn ok((name, text): (&str, &str)) -> Parsed {
        parse(Path::new(name), text).unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    pub(super) fn text(text: &str) -> Result<Parsed, InputError> {
        parse(Path::new("t.yaml"), text)
    }

    pub(super) fn field_error(result: Result<Parsed, InputError>) -> (String, String) {
        match result {
            Err(InputError::Field { field, value, .. }) => (field, value),
            other => panic!("expected a field error, got {other:?}"),
        }
    }

    pub(super) fn on(timeout: bool, connect_failure: bool, status_5xx: bool) -> RetryOn {
        RetryOn {
            timeout,
            connect_failure,
            status_5xx,
        }
    }

    pub(super) fn settings(layer: &Layer) -> Vec<&str> {
        layer.defaults.iter().map(|d| d.setting.as_str()).collect()
    }

    pub(super) fn has_note(layer: &Layer, part: &str) -> bool {
        layer.notes.iter().any(|n| n.contains(part))
    }

    pub(super) fn ok_err((name, text): (&str, &str)) -> Result<Parsed, InputError> {
        parse(Path::new(name), text)
    }

    #[test]
    fn flow_style_yaml_reads_like_block_style() {
        let parsed = ok(data!("hpa-php-apache.yaml"));
        let hpa = &parsed.autoscalers[0];
        assert_eq!((hpa.min_replicas, hpa.max_replicas), (1, 10));
        assert_eq!(hpa.metrics[0].target, Target::Utilization(0.5));
        assert_eq!(hpa.source.line, Some(2));
    }

    #[test]
    fn bad_yaml_names_its_line() {
        match ok_err(data!("hostile-bad-yaml.yaml")) {
            Err(InputError::Syntax { line, why, .. }) => {
                assert_eq!(line, 10, "{why}");
                assert!(!why.contains(" at line "), "{why}");
            }
            other => panic!("{other:?}"),
        }
        for (yaml, line) in [("a: 1\na: 2\n", 2), ("a:\n\tb: 1\n", 2), ("x: .nan\n", 1)] {
            match text(yaml) {
                Err(InputError::Syntax { line: got, .. }) => assert_eq!(got, line, "{yaml:?}"),
                other => panic!("{yaml:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn unknown_kinds_and_documents_are_listed() {
        let parsed = ok(data!("hostile-unknown-kinds.yaml"));
        assert!(parsed.layers.is_empty() && parsed.autoscalers.is_empty());
        let what: Vec<&str> = parsed.skipped.iter().map(|s| s.what.as_str()).collect();
        assert_eq!(
            what,
            [
                "document at line 14",
                "document at line 16",
                "CronJob nightly (line 2)",
                "Widget gizmo (line 9)",
                "(no kind) kindless (line 19)",
                "HorizontalPodAutoscaler old (line 22)",
                "Gateway example-gateway (line 29)",
            ]
        );
        assert!(parsed.skipped[5].why.contains("v2beta1"));
    }

    #[test]
    fn a_list_is_read_item_by_item() {
        let parsed = ok(data!("kubectl-get-list.yaml"));
        let [layer] = parsed.layers.as_slice() else {
            panic!()
        };
        assert_eq!(layer.source.line, Some(4));
        assert_eq!(layer.tries, Tries::AtMost(4));
        assert_eq!(layer.retry_on, on(true, true, true));
        let hpa = &parsed.autoscalers[0];
        assert_eq!(hpa.source.line, Some(21));
        assert_eq!(hpa.min_replicas, 1);
        assert_eq!(
            hpa.metrics[0].name,
            "http_requests_per_second{service=checkout}"
        );
        assert_eq!(hpa.metrics[0].sees, Sees::EveryAttempt);
        assert_eq!(hpa.metrics[0].target, Target::AverageValue(0.5));
        assert_eq!(hpa.metrics[1].sees, Sees::Unknown("memory".into()));
        assert_eq!(hpa.metrics[1].target, Target::AverageValue(2048.0));
        assert_eq!(parsed.skipped[0].what, "Deployment checkout (line 49)");
        let (field, _) = field_error(text("kind: List\nitems: 5\n"));
        assert_eq!(field, "List (line 1) items");
        let odd = text("kind: List\nitems:\n- 5\n- null\n").unwrap();
        assert_eq!(odd.skipped.len(), 2);
        for empty in [
            "kind: List\nitems:\n",
            "kind: List\nitems: ~\n",
            "kind: List\nitems: []\n",
        ] {
            assert_eq!(text(empty).unwrap(), Parsed::default(), "{empty:?}");
        }
        let (_, value) = field_error(text("kind: List\nitems: {a: 1}\n"));
        assert_eq!(value, "(not a sequence)");
    }

    #[test]
    fn hostile_structure_is_refused_not_crashed_on() {
        let mut bomb = String::from("a: &a [x, x, x, x, x, x, x, x, x]\n");
        for (prev, name) in ["a", "b", "c", "d", "e", "f", "g", "h"]
            .iter()
            .zip(["b", "c", "d", "e", "f", "g", "h", "i"])
        {
            let refs = vec![format!("*{prev}"); 9].join(", ");
            bomb.push_str(&format!("{name}: &{name} [{refs}]\n"));
        }
        assert!(matches!(text(&bomb), Err(InputError::Syntax { .. })));
        let deep = format!("a: {}{}\n", "[".repeat(500), "]".repeat(500));
        assert!(matches!(text(&deep), Err(InputError::Syntax { .. })));
        assert_eq!(text("").unwrap(), Parsed::default());
        assert_eq!(text("---\n---\n# nothing\n").unwrap(), Parsed::default());
        let many = "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\n---\n".repeat(2000);
        assert_eq!(text(&many).unwrap().skipped.len(), 2000);
        let huge = "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\n\
                    metadata: {name: a}\n\
                    spec: {maxReplicas: 99999999999999999999999}\n";
        assert!(matches!(text(huge), Err(InputError::Field { .. })));
        let wrong_shapes = "apiVersion: networking.istio.io/v1\nkind: VirtualService\n\
                            metadata: [1]\nspec: {http: 5}\n";
        assert!(matches!(text(wrong_shapes), Err(InputError::Field { .. })));
    }

    /// Every prefix of every input parses or fails cleanly: no panic on a cut file.
    #[test]
    fn truncated_inputs_never_panic() {
        for (name, full) in ALL {
            let cuts: Vec<usize> = (0..full.len())
                .filter(|i| full.is_char_boundary(*i))
                .collect();
            let step = (cuts.len() / 200).max(1);
            for cut in cuts.iter().step_by(step) {
                let _ = parse(Path::new(name), &full[..*cut]);
            }
        }
    }
}
