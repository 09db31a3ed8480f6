//! HAProxy configuration reader: one [`Layer`] per `backend` or `listen` section that has servers,
//! with the retry policy HAProxy 2.6 gives it (Debian bookworm ships 2.6.12; read against
//! doc/configuration.txt and the source at v2.6.0, and the 2.6.12 changelog). A proxy takes its
//! settings from a `defaults` section: the named one after `from`, else the last one before it; a
//! `defaults` section without `from` starts again from HAProxy's built-in values. Conditional
//! blocks (`.if`) are refused: which branch holds depends on the machine that loads the file.

use std::path::Path;

use super::layer::{
    DefaultUsed, InputError, Layer, Parsed, RetryOn, Skipped, Source, Tier, Tries, retried_codes,
};

const VERSION: &str = "HAProxy 2.6 (Debian bookworm: 2.6.12)";
const DOC: &str = "doc/configuration.txt (https://docs.haproxy.org/2.6/configuration.html)";

/// Keywords that open a section in HAProxy 2.6 (`REGISTER_CONFIG_SECTION`), and two later ones.
const SECTIONS: [&str; 17] = [
    "global",
    "defaults",
    "frontend",
    "backend",
    "listen",
    "userlist",
    "peers",
    "mailers",
    "namespace_list",
    "cache",
    "fcgi-app",
    "http-errors",
    "log-forward",
    "program",
    "resolvers",
    "ring",
    "crt-store",
];

/// Reads an HAProxy configuration file's retrying backends.
pub fn parse(file: &Path, text: &str) -> Result<Parsed, InputError> {
    let sections = split(file, text)?;
    let mut parsed = Parsed::default();
    let mut defaults: Vec<(Option<String>, Settings)> = Vec::new();
    for s in &sections {
        match s.keyword.as_str() {
            "defaults" => {
                let base = match &s.from {
                    Some(name) => named(file, s, &defaults, name)?.clone(),
                    None => Settings::default(),
                };
                let (settings, _) = read_body(file, s, base)?;
                defaults.push((s.name.clone(), settings));
            }
            "backend" | "listen" => {
                let base = inherited(file, s, &defaults)?;
                let (settings, proxy) = read_body(file, s, base)?;
                if proxy.servers == 0 {
                    parsed
                        .skipped
                        .push(skip(file, s, "no server: it proxies nothing"));
                } else {
                    parsed.layers.push(layer(file, s, &settings, &proxy));
                }
            }
            "frontend" => {
                inherited(file, s, &defaults)?;
                let why = "a frontend routes requests; its backends' retries are read";
                parsed.skipped.push(skip(file, s, why));
            }
            _ => parsed
                .skipped
                .push(skip(file, s, "not a proxy: no retry policy")),
        }
    }
    Ok(parsed)
}

/// One section: its header and its lines, cut into words.
struct Section {
    keyword: String,
    name: Option<String>,
    from: Option<String>,
    line: u32,
    body: Vec<(u32, Vec<String>)>,
}

impl Section {
    fn locator(&self) -> String {
        match &self.name {
            Some(name) => format!("{} {name}", self.keyword),
            None => self.keyword.clone(),
        }
    }
}

fn skip(file: &Path, s: &Section, why: &str) -> Skipped {
    Skipped::new(file, s.locator(), Some(s.line), why)
}

/// Cuts the file into sections; refuses what HAProxy would refuse before any section starts.
fn split(file: &Path, text: &str) -> Result<Vec<Section>, InputError> {
    let mut sections: Vec<Section> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let n = u32::try_from(i + 1).unwrap_or(u32::MAX);
        let w = words(file, n, raw)?;
        let Some(first) = w.first() else { continue };
        if let Some(directive) = first.strip_prefix('.') {
            if matches!(directive, "if" | "elif" | "else" | "endif") {
                let why =
                    format!("conditional block `{first}`: check does not evaluate conditions");
                return Err(InputError::syntax(file, n, why));
            }
            // `.notice`, `.warning`, `.diag`, `.alert` only print a message.
            continue;
        }
        if SECTIONS.contains(&first.as_str()) {
            sections.push(header(file, n, w)?);
        } else if let Some(s) = sections.last_mut() {
            s.body.push((n, w));
        } else {
            return Err(InputError::syntax(
                file,
                n,
                format!("`{first}` outside any section"),
            ));
        }
    }
    Ok(sections)
}

