//! Where attempts go: a set of target URLs, fixed or read from a file that another process
//! rewrites atomically (the runner routes only to ready pods this way).

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime};

use rand::Rng;

/// One target URL, split for the client.
#[derive(Debug)]
pub struct Target {
    pub url: String,
    /// `host:port` for the `Host` header.
    pub authority: String,
    /// Origin-form path and query, e.g. `/work`.
    pub path: String,
    /// `https://`: a TLS session on each connection.
    pub tls: bool,
    host: String,
    port: u16,
    /// Set when a reload removed this target: its idle connections are not reused.
    retired: AtomicBool,
    /// A host name's addresses and when they were looked up (see [`Target::resolve`]).
    resolved: tokio::sync::Mutex<Option<(Instant, Vec<SocketAddr>)>>,
}

/// How long a host name's addresses are reused before the next lookup.
pub const DNS_TTL: Duration = Duration::from_secs(1);

impl Target {
    /// Parses `http://host[:port][/path]` or `https://...`.
    pub fn parse(url: &str) -> Result<Target, String> {
        let uri: http::Uri = url.parse().map_err(|e| format!("target `{url}`: {e}"))?;
        let tls = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => {
                return Err(format!(
                    "target `{url}`: only http:// and https:// URLs are supported"
                ));
            }
        };
        let authority = uri
            .authority()
            .ok_or_else(|| format!("target `{url}`: no host"))?;
        let host = authority.host().trim_matches(['[', ']']).to_string();
        Ok(Target {
            url: url.to_string(),
            authority: authority.as_str().to_string(),
            path: uri.path_and_query().map_or("/", |p| p.as_str()).to_string(),
            port: authority.port_u16().unwrap_or(if tls { 443 } else { 80 }),
            tls,
            host,
            retired: AtomicBool::new(false),
            resolved: tokio::sync::Mutex::new(None),
        })
    }

    /// One socket address for a new connection, picked at random among the host's. A host
    /// name is looked up at most once per [`DNS_TTL`], by one connection while the others wait:
    /// a trapped service makes every attempt a new connection, and a lookup each (through
    /// getaddrinfo's thread pool and, in a pod, every search domain) made the loadgen the
    /// bottleneck and its exit wait for the queued lookups.
    pub async fn resolve(&self) -> std::io::Result<SocketAddr> {
        if let Ok(ip) = self.host.parse::<IpAddr>() {
            return Ok(SocketAddr::new(ip, self.port));
        }
        let mut cached = self.resolved.lock().await;
        let fresh = cached
            .as_ref()
            .filter(|(at, _)| at.elapsed() < DNS_TTL)
            .map(|(_, addrs)| addrs.clone());
        let addrs = match fresh {
            Some(addrs) => addrs,
            None => {
                let addrs: Vec<SocketAddr> =
                    tokio::net::lookup_host((self.host.as_str(), self.port))
                        .await?
                        .collect();
                if addrs.is_empty() {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        format!("{} has no address", self.host),
                    ));
                }
                *cached = Some((Instant::now(), addrs.clone()));
                addrs
            }
        };
        Ok(addrs[rand::rng().random_range(0..addrs.len())])
    }

    /// The URL's host, without brackets: what its certificate is checked against.
    pub fn host(&self) -> &str {
        &self.host
    }

    pub fn scheme(&self) -> &'static str {
        if self.tls { "https" } else { "http" }
    }

    pub fn is_retired(&self) -> bool {
        self.retired.load(Ordering::Relaxed)
    }
}

/// The current target set.
#[derive(Debug, Default)]
pub struct Targets {
    current: RwLock<Arc<Vec<Arc<Target>>>>,
}

impl Targets {
    pub fn new(list: Vec<Target>) -> Targets {
        Targets {
            current: RwLock::new(Arc::new(list.into_iter().map(Arc::new).collect())),
        }
    }

    fn list(&self) -> Arc<Vec<Arc<Target>>> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// A target at random, as a Kubernetes Service picks an endpoint per connection.
    pub fn pick(&self) -> Option<Arc<Target>> {
        let list = self.list();
        if list.is_empty() {
            return None;
        }
        Some(list[rand::rng().random_range(0..list.len())].clone())
    }

    /// Whether any target is `https://`.
    pub fn any_tls(&self) -> bool {
        self.list().iter().any(|t| t.tls)
    }

    pub fn urls(&self) -> Vec<String> {
        self.list().iter().map(|t| t.url.clone()).collect()
    }

