//! Finding the pods and reading their counters and arrival logs over HTTP.

use std::path::PathBuf;
use std::time::Duration;

use reqwest::Url;

use crate::arrivals::{self, Cursor, Page, Read, ReadKind};
use crate::exposition::{self, ParseError};
use crate::rate::ArrivalCounts;

/// Where the pod list comes from.
#[derive(Clone, Debug, PartialEq)]
pub enum PodSource {
    /// A fixed list of base URLs.
    Static(Vec<Url>),
    /// A file of base URLs, one a line, re-read at every scrape (the runner
    /// rewrites it atomically). Blank lines and `#` comments are ignored.
    File(PathBuf),
    /// A headless Service name, re-resolved at every scrape; every address is a pod.
    Dns { host: String, port: u16 },
}

/// Why the pod list could not be (fully) read.
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    #[error("pods file {path}: {source}")]
    File {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("pods file {path} line {line}: {reason}")]
    BadLine {
        path: PathBuf,
        line: usize,
        reason: String,
    },
    #[error("resolving {host}:{port}: {source}")]
    Resolve {
        host: String,
        port: u16,
        source: std::io::Error,
    },
}

/// Parses a pod base URL (`http://host:port`, optional path prefix).
pub fn parse_pod_url(s: &str) -> Result<Url, String> {
    let url = Url::parse(s).map_err(|e| format!("bad pod URL {s:?}: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(format!("bad pod URL {s:?}: want http(s)://host[:port]"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(format!("bad pod URL {s:?}: no query or fragment allowed"));
    }
    Ok(url)
}

/// Parses `NAME:PORT` for `--pods-dns`.
pub fn parse_dns_target(s: &str) -> Result<(String, u16), String> {
    let (host, port) = s
        .rsplit_once(':')
        .ok_or(format!("bad --pods-dns {s:?}: want NAME:PORT"))?;
    let port: u16 = port
        .parse()
        .map_err(|_| format!("bad --pods-dns {s:?}: port {port:?} is not 0-65535"))?;
    if host.is_empty() {
        return Err(format!("bad --pods-dns {s:?}: empty name"));
    }
    Ok((host.to_owned(), port))
}

impl PodSource {
    /// The current pods; with a partly bad file, the good lines and the errors.
    pub async fn discover(&self) -> (Vec<Url>, Vec<DiscoveryError>) {
        match self {
            PodSource::Static(urls) => (urls.clone(), Vec::new()),
            PodSource::File(path) => match tokio::fs::read_to_string(path).await {
                Ok(text) => parse_pods_file(path, &text),
                Err(source) => (
                    Vec::new(),
                    vec![DiscoveryError::File {
                        path: path.clone(),
                        source,
                    }],
                ),
            },
            PodSource::Dns { host, port } => {
                match tokio::net::lookup_host((host.as_str(), *port)).await {
                    Ok(addrs) => {
                        let mut urls: Vec<Url> = addrs
                            .filter_map(|a| Url::parse(&format!("http://{a}")).ok())
                            .collect();
                        urls.sort();
                        urls.dedup();
                        (urls, Vec::new())
                    }
                    Err(source) => (
                        Vec::new(),
                        vec![DiscoveryError::Resolve {
                            host: host.clone(),
                            port: *port,
                            source,
                        }],
                    ),
                }
            }
        }
    }
}

fn parse_pods_file(path: &std::path::Path, text: &str) -> (Vec<Url>, Vec<DiscoveryError>) {
    let mut urls = Vec::new();
    let mut errors = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        match parse_pod_url(line) {
            Ok(url) if !urls.contains(&url) => urls.push(url),
            Ok(_) => {}
            Err(reason) => errors.push(DiscoveryError::BadLine {
                path: path.to_owned(),
                line: i + 1,
                reason,
            }),
        }
    }
    (urls, errors)
}

