//! F5's gateway on Kubernetes: HAProxy 2.6 from the kit's image (`k8s/overlays/gateway`), in
//! front of the service pods, its backends following the pods' readiness through DNS as a
//! Service's endpoints do, and its counters read from its stats page as CSV through the API
//! server's service proxy.
//!
//! - Backends: a `server-template` of one slot per possible pod (the HPA's ceiling, or the fixed
//!   pod count) filled from the A records of the headless Service `service-ready`, which lists
//!   the ready pods only. HAProxy re-resolves every `hold valid`, adds a new ready pod to a free
//!   slot and drops one that left the answer (`hold obsolete` 0 s). CoreDNS caches its answers
//!   for its `ttl` (5 s on the one-machine cluster), so a change reaches the gateway up to that
//!   much later.
//! - Counters: the page lists every proxy; the `clients` frontend and the `pods` backend's
//!   servers are kept and read by [`haproxy_counters`], as the embedded runner reads `show
//!   stat` (the `stats` frontend's own requests are not client requests).
//!
//! Everything here is pure; `kube/mod.rs` applies the objects and reads the page.

use crate::gateway::{GatewayCounters, MAX_CONNECTIONS, haproxy_counters, haproxy_defaults};
use crate::table::Table;
use falsification_model::experiment::Gateway;

/// The frontend's port (the Service `gateway`'s `http`).
pub const PORT: u16 = 8080;
/// The stats page's port (the Service `gateway`'s `stats`).
pub const STATS_PORT: u16 = 8404;
/// The headless Service of the ready service pods, which HAProxy resolves.
pub const PODS_SERVICE: &str = "service-ready";
/// The proxies of the configuration: clients in, pods out.
const FRONTEND: &str = "clients";
const BACKEND: &str = "pods";
/// The label on the overlay's gateway objects, which the runner applies only for a case with a
/// gateway.
pub const COMPONENT: (&str, &str) = ("app.kubernetes.io/component", "gateway");

/// HAProxy's configuration for `g` (run time) in `namespace`, with `slots` servers, re-resolving
/// the pods every `resolve_s` (run seconds).
pub fn haproxy_config(g: &Gateway, namespace: &str, slots: u32, resolve_s: f64) -> String {
    let resolve = ((resolve_s * 1000.0).round() as u64).max(1);
    format!(
        "# F5's gateway (falsification/src/kube/gateway.rs writes this file; a run replaces it with\n\
         # the case's values): {retries} retries on a response timeout or a failed connection, one\n\
         # try every `timeout server`; the backends are the ready pods, as DNS lists them.\n\
         global\n\
         \x20   maxconn {MAX_CONNECTIONS}\n\
         {defaults}\
         resolvers kube\n\
         \x20   parse-resolv-conf\n\
         \x20   accepted_payload_size 8192\n\
         \x20   resolve_retries 3\n\
         \x20   timeout resolve {resolve}ms\n\
         \x20   timeout retry {resolve}ms\n\
         \x20   hold valid {resolve}ms\n\
         \x20   hold obsolete 0s\n\
         \x20   hold nx {resolve}ms\n\
         \x20   hold refused {resolve}ms\n\
         frontend {FRONTEND}\n\
         \x20   bind :{PORT}\n\
         \x20   maxconn {MAX_CONNECTIONS}\n\
         \x20   default_backend {BACKEND}\n\
         backend {BACKEND}\n\
         \x20   balance {balance}\n\
         \x20   server-template pod 1-{slots} {PODS_SERVICE}.{namespace}.svc.cluster.local:8080 check resolvers kube resolve-prefer ipv4 init-addr none\n\
         frontend stats\n\
         \x20   bind :{STATS_PORT}\n\
         \x20   stats enable\n\
         \x20   stats uri /stats\n",
        retries = g.retries,
        defaults = haproxy_defaults(g),
        balance = crate::gateway::haproxy_balance(g),
    )
}

