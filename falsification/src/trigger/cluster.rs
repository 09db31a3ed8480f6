//! `falsification trigger --cluster kube`: the loadgen runs inside the cluster, as an Indexed Job
//! of shards in a namespace of its own (`kube::load` does the Kubernetes part), and its
//! per-second rows come back through the shards' logs.
//!
//! Pure here: the namespace's name, the shards the rate needs (sockets per shard, as the kube
//! runner counts them), the invocation split across the shards (the loadgen's own `--instances`:
//! each shard sends 1/N of every rate with its own seed, all from a common `--start-at`), and
//! the live merge of the shards' rows by Unix second, which gives a second only once every
//! shard still running has closed it. [`ClusterLoad`] is the seam `trigger::run` uses.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, bail};
use loadgen::config::RequestFlags;
use loadgen::record::StdoutLine;
use loadgen::request::BUNDLE_REQUEST_FILE;
use loadgen::{Invocation, Load, Row, TargetSource};

use super::measure::{LoadRow, load_row};
use crate::kube::load::{LoadCluster, LoadJob, OnEvent, REQUEST_DIR, ShardEvent};
use crate::kube::scale::SOCKETS_PER_SHARD;
use crate::kube::shards::{self, MergeCheck, ShardLog};
use crate::kube::unix_now;
use crate::runner::record;

/// Where the loadgen runs in the cluster.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClusterTarget {
    /// Loadgen shards; `None`: as many as the rate needs ([`shards_needed`]).
    pub shards: Option<u32>,
    /// The kit's image; default: the one the cluster records, else `retry-debt-kit:dev` (as the
    /// kube runner picks it).
    pub image: Option<String>,
    /// The kubeconfig and context; default: KUBECONFIG, ~/.kube/config, in-cluster.
    pub kubeconfig: Option<PathBuf>,
    pub context: Option<String>,
}

/// The trigger's namespaces: this prefix and a random suffix.
pub const NAMESPACE_PREFIX: &str = "retry-debt-trigger-";
/// Seconds between applying the Job and the shards' common start: time for the pods to start.
pub const LEAD_S: f64 = 10.0;
/// How long the namespace may take to go once deleted.
pub const CLEANUP_WITHIN: Duration = Duration::from_secs(120);
/// The loadgen binary's defaults for flags an invocation leaves out (its `Config`).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
const DEFAULT_RETRIES: u32 = 2;

/// The namespace of one run: [`NAMESPACE_PREFIX`] and `suffix` in base 36 (6 characters).
pub fn namespace_name(suffix: u32) -> String {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut n = u64::from(suffix) % 36u64.pow(6);
    let mut tail = [b'0'; 6];
    for c in tail.iter_mut().rev() {
        *c = DIGITS[(n % 36) as usize];
        n /= 36;
    }
    format!("{NAMESPACE_PREFIX}{}", String::from_utf8_lossy(&tail))
}

/// The sockets the whole load may hold at once with every attempt failing: `A x peak rate x
/// timeout` (as `kube::scale::check_sockets` counts a case's).
pub fn sockets(inv: &Invocation) -> f64 {
    let peak = match &inv.load {
        Load::Rate(r) => *r,
        Load::Schedule(s) => s.steps().iter().map(|s| s.rate).fold(0.0, f64::max),
    };
    let a = falsification_model::laws::layer_amplification(
        inv.retries.unwrap_or(DEFAULT_RETRIES),
        inv.retry_budget.map(|b| b.ratio),
    );
    a * peak * inv.timeout.unwrap_or(DEFAULT_TIMEOUT).as_secs_f64()
}

/// The fewest shards that keep each under `kube::scale::SOCKETS_PER_SHARD` sockets.
pub fn shards_needed(inv: &Invocation) -> u32 {
    ((sockets(inv) / SOCKETS_PER_SHARD).ceil() as u32).max(1)
}

