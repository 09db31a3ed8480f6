//! A real retrying proxy between the loadgen and the embedded pods (F5, retry stacks): HAProxy 2.6
//! or nginx 1.22 from the distribution, configured from the experiment's [`Gateway`], its backends
//! following the ready pods as a Service's endpoints do, and its own counters read for the attempts
//! it sent.
//!
//! - HAProxy: a `server-template` of one slot per possible pod; the runtime API (admin socket)
//!   sets a slot's address and puts it `ready` or in `maint`, so nothing is reloaded and no
//!   connection is dropped. Tries sent = the servers' `stot`, client requests = the frontend's
//!   `req_tot` (`show stat`).
//! - nginx: the upstream is rewritten and the master reloaded (`SIGHUP`): old workers finish their
//!   requests. Open-source nginx has no upstream counters, so the access log's `$upstream_addr`
//!   (one address per try, comma separated) gives the tries per client request. Passive health
//!   checks are off (`max_fails=0`): by default one timeout takes a server out for 10 s, and an
//!   overloaded group would answer 502 at once, without trying the pods at all.
//!
//! The pure parts (configuration text, slot assignment, the counters' parsing) are tested without
//! I/O; `tests/embedded.rs` runs the proxies.

use std::net::SocketAddr;
use std::path::Path;

use crate::table::Table;
use falsification_model::experiment::{Balance, Gateway};

/// What a gateway has done so far (cumulative).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct GatewayCounters {
    /// Client attempts it received.
    pub requests: f64,
    /// Tries it sent to the pods, retries included.
    pub tries: f64,
    /// Client attempts it answered with a 5xx of its own (504 after its last try timed out).
    pub errors: f64,
}

impl GatewayCounters {
    pub fn minus(&self, earlier: &GatewayCounters) -> GatewayCounters {
        GatewayCounters {
            requests: self.requests - earlier.requests,
            tries: self.tries - earlier.tries,
            errors: self.errors - earlier.errors,
        }
    }
}

/// HAProxy keeps 2 sockets per proxied connection and refuses to start when `maxconn` needs more
/// than the open-files limit (20,000 here and on the one-machine cluster).
pub const MAX_CONNECTIONS: u32 = 8_000;

/// HAProxy's `defaults` section: the gateway's retry policy, the same embedded and on Kubernetes.
pub fn haproxy_defaults(g: &Gateway) -> String {
    let ms = |s: f64| ((s * 1000.0).round() as u64).max(1);
    let abort = if g.abort_on_close {
        "    option abortonclose\n"
    } else {
        ""
    };
    format!(
        "defaults\n\
         \x20   mode http\n\
         \x20   timeout connect {connect}ms\n\
         \x20   timeout client {client}ms\n\
         \x20   timeout server {server}ms\n\
         \x20   retries {retries}\n\
         \x20   retry-on response-timeout conn-failure\n\
         {abort}",
        connect = ms(g.timeout_s.min(1.0)),
        // The client side never times out before the client does.
        client = ms(f64::from(g.retries + 1) * g.timeout_s * 10.0),
        server = ms(g.timeout_s),
        retries = g.retries,
    )
}

/// HAProxy's configuration: one frontend on `listen`, one backend of `slots` disabled servers.
pub fn haproxy_config(g: &Gateway, listen: SocketAddr, socket: &Path, slots: usize) -> String {
    format!(
        "global\n\
         \x20   maxconn {MAX_CONNECTIONS}\n\
         \x20   stats socket {socket} mode 600 level admin\n\
         {defaults}\
         frontend clients\n\
         \x20   bind {listen}\n\
         \x20   maxconn {MAX_CONNECTIONS}\n\
         \x20   default_backend pods\n\
         backend pods\n\
         \x20   balance {balance}\n\
         \x20   server-template pod 1-{slots} 127.0.0.1:1 disabled\n",
        socket = socket.display(),
        defaults = haproxy_defaults(g),
        balance = haproxy_balance(g),
    )
}

/// HAProxy's `balance` for the gateway's choice of pod.
pub fn haproxy_balance(g: &Gateway) -> &'static str {
    match g.balance {
        Balance::RoundRobin => "roundrobin",
        Balance::LeastConnections => "leastconn",
    }
}