/// A section's first line: `backend NAME [from DEFAULTS]`, `defaults [NAME] [from DEFAULTS]`.
fn header(file: &Path, n: u32, w: Vec<String>) -> Result<Section, InputError> {
    let keyword = w[0].clone();
    let mut rest = w.into_iter().skip(1).peekable();
    let name = rest.next_if(|word| word != "from");
    let from = match rest.next().as_deref() {
        Some("from") => {
            let why = "`from` needs the name of a defaults section";
            Some(
                rest.next()
                    .ok_or_else(|| InputError::syntax(file, n, why))?,
            )
        }
        _ => None,
    };
    let named = matches!(keyword.as_str(), "frontend" | "backend" | "listen");
    if named && name.is_none() {
        return Err(InputError::syntax(
            file,
            n,
            format!("`{keyword}` needs a name"),
        ));
    }
    Ok(Section {
        keyword,
        name,
        from,
        line: n,
        body: Vec::new(),
    })
}

/// One line cut into words as HAProxy 2.6 does (`parse_line`): blanks separate words, `#` starts a
/// comment outside quotes, `"..."` and `'...'` quote, a backslash escapes the next character.
/// Environment variables (`"${NAME}"`) are kept as written: check does not expand them.
fn words(file: &Path, n: u32, line: &str) -> Result<Vec<String>, InputError> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some('\''), c) => word.push(c),
            (_, '\\') => {
                in_word = true;
                escape(&mut chars, &mut word);
            }
            (None, '"' | '\'') => {
                in_word = true;
                quote = Some(c);
            }
            (None, '#') => break,
            (None, ' ' | '\t' | '\r') => {
                if in_word {
                    out.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            (_, c) => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if let Some(q) = quote {
        return Err(InputError::syntax(file, n, format!("unmatched quote {q}")));
    }
    if in_word {
        out.push(word);
    }
    Ok(out)
}

/// The character after a backslash, as configuration.txt 2.2 lists them.
fn escape(chars: &mut std::str::Chars<'_>, word: &mut String) {
    match chars.next() {
        Some('n') => word.push('\n'),
        Some('r') => word.push('\r'),
        Some('t') => word.push('\t'),
        Some('x') => {
            let hex: String = chars.clone().take(2).collect();
            match u8::from_str_radix(&hex, 16) {
                Ok(b) if hex.len() == 2 => {
                    chars.nth(1);
                    word.push(char::from(b));
                }
                _ => word.push_str("\\x"),
            }
        }
        Some(c @ (' ' | '#' | '\\' | '\'' | '"' | '$')) => word.push(c),
        Some(c) => {
            word.push('\\');
            word.push(c);
        }
        None => word.push('\\'),
    }
}

/// What a proxy's retries depend on; `None` is HAProxy's built-in value.
#[derive(Debug, Clone, Default)]
struct Settings {
    http: Option<bool>,
    retries: Option<u32>,
    retry_on: Option<Vec<String>>,
    /// `timeout server` in ms; 0 is no timeout.
    server_timeout_ms: Option<u64>,
    abortonclose: Option<bool>,
    redispatch: Option<bool>,
}

/// What only the proxy itself says (not inherited).
#[derive(Debug, Default)]
struct Proxy {
    servers: u64,
    disable_l7_retry: bool,
}

fn named<'a>(
    file: &Path,
    s: &Section,
    defaults: &'a [(Option<String>, Settings)],
    name: &str,
) -> Result<&'a Settings, InputError> {
    let mut found = defaults.iter().filter(|(n, _)| n.as_deref() == Some(name));
    let why = match (found.next(), found.next()) {
        (Some((_, settings)), None) => return Ok(settings),
        (Some(_), Some(_)) => "two defaults sections have that name",
        (None, _) => "no defaults section of that name before it",
    };
    Err(InputError::field(
        file,
        "from",
        name,
        format!("line {}: {why}", s.line),
    ))
}