/// The shard count: `given` when it is enough, else the fewest that are.
pub fn shard_count(inv: &Invocation, given: Option<u32>) -> anyhow::Result<u32> {
    let need = shards_needed(inv);
    match given {
        None => Ok(need),
        Some(0) => bail!("loadgen shards: at least 1"),
        Some(n) if n < need => bail!(
            "{n} loadgen shards would hold about {:.0} sockets each (A x peak rate x timeout = \
             {:.0}), too close to a pod's 20,000 open files: use {need} or more",
            sockets(inv) / f64::from(n),
            sockets(inv)
        ),
        Some(n) => Ok(n),
    }
}

/// What one shard runs: `inv` with `--instances shards` (each pod sends 1/N of every rate, with
/// the seed plus its index, which the Job gives it), from the common `--start-at start_at`, its
/// rows on stdout. Flags that name this machine are dropped: `--out` (the pod's files would go
/// with the namespace; the rows come back through the log), `--metrics-listen`, `--bind`.
/// Refused: a targets file (not in the pod), a loopback target (the pod itself), an unbounded
/// run.
pub fn shard_invocation(
    inv: &Invocation,
    shards: u32,
    start_at: f64,
) -> anyhow::Result<Invocation> {
    let TargetSource::Urls(urls) = &inv.targets else {
        bail!("--cluster kube: the loadgen in the cluster cannot read a targets file; give URLs");
    };
    if let Some(url) = urls.iter().find(|u| loopback(u)) {
        bail!(
            "--cluster kube: target {url} is the loadgen pod itself; give the service's address \
             as the cluster resolves it, e.g. http://SERVICE.NAMESPACE:PORT/path"
        );
    }
    let bounded =
        inv.duration.is_some() || matches!(&inv.load, Load::Schedule(s) if s.end().is_some());
    if !bounded {
        bail!("--cluster kube: the load needs a duration or a schedule with an end");
    }
    Ok(Invocation {
        instances: Some(shards),
        instance_index: None,
        start_at: Some(start_at),
        stdout_rows: true,
        out: None,
        metrics_listen: None,
        bind: None,
        ..inv.clone()
    })
}

/// The run's requests and TLS files as the pods get them: `inv` with every value read here
/// (`@env:`, `@file:`, bodies, a request file, the CA, the client certificate and key) moved
/// into files under [`REQUEST_DIR`], and those files, for the Secret. No file for a plain
/// `GET` without TLS flags. The Job's manifest then names files only: no secret is in it.
pub fn request_files(inv: &Invocation) -> anyhow::Result<(Invocation, BTreeMap<String, Vec<u8>>)> {
    let mut files = BTreeMap::new();
    let mut out = inv.clone();
    let dir = Path::new(REQUEST_DIR);
    if inv.request != RequestFlags::default() {
        let set = inv.request.request_set()?;
        files = set.bundle(dir, &|name| std::env::var(name).ok())?;
        out.request = RequestFlags {
            request_file: Some(dir.join(BUNDLE_REQUEST_FILE)),
            grpc: inv.request.grpc,
            ..RequestFlags::default()
        };
    }
    let tls = &inv.tls;
    for (flag, path, name, moved) in [
        ("--cacert", &tls.cacert, "cacert.pem", &mut out.tls.cacert),
        ("--cert", &tls.cert, "cert.pem", &mut out.tls.cert),
        ("--key", &tls.key, "key.pem", &mut out.tls.key),
    ] {
        if let Some(path) = path {
            let bytes =
                std::fs::read(path).with_context(|| format!("{flag} {}", path.display()))?;
            files.insert(name.to_string(), bytes);
            *moved = Some(dir.join(name));
        }
    }
    Ok((out, files))
}

/// Whether a URL's host is this machine's loopback.
fn loopback(url: &str) -> bool {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host.split(':').next().unwrap_or(""),
    };
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// How long the Job may run before its controller ends it, whatever happens here: the lead,
/// the load, the loadgen's drain at its end (every attempt of the last request, its backoffs,
/// a second) and a minute.
pub fn active_deadline_s(inv: &Invocation, lead_s: f64) -> i64 {
    let load_s = match (&inv.duration, &inv.load) {
        (Some(d), Load::Schedule(s)) => s.end().map_or(d.as_secs_f64(), |e| e.min(d.as_secs_f64())),
        (Some(d), Load::Rate(_)) => d.as_secs_f64(),
        (None, Load::Schedule(s)) => s.end().unwrap_or(0.0),
        (None, Load::Rate(_)) => 0.0,
    };
    let retries = inv.retries.unwrap_or(DEFAULT_RETRIES);
    let drain = inv.drain.unwrap_or_else(|| {
        inv.timeout.unwrap_or(DEFAULT_TIMEOUT) * (retries + 1)
            + inv.backoff.map_or(Duration::ZERO, |b| b.cap * retries)
            + Duration::from_secs(1)
    });
    (lead_s + load_s + drain.as_secs_f64() + 60.0).ceil() as i64
}