/// The gateway's stats page as CSV through the API server's service proxy.
pub fn stats_path(namespace: &str) -> String {
    format!("/api/v1/namespaces/{namespace}/services/gateway:stats/proxy/stats;csv")
}

/// The counters of the stats page (cumulative): the `clients` frontend's requests and 5xx, the
/// pods' servers' tries.
pub fn counters(csv: &str) -> Option<GatewayCounters> {
    haproxy_counters(csv, |px| px == FRONTEND || px == BACKEND)
}

/// How many of the pods' servers are up (resolved and passing their check).
pub fn servers_up(csv: &str) -> usize {
    let Ok(t) = Table::parse(csv) else {
        return 0;
    };
    let (Ok(px), Ok(sv), Ok(status)) = (t.column("pxname"), t.column("svname"), t.column("status"))
    else {
        return 0;
    };
    t.rows()
        .filter(|r| {
            r.text(px) == BACKEND
                && !matches!(r.text(sv), "BACKEND" | "FRONTEND" | "")
                && r.text(status).starts_with("UP")
        })
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use falsification_model::experiment::load;

    fn f5_gateway(s: f64) -> Gateway {
        load("F5").unwrap().cases[0]
            .scenario
            .time_scaled(s)
            .gateway
            .unwrap()
    }

    #[test]
    fn the_overlay_file_is_what_the_runner_writes_for_f5_at_scale_1() {
        // The overlay is what deploy.sh applies on kind: F5's gateway in namespace retry-debt,
        // one slot per pod up to the base HPA's ceiling of 50.
        let text = haproxy_config(&f5_gateway(1.0), "retry-debt", 50, 1.0);
        assert_eq!(
            text,
            include_str!("../../../k8s/overlays/gateway/haproxy.cfg"),
            "regenerate k8s/overlays/gateway/haproxy.cfg from this test's text"
        );
    }

    #[test]
    fn the_config_carries_the_case_scaled() {
        let g = f5_gateway(5.0);
        let text = haproxy_config(&g, "rdk-run", 4, 0.2);
        for want in [
            "    retries 2\n",
            "    retry-on response-timeout conn-failure\n",
            "    timeout server 600ms\n",
            "    timeout connect 600ms\n",
            "    hold valid 200ms\n",
            "    maxconn 8000\n",
            "    server-template pod 1-4 service-ready.rdk-run.svc.cluster.local:8080 check resolvers kube",
            "    stats uri /stats\n",
        ] {
            assert!(text.contains(want), "{want:?} in\n{text}");
        }
        assert!(!text.contains("abortonclose"));
        let text = haproxy_config(
            &Gateway {
                abort_on_close: true,
                balance: falsification_model::experiment::Balance::RoundRobin,
                ..g
            },
            "rdk-run",
            4,
            0.2,
        );
        assert!(text.contains("    option abortonclose\n"));
    }

    /// What HAProxy 2.6's stats page printed with `;csv` (columns cut to those read).
    const PAGE: &str = "# pxname,svname,qcur,scur,stot,status,req_tot,hrsp_5xx,\n\
        clients,FRONTEND,,0,120,OPEN,110,7,\n\
        pods,pod1,0,0,60,UP,,0,\n\
        pods,pod2,0,0,50,UP,,0,\n\
        pods,pod3,0,0,0,MAINT (resolution),,0,\n\
        pods,BACKEND,0,0,110,UP,,7,\n\
        stats,FRONTEND,,1,40,OPEN,40,0,\n\
        stats,BACKEND,0,0,0,UP,0,0,\n";

    #[test]
    fn the_counters_leave_out_the_stats_page_itself() {
        let c = counters(PAGE).unwrap();
        assert_eq!(
            c,
            GatewayCounters {
                requests: 110.0,
                tries: 110.0,
                errors: 7.0
            }
        );
        assert_eq!(servers_up(PAGE), 2);
        assert_eq!(servers_up(""), 0);
        assert_eq!(
            stats_path("ns"),
            "/api/v1/namespaces/ns/services/gateway:stats/proxy/stats;csv"
        );
    }
}
