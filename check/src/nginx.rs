//! nginx configuration reader: one [`Layer`] per `location` that passes requests on with
//! `proxy_pass`, with the `proxy_next_upstream*` policy nginx 1.22 gives it (Debian bookworm ships
//! 1.22.1; read against the nginx.org module pages and src/http at release-1.22.1). Directives are
//! inherited http -> server -> location -> nested location; a directive in an inner block replaces
//! the outer one. A file with no `http` block is read as if it were included in one (a conf.d
//! snippet). `include` is not followed, `if` blocks are not evaluated: both are listed as skipped.

use std::net::IpAddr;
use std::path::Path;

use super::layer::{
    DefaultUsed, InputError, Layer, Parsed, RetryOn, Skipped, Source, Tier, Tries,
    nginx_read_timeout_s, retried_codes,
};

const VERSION: &str = "nginx 1.22 (Debian bookworm: 1.22.1)";
const PROXY_DOC: &str = "https://nginx.org/en/docs/http/ngx_http_proxy_module.html";

/// Blocks nested deeper than this are refused (a configuration nests a few levels; a hostile file
/// should not exhaust the stack).
const MAX_DEPTH: usize = 64;

/// Reads an nginx configuration file's proxied locations.
pub fn parse(file: &Path, text: &str) -> Result<Parsed, InputError> {
    let top = tree(file, &tokens(file, text)?)?;
    let mut cx = Cx {
        file,
        upstreams: Vec::new(),
        parsed: Parsed::default(),
        snippet: None,
    };
    let mut http_seen = false;
    for d in &top {
        match d.name.as_str() {
            "http" => {
                if http_seen {
                    return Err(InputError::syntax(
                        file,
                        d.line,
                        "\"http\" directive is duplicate",
                    ));
                }
                http_seen = true;
                cx.http(d.children())?;
            }
            "stream" | "mail" => cx.skip(d, "TCP/UDP or mail proxying: not read"),
            "include" => cx.skip(d, "not followed"),
            _ => {}
        }
    }
    let loose = |name: &str| top.iter().any(|d| d.name == name);
    if !http_seen && (loose("server") || loose("upstream") || loose("location")) {
        cx.snippet = Some("no http block: read as if included in http {}");
        cx.http(&top)?;
    }
    Ok(cx.parsed)
}

/// A directive with its arguments and, for a block, what it holds.
#[derive(Debug)]
struct Directive {
    name: String,
    args: Vec<String>,
    line: u32,
    block: Option<Vec<Directive>>,
}

impl Directive {
    fn children(&self) -> &[Directive] {
        self.block.as_deref().unwrap_or(&[])
    }

    /// This directive's `value` refused, at its line.
    fn bad(&self, file: &Path, value: &str, why: impl std::fmt::Display) -> InputError {
        InputError::field(
            file,
            &self.name,
            value,
            format!("line {}: {why}", self.line),
        )
    }
}

#[derive(Debug, PartialEq)]
enum Tok {
    Word(String),
    Semi,
    Open,
    Close,
}

/// The file's tokens with their lines, as nginx's `ngx_conf_read_token` cuts them: `#` starts a
/// comment at the start of a word, quotes and backslashes protect, `${name}` stays in its word.
fn tokens(file: &Path, text: &str) -> Result<Vec<(Tok, u32)>, InputError> {
    let mut out = Vec::new();
    let mut line = 1u32;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\n' => line += 1,
            c if c.is_whitespace() => {}
            '#' => while chars.next_if(|&c| c != '\n').is_some() {},
            ';' => out.push((Tok::Semi, line)),
            '{' => out.push((Tok::Open, line)),
            '}' => out.push((Tok::Close, line)),
            '"' | '\'' => {
                let start = line;
                let word = quoted(file, &mut chars, c, &mut line, start)?;
                if let Some(&next) = chars.peek()
                    && !(next.is_whitespace() || matches!(next, ';' | '{' | ')'))
                {
                    return Err(InputError::syntax(
                        file,
                        line,
                        format!("unexpected \"{next}\""),
                    ));
                }
                out.push((Tok::Word(word), start));
            }
            c => out.push((Tok::Word(bare(&mut chars, c)), line)),
        }
    }
    Ok(out)
}

fn quoted(
    file: &Path,
    chars: &mut std::iter::Peekable<std::str::Chars<'_>>,
    quote: char,
    line: &mut u32,
    start: u32,
) -> Result<String, InputError> {
    let mut word = String::new();
    loop {
        match chars.next() {
            None => {
                let why = "unexpected end of file, expecting terminating quote";
                return Err(InputError::syntax(file, start, why));
            }
            Some(c) if c == quote => return Ok(word),
            Some('\\') => {
                let next = chars.next();
                *line += u32::from(next == Some('\n'));
                unescape(next, &mut word);
            }
            Some(c) => {
                *line += u32::from(c == '\n');
                word.push(c);
            }
        }
    }
}

/// What a backslash and the character after it stand for (`ngx_conf_read_token`).
fn unescape(next: Option<char>, word: &mut String) {
    match next {
        Some(c @ ('"' | '\'' | '\\')) => word.push(c),
        Some('t') => word.push('\t'),
        Some('r') => word.push('\r'),
        Some('n') => word.push('\n'),
        Some(c) => {
            word.push('\\');
            word.push(c);
        }
        None => word.push('\\'),
    }
}