/// Adds one shard's second to the merged second: counts add, the in-flight gauges add (each
/// shard's at the end of the same second), percentiles keep the worst. Every field is named, so
/// a field the loadgen adds to [`Row`] does not compile here until it is merged.
fn add_row(into: &mut Row, r: &Row) {
    let Row {
        second: _,
        arrivals,
        first_attempts,
        attempts,
        successes,
        timeouts,
        errors,
        denied_budget,
        denied_quota,
        shed,
        requests_succeeded,
        requests_failed,
        requests_unfinished,
        in_flight,
        send_lag_p99_us,
        attempt_p99_us,
        throttled,
        breaker_open,
    } = r;
    let add_all = |a: &mut Vec<u64>, b: &[u64]| {
        if a.len() < b.len() {
            a.resize(b.len(), 0);
        }
        a.iter_mut().zip(b).for_each(|(x, y)| *x += y);
    };
    into.arrivals += arrivals;
    into.first_attempts += first_attempts;
    add_all(&mut into.attempts, attempts);
    add_all(&mut into.successes, successes);
    into.timeouts += timeouts;
    into.errors
        .iter_mut()
        .zip(errors)
        .for_each(|(x, y)| *x += y);
    into.denied_budget += denied_budget;
    into.denied_quota += denied_quota;
    into.shed += shed;
    into.requests_succeeded += requests_succeeded;
    into.requests_failed += requests_failed;
    into.requests_unfinished += requests_unfinished;
    into.in_flight += in_flight;
    into.send_lag_p99_us = into.send_lag_p99_us.max(*send_lag_p99_us);
    into.attempt_p99_us = into.attempt_p99_us.max(*attempt_p99_us);
    into.throttled += throttled;
    into.breaker_open += breaker_open;
}

/// The shards' logs merged live by Unix second from the common start: each shard's row goes to
/// the second its start is nearest to (a shard started late lands in the seconds it ran), and a
/// second is given once every shard that has not ended has closed it (printed it or a later
/// one), in order, with no gap (a second no shard ran is an empty row).
#[derive(Debug, Clone)]
pub struct LiveMerge {
    start_unix: f64,
    logs: Vec<ShardLog>,
    /// Each shard's last second taken.
    last: Vec<Option<u64>>,
    ended: Vec<bool>,
    pending: BTreeMap<u64, Row>,
    /// The next second to give.
    next: u64,
}

impl LiveMerge {
    pub fn new(shards: usize, start_unix: f64) -> LiveMerge {
        LiveMerge {
            start_unix,
            logs: vec![ShardLog::default(); shards],
            last: vec![None; shards],
            ended: vec![false; shards],
            pending: BTreeMap::new(),
            next: 0,
        }
    }

    fn second(&self, unix: f64) -> u64 {
        (unix - self.start_unix).round().max(0.0) as u64
    }

    /// Takes one line of shard `shard`'s log; gives the seconds it closed for all. A row for a
    /// second the shard already gave (a log read again) is ignored.
    pub fn line(&mut self, shard: usize, line: &str) -> Vec<Row> {
        if shard >= self.logs.len() || self.ended[shard] {
            return Vec::new();
        }
        if let Ok(StdoutLine::Row(r)) = serde_json::from_str::<StdoutLine>(line) {
            let s = self.second(r.unix_time);
            if self.last[shard].is_some_and(|l| s <= l) {
                return Vec::new();
            }
            self.last[shard] = Some(s);
            // A second already given (only a shard that was ended can send one) stays in the
            // shard's log, and so in the merge check, but not in the rows.
            if s >= self.next {
                let row = self.pending.entry(s).or_insert_with(|| Row {
                    second: s,
                    ..Row::default()
                });
                add_row(row, &r.row);
            }
        }
        self.logs[shard].push(line);
        self.closed()
    }