/// The settings a proxy starts from.
fn inherited(
    file: &Path,
    s: &Section,
    defaults: &[(Option<String>, Settings)],
) -> Result<Settings, InputError> {
    match &s.from {
        Some(name) => named(file, s, defaults, name).cloned(),
        None => Ok(defaults.last().map(|(_, d)| d.clone()).unwrap_or_default()),
    }
}

fn read_body(
    file: &Path,
    s: &Section,
    mut settings: Settings,
) -> Result<(Settings, Proxy), InputError> {
    let mut proxy = Proxy::default();
    for (n, w) in &s.body {
        let bad = |field: &str, value: &str, why: &str| {
            InputError::field(
                file,
                field,
                value,
                format!("line {n} ({}): {why}", s.locator()),
            )
        };
        let arg = |i: usize| w.get(i).map(String::as_str).unwrap_or("");
        match (arg(0), arg(1)) {
            ("mode", m) => {
                settings.http = Some(match m {
                    "http" => true,
                    "tcp" => false,
                    _ => return Err(bad("mode", m, "HAProxy 2.6 knows tcp and http")),
                })
            }
            ("retries", r) => settings.retries = Some(retries(r, &bad)?),
            ("retry-on", _) => settings.retry_on = Some(retry_on(&w[1..], &bad)?),
            ("timeout", "server") => {
                settings.server_timeout_ms = Some(duration_ms("timeout server", arg(2), &bad)?)
            }
            ("srvtimeout" | "contimeout" | "clitimeout", _) => {
                let why = "removed in HAProxy 2.1; write `timeout server` and the like";
                return Err(bad(arg(0), arg(1), why));
            }
            ("option" | "no" | "default", _) => option(&mut settings, w),
            ("server" | "dispatch", _) => proxy.servers += 1,
            ("server-template", _) => {
                let n = template_count(arg(2), &bad)?;
                proxy.servers = proxy.servers.saturating_add(n);
            }
            ("http-request", "disable-l7-retry") => proxy.disable_l7_retry = true,
            _ => {}
        }
    }
    Ok((settings, proxy))
}

/// `option X`, `no option X`, `default option X` for the options that matter here.
fn option(settings: &mut Settings, w: &[String]) {
    let (value, name) = match (w.first().map(String::as_str), w.get(1), w.get(2)) {
        (Some("option"), Some(name), _) => (Some(true), name),
        (Some("no"), Some(o), Some(name)) if o == "option" => (Some(false), name),
        (Some("default"), Some(o), Some(name)) if o == "option" => (None, name),
        _ => return,
    };
    match name.as_str() {
        "abortonclose" => settings.abortonclose = value,
        "redispatch" => settings.redispatch = value,
        _ => {}
    }
}

/// A field of a section's line refused: the field, the value and why (the line is added).
type Bad<'a> = &'a dyn Fn(&str, &str, &str) -> InputError;

/// `retries N`: digits only (HAProxy's `atol` would read `3x` as 3), kept in an `int`.
fn retries(value: &str, bad: Bad) -> Result<u32, InputError> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        let why = if value.contains('$') {
            "an environment variable, which check does not expand"
        } else {
            "not a whole number"
        };
        return Err(bad("retries", value, why));
    }
    value
        .parse::<i32>()
        .ok()
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| bad("retries", value, "more than HAProxy counts (2^31 - 1)"))
}

/// The keywords `retry-on` accepts in 2.6 (`proxy_parse_retry_on`).
const RETRY_ON: [&str; 17] = [
    "none",
    "conn-failure",
    "empty-response",
    "junk-response",
    "response-timeout",
    "0rtt-rejected",
    "401",
    "403",
    "404",
    "408",
    "425",
    "500",
    "501",
    "502",
    "503",
    "504",
    "all-retryable-errors",
];