/// An unquoted word: up to a blank, `;` or `{` (not the `{` of `${name}`); a `}` inside a word
/// is part of it, as in nginx.
fn bare(chars: &mut std::iter::Peekable<std::str::Chars<'_>>, first: char) -> String {
    let mut word = String::new();
    let mut c = first;
    loop {
        if c == '\\' {
            unescape(chars.next(), &mut word);
        } else {
            word.push(c);
        }
        match chars.peek() {
            Some('{') if word.ends_with('$') => {}
            Some(&n) if n.is_whitespace() || matches!(n, ';' | '{') => break,
            None => break,
            Some(_) => {}
        }
        c = chars.next().unwrap_or_default();
    }
    word
}

/// Directives and blocks from the tokens, without recursion (a hostile file may nest deeply).
fn tree(file: &Path, toks: &[(Tok, u32)]) -> Result<Vec<Directive>, InputError> {
    let mut stack: Vec<(Option<Directive>, Vec<Directive>)> = vec![(None, Vec::new())];
    let mut words: Vec<String> = Vec::new();
    let mut first_line = 0;
    let head = |words: &mut Vec<String>, line: u32| Directive {
        name: words.remove(0),
        args: std::mem::take(words),
        line,
        block: None,
    };
    for (tok, line) in toks {
        match tok {
            Tok::Word(w) => {
                if words.is_empty() {
                    first_line = *line;
                }
                words.push(w.clone());
            }
            Tok::Semi | Tok::Open if words.is_empty() => {
                let c = if *tok == Tok::Semi { ";" } else { "{" };
                return Err(InputError::syntax(
                    file,
                    *line,
                    format!("unexpected \"{c}\""),
                ));
            }
            Tok::Semi => {
                let d = head(&mut words, first_line);
                if let Some(top) = stack.last_mut() {
                    top.1.push(d);
                }
            }
            Tok::Open => {
                if stack.len() > MAX_DEPTH {
                    return Err(InputError::syntax(
                        file,
                        *line,
                        format!("blocks nested deeper than {MAX_DEPTH}"),
                    ));
                }
                stack.push((Some(head(&mut words, first_line)), Vec::new()));
            }
            Tok::Close => {
                if !words.is_empty() || stack.len() == 1 {
                    return Err(InputError::syntax(file, *line, "unexpected \"}\""));
                }
                if let Some((Some(mut d), children)) = stack.pop() {
                    d.block = Some(children);
                    if let Some(top) = stack.last_mut() {
                        top.1.push(d);
                    }
                }
            }
        }
    }
    if !words.is_empty() {
        let why = "unexpected end of file, expecting \";\" or \"}\"";
        return Err(InputError::syntax(file, first_line, why));
    }
    match stack.pop() {
        Some((None, top)) => Ok(top),
        Some((Some(open), _)) => {
            let why = format!(
                "unexpected end of file, expecting \"}}\" to close \"{}\"",
                open.name
            );
            Err(InputError::syntax(file, open.line, why))
        }
        None => Ok(Vec::new()),
    }
}

/// The `proxy_*` directives a location's retries depend on; `None`: not set at this level.
#[derive(Debug, Clone, Default)]
struct Proxy {
    /// `proxy_next_upstream` words, lowercased (several lines in one block add up).
    next_upstream: Option<Vec<String>>,
    tries: Option<u32>,
    next_upstream_timeout_s: Option<f64>,
    read_timeout_s: Option<f64>,
    connect_timeout_s: Option<f64>,
    ignore_client_abort: Option<bool>,
    request_buffering: Option<bool>,
}

impl Proxy {
    /// This block's own directives; a scalar one twice in a block is nginx's "is duplicate".
    fn read(file: &Path, block: &[Directive]) -> Result<Proxy, InputError> {
        let mut p = Proxy::default();
        for d in block {
            let dup = |set: bool| -> Result<(), InputError> {
                if set {
                    Err(InputError::syntax(
                        file,
                        d.line,
                        format!("\"{}\" directive is duplicate", d.name),
                    ))
                } else {
                    Ok(())
                }
            };
            let name = d.name.as_str();
            match name {
                "proxy_next_upstream" => {
                    let words = p.next_upstream.get_or_insert_with(Vec::new);
                    words.extend(next_upstream(file, d)?);
                }
                "proxy_next_upstream_tries" => {
                    dup(p.tries.is_some())?;
                    p.tries = Some(count(file, d)?);
                }
                "proxy_next_upstream_timeout" | "proxy_read_timeout" | "proxy_connect_timeout" => {
                    let slot = match name {
                        "proxy_read_timeout" => &mut p.read_timeout_s,
                        "proxy_connect_timeout" => &mut p.connect_timeout_s,
                        _ => &mut p.next_upstream_timeout_s,
                    };
                    dup(slot.is_some())?;
                    let mut secs = seconds(file, d)?;
                    if name == "proxy_read_timeout" {
                        secs = nginx_read_timeout_s(secs)
                            .map_err(|why| d.bad(file, &d.args.join(" "), why))?;
                    }
                    *slot = Some(secs);
                }
                "proxy_ignore_client_abort" => {
                    dup(p.ignore_client_abort.is_some())?;
                    p.ignore_client_abort = Some(flag(file, d)?);
                }
                "proxy_request_buffering" => {
                    dup(p.request_buffering.is_some())?;
                    p.request_buffering = Some(flag(file, d)?);
                }
                _ => {}
            }
        }
        Ok(p)
    }