    /// Shard `shard`'s log has ended: it no longer holds seconds back.
    pub fn ended(&mut self, shard: usize) -> Vec<Row> {
        if let Some(e) = self.ended.get_mut(shard) {
            *e = true;
        }
        self.closed()
    }

    /// Ends every shard: gives what is left.
    pub fn end_all(&mut self) -> Vec<Row> {
        self.ended.iter_mut().for_each(|e| *e = true);
        self.closed()
    }

    /// The seconds every running shard has closed, from the next one on.
    fn closed(&mut self) -> Vec<Row> {
        let running: Vec<Option<u64>> = (0..self.logs.len())
            .filter(|&i| !self.ended[i])
            .map(|i| self.last[i])
            .collect();
        let through = if running.is_empty() {
            self.pending.keys().next_back().copied()
        } else if running.iter().any(Option::is_none) {
            None
        } else {
            running.into_iter().flatten().min()
        };
        let Some(through) = through else {
            return Vec::new();
        };
        let mut out = Vec::new();
        while self.next <= through {
            let s = self.next;
            out.push(self.pending.remove(&s).unwrap_or_else(|| Row {
                second: s,
                ..Row::default()
            }));
            self.next += 1;
        }
        out
    }

    pub fn logs(&self) -> &[ShardLog] {
        &self.logs
    }

    /// The shards' rows merged against their own summaries (`kube::shards::check`).
    pub fn check(&self) -> MergeCheck {
        let merged = shards::merge(&self.logs, self.start_unix, 1.0, 0);
        shards::check(&merged, &self.logs)
    }
}

/// The loadgen running in the cluster: its namespace, its shards, their merged rows.
pub struct ClusterLoad {
    job: LoadJob,
    merge: Arc<Mutex<LiveMerge>>,
    rows: Arc<Mutex<Vec<LoadRow>>>,
    shards: u32,
    start_unix: f64,
}

/// Pushes merged seconds onto the rows, as [`LoadRow`]s from the common start.
fn push(rows: &Mutex<Vec<LoadRow>>, merged: &[Row]) {
    if !merged.is_empty() {
        rows.lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(merged.iter().map(load_row));
    }
}

impl ClusterLoad {
    /// Creates the namespace (`retry-debt-trigger-<random>`, labelled as `kube::load::SELECTOR`
    /// says), the Job of shards running `loadgen` with `invocation` split across them
    /// ([`shard_invocation`]) from a common start [`LEAD_S`] ahead, waits for the pods to run,
    /// and follows their logs: every second all shards have closed is pushed onto `rows` as a
    /// [`LoadRow`] (`second` from the common start). Nothing is created when the invocation or
    /// the shard count is refused; on a failure after the namespace exists it is deleted.
    pub async fn start(
        target: &ClusterTarget,
        invocation: Invocation,
        rows: Arc<Mutex<Vec<LoadRow>>>,
    ) -> anyhow::Result<ClusterLoad> {
        let shards = shard_count(&invocation, target.shards)?;
        shard_invocation(&invocation, shards, unix_now())?;
        let (invocation, files) = request_files(&invocation)?;
        let cluster = LoadCluster {
            kubeconfig: target.kubeconfig.clone(),
            context: target.context.clone(),
            image: target.image.clone(),
        };
        let mut job = LoadJob::create(&cluster, &namespace_name(rand::random())).await?;
        if !job.others().is_empty() {
            eprintln!(
                "falsification: other trigger namespaces exist (running, or left by a run that \
                 was killed): {}; delete those not running with `kubectl delete namespace NAME`",
                job.others().join(", ")
            );
        }
        let start_unix = unix_now() + LEAD_S;
        let inv = shard_invocation(&invocation, shards, start_unix)?;
        let merge = Arc::new(Mutex::new(LiveMerge::new(shards as usize, start_unix)));
        let on_event: OnEvent = {
            let (merge, rows) = (merge.clone(), rows.clone());
            Arc::new(move |shard, event| {
                let merged = {
                    let mut m = merge.lock().unwrap_or_else(|e| e.into_inner());
                    match event {
                        ShardEvent::Line(line) => m.line(shard, line),
                        ShardEvent::Ended => m.ended(shard),
                    }
                };
                push(&rows, &merged);
            })
        };
        let within = Duration::from_secs_f64(LEAD_S + 120.0);
        let deadline = active_deadline_s(&inv, LEAD_S);
        let ran = job
            .run(shards, inv.args(), &files, deadline, on_event, within)
            .await
            .and_then(|()| {
                // Shards that came up after the common start would shift every second of the
                // record against the plan's schedule: refused, not measured wrong.
                let late = unix_now() - start_unix;
                anyhow::ensure!(
                    late <= 0.0,
                    "the loadgen's pods ran {late:.1} s after their common start ({LEAD_S} s after \
                     the Job was applied; pulling the image?): nothing is judged from a shifted \
                     schedule; run again once the image is on the nodes"
                );
                Ok(())
            });
        if let Err(e) = ran {
            let ns = job.namespace().to_string();
            if let Err(c) = job.delete(CLEANUP_WITHIN).await {
                return Err(e.context(format!("and cleaning up namespace {ns}: {c:#}")));
            }
            return Err(e);
        }
        Ok(ClusterLoad {
            job,
            merge,
            rows,
            shards,
            start_unix,
        })
    }