/// Why one pod could not be read this time. Each is counted by [`reason`](Self::reason).
#[derive(Debug, thiserror::Error)]
pub enum ScrapeError {
    #[error("connect: {0}")]
    Connect(String),
    #[error("no complete answer within {0:?}")]
    Timeout(Duration),
    #[error("HTTP exchange failed: {0}")]
    Http(String),
    #[error("status {0}")]
    Status(u16),
    #[error("body larger than {0} bytes")]
    TooLarge(usize),
    #[error("parse: {0}")]
    Parse(#[from] ParseError),
    #[error("no /arrivals (404): the pod predates distinct counting")]
    NoArrivals,
}

impl ScrapeError {
    /// Every reason, to pre-register the error counters at zero.
    pub const REASONS: [&'static str; 7] = [
        "connect",
        "timeout",
        "http",
        "status",
        "too_large",
        "parse",
        "no_arrivals",
    ];

    pub fn reason(&self) -> &'static str {
        match self {
            ScrapeError::Connect(_) => "connect",
            ScrapeError::Timeout(_) => "timeout",
            ScrapeError::Http(_) => "http",
            ScrapeError::Status(_) => "status",
            ScrapeError::TooLarge(_) => "too_large",
            ScrapeError::Parse(_) => "parse",
            ScrapeError::NoArrivals => "no_arrivals",
        }
    }
}

/// What one pod gave in one round: its counters and its new arrivals.
#[derive(Clone, Debug)]
pub struct PodScrape {
    pub counts: ArrivalCounts,
    pub arrivals: Read,
}

/// Reads pods' `/metrics` and `/arrivals` with bounded bodies and an overall deadline.
#[derive(Clone, Debug)]
pub struct Scraper {
    client: reqwest::Client,
    timeout: Duration,
    max_body: usize,
}

impl Scraper {
    pub fn new(timeout: Duration, max_body: usize) -> Result<Self, reqwest::Error> {
        let client = reqwest::Client::builder()
            // Pods are addressed directly; an HTTP(S)_PROXY from the environment must not apply.
            .no_proxy()
            .pool_max_idle_per_host(1)
            .pool_idle_timeout(Duration::from_secs(90))
            .build()?;
        Ok(Self {
            client,
            timeout,
            max_body,
        })
    }

    /// `<base>/metrics` for a pod base URL.
    pub fn metrics_url(base: &Url) -> Url {
        let mut url = base.clone();
        let path = format!("{}/metrics", base.path().trim_end_matches('/'));
        url.set_path(&path);
        url
    }

    /// `<base>/arrivals?after=N` for a pod base URL.
    pub fn arrivals_url(base: &Url, after: u64) -> Url {
        let mut url = base.clone();
        let path = format!("{}/arrivals", base.path().trim_end_matches('/'));
        url.set_path(&path);
        url.set_query(Some(&format!("after={after}")));
        url
    }

    /// Reads a pod's counters, then its arrivals after `cursor` (`None`: only
    /// where its log stands), all within the scrape deadline. Any failure
    /// fails the whole pod for this round: its cursor stays, so nothing of its
    /// log is skipped.
    pub async fn scrape(
        &self,
        base: &Url,
        cursor: Option<Cursor>,
    ) -> Result<PodScrape, ScrapeError> {
        let both = async {
            let counts = self.counts(base).await?;
            let arrivals = self.arrivals(base, cursor).await?;
            Ok(PodScrape { counts, arrivals })
        };
        match tokio::time::timeout(self.timeout, both).await {
            Ok(result) => result,
            Err(_) => Err(ScrapeError::Timeout(self.timeout)),
        }
    }

    async fn counts(&self, base: &Url) -> Result<ArrivalCounts, ScrapeError> {
        let text = self.get(Self::metrics_url(base), self.max_body).await?;
        Ok(exposition::arrival_counts(&text)?)
    }

    async fn page(&self, base: &Url, after: u64) -> Result<Page, ScrapeError> {
        let url = Self::arrivals_url(base, after);
        let text = match self.get(url, arrivals::MAX_BODY).await {
            Err(ScrapeError::Status(404)) => return Err(ScrapeError::NoArrivals),
            other => other?,
        };
        Ok(arrivals::parse_page(&text, after)?)
    }