    /// This level over its parent (nginx's merge: an inner value replaces the outer one).
    fn over(self, parent: &Proxy) -> Proxy {
        Proxy {
            next_upstream: self.next_upstream.or_else(|| parent.next_upstream.clone()),
            tries: self.tries.or(parent.tries),
            next_upstream_timeout_s: self
                .next_upstream_timeout_s
                .or(parent.next_upstream_timeout_s),
            read_timeout_s: self.read_timeout_s.or(parent.read_timeout_s),
            connect_timeout_s: self.connect_timeout_s.or(parent.connect_timeout_s),
            ignore_client_abort: self.ignore_client_abort.or(parent.ignore_client_abort),
            request_buffering: self.request_buffering.or(parent.request_buffering),
        }
    }
}

fn one_arg<'a>(file: &Path, d: &'a Directive) -> Result<&'a str, InputError> {
    match d.args.as_slice() {
        [a] => Ok(a),
        _ => Err(d.bad(file, &d.args.join(" "), "takes one value")),
    }
}

/// The values `proxy_next_upstream` takes in 1.22 (`ngx_http_proxy_next_upstream_masks`).
const NEXT_UPSTREAM: [&str; 13] = [
    "error",
    "timeout",
    "invalid_header",
    "non_idempotent",
    "http_500",
    "http_502",
    "http_503",
    "http_504",
    "http_403",
    "http_404",
    "http_429",
    "updating",
    "off",
];

fn next_upstream(file: &Path, d: &Directive) -> Result<Vec<String>, InputError> {
    if d.args.is_empty() {
        return Err(d.bad(file, "", "needs at least one value"));
    }
    d.args
        .iter()
        .map(|a| {
            let lower = a.to_ascii_lowercase();
            if NEXT_UPSTREAM.contains(&lower.as_str()) {
                Ok(lower)
            } else {
                Err(d.bad(file, a, "not a value nginx 1.22 takes here"))
            }
        })
        .collect()
}

/// A number (`ngx_conf_set_num_slot`): digits only.
fn count(file: &Path, d: &Directive) -> Result<u32, InputError> {
    let a = one_arg(file, d)?;
    if a.is_empty() || !a.bytes().all(|b| b.is_ascii_digit()) {
        return Err(d.bad(file, a, "invalid number"));
    }
    a.parse()
        .map_err(|_| d.bad(file, a, "more tries than check counts (2^32 - 1)"))
}

fn flag(file: &Path, d: &Directive) -> Result<bool, InputError> {
    let a = one_arg(file, d)?;
    match a.to_ascii_lowercase().as_str() {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(d.bad(file, a, "it must be \"on\" or \"off\"")),
    }
}

fn seconds(file: &Path, d: &Directive) -> Result<f64, InputError> {
    let a = one_arg(file, d)?;
    let why = "not an nginx time (a number with ms, s, m, h, d, w, M, y, largest first)";
    let ms = time_ms(a).ok_or_else(|| d.bad(file, a, why))?;
    Ok(ms as f64 / 1000.0)
}

/// An nginx time in ms (`ngx_parse_time` for a msec slot): parts like `1m30s` from the largest
/// unit down; a number without a unit is seconds.
fn time_ms(value: &str) -> Option<u64> {
    const UNITS: [(&str, u64); 8] = [
        ("y", 365 * 86_400_000),
        ("M", 30 * 86_400_000),
        ("w", 7 * 86_400_000),
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("ms", 1),
        ("m", 60_000),
        ("s", 1000),
    ];
    // The order units must come in (ms last).
    let rank = |u: &str| {
        ["y", "M", "w", "d", "h", "m", "s", "ms"]
            .iter()
            .position(|&x| x == u)
    };
    let limit = u64::try_from(i64::MAX).ok()?;
    let (mut total, mut last, mut rest) = (0u64, None, value.trim_end());
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let number: u64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let Some((unit, scale)) = UNITS.iter().find(|(u, _)| rest.starts_with(u)) else {
            // A bare number: seconds, and the end of the value.
            return if rest.is_empty() {
                total
                    .checked_add(number.checked_mul(1000)?)
                    .filter(|t| *t <= limit)
            } else {
                None
            };
        };
        let r = rank(unit)?;
        if last.is_some_and(|l| r <= l) {
            return None;
        }
        last = Some(r);
        total = total.checked_add(number.checked_mul(*scale)?)?;
        rest = rest[unit.len()..].trim_start_matches(' ');
    }
    (last.is_some() && total <= limit).then_some(total)
}

/// An `upstream` block: its `server` lines.
struct Upstream {
    name: String,
    servers: Vec<Server>,
}

struct Server {
    address: String,
    down: bool,
    backup: bool,
    /// `max_fails=0` turns passive health checks off for it.
    never_benched: bool,
}