    pub fn namespace(&self) -> &str {
        self.job.namespace()
    }

    pub fn shards(&self) -> u32 {
        self.shards
    }

    /// The image the shards run and where it came from (`--image`, the cluster's record, the
    /// default), for the record.
    pub fn image(&self) -> (&str, &str) {
        self.job.image()
    }

    /// The shards' common start, Unix seconds: second 0 of the rows.
    pub fn start_unix(&self) -> f64 {
        self.start_unix
    }

    /// Gives what the merge still holds back (shards whose logs did not end).
    fn flush(&self) {
        let rest = self
            .merge
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .end_all();
        push(&self.rows, &rest);
    }

    /// Resolves when every shard's container has exited and its rows are in: Ok(()) if all
    /// succeeded, else an error naming each shard that did not and its exit (at once after
    /// [`ClusterLoad::stop`]). It may be dropped and called again, as in a `select!` loop.
    pub async fn wait(&mut self) -> anyhow::Result<()> {
        let r = self.job.wait().await;
        self.flush();
        r
    }

    /// Stops all load at once (in-flight attempts abandoned): the Job's pods deleted with
    /// `grace` (SIGTERM, then SIGKILL); the rows they printed are in when it returns.
    pub async fn stop(&mut self, grace: Duration) {
        self.job.stop(grace).await;
        self.flush();
    }

    /// The merged rows against the shards' own summaries (equal when every shard printed its
    /// summary and no row was lost).
    pub fn merge_check(&self) -> MergeCheck {
        self.merge.lock().unwrap_or_else(|e| e.into_inner()).check()
    }