fn retry_on(words: &[String], bad: Bad) -> Result<Vec<String>, InputError> {
    if words.is_empty() {
        return Err(bad("retry-on", "", "needs at least one keyword"));
    }
    for w in words {
        if !RETRY_ON.contains(&w.as_str()) {
            return Err(bad("retry-on", w, "not a retry-on keyword of HAProxy 2.6"));
        }
    }
    if words.iter().any(|w| w == "none") && words.len() > 1 {
        return Err(bad("retry-on", &words.join(" "), "`none` must stand alone"));
    }
    // `all-retryable-errors` as `proxy_parse_retry_on` expands it.
    let mut out = Vec::new();
    for w in words {
        if w == "all-retryable-errors" {
            out.extend(
                [
                    "conn-failure",
                    "empty-response",
                    "junk-response",
                    "response-timeout",
                    "0rtt-rejected",
                    "500",
                    "502",
                    "503",
                    "504",
                ]
                .map(String::from),
            );
        } else if w != "none" {
            out.push(w.clone());
        }
    }
    Ok(out)
}

/// `server-template PREFIX NUM|LOW-HIGH ...`: how many servers it declares.
fn template_count(range: &str, bad: Bad) -> Result<u64, InputError> {
    let bad = || bad("server-template", range, "expects NUM or LOW-HIGH");
    let number = |s: &str| s.parse::<u64>().map_err(|_| bad());
    match range.split_once('-') {
        Some((low, high)) => {
            let (low, high) = (number(low)?, number(high)?);
            if low == 0 || high < low {
                return Err(bad());
            }
            Ok(high - low + 1)
        }
        None => number(range),
    }
}

/// An HAProxy time (`parse_time_err`, unit ms by default): `us`, `ms`, `s`, `m`, `h`, `d`, whole
/// numbers only, rounded up to ms, below 2^31 ms; 0 is no timeout.
fn duration_ms(name: &str, value: &str, bad: Bad) -> Result<u64, InputError> {
    let digits = value.bytes().take_while(u8::is_ascii_digit).count();
    let (number, unit) = value.split_at(digits);
    let bad = |why: &str| bad(name, value, why);
    if number.is_empty() {
        let why = if value.contains('$') {
            "an environment variable, which check does not expand"
        } else {
            "expects a whole number with an optional unit (us, ms, s, m, h, d)"
        };
        return Err(bad(why));
    }
    // (multiplier, divisor) to milliseconds.
    let (mul, div): (u128, u128) = match unit {
        "" | "ms" => (1, 1),
        "us" => (1, 1000),
        "s" => (1000, 1),
        "m" => (60_000, 1),
        "h" => (3_600_000, 1),
        "d" => (86_400_000, 1),
        _ => return Err(bad("unknown unit: HAProxy takes us, ms, s, m, h, d")),
    };
    let too_long = || bad("over HAProxy's limit of 2147483647 ms (about 24.8 days)");
    let n: u128 = number.parse().map_err(|_| too_long())?;
    let ms = n.checked_mul(mul).ok_or_else(too_long)?.div_ceil(div);
    if ms >= 1 << 31 {
        return Err(too_long());
    }
    Ok(u64::try_from(ms).unwrap_or(u64::MAX))
}

fn layer(file: &Path, s: &Section, set: &Settings, proxy: &Proxy) -> Layer {
    let http = set.http.unwrap_or(false);
    let keywords: Vec<String> = set
        .retry_on
        .clone()
        .unwrap_or_else(|| vec!["conn-failure".to_string()]);
    let (retry_on, mut notes) = classes(&keywords, http);
    let retries = set.retries.unwrap_or(3);
    let retrying = retries > 0 && !keywords.is_empty();
    let per_try_timeout_s = match set.server_timeout_ms {
        Some(ms) if ms > 0 => Some(ms as f64 / 1000.0),
        _ => None,
    };
    if retry_on.timeout && per_try_timeout_s.is_none() {
        notes.push(
            "response-timeout is retried, but no `timeout server` is set: it never fires".into(),
        );
    }
    notes.extend(policy_notes(set, proxy, &keywords, http, retrying));
    Layer {
        tries: Tries::AtMost(if retrying { retries + 1 } else { 1 }),
        retry_on,
        per_try_timeout_s,
        aborts_on_close: set.abortonclose.unwrap_or(false),
        defaults: defaults_used(set),
        notes,
        ..Layer::new(
            "haproxy",
            Tier::Edge,
            Source::new(file, Some(s.line), s.locator()),
        )
    }
}