struct Cx<'a> {
    file: &'a Path,
    upstreams: Vec<Upstream>,
    parsed: Parsed,
    /// Why the file was read as a snippet, for every layer's notes.
    snippet: Option<&'static str>,
}

impl Cx<'_> {
    fn skip(&mut self, d: &Directive, why: &str) {
        let what = d
            .args
            .first()
            .map_or(d.name.clone(), |a| format!("{} {a}", d.name));
        let skipped = Skipped::new(self.file, what, Some(d.line), why);
        self.parsed.skipped.push(skipped);
    }

    fn http(&mut self, block: &[Directive]) -> Result<(), InputError> {
        for d in block.iter().filter(|d| d.name == "upstream") {
            self.upstream(d)?;
        }
        let p = Proxy::read(self.file, block)?;
        let mut loose_locations = false;
        for d in block {
            match d.name.as_str() {
                "server" if d.block.is_some() => self.server(d, &p)?,
                "include" => self.skip(d, "not followed"),
                "location" => loose_locations = true,
                _ => {}
            }
        }
        if loose_locations {
            // A snippet included inside a server block.
            self.snippet = Some("no http or server block: read as if included in server {}");
            self.locations(block, &p, "server")?;
        }
        Ok(())
    }

    fn upstream(&mut self, d: &Directive) -> Result<(), InputError> {
        let Some(name) = d.args.first() else {
            return Err(InputError::syntax(
                self.file,
                d.line,
                "\"upstream\" needs a name",
            ));
        };
        if self
            .upstreams
            .iter()
            .any(|u| u.name.eq_ignore_ascii_case(name))
        {
            return Err(InputError::syntax(
                self.file,
                d.line,
                format!("duplicate upstream \"{name}\""),
            ));
        }
        let servers = d
            .children()
            .iter()
            .filter(|s| s.name == "server")
            .map(|s| {
                let has = |p: &str| s.args.iter().skip(1).any(|a| a == p);
                Server {
                    address: s.args.first().cloned().unwrap_or_default(),
                    down: has("down"),
                    backup: has("backup"),
                    never_benched: has("max_fails=0"),
                }
            })
            .collect();
        self.upstreams.push(Upstream {
            name: name.clone(),
            servers,
        });
        Ok(())
    }

    fn server(&mut self, d: &Directive, http: &Proxy) -> Result<(), InputError> {
        let p = Proxy::read(self.file, d.children())?.over(http);
        let name = d
            .children()
            .iter()
            .find(|c| c.name == "server_name")
            .and_then(|c| c.args.first())
            .map(|n| format!("server {n}"))
            .unwrap_or_else(|| format!("server (line {})", d.line));
        self.locations(d.children(), &p, &name)
    }

    fn locations(
        &mut self,
        block: &[Directive],
        p: &Proxy,
        server: &str,
    ) -> Result<(), InputError> {
        for d in block {
            match d.name.as_str() {
                // Recursion is bounded: `tree` refuses blocks nested deeper than MAX_DEPTH.
                "location" if d.block.is_some() => self.location(d, p, server)?,
                "if" => self.skip(d, "conditional block: not evaluated"),
                "limit_except" => self.skip(d, "per-method block: not read"),
                "include" => self.skip(d, "not followed"),
                _ => {}
            }
        }
        Ok(())
    }

    fn location(&mut self, d: &Directive, parent: &Proxy, server: &str) -> Result<(), InputError> {
        let p = Proxy::read(self.file, d.children())?.over(parent);
        let uri = d.args.join(" ");
        let locator = format!("{server} location {uri}");
        for c in d.children() {
            match c.name.as_str() {
                "proxy_pass" => self.proxied(d, c, &p, &locator)?,
                "fastcgi_pass" | "uwsgi_pass" | "scgi_pass" | "grpc_pass" | "memcached_pass" => {
                    let why = format!("{}: only proxy_pass is read", c.name);
                    self.skip(d, &why);
                }
                _ => {}
            }
        }
        self.locations(d.children(), &p, server)
    }

    fn proxied(
        &mut self,
        loc: &Directive,
        pass: &Directive,
        p: &Proxy,
        locator: &str,
    ) -> Result<(), InputError> {
        let url = one_arg(self.file, pass)?;
        if url.contains('$') {
            self.skip(
                loc,
                "proxy_pass with variables: the server is chosen per request",
            );
            return Ok(());
        }
        let target = self.target(pass, url)?;
        let layer = self.layer(loc, p, locator, &target);
        self.parsed.layers.push(layer);
        Ok(())
    }
}

/// Where `proxy_pass` sends requests: how many servers, and what is known of them.
struct Target {
    servers: u32,
    /// Every server is an IP address or a socket (a name may resolve to several addresses).
    exact: bool,
    notes: Vec<String>,
}