/// nginx's configuration: one worker, the upstream of `pods` (a placeholder marked `down` while
/// none is ready), `$upstream_addr` logged per client request.
pub fn nginx_config(g: &Gateway, listen: SocketAddr, dir: &Path, pods: &[SocketAddr]) -> String {
    let servers: String = if pods.is_empty() {
        "        server 127.0.0.1:1 down;\n".into()
    } else {
        pods.iter()
            .map(|p| format!("        server {p} max_fails=0;\n"))
            .collect()
    };
    let ms = |s: f64| ((s * 1000.0).round() as u64).max(1);
    let ignore = if g.abort_on_close { "off" } else { "on" };
    format!(
        "worker_processes 1;\n\
         daemon off;\n\
         pid {dir}/nginx.pid;\n\
         error_log {dir}/error.log warn;\n\
         worker_rlimit_nofile {files};\n\
         events {{ worker_connections {MAX_CONNECTIONS}; }}\n\
         http {{\n\
         \x20   log_format tries '$status $upstream_addr';\n\
         \x20   access_log {dir}/tries.log tries;\n\
         \x20   client_body_temp_path {dir};\n\
         \x20   proxy_temp_path {dir};\n\
         \x20   upstream pods {{\n\
         {least_conn}\
         {servers}\
         \x20       keepalive 64;\n\
         \x20   }}\n\
         \x20   server {{\n\
         \x20       listen {listen};\n\
         \x20       keepalive_requests 1000000;\n\
         \x20       location / {{\n\
         \x20           proxy_pass http://pods;\n\
         \x20           proxy_http_version 1.1;\n\
         \x20           proxy_set_header Connection \"\";\n\
         \x20           proxy_connect_timeout {connect}ms;\n\
         \x20           proxy_read_timeout {server}ms;\n\
         \x20           proxy_next_upstream timeout error;\n\
         \x20           proxy_next_upstream_tries {tries};\n\
         \x20           proxy_ignore_client_abort {ignore};\n\
         \x20       }}\n\
         \x20   }}\n\
         }}\n",
        dir = dir.display(),
        files = 2 * MAX_CONNECTIONS + 100,
        connect = ms(g.timeout_s.min(1.0)),
        server = ms(g.timeout_s),
        least_conn = match g.balance {
            Balance::RoundRobin => "",
            Balance::LeastConnections => "        least_conn;\n",
        },
        tries = g.retries + 1,
    )
}

/// HAProxy's server slots: which pod each holds. A pod keeps its slot while it is ready; a freed
/// slot is reused by the next new pod.
#[derive(Debug, Clone, PartialEq)]
pub struct Slots {
    held: Vec<Option<SocketAddr>>,
}

impl Slots {
    pub fn new(n: usize) -> Slots {
        Slots {
            held: vec![None; n],
        }
    }

    /// The runtime API commands that make the enabled servers exactly `ready`, and the new state.
    /// Pods beyond the slots are left out (the template is sized for the replica ceiling).
    pub fn follow(&mut self, ready: &[SocketAddr]) -> Vec<String> {
        let mut commands = Vec::new();
        for (i, slot) in self.held.iter_mut().enumerate() {
            if let Some(addr) = slot
                && !ready.contains(addr)
            {
                // In maintenance a server takes no new request and finishes the ones it has.
                commands.push(format!("set server pods/pod{} state maint", i + 1));
                *slot = None;
            }
        }
        for addr in ready {
            if self.held.contains(&Some(*addr)) {
                continue;
            }
            let Some(i) = self.held.iter().position(Option::is_none) else {
                break;
            };
            self.held[i] = Some(*addr);
            commands.push(format!(
                "set server pods/pod{n} addr {ip} port {port}",
                n = i + 1,
                ip = addr.ip(),
                port = addr.port()
            ));
            commands.push(format!("set server pods/pod{} state ready", i + 1));
        }
        commands
    }
}

/// The counters of HAProxy's `show stat` CSV: the frontend's `req_tot` and `hrsp_5xx`, the sum of
/// the servers' `stot`.
pub fn parse_haproxy_stats(csv: &str) -> Option<GatewayCounters> {
    haproxy_counters(csv, |_| true)
}

/// [`parse_haproxy_stats`] over the proxies (`pxname`) that `keep` accepts.
pub fn haproxy_counters(csv: &str, keep: impl Fn(&str) -> bool) -> Option<GatewayCounters> {
    let t = Table::parse(csv).ok()?;
    let col = |name: &str| t.column(name).ok();
    let (px, sv, stot, req, err5) = (
        col("pxname")?,
        col("svname")?,
        col("stot")?,
        col("req_tot")?,
        col("hrsp_5xx")?,
    );
    let mut c = GatewayCounters::default();
    for row in t.rows().filter(|r| keep(r.text(px))) {
        let num = |i: usize| row.number(i).unwrap_or(0.0);
        match row.text(sv) {
            "FRONTEND" => {
                c.requests += num(req);
                c.errors += num(err5);
            }
            "BACKEND" => {}
            _ => c.tries += num(stot),
        }
    }
    Some(c)
}