/// The three classes from 2.6's retry-on keywords, and what else they retry; the status
/// keywords (401 to 504) go through [`retried_codes`].
fn classes(keywords: &[String], http: bool) -> (RetryOn, Vec<String>) {
    let has = |k: &str| keywords.iter().any(|w| w == k);
    let mut notes = Vec::new();
    let codes: Vec<u32> = keywords.iter().filter_map(|k| k.parse().ok()).collect();
    let (gateway, status_note) = retried_codes(&codes);
    let retry_on = RetryOn {
        timeout: http && has("response-timeout"),
        connect_failure: has("conn-failure"),
        status_5xx: http && gateway,
    };
    if http {
        notes.extend(status_note);
        let others: Vec<&str> = keywords
            .iter()
            .map(String::as_str)
            .filter(|k| !matches!(*k, "conn-failure" | "response-timeout"))
            .filter(|k| k.parse::<u32>().is_err())
            .collect();
        if !others.is_empty() {
            notes.push(format!(
                "also retries on {}, outside the three failure classes",
                others.join(", ")
            ));
        }
    }
    if !http && keywords.iter().any(|k| k != "conn-failure") {
        notes.push(
            "mode tcp: only failed connections are retried; retry-on's HTTP keywords are ignored"
                .into(),
        );
    }
    (retry_on, notes)
}

fn policy_notes(
    set: &Settings,
    proxy: &Proxy,
    keywords: &[String],
    http: bool,
    retrying: bool,
) -> Vec<String> {
    let mut notes = Vec::new();
    if !retrying {
        notes.push("makes one try: `retries 0` or `retry-on none`".into());
        return notes;
    }
    if http && keywords.iter().any(|k| k != "conn-failure") {
        notes.push(
            "a retry after the request was sent needs the request to fit in one buffer \
             (tune.bufsize): bigger requests are tried once"
                .into(),
        );
        notes.push(
            "HAProxy 2.6.0 to 2.6.9 make one such retry fewer than `retries` (fixed in 2.6.10)"
                .into(),
        );
    }
    if keywords.iter().any(|k| k == "conn-failure") {
        notes.push(
            "a retry on the same server after a failed connection waits min(timeout connect, 1 s)"
                .into(),
        );
    }
    if set.redispatch == Some(true) {
        notes.push(
            "option redispatch: a retry may go to another server (by default the last retry)"
                .into(),
        );
    }
    if proxy.disable_l7_retry {
        notes.push("`http-request disable-l7-retry`: some requests are not retried (its condition is not evaluated)".into());
    }
    if set.abortonclose == Some(true) {
        notes.push(
            "option abortonclose drops a request whose client has gone while it is queued or \
             connecting; a try already sent runs until its timeout"
                .into(),
        );
    }
    notes
}