    async fn arrivals(&self, base: &Url, cursor: Option<Cursor>) -> Result<Read, ScrapeError> {
        let Some(cursor) = cursor else {
            let header = self.page(base, arrivals::PEEK).await?.header;
            return Ok(Read {
                kind: ReadKind::Baseline,
                epoch: header.epoch,
                next: header.newest,
                lost: 0,
                entries: Vec::new(),
            });
        };
        let mut page = self.page(base, cursor.next).await?;
        let mut kind = ReadKind::Continued;
        if arrivals::restarted(&cursor, &page.header) {
            kind = ReadKind::Restarted;
            page = self.page(base, 0).await?;
        }
        let epoch = page.header.epoch;
        let mut read = Read {
            kind,
            epoch,
            next: page.header.next,
            lost: page.header.lost,
            entries: page.entries,
        };
        let mut header = page.header;
        for _ in 1..arrivals::MAX_PAGES {
            if header.next >= header.newest {
                break;
            }
            let page = self.page(base, header.next).await?;
            if page.header.epoch != epoch || page.header.next < header.next {
                // Restarted while being read: the next round starts it over.
                break;
            }
            header = page.header;
            read.next = header.next;
            read.lost += header.lost;
            read.entries.extend(page.entries);
        }
        Ok(read)
    }

    /// A successful response's body, at most `limit` bytes, as UTF-8.
    async fn get(&self, url: Url, limit: usize) -> Result<String, ScrapeError> {
        let classify = |e: reqwest::Error| {
            if e.is_connect() {
                ScrapeError::Connect(e.to_string())
            } else {
                ScrapeError::Http(e.to_string())
            }
        };
        let mut response = self.client.get(url).send().await.map_err(classify)?;
        if !response.status().is_success() {
            return Err(ScrapeError::Status(response.status().as_u16()));
        }
        if response.content_length().is_some_and(|n| n > limit as u64) {
            return Err(ScrapeError::TooLarge(limit));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(classify)? {
            if body.len() + chunk.len() > limit {
                return Err(ScrapeError::TooLarge(limit));
            }
            body.extend_from_slice(&chunk);
        }
        String::from_utf8(body).map_err(|e| {
            ScrapeError::Parse(ParseError {
                line: 0,
                reason: format!("body is not UTF-8: {e}"),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_urls() {
        assert!(parse_pod_url("http://127.0.0.1:8080").is_ok());
        assert!(parse_pod_url("https://pod.ns.svc:8443/prefix/").is_ok());
        for bad in ["127.0.0.1:8080", "ftp://x", "http://x/?q=1", "", "http://"] {
            let err = parse_pod_url(bad).unwrap_err();
            assert!(err.contains(&format!("{bad:?}")), "{err}");
        }
        let base = parse_pod_url("http://127.0.0.1:8080").unwrap();
        assert_eq!(
            Scraper::metrics_url(&base).as_str(),
            "http://127.0.0.1:8080/metrics"
        );
        let base = parse_pod_url("http://h/p/").unwrap();
        assert_eq!(Scraper::metrics_url(&base).as_str(), "http://h/p/metrics");
        assert_eq!(
            Scraper::arrivals_url(&base, 7).as_str(),
            "http://h/p/arrivals?after=7"
        );
    }

    #[test]
    fn dns_targets() {
        assert_eq!(
            parse_dns_target("svc.ns:8080").unwrap(),
            ("svc.ns".to_owned(), 8080)
        );
        for bad in ["svc", "svc:http", ":80", "svc:70000"] {
            assert!(parse_dns_target(bad).unwrap_err().contains(bad));
        }
    }

    #[test]
    fn pods_file_lines() {
        let text =
            "# pods\nhttp://127.0.0.1:1\n\n  http://127.0.0.1:2  \nnot a url\nhttp://127.0.0.1:1\n";
        let (urls, errors) = parse_pods_file(std::path::Path::new("p"), text);
        assert_eq!(urls.len(), 2);
        assert_eq!(errors.len(), 1);
        assert!(errors[0].to_string().contains("line 5"), "{}", errors[0]);
    }

    #[tokio::test]
    async fn dns_source_resolves_localhost() {
        let source = PodSource::Dns {
            host: "localhost".into(),
            port: 4321,
        };
        let (urls, errors) = source.discover().await;
        assert!(errors.is_empty(), "{errors:?}");
        assert!(
            urls.iter().any(|u| u.as_str() == "http://127.0.0.1:4321/"),
            "{urls:?}"
        );
    }
}