    /// Replaces the set; unchanged URLs keep their identity (and idle connections).
    pub fn replace(&self, new: Vec<Target>) {
        let mut guard = self.current.write().unwrap_or_else(|p| p.into_inner());
        let old = guard.clone();
        let next: Vec<Arc<Target>> = new
            .into_iter()
            .map(|t| {
                old.iter()
                    .find(|o| o.url == t.url)
                    .cloned()
                    .unwrap_or_else(|| Arc::new(t))
            })
            .collect();
        for o in old.iter() {
            if !next.iter().any(|n| Arc::ptr_eq(n, o)) {
                o.retired.store(true, Ordering::Relaxed);
            }
        }
        *guard = Arc::new(next);
    }
}

/// Reads a targets file: one URL a line, blank lines and `#` comments skipped.
pub fn read_targets_file(path: &Path) -> Result<Vec<Target>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("targets file {}: {e}", path.display()))?;
    text.lines()
        .enumerate()
        .map(|(i, l)| (i, l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
        .map(|(i, l)| {
            Target::parse(l)
                .map_err(|e| format!("targets file {} line {}: {e}", path.display(), i + 1))
        })
        .collect()
}

/// What identifies a version of the file: an atomic rewrite changes the inode.
fn fingerprint(path: &Path) -> Option<(SystemTime, u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len(), m.ino()))
}

/// Polls `path` every `every` and replaces `targets` when the file changed. A file that does
/// not parse is reported and the previous set kept.
pub async fn watch(path: PathBuf, targets: Arc<Targets>, every: Duration) {
    let mut seen = fingerprint(&path);
    let mut tick = tokio::time::interval(every);
    loop {
        tick.tick().await;
        let now = fingerprint(&path);
        if now == seen {
            continue;
        }
        seen = now;
        match read_targets_file(&path) {
            Ok(list) => {
                targets.replace(list);
                tracing::info!(targets = ?targets.urls(), "targets file reloaded");
            }
            Err(e) => tracing::warn!("{e}; keeping the previous targets"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_urls() {
        let t = Target::parse("http://127.0.0.1:8080/work?x=1").unwrap();
        assert_eq!(
            (t.authority.as_str(), t.path.as_str(), t.port),
            ("127.0.0.1:8080", "/work?x=1", 8080)
        );
        let t = Target::parse("http://[::1]/").unwrap();
        assert_eq!((t.host.as_str(), t.port), ("::1", 80));
        let t = Target::parse("https://a/").unwrap();
        assert!(t.tls && t.port == 443 && t.scheme() == "https");
        assert!(
            Target::parse("ftp://a/")
                .unwrap_err()
                .contains("only http:// and https://")
        );
        assert!(
            Target::parse("not a url")
                .unwrap_err()
                .contains("`not a url`")
        );
    }

    #[tokio::test]
    async fn a_host_name_is_looked_up_once_per_ttl() {
        let t = Target::parse("http://localhost:8080/").unwrap();
        let a = t.resolve().await.unwrap();
        assert_eq!(a.port(), 8080);
        let first = t.resolved.lock().await.as_ref().unwrap().0;
        for _ in 0..100 {
            t.resolve().await.unwrap();
        }
        assert_eq!(
            t.resolved.lock().await.as_ref().unwrap().0,
            first,
            "no new lookup"
        );
        let ip = Target::parse("http://127.0.0.1:9/").unwrap();
        ip.resolve().await.unwrap();
        assert!(
            ip.resolved.lock().await.is_none(),
            "an address is not looked up"
        );
    }

    #[test]
    fn replace_keeps_identity_and_retires_removed() {
        let ts = Targets::new(vec![
            Target::parse("http://a:1/").unwrap(),
            Target::parse("http://b:1/").unwrap(),
        ]);
        let a = ts.list()[0].clone();
        let b = ts.list()[1].clone();
        ts.replace(vec![
            Target::parse("http://a:1/").unwrap(),
            Target::parse("http://c:1/").unwrap(),
        ]);
        assert!(Arc::ptr_eq(&ts.list()[0], &a));
        assert!(!a.is_retired());
        assert!(b.is_retired());
        assert_eq!(ts.urls(), ["http://a:1/", "http://c:1/"]);
        ts.replace(vec![]);
        assert!(ts.pick().is_none());
    }

    #[test]
    fn file_errors_name_line_and_value() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("targets");
        std::fs::write(&p, "# pods\nhttp://127.0.0.1:1/work\n\nftp://x/\n").unwrap();
        let e = read_targets_file(&p).err().unwrap();
        assert!(e.contains("line 4") && e.contains("ftp://x/"), "{e}");
        std::fs::write(&p, "# pods\nhttp://127.0.0.1:1/work\n\n").unwrap();
        assert_eq!(read_targets_file(&p).unwrap().len(), 1);
    }
}