impl Cx<'_> {
    fn target(&self, pass: &Directive, url: &str) -> Result<Target, InputError> {
        let lower = url.to_ascii_lowercase();
        let Some(rest) = lower
            .strip_prefix("http://")
            .or_else(|| lower.strip_prefix("https://"))
        else {
            let why = "invalid URL prefix (http:// or https://)";
            return Err(pass.bad(self.file, url, why));
        };
        if rest.starts_with("unix:") {
            return Ok(Target {
                servers: 1,
                exact: true,
                notes: Vec::new(),
            });
        }
        let authority = rest.split('/').next().unwrap_or_default();
        let (host, port) = split_port(authority);
        let Some(group) = self
            .upstreams
            .iter()
            .find(|u| u.name.eq_ignore_ascii_case(host))
        else {
            let exact = host.parse::<IpAddr>().is_ok();
            let mut notes = Vec::new();
            if !exact {
                notes.push(format!(
                    "{host}: no upstream of that name in this file, so a host, resolved at \
                     start: one try per address it has"
                ));
            }
            return Ok(Target {
                servers: 1,
                exact,
                notes,
            });
        };
        if port.is_some() {
            let why = format!("upstream \"{}\" may not have a port", group.name);
            return Err(pass.bad(self.file, url, why));
        }
        Ok(group_target(group))
    }
}

fn split_port(authority: &str) -> (&str, Option<&str>) {
    if let Some(v6) = authority.strip_prefix('[') {
        let (host, after) = v6.split_once(']').unwrap_or((v6, ""));
        return (host, after.strip_prefix(':'));
    }
    match authority.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (authority, None),
    }
}

/// An upstream group's tries: one per server that is not `down`, backups included
/// (`ngx_http_upstream_tries` in ngx_http_upstream_round_robin.c adds the backup peers).
fn group_target(group: &Upstream) -> Target {
    let live: Vec<&Server> = group.servers.iter().filter(|s| !s.down).collect();
    let names: Vec<&str> = live
        .iter()
        .map(|s| s.address.as_str())
        .filter(|a| !is_address(a))
        .collect();
    let mut notes = Vec::new();
    if live.is_empty() {
        notes.push(format!("every server of upstream {} is down", group.name));
    }
    if !names.is_empty() {
        notes.push(format!(
            "{} resolved at start: one try per address each has",
            names.join(", ")
        ));
    }
    if live.iter().any(|s| s.backup) {
        notes.push("backup servers are tried after the others, one try each".into());
    }
    if live.iter().any(|s| !s.never_benched) {
        notes.push(
            "passive health checks (max_fails=1 in fail_timeout=10s unless set) take a failing \
             server out, and tries skip it"
                .into(),
        );
    }
    Target {
        servers: u32::try_from(live.len()).unwrap_or(u32::MAX),
        exact: names.is_empty(),
        notes,
    }
}

fn is_address(server: &str) -> bool {
    if server.starts_with("unix:") {
        return true;
    }
    let (host, _) = split_port(server);
    host.parse::<IpAddr>().is_ok()
}

impl Cx<'_> {
    fn layer(&self, loc: &Directive, p: &Proxy, locator: &str, target: &Target) -> Layer {
        let words = p
            .next_upstream
            .clone()
            .unwrap_or_else(|| vec!["error".into(), "timeout".into()]);
        let has = |w: &str| words.iter().any(|x| x == w);
        let off = has("off");
        let (retry_on, mut notes) = if off {
            (
                RetryOn::NOTHING,
                vec!["proxy_next_upstream off: one try".to_string()],
            )
        } else {
            classes(&words)
        };
        let limit = p.tries.unwrap_or(0);
        let tries = match (off, limit) {
            (true, _) => Tries::AtMost(1),
            (false, 0) => Tries::OnePerServer {
                servers: target.servers,
            },
            (false, n) if target.exact => Tries::AtMost(n.min(target.servers).max(1)),
            (false, n) => Tries::AtMost(n),
        };
        if !off {
            notes.extend(target.notes.iter().cloned());
            notes.extend(retry_notes(p, &words, limit, target));
        }
        notes.extend(self.snippet.map(String::from));
        // 0 was refused when read (`nginx_read_timeout_s`).
        let read = p.read_timeout_s.unwrap_or(60.0);
        let source = Source::new(self.file, Some(loc.line), locator);
        Layer {
            tries,
            retry_on,
            per_try_timeout_s: Some(read),
            overall_timeout_s: p.next_upstream_timeout_s.filter(|t| *t > 0.0),
            aborts_on_close: !p.ignore_client_abort.unwrap_or(false),
            defaults: defaults_used(p, off),
            notes,
            ..Layer::new("nginx", Tier::Edge, source)
        }
    }
}

/// The three classes from `proxy_next_upstream`, and what else it retries; its `http_NNN`
/// statuses go through [`retried_codes`].
fn classes(words: &[String]) -> (RetryOn, Vec<String>) {
    let has = |w: &str| words.iter().any(|x| x == w);
    let codes: Vec<u32> = words
        .iter()
        .filter_map(|w| w.strip_prefix("http_")?.parse().ok())
        .collect();
    let (status_5xx, status_note) = retried_codes(&codes);
    let mut notes: Vec<String> = status_note.into_iter().collect();
    if has("invalid_header") {
        notes.push("also retries on invalid_header, outside the three failure classes".into());
    }
    let retry_on = RetryOn {
        timeout: has("timeout"),
        connect_failure: has("error"),
        status_5xx,
    };
    (retry_on, notes)
}