/// Adds the access log's new lines (`$status $upstream_addr`: one address per try of one client
/// request) to `c`; returns the bytes consumed (whole lines only).
pub fn count_nginx_tries(log: &str, c: &mut GatewayCounters) -> usize {
    let Some(end) = log.rfind('\n').map(|i| i + 1) else {
        return 0;
    };
    for line in log[..end].lines() {
        let (status, upstream) = line.split_once(' ').unwrap_or((line, ""));
        c.requests += 1.0;
        // Tries are `, ` separated; with no server to try nginx logs the group's name.
        c.tries += upstream
            .split(',')
            .filter(|t| t.trim().parse::<SocketAddr>().is_ok())
            .count() as f64;
        if status.starts_with('5') {
            c.errors += 1.0;
        }
    }
    end
}

#[cfg(test)]
mod tests {
    use super::*;
    use falsification_model::experiment::GatewayKind;
    use kit_check::layer::{self, Layer, RetryOn, Tier, Tries};

    fn gw(kind: GatewayKind) -> Gateway {
        Gateway {
            kind,
            retries: 2,
            timeout_s: 0.15,
            abort_on_close: false,
            balance: Balance::RoundRobin,
        }
    }

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    #[test]
    fn haproxy_config_retries_on_the_server_timeout() {
        let text = haproxy_config(
            &gw(GatewayKind::Haproxy),
            addr(9000),
            Path::new("/t/a.sock"),
            50,
        );
        for want in [
            "retries 2\n",
            "retry-on response-timeout conn-failure\n",
            "timeout server 150ms\n",
            "bind 127.0.0.1:9000\n",
            "server-template pod 1-50 127.0.0.1:1 disabled\n",
            "stats socket /t/a.sock mode 600 level admin\n",
        ] {
            assert!(text.contains(want), "{want:?} missing from\n{text}");
        }
        assert!(!text.contains("abortonclose"));
        let g = Gateway {
            abort_on_close: true,
            balance: Balance::RoundRobin,
            ..gw(GatewayKind::Haproxy)
        };
        assert!(haproxy_config(&g, addr(9000), Path::new("/s"), 4).contains("option abortonclose"));
    }

    #[test]
    fn nginx_config_tries_each_pod_once_and_never_benches_one() {
        let text = nginx_config(
            &gw(GatewayKind::Nginx),
            addr(9000),
            Path::new("/t"),
            &[addr(1), addr(2)],
        );
        for want in [
            "server 127.0.0.1:1 max_fails=0;",
            "server 127.0.0.1:2 max_fails=0;",
            "proxy_next_upstream_tries 3;",
            "proxy_read_timeout 150ms;",
            "proxy_ignore_client_abort on;",
            "listen 127.0.0.1:9000;",
        ] {
            assert!(text.contains(want), "{want:?} missing from\n{text}");
        }
        let none = nginx_config(&gw(GatewayKind::Nginx), addr(9000), Path::new("/t"), &[]);
        assert!(none.contains("server 127.0.0.1:1 down;"));
    }

    /// The one layer `falsification check` reads back from a gateway's file this module writes.
    fn read_back(
        parse: fn(&Path, &str) -> Result<layer::Parsed, layer::InputError>,
        text: &str,
    ) -> Layer {
        let parsed = parse(Path::new("gateway"), text).unwrap();
        assert_eq!(parsed.layers.len(), 1, "{:#?}", parsed.layers);
        parsed.layers[0].clone()
    }

    const TIMEOUT_AND_CONNECT: RetryOn = RetryOn {
        timeout: true,
        connect_failure: true,
        status_5xx: false,
    };