    /// Writes each shard's log as it came (`shard-<i>.jsonl`) into `dir`.
    pub fn write_logs(&self, dir: &Path) -> anyhow::Result<()> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let m = self.merge.lock().unwrap_or_else(|e| e.into_inner()).clone();
        for (i, l) in m.logs().iter().enumerate() {
            let mut text = String::new();
            for r in &l.rows {
                text += &(StdoutLine::Row(r.clone()).json() + "\n");
            }
            if let Some(s) = &l.summary {
                text += &(StdoutLine::Summary(Box::new(s.clone())).json() + "\n");
            }
            for o in &l.other {
                text += &format!("{o}\n");
            }
            record::write(dir, &format!("shard-{i}.jsonl"), &text)?;
        }
        Ok(())
    }

    /// Deletes the namespace and waits until it is gone (at most [`CLEANUP_WITHIN`]): an error
    /// if it is not. Shards still running are stopped first with a short grace.
    pub async fn cleanup(self) -> anyhow::Result<()> {
        self.job.delete(CLEANUP_WITHIN).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use loadgen::record::TimedRow;
    use loadgen::{BudgetFlags, Schedule};

    fn invocation() -> Invocation {
        Invocation {
            timeout: Some(Duration::from_secs(1)),
            retries: Some(2),
            duration: Some(Duration::from_secs(30)),
            seed: Some(7),
            out: Some(PathBuf::from("/tmp/run/loadgen")),
            stdout_rows: true,
            ..Invocation::new(
                TargetSource::Urls(vec!["http://service.retry-debt/work".into()]),
                Load::Schedule(Schedule::parse_steps("0s:20,3s:200,8s:20,30s:end").unwrap()),
            )
        }
    }

    #[test]
    fn namespace_names_are_dns_labels_under_the_prefix() {
        for s in [0, 1, 35, 36, u32::MAX] {
            let n = namespace_name(s);
            assert!(n.starts_with(NAMESPACE_PREFIX), "{n}");
            assert_eq!(n.len(), NAMESPACE_PREFIX.len() + 6);
            assert!(n.len() <= 63);
            assert!(
                n.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            );
        }
        assert_eq!(namespace_name(0), "retry-debt-trigger-000000");
        assert_eq!(namespace_name(36), "retry-debt-trigger-000010");
        assert_ne!(namespace_name(1), namespace_name(2));
    }

    #[test]
    fn shards_follow_the_sockets_the_peak_rate_may_hold() {
        // 3 x 200/s x 1 s = 600 sockets: one shard.
        let inv = invocation();
        assert_eq!(sockets(&inv), 600.0);
        assert_eq!(shard_count(&inv, None).unwrap(), 1);
        assert_eq!(shard_count(&inv, Some(3)).unwrap(), 3);
        assert!(shard_count(&inv, Some(0)).is_err());
        // 3 x 4,000/s x 10 s = 120,000: 12 shards of 10,000; 5 are refused, naming 12.
        let big = Invocation {
            timeout: Some(Duration::from_secs(10)),
            load: Load::Rate(4000.0),
            ..invocation()
        };
        assert_eq!(shards_needed(&big), 12);
        let e = shard_count(&big, Some(5)).unwrap_err().to_string();
        assert!(e.contains("use 12 or more"), "{e}");
        // A budget of 0.1 caps A at 1.1; the binary's defaults (2 retries, 10 s) otherwise.
        let budget = Invocation {
            retry_budget: Some(BudgetFlags {
                ratio: 0.1,
                min_per_sec: None,
                ttl: None,
            }),
            ..big.clone()
        };
        assert!((sockets(&budget) - 44_000.0).abs() < 1e-6);
        let defaults = Invocation {
            timeout: None,
            retries: None,
            ..big
        };
        assert_eq!(sockets(&defaults), 120_000.0);
    }

    #[test]
    fn a_shard_runs_its_share_from_the_common_start_with_its_rows_on_stdout() {
        let inv = Invocation {
            metrics_listen: Some("127.0.0.1:9464".parse().unwrap()),
            instance_index: Some(1),
            stdout_rows: false,
            ..invocation()
        };
        let s = shard_invocation(&inv, 3, 1_800_000_000.5).unwrap();
        let args = s.args();
        for want in [
            "--target=http://service.retry-debt/work",
            "--schedule=0s:20,3s:200,8s:20,30s:end",
            "--instances=3",
            "--start-at=1800000000.5",
            "--stdout-rows",
            "--seed=7",
            "--duration=30s",
            "--timeout=1s",
            "--retries=2",
        ] {
            assert!(args.contains(&want.to_string()), "{want} in {args:?}");
        }
        // The Job gives each pod its index; nothing names this machine.
        for gone in ["--instance-index", "--out", "--metrics-listen", "--bind"] {
            assert!(
                !args.iter().any(|a| a.starts_with(gone)),
                "{gone} in {args:?}"
            );
        }
        // Refused before anything is created.
        for (target, why) in [
            ("http://127.0.0.1:8080/work", "the loadgen pod itself"),
            ("http://localhost/work", "the loadgen pod itself"),
            ("http://[::1]:80/", "the loadgen pod itself"),
        ] {
            let bad = Invocation {
                targets: TargetSource::Urls(vec![target.into()]),
                ..invocation()
            };
            let e = shard_invocation(&bad, 1, 1.0).unwrap_err().to_string();
            assert!(e.contains(why), "{target}: {e}");
        }
        let file = Invocation {
            targets: TargetSource::File(PathBuf::from("/tmp/targets")),
            ..invocation()
        };
        assert!(shard_invocation(&file, 1, 1.0).is_err());
        let unbounded = Invocation {
            duration: None,
            load: Load::Rate(5.0),
            ..invocation()
        };
        assert!(shard_invocation(&unbounded, 1, 1.0).is_err());
        assert!(!loopback("http://service.ns.svc.cluster.local:8080/work"));
        assert!(!loopback("http://10.96.0.12/work"));
    }

    #[test]
    fn secrets_go_into_the_secret_and_the_job_names_files_only() {
        const PLANTED: &str = "planted-7f3a9c";
        let dir = tempfile::tempdir().unwrap();
        let (ca, body) = (dir.path().join("ca.pem"), dir.path().join("order.json"));
        std::fs::write(&ca, "CA").unwrap();
        std::fs::write(&body, format!("{{\"card\":\"{PLANTED}\"}}")).unwrap();
        let key_file = dir.path().join("key");
        std::fs::write(&key_file, PLANTED).unwrap();
        let inv = Invocation {
            request: RequestFlags {
                headers: vec![
                    format!("authorization: Bearer {PLANTED}").parse().unwrap(),
                    format!("x-key: @file:{}", key_file.display())
                        .parse()
                        .unwrap(),
                ],
                body_file: Some(body),
                ..RequestFlags::default()
            },
            tls: loadgen::config::TlsFlags {
                cacert: Some(ca),
                ..Default::default()
            },
            ..invocation()
        };
        assert!(
            inv.args().join(" ").contains(PLANTED),
            "the literal is in the local argv"
        );
        let (moved, files) = request_files(&inv).unwrap();
        let args = shard_invocation(&moved, 2, 1.0).unwrap().args();
        let job = crate::kube::load::job("ns", "kit:dev", 2, args.clone(), Some(REQUEST_DIR), 60);
        let manifest = serde_json::to_string(&job).unwrap();
        assert!(!manifest.contains(PLANTED), "{manifest}");
        assert!(
            args.contains(&format!("--request-file={REQUEST_DIR}/requests.toml"))
                && args.contains(&format!("--cacert={REQUEST_DIR}/cacert.pem")),
            "{args:?}"
        );
        assert!(manifest.contains(crate::kube::load::REQUEST_SECRET));
        let secret = crate::kube::load::request_secret("ns", &files);
        let held: Vec<String> = secret
            .data
            .unwrap()
            .values()
            .map(|b| String::from_utf8_lossy(&b.0).into_owned())
            .collect();
        assert_eq!(
            held.iter().filter(|v| v.contains(PLANTED)).count(),
            3,
            "{held:?}"
        );
        let (same, none) = request_files(&invocation()).unwrap();
        assert!(
            none.is_empty() && same == invocation(),
            "a plain GET needs no Secret"
        );
    }

    #[test]
    fn the_job_ends_itself_after_the_lead_the_load_its_drain_and_a_minute() {
        // 10 + 30 + 3 x 1 s + 1 s + 60.
        assert_eq!(active_deadline_s(&invocation(), 10.0), 104);
        let ended_early = Invocation {
            load: Load::Schedule(Schedule::parse_steps("0s:20,12s:end").unwrap()),
            drain: Some(Duration::from_secs(2)),
            ..invocation()
        };
        assert_eq!(active_deadline_s(&ended_early, 10.0), 84);
    }

    fn row(second: u64, first: u64, retries: u64, timeouts: u64) -> Row {
        Row {
            second,
            arrivals: first,
            first_attempts: first,
            attempts: vec![first, retries],
            successes: vec![first - timeouts.min(first), 0],
            timeouts,
            in_flight: 2,
            attempt_p99_us: 1000 * (second + 1),
            ..Row::default()
        }
    }

    /// The line a shard that started at `start` prints for `r`.
    fn line(start: f64, r: &Row) -> String {
        StdoutLine::Row(TimedRow {
            unix_time: start + r.second as f64,
            row: r.clone(),
        })
        .json()
    }

    #[test]
    fn seconds_come_only_once_every_running_shard_has_closed_them() {
        let t0 = 1_800_000_000.0;
        let mut m = LiveMerge::new(2, t0);
        // Shard 0 is ahead: nothing comes until shard 1 has closed a second.
        assert!(m.line(0, &line(t0 + 0.01, &row(0, 10, 0, 0))).is_empty());
        assert!(m.line(0, &line(t0 + 0.01, &row(1, 12, 3, 3))).is_empty());
        // A stray line (a warning) is kept in the shard's log and closes nothing.
        assert!(m.line(1, "loadgen: warning").is_empty());
        // Shard 1 started 0.3 s late: its second 0 is the common second 0.
        let got = m.line(1, &line(t0 + 0.3, &row(0, 11, 0, 0)));
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].second, got[0].first_attempts), (0, 21));
        assert_eq!(got[0].attempts, vec![21, 0]);
        assert_eq!(got[0].in_flight, 4);
        let got = m.line(1, &line(t0 + 0.3, &row(1, 10, 2, 2)));
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].second, 1);
        assert_eq!(got[0].attempts, vec![22, 5]);
        assert_eq!(got[0].timeouts, 5);
        assert_eq!(got[0].attempt_p99_us, 2000);
        // The same second read again (a reopened log) is not counted twice.
        assert!(m.line(1, &line(t0 + 0.3, &row(1, 10, 2, 2))).is_empty());
        // Shard 1 runs on; shard 0's log ends: its seconds no longer hold anything back.
        assert!(m.line(1, &line(t0 + 0.3, &row(2, 9, 6, 5))).is_empty());
        let got = m.ended(0);
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].second, got[0].first_attempts), (2, 9));
        assert!(m.end_all().is_empty());
        // As LoadRows: seconds from the common start, every attempt number counted.
        let r = load_row(&got[0]);
        assert_eq!((r.second, r.attempts, r.timeouts), (2.0, 15.0, 5.0));
        assert_eq!(m.logs()[1].other, vec!["loadgen: warning".to_string()]);
        assert_eq!(m.logs()[1].rows.len(), 3);
    }

    #[test]
    fn a_shard_that_starts_late_leaves_no_gap_and_the_end_gives_the_rest() {
        let t0 = 100.0;
        let mut m = LiveMerge::new(2, t0);
        // Shard 1 started 2 s late: its first second is the common second 2.
        assert!(m.line(1, &line(102.1, &row(0, 5, 0, 0))).is_empty());
        let got = m.line(0, &line(100.0, &row(0, 5, 0, 0)));
        assert_eq!(got.len(), 1);
        let got = m.line(0, &line(100.0, &row(1, 5, 0, 0)));
        assert_eq!(got.len(), 1);
        let got = m.line(0, &line(100.0, &row(2, 5, 0, 0)));
        assert_eq!((got.len(), got[0].first_attempts), (1, 10));
        // Shard 0 ran 2 s more; shard 1's log ended early (its pod was stopped).
        assert!(m.line(0, &line(100.0, &row(3, 5, 0, 0))).is_empty());
        let rest = m.ended(1);
        assert_eq!(rest.iter().map(|r| r.second).collect::<Vec<_>>(), [3]);
        // A second no shard ran is an empty row: one shard that started 1 s late.
        let mut m = LiveMerge::new(1, t0);
        let got = m.line(0, &line(101.0, &row(0, 4, 0, 0)));
        assert_eq!(got.iter().map(|r| r.second).collect::<Vec<_>>(), [0, 1]);
        assert_eq!((got[0].first_attempts, got[1].first_attempts), (0, 4));
        // With every shard ended, the seconds left come at once.
        let mut m = LiveMerge::new(2, t0);
        m.line(0, &line(102.0, &row(0, 4, 0, 0)));
        let got = m.end_all();
        assert_eq!(got.iter().map(|r| r.second).collect::<Vec<_>>(), [0, 1, 2]);
        assert_eq!(got[0].first_attempts, 0);
        assert_eq!(got[2].first_attempts, 4);
    }
}