fn retry_notes(p: &Proxy, words: &[String], limit: u32, target: &Target) -> Vec<String> {
    let mut notes = Vec::new();
    if words.iter().any(|w| w == "non_idempotent") {
        notes.push("non_idempotent: POST, LOCK and PATCH requests are retried too".into());
    } else {
        notes.push(
            "POST, LOCK and PATCH requests are not retried once sent (no non_idempotent)".into(),
        );
    }
    if limit > target.servers && target.exact {
        notes.push(format!(
            "proxy_next_upstream_tries {limit}, but only {} servers: one try each",
            target.servers
        ));
    }
    let connect = match p.connect_timeout_s {
        Some(s) => format!("{s}s"),
        None => "60s by default".to_string(),
    };
    notes.push(format!(
        "proxy_read_timeout bounds the wait between two reads, not the whole response; \
         connecting (proxy_connect_timeout, {connect}) comes on top"
    ));
    if p.request_buffering == Some(false) {
        notes.push(
            "proxy_request_buffering off: a request whose body has started upstream is not retried"
                .into(),
        );
    }
    notes
}

/// The built-in values this location's figures rest on.
fn defaults_used(p: &Proxy, off: bool) -> Vec<DefaultUsed> {
    let used = |setting: &str, value: &str| {
        let source = "src/http/modules/ngx_http_proxy_module.c (release-1.22.1)";
        DefaultUsed::new(
            setting,
            value,
            VERSION,
            format!("{PROXY_DOC}#{setting}; {source}"),
        )
    };
    let mut out = Vec::new();
    if p.next_upstream.is_none() {
        out.push(used("proxy_next_upstream", "error timeout"));
    }
    if !off && p.tries.is_none() {
        out.push(used(
            "proxy_next_upstream_tries",
            "0 (no limit: one try per server)",
        ));
    }
    if !off && p.next_upstream_timeout_s.is_none() {
        out.push(used("proxy_next_upstream_timeout", "0 (no limit)"));
    }
    if p.read_timeout_s.is_none() {
        out.push(used("proxy_read_timeout", "60s"));
    }
    if p.ignore_client_abort.is_none() {
        out.push(used("proxy_ignore_client_abort", "off"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Parsed {
        parse(Path::new("t.conf"), text).unwrap()
    }

    fn only(parsed: &Parsed) -> Layer {
        assert_eq!(parsed.layers.len(), 1, "{:#?}", parsed.layers);
        parsed.layers[0].clone()
    }

    const TIMEOUT_AND_CONNECT: RetryOn = RetryOn {
        timeout: true,
        connect_failure: true,
        status_5xx: false,
    };

    #[test]
    fn nginxs_own_default_configuration_proxies_nothing() {
        let text = include_str!("../tests/data/nginx/nginx.conf");
        let parsed = read(text);
        assert!(parsed.layers.is_empty());
        assert_eq!(parsed.skipped.len(), 1);
        assert_eq!(parsed.skipped[0].what, "include mime.types (line 18)");
    }

    #[test]
    fn the_load_balancing_example_tries_each_of_three_servers() {
        let text = include_str!("../tests/data/nginx/load_balancing.conf");
        let l = only(&read(text));
        assert_eq!(l.tries, Tries::OnePerServer { servers: 3 });
        assert_eq!(l.retry_on, TIMEOUT_AND_CONNECT);
        assert_eq!(l.per_try_timeout_s, Some(60.0));
        assert_eq!(l.overall_timeout_s, None);
        assert!(l.aborts_on_close);
        assert_eq!(l.source.line, Some(11));
        let settings: Vec<&str> = l.defaults.iter().map(|d| d.setting.as_str()).collect();
        assert_eq!(
            settings,
            [
                "proxy_next_upstream",
                "proxy_next_upstream_tries",
                "proxy_next_upstream_timeout",
                "proxy_read_timeout",
                "proxy_ignore_client_abort"
            ]
        );
        assert!(l.defaults.iter().all(|d| d.version.contains("1.22")));
        assert!(l.notes.iter().any(|n| n.contains("POST")));
        assert!(l.notes.iter().any(|n| n.contains("srv1.example.com")));
    }

    #[test]
    fn the_upstream_example_counts_backups_and_reads_as_a_snippet() {
        let text = include_str!("../tests/data/nginx/upstream_module_example.conf");
        let l = only(&read(text));
        assert_eq!(l.tries, Tries::OnePerServer { servers: 5 });
        assert!(l.notes.iter().any(|n| n.contains("backup")));
        assert!(l.notes.iter().any(|n| n.contains("no http block")));
    }

    #[test]
    fn the_proxy_module_example_is_a_location_alone() {
        let text = include_str!("../tests/data/nginx/proxy_module_example.conf");
        let l = only(&read(text));
        assert_eq!(l.tries, Tries::OnePerServer { servers: 1 });
        assert_eq!(l.source.locator, "server location /");
        assert!(l.notes.iter().any(|n| n.contains("localhost")));
    }

    #[test]
    fn directives_inherit_inwards_and_inner_ones_replace_outer_ones() {
        let text = "
http {
    proxy_next_upstream error;
    proxy_ignore_client_abort on;
    upstream app { server 192.0.2.1; server 192.0.2.2; server 192.0.2.3 down; }
    server {
        server_name example.com;
        proxy_next_upstream_tries 5;
        location /a {
            proxy_pass http://APP;
            proxy_read_timeout 2s;
            proxy_next_upstream_timeout 10s;
            location /a/b {
                proxy_pass http://app/x;
                proxy_next_upstream timeout http_503;
                proxy_next_upstream non_idempotent;
            }
        }
    }
}";
        let parsed = read(text);
        assert_eq!(parsed.layers.len(), 2);
        let (a, b) = (&parsed.layers[0], &parsed.layers[1]);
        assert_eq!(a.source.locator, "server example.com location /a");
        assert_eq!(a.tries, Tries::AtMost(2));
        assert_eq!(
            a.retry_on,
            RetryOn {
                timeout: false,
                connect_failure: true,
                status_5xx: false
            }
        );
        assert_eq!(a.per_try_timeout_s, Some(2.0));
        assert_eq!(a.overall_timeout_s, Some(10.0));
        assert!(!a.aborts_on_close);
        assert!(a.notes.iter().any(|n| n.contains("only 2 servers")));
        assert_eq!(b.source.locator, "server example.com location /a/b");
        assert_eq!(
            b.retry_on,
            RetryOn {
                timeout: true,
                connect_failure: false,
                status_5xx: true
            }
        );
        assert_eq!(b.per_try_timeout_s, Some(2.0));
        assert!(b.notes.iter().any(|n| n.contains("only 503")));
        assert!(b.notes.iter().any(|n| n.contains("non_idempotent")));
    }

    #[test]
    fn off_and_status_codes() {
        let loc = |policy: &str| {
            only(&read(&format!(
                "server {{ location / {{ proxy_pass http://192.0.2.1:80; {policy} }} }}"
            )))
        };
        let off = loc("proxy_next_upstream off;");
        assert_eq!(off.tries, Tries::AtMost(1));
        assert_eq!(off.retry_on, RetryOn::NOTHING);
        let five = loc("proxy_next_upstream http_500 http_404;");
        assert_eq!(five.retry_on, RetryOn::NOTHING);
        assert!(
            five.notes
                .iter()
                .any(|n| n.contains("500, 404 outside the three failure classes")),
            "{:?}",
            five.notes
        );
        let all = loc("proxy_next_upstream ERROR http_502 http_503 http_504;");
        assert!(all.retry_on.status_5xx && all.retry_on.connect_failure);
        assert!(!all.notes.iter().any(|n| n.contains("only")));
        // http_500 alone is not the 5xx class; with http_503 it is, and 500 is still noted.
        let both = loc("proxy_next_upstream http_500 http_503;");
        assert!(both.retry_on.status_5xx);
        assert!(both.notes.iter().any(|n| n.contains("500 outside")));
    }

    /// nginx 1.22 arms the read timer with 0 ms: every try times out at once. Not "no timeout".
    #[test]
    fn a_zero_read_timeout_is_refused_not_read_as_none() {
        let e = refused("server { location / { proxy_pass http://a; proxy_read_timeout 0; } }");
        match e {
            InputError::Field {
                field, value, why, ..
            } => {
                assert_eq!(
                    (field.as_str(), value.as_str()),
                    ("proxy_read_timeout", "0")
                );
                assert!(why.contains("next"), "{why}");
            }
            other => panic!("{other:?}"),
        }
        let inherited =
            "http { proxy_read_timeout 0s; server { location / { proxy_pass http://a; } } }";
        assert!(matches!(refused(inherited), InputError::Field { .. }));
    }

    #[test]
    fn a_host_counts_as_one_server_unless_a_name_may_have_more() {
        let loc = |url: &str| {
            only(&read(&format!(
                "server {{ location / {{ proxy_pass {url}; proxy_next_upstream_tries 3; }} }}"
            )))
        };
        assert_eq!(loc("http://192.0.2.1:8080").tries, Tries::AtMost(1));
        assert_eq!(loc("https://[2001:db8::1]:443/x").tries, Tries::AtMost(1));
        assert_eq!(loc("http://unix:/run/app.sock:/").tries, Tries::AtMost(1));
        let named = loc("http://app.internal:8080");
        assert_eq!(named.tries, Tries::AtMost(3));
        assert!(
            named
                .notes
                .iter()
                .any(|n| n.contains("one try per address"))
        );
    }

    #[test]
    fn what_is_not_read_is_listed() {
        let text = "
stream { server { proxy_pass 192.0.2.1:53; } }
http {
    include conf.d/*.conf;
    server {
        location / { if ($x) { proxy_pass http://192.0.2.1; } }
        location /v { proxy_pass http://$backend; }
        location /g { grpc_pass grpc://192.0.2.1:50051; }
    }
}";
        let parsed = read(text);
        assert!(parsed.layers.is_empty());
        let what: Vec<&str> = parsed.skipped.iter().map(|s| s.what.as_str()).collect();
        assert_eq!(
            what,
            [
                "stream (line 2)",
                "include conf.d/*.conf (line 4)",
                "if ($x) (line 6)",
                "location /v (line 7)",
                "location /g (line 8)"
            ]
        );
    }

    #[test]
    fn quotes_comments_and_variables_are_words_as_nginx_cuts_them() {
        let toks = tokens(Path::new("t"), "a \"b c\" 'd;e' ${f}g # h { ;\n \\;x;").unwrap();
        let words: Vec<String> = toks
            .into_iter()
            .filter_map(|(t, _)| match t {
                Tok::Word(w) => Some(w),
                _ => None,
            })
            .collect();
        assert_eq!(words, ["a", "b c", "d;e", "${f}g", "\\;x"]);
        let l = only(&read(
            "server { location / { proxy_pass \"http://192.0.2.1\"; proxy_read_timeout '5s'; } }",
        ));
        assert_eq!(l.per_try_timeout_s, Some(5.0));
    }

    #[test]
    fn times_take_nginxs_units() {
        for (v, ms) in [
            ("150ms", 150),
            ("60", 60_000),
            ("60s", 60_000),
            ("1m30s", 90_000),
            ("1m 30s", 90_000),
            ("1m30", 90_000),
            ("1h", 3_600_000),
            ("2d", 172_800_000),
            ("1w", 604_800_000),
            ("1M", 2_592_000_000),
            ("1y", 31_536_000_000),
            ("1s500ms", 1500),
            ("0", 0),
        ] {
            assert_eq!(time_ms(v), Some(ms), "{v}");
        }
        for v in [
            "",
            "3x",
            "1.5s",
            "s",
            "30sm",
            "1s1m",
            "1ms1s",
            "ms",
            "-1s",
            "1s1s",
            "99999999999999999999s",
            "9223372036854775807s",
        ] {
            assert_eq!(time_ms(v), None, "{v}");
        }
    }

    fn refused(text: &str) -> InputError {
        parse(Path::new("bad.conf"), text).unwrap_err()
    }

    #[test]
    fn malformed_files_name_the_line_or_the_field() {
        let line_of = |e: InputError| match e {
            InputError::Syntax { line, .. } => line,
            other => panic!("{other:?}"),
        };
        assert_eq!(line_of(refused("http {\n server {\n location / {\n")), 3);
        assert_eq!(line_of(refused("http {\n}\n}\n")), 3);
        assert_eq!(line_of(refused("http {\n proxy_read_timeout 5s\n}")), 3);
        assert_eq!(line_of(refused("events {}\nworker_processes 1")), 2);
        assert_eq!(line_of(refused("http {\n ;\n}")), 2);
        assert_eq!(line_of(refused("{ }")), 1);
        assert_eq!(line_of(refused("http { server_name \"a\n b;\n")), 1);
        assert_eq!(line_of(refused("http { server_name \"a\"b; }")), 1);
        assert_eq!(
            line_of(refused(
                "http { proxy_read_timeout 1s;\n proxy_read_timeout 2s; }"
            )),
            2
        );
        assert_eq!(line_of(refused("http {}\nhttp {}")), 2);
        assert_eq!(line_of(refused("upstream a { }\nupstream A { }")), 2);
        let deep = "location / {".repeat(100);
        assert_eq!(line_of(refused(&deep)), 1);
        let field_of = |e: InputError| match e {
            InputError::Field { field, value, .. } => (field, value),
            other => panic!("{other:?}"),
        };
        let cases = [
            ("proxy_read_timeout 3x;", "proxy_read_timeout", "3x"),
            ("proxy_next_upstream bogus;", "proxy_next_upstream", "bogus"),
            (
                "proxy_next_upstream_tries 99999999999;",
                "proxy_next_upstream_tries",
                "99999999999",
            ),
            (
                "proxy_next_upstream_tries -1;",
                "proxy_next_upstream_tries",
                "-1",
            ),
            (
                "proxy_ignore_client_abort maybe;",
                "proxy_ignore_client_abort",
                "maybe",
            ),
            ("proxy_read_timeout 1s 2s;", "proxy_read_timeout", "1s 2s"),
        ];
        for (line, name, value) in cases {
            let e = refused(&format!(
                "server {{ location / {{ proxy_pass http://a; {line} }} }}"
            ));
            assert_eq!(field_of(e), (name.to_string(), value.to_string()), "{line}");
        }
        let e = refused(
            "upstream app { server a; }\nserver { location / { proxy_pass http://app:80; } }",
        );
        assert_eq!(
            field_of(e),
            ("proxy_pass".to_string(), "http://app:80".to_string())
        );
        let e = refused("server { location / { proxy_pass ftp://a; } }");
        assert_eq!(field_of(e).0, "proxy_pass");
    }

    #[test]
    fn hostile_input_is_refused_or_read_without_panic() {
        for text in [
            "\u{0}",
            "}}}}",
            "{{{{",
            "\"",
            "'\\",
            "a${",
            "server { location { proxy_pass; } }",
            "server { location / { proxy_pass http://; } }",
            "server { location / { proxy_pass http://[::1; } }",
            "upstream { }",
            "#",
            "\\",
        ] {
            let _ = parse(Path::new("x"), text);
        }
        let many = "server { location / { proxy_pass http://192.0.2.1; } }\n".repeat(5_000);
        assert_eq!(read(&many).layers.len(), 5_000);
    }
}