/// The built-in values this proxy's figures rest on.
fn defaults_used(set: &Settings) -> Vec<DefaultUsed> {
    let unset = [
        (
            set.http.is_none(),
            "mode",
            "tcp",
            "4.2 `mode`: \"This is the default mode\"",
        ),
        (
            set.retries.is_none(),
            "retries",
            "3",
            "4.2 `retries`; CONN_RETRIES in include/haproxy/defaults.h",
        ),
        (
            set.retry_on.is_none(),
            "retry-on",
            "conn-failure",
            "4.2 `retry-on`: \"The default is conn-failure\"",
        ),
        (
            set.server_timeout_ms.is_none(),
            "timeout server",
            "none (HAProxy warns at start-up)",
            "4.2 `timeout server`",
        ),
        (
            set.abortonclose.is_none(),
            "option abortonclose",
            "off",
            "4.2 `option abortonclose`",
        ),
    ];
    let used = |(_, setting, value, reference): (bool, &str, &str, &str)| {
        DefaultUsed::new(setting, value, VERSION, format!("{DOC} {reference}"))
    };
    unset.into_iter().filter(|d| d.0).map(used).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Parsed {
        parse(Path::new("t.cfg"), text).unwrap()
    }

    fn one(parsed: &Parsed, locator: &str) -> Layer {
        let found: Vec<&Layer> = parsed
            .layers
            .iter()
            .filter(|l| l.source.locator == locator)
            .collect();
        assert_eq!(found.len(), 1, "{locator} in {:#?}", parsed.layers);
        found[0].clone()
    }

    const TIMEOUT_AND_CONNECT: RetryOn = RetryOn {
        timeout: true,
        connect_failure: true,
        status_5xx: false,
    };

    const CONNECT: RetryOn = RetryOn {
        timeout: false,
        connect_failure: true,
        status_5xx: false,
    };

    #[test]
    fn the_kits_kubernetes_gateway_waits_3_s_a_try() {
        let text = include_str!("../../k8s/overlays/gateway/haproxy.cfg");
        let parsed = parse(Path::new("haproxy.cfg"), text).unwrap();
        let l = one(&parsed, "backend pods");
        assert_eq!(l.tries, Tries::AtMost(3));
        assert_eq!(l.retry_on, TIMEOUT_AND_CONNECT);
        assert_eq!(l.per_try_timeout_s, Some(3.0));
        assert!(!l.aborts_on_close);
        assert_eq!(l.source.line, Some(27));
        let skipped: Vec<&str> = parsed.skipped.iter().map(|s| s.what.as_str()).collect();
        assert_eq!(
            skipped,
            [
                "global (line 4)",
                "resolvers kube (line 13)",
                "frontend clients (line 23)",
                "frontend stats (line 30)"
            ]
        );
    }

    #[test]
    fn upstream_edge_example_uses_its_named_defaults_and_the_built_in_retries() {
        let text = include_str!("../tests/data/haproxy/basic-config-edge.cfg");
        let parsed = read(text);
        assert_eq!(parsed.layers.len(), 1);
        let l = one(&parsed, "backend app1");
        assert_eq!(l.tries, Tries::AtMost(4));
        assert_eq!(l.retry_on, CONNECT);
        assert_eq!(l.per_try_timeout_s, Some(60.0));
        assert!(l.aborts_on_close);
        let settings: Vec<&str> = l.defaults.iter().map(|d| d.setting.as_str()).collect();
        assert_eq!(settings, ["retries", "retry-on"]);
        assert!(l.defaults.iter().all(|d| d.version.contains("2.6")));
        assert!(l.notes.iter().any(|n| n.contains("abortonclose")));
        assert!(
            parsed
                .skipped
                .iter()
                .any(|s| s.what.starts_with("cache cache"))
        );
    }

    #[test]
    fn upstream_content_switching_example_retries_twice_with_redispatch() {
        let text = include_str!("../tests/data/haproxy/content-sw-sample.cfg");
        let parsed = read(text);
        let stat = one(&parsed, "backend static");
        let dynamic = one(&parsed, "backend dynamic");
        for (l, timeout) in [(&stat, 5.0), (&dynamic, 30.0)] {
            assert_eq!(l.tries, Tries::AtMost(3));
            assert_eq!(l.retry_on, CONNECT);
            assert_eq!(l.per_try_timeout_s, Some(timeout));
            assert!(!l.aborts_on_close);
            assert!(l.notes.iter().any(|n| n.contains("redispatch")));
        }
        assert_eq!(stat.source.line, Some(37));
    }

    #[test]
    fn upstream_abortonclose_test_config_inherits_the_option() {
        let text = include_str!("../tests/data/haproxy/http_abortonclose.cfg");
        let parsed = read(text);
        assert_eq!(parsed.layers.len(), 4);
        assert_eq!(one(&parsed, "backend be1_1").tries, Tries::AtMost(2));
        assert_eq!(one(&parsed, "backend be1_2").tries, Tries::AtMost(11));
        assert!(parsed.layers.iter().all(|l| l.aborts_on_close));
        assert!(
            parsed
                .layers
                .iter()
                .all(|l| l.per_try_timeout_s == Some(10.0))
        );
    }

    #[test]
    fn the_documentations_first_example() {
        let text = include_str!("../tests/data/haproxy/configuration-2.6-example.cfg");
        let l = one(&read(text), "backend servers");
        assert_eq!(l.tries, Tries::AtMost(4));
        assert_eq!(l.per_try_timeout_s, Some(50.0));
    }

    #[test]
    fn named_defaults_and_from_choose_what_a_proxy_inherits() {
        let text = "\
defaults base
    mode http
    retries 1
    retry-on all-retryable-errors
    timeout server 2s
    option abortonclose
defaults other
    timeout server 9s
backend a from base
    no option abortonclose
    server s 192.0.2.1:80
backend b
    server s 192.0.2.1:80
defaults child from base
    retries 4
listen c
    server-template s 1-3 192.0.2.1:80
";
        let parsed = read(text);
        let a = one(&parsed, "backend a");
        assert_eq!(a.tries, Tries::AtMost(2));
        assert_eq!(
            a.retry_on,
            RetryOn {
                timeout: true,
                connect_failure: true,
                status_5xx: true
            }
        );
        assert_eq!(a.per_try_timeout_s, Some(2.0));
        assert!(!a.aborts_on_close);
        assert!(a.notes.iter().any(|n| n.contains("500")), "{:?}", a.notes);
        // `defaults other` started again from the built-in values.
        let b = one(&parsed, "backend b");
        assert_eq!(b.tries, Tries::AtMost(4));
        assert_eq!(b.retry_on, CONNECT);
        assert_eq!(b.per_try_timeout_s, Some(9.0));
        let c = one(&parsed, "listen c");
        assert_eq!(c.tries, Tries::AtMost(5));
        assert!(c.aborts_on_close);
        assert_eq!(c.per_try_timeout_s, Some(2.0));
    }

    #[test]
    fn tcp_mode_retries_only_connections() {
        let text = "defaults\n retry-on response-timeout conn-failure 503\nbackend b\n server s 192.0.2.1:80\n";
        let l = one(&read(text), "backend b");
        assert_eq!(l.retry_on, CONNECT);
        assert!(l.notes.iter().any(|n| n.contains("mode tcp")));
        assert!(l.defaults.iter().any(|d| d.setting == "mode"));
    }

    #[test]
    fn retry_on_none_or_no_retries_make_one_try() {
        for policy in ["retry-on none", "retries 0"] {
            let text = format!("backend b\n mode http\n {policy}\n server s 192.0.2.1:80\n");
            let l = one(&read(&text), "backend b");
            assert_eq!(l.tries, Tries::AtMost(1), "{policy}");
        }
        let l = one(
            &read("backend b\n mode http\n retry-on none\n server s 192.0.2.1:80\n"),
            "backend b",
        );
        assert_eq!(l.retry_on, RetryOn::NOTHING);
    }

    #[test]
    fn gateway_status_codes_count_as_5xx() {
        let text = "backend b\n mode http\n retry-on 503 404\n server s 192.0.2.1:80\n";
        let l = one(&read(text), "backend b");
        assert!(l.retry_on.status_5xx && !l.retry_on.connect_failure);
        assert!(l.notes.iter().any(|n| n.contains("only 503")));
        assert!(l.notes.iter().any(|n| n.contains("404")));
        // A retried 500 alone is noted, not the 5xx class (what a proxy gives up with is 502-504).
        let text = "backend b\n mode http\n retry-on 500 conn-failure\n server s 192.0.2.1:80\n";
        let l = one(&read(text), "backend b");
        assert!(!l.retry_on.status_5xx && l.retry_on.connect_failure);
        assert!(l.notes.iter().any(|n| n.contains("500 outside")));
    }

    #[test]
    fn quotes_comments_and_escapes_are_words_as_haproxy_cuts_them() {
        let w = words(Path::new("t"), 1, r#"  timeout  server "2s" # note"#).unwrap();
        assert_eq!(w, ["timeout", "server", "2s"]);
        let w = words(Path::new("t"), 1, r"log-format a\ b\#c 'd e' x#y").unwrap();
        assert_eq!(w, ["log-format", "a b#c", "d e", "x"]);
        let text = "backend b # comment\n timeout server 2s#x\n server s 192.0.2.1:80\n";
        assert_eq!(one(&read(text), "backend b").per_try_timeout_s, Some(2.0));
    }

    #[test]
    fn times_take_haproxys_units() {
        let bad = |field: &str, value: &str, why: &str| {
            InputError::field(Path::new("t"), field, value, why)
        };
        let ms = |v: &str| duration_ms("timeout server", v, &bad);
        for (v, want) in [
            ("3000", 3000),
            ("3000ms", 3000),
            ("3s", 3000),
            ("2m", 120_000),
            ("1h", 3_600_000),
            ("1d", 86_400_000),
            ("1500us", 2),
            ("0", 0),
        ] {
            assert_eq!(ms(v).unwrap(), want, "{v}");
        }
        for v in ["3x", "1.5s", "", "s", "2147483648", "25d", "3 s", "-1"] {
            assert!(ms(v).is_err(), "{v}");
        }
    }

    #[test]
    fn no_timeout_server_means_no_per_try_timeout() {
        let text = "backend b\n mode http\n retry-on response-timeout\n timeout server 0\n server s 192.0.2.1:80\n";
        let l = one(&read(text), "backend b");
        assert_eq!(l.per_try_timeout_s, None);
        assert!(l.notes.iter().any(|n| n.contains("never fires")));
    }

    #[test]
    fn a_backend_without_servers_is_skipped() {
        let parsed = read("backend notfound\n http-request return status 404\n");
        assert!(parsed.layers.is_empty());
        assert_eq!(parsed.skipped[0].what, "backend notfound (line 1)");
    }

    fn refused(text: &str) -> InputError {
        parse(Path::new("bad.cfg"), text).unwrap_err()
    }

    #[test]
    fn malformed_files_name_the_line_or_the_field() {
        let field_of = |e: InputError| match e {
            InputError::Field { field, value, .. } => (field, value),
            other => panic!("{other:?}"),
        };
        let line_of = |e: InputError| match e {
            InputError::Syntax { line, .. } => line,
            other => panic!("{other:?}"),
        };
        let server = " server s 192.0.2.1:80\n";
        let cases = [
            ("timeout server 3x", "timeout server", "3x"),
            ("retries 99999999999", "retries", "99999999999"),
            ("retries 2147483648", "retries", "2147483648"),
            ("retries -1", "retries", "-1"),
            ("retries many", "retries", "many"),
            ("retry-on bogus", "retry-on", "bogus"),
            ("retry-on none 503", "retry-on", "none 503"),
            ("mode udp", "mode", "udp"),
            ("srvtimeout 5s", "srvtimeout", "5s"),
            ("server-template s 5-1 a:1", "server-template", "5-1"),
            ("timeout server \"${T}\"", "timeout server", "${T}"),
        ];
        for (line, name, value) in cases {
            let e = refused(&format!("backend b\n {line}\n{server}"));
            assert_eq!(field_of(e), (name.to_string(), value.to_string()), "{line}");
        }
        let e = refused("backend b from nowhere\n server s 192.0.2.1:80\n");
        assert_eq!(field_of(e), ("from".to_string(), "nowhere".to_string()));
        assert_eq!(line_of(refused("backend b\n timeout server \"3s\n")), 2);
        assert_eq!(line_of(refused("retries 3\nbackend b\n")), 1);
        assert_eq!(line_of(refused("backend\n server s a:1\n")), 1);
        assert_eq!(
            line_of(refused("defaults\n.if defined(X)\n retries 9\n.endif\n")),
            2
        );
        let message = refused("backend b\n timeout server 3x\n").to_string();
        assert!(message.contains("line 2 (backend b)"), "{message}");
    }

    #[test]
    fn hostile_input_is_refused_or_read_without_panic() {
        for text in [
            "\u{0}\u{1}",
            "backend b\n server-template s 1-18446744073709551615 a:1\n",
            "backend \"\n",
            "backend b\n timeout server 99999999999999999999999999999999999999999s\n",
            "backend b\n retry-on\n",
            "backend b\n timeout server\n",
            "backend b\n option\n no\n default option\n",
            "\\",
        ] {
            let _ = parse(Path::new("x"), text);
        }
        let huge = "backend b\n server s a:1\n".repeat(10_000);
        assert_eq!(read(&huge).layers.len(), 10_000);
    }
}