    #[test]
    fn check_reads_the_embedded_haproxy_as_twice_retrying_on_timeout_and_connect() {
        for abort in [false, true] {
            let g = Gateway {
                abort_on_close: abort,
                ..gw(GatewayKind::Haproxy)
            };
            let text = haproxy_config(&g, addr(9000), Path::new("/t/a.sock"), 50);
            let l = read_back(kit_check::haproxy::parse, &text);
            assert_eq!(l.source.locator, "backend pods");
            assert_eq!(l.software, "haproxy");
            assert_eq!(l.tier, Tier::Edge);
            assert_eq!(l.tries, Tries::AtMost(3));
            assert_eq!(l.retry_on, TIMEOUT_AND_CONNECT);
            assert_eq!(l.per_try_timeout_s, Some(0.15));
            assert_eq!(l.overall_timeout_s, None);
            assert_eq!(l.aborts_on_close, abort);
            let settings: Vec<&str> = l.defaults.iter().map(|d| d.setting.as_str()).collect();
            let want: &[&str] = if abort { &[] } else { &["option abortonclose"] };
            assert_eq!(settings, want);
        }
    }

    fn nginx(abort_on_close: bool, pods: u16) -> Layer {
        let g = Gateway {
            abort_on_close,
            ..gw(GatewayKind::Nginx)
        };
        let pods: Vec<SocketAddr> = (1..=pods).map(addr).collect();
        let text = nginx_config(&g, addr(9000), Path::new("/t"), &pods);
        read_back(kit_check::nginx::parse, &text)
    }

    #[test]
    fn check_reads_the_embedded_nginx_as_trying_three_of_its_four_pods() {
        for abort in [false, true] {
            let l = nginx(abort, 4);
            assert_eq!(l.software, "nginx");
            assert_eq!(l.tier, Tier::Edge);
            assert_eq!(l.source.locator, "server (line 19) location /");
            assert_eq!(l.tries, Tries::AtMost(3));
            assert_eq!(l.retry_on, TIMEOUT_AND_CONNECT);
            assert_eq!(l.per_try_timeout_s, Some(0.15));
            assert_eq!(l.overall_timeout_s, None);
            assert_eq!(l.aborts_on_close, abort);
            assert!(
                l.defaults
                    .iter()
                    .all(|d| d.setting == "proxy_next_upstream_timeout")
            );
            assert!(
                !l.notes.iter().any(|n| n.contains("passive health")),
                "{:?}",
                l.notes
            );
        }
    }

    #[test]
    fn check_reads_the_embedded_nginx_with_no_pod_as_one_try() {
        let l = nginx(false, 0);
        assert_eq!(l.tries, Tries::AtMost(1));
        assert!(l.notes.iter().any(|n| n.contains("down")));
        assert_eq!(nginx(false, 2).tries, Tries::AtMost(2));
    }

    #[test]
    fn slots_follow_readiness_and_are_reused() {
        let mut s = Slots::new(2);
        assert_eq!(
            s.follow(&[addr(1)]),
            [
                "set server pods/pod1 addr 127.0.0.1 port 1",
                "set server pods/pod1 state ready"
            ]
        );
        assert!(s.follow(&[addr(1)]).is_empty(), "nothing changed");
        assert_eq!(
            s.follow(&[addr(2)]),
            [
                "set server pods/pod1 state maint",
                "set server pods/pod1 addr 127.0.0.1 port 2",
                "set server pods/pod1 state ready"
            ]
        );
        // Beyond the slots: left out.
        let c = s.follow(&[addr(2), addr(3), addr(4)]);
        assert_eq!(c.len(), 2);
        assert!(c[0].contains("pod2 addr 127.0.0.1 port 3"));
    }

    #[test]
    fn haproxy_counters_sum_the_servers_tries() {
        // Measured: one client request, 3 tries at a busy pod, the client got a 504.
        let csv = "# pxname,svname,qcur,stot,req_tot,hrsp_5xx\n\
                   clients,FRONTEND,0,1,1,1\n\
                   pods,pod1,0,3,,0\n\
                   pods,pod2,0,0,,0\n\
                   pods,BACKEND,0,1,1,1\n\n";
        assert_eq!(
            parse_haproxy_stats(csv),
            Some(GatewayCounters {
                requests: 1.0,
                tries: 3.0,
                errors: 1.0
            })
        );
        assert_eq!(parse_haproxy_stats("no header"), None);
    }

    #[test]
    fn nginx_counts_the_addresses_of_each_request() {
        let mut c = GatewayCounters::default();
        let log = "504 127.0.0.1:1, 127.0.0.1:2, 127.0.0.1:3\n200 127.0.0.1:2\n502 pods\n200 127.0";
        let used = count_nginx_tries(log, &mut c);
        assert_eq!(used, log.rfind('\n').unwrap() + 1, "the partial line waits");
        assert_eq!(
            c,
            GatewayCounters {
                requests: 3.0,
                tries: 4.0,
                errors: 2.0
            }
        );
    }
}
