//! One attempt over HTTP/1.1 (default, the kit's own lean exchange in [`crate::h1`]) or h2c
//! (hyper's connection API).
//!
//! HTTP/1.1: an attempt takes an idle keep-alive connection or opens a new one to a random
//! target; it owns that connection until the response is read, so every attempt to a server
//! that does not answer holds its own socket, and nothing more. The attempt's own task reads
//! the answer (no task per connection, no channel hop); an idle connection is not polled, and
//! one the server closed meanwhile is found before reuse (the reactor has kept the readiness
//! its FIN or reset raised) and dropped. A request is never resent behind the caller's back:
//! a connection that ends before its answer is an `io` error of that attempt.
//! Every connection this side closes goes with a reset (`SO_LINGER` 0, set before it connects):
//! an attempt dropped at its timeout, even while connecting, so the server sees the client go
//! as with a real client that gives up; an idle one beyond the pool or at the end; an h2c one.
//! This side keeps no TIME_WAIT, which at thousands of abandoned attempts a second would hold
//! every ephemeral port and makes every later `connect` slow: with 12,000 of them, the kernel's
//! search for a free port took two thirds of the loadgen's CPU.
//!
//! h2c: one shared connection per target (per shard: each shard has its own `Client`); dropping
//! an attempt resets its stream only.
//!
//! `https://` targets: the same, over a TLS session ([`crate::tls`]) on the connection; a
//! failed handshake is a `tls` error of the attempt. gRPC (`--grpc`): each attempt a unary call
//! on the HTTP/2 connection, judged by its `grpc-status`.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Waker};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rand::Rng;
use tokio::net::{TcpSocket, TcpStream};
use tokio::task::{JoinHandle, JoinSet};
use tokio_rustls::client::TlsStream;

use crate::config::TlsFlags;
use crate::h1;
use crate::record::{AttemptOutcome, ErrorKind};
use crate::request::{GrpcOutcome, Prepared, PreparedRequest, RequestSet, grpc_timeout};
use crate::targets::{Target, Targets};
use crate::tls::{Handshake, HandshakeFailed, Tls};

/// Idle HTTP/1.1 connections kept for reuse at most; more are closed when they come back.
const MAX_IDLE: usize = 4096;

/// Aborts the task driving a connection when dropped, which closes its socket.
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// An HTTP/1.1 connection's byte stream: plain, or a TLS session on it.
enum Wire {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

struct H1Conn {
    target: Arc<Target>,
    wire: Wire,
}

impl H1Conn {
    /// Still open with nothing unread, and its target still listed. An idle connection is not
    /// polled, but the reactor keeps the readiness that the peer's FIN or reset raised: with
    /// none since its last answer was read (which cleared it, see [`h1::exchange`]) this costs
    /// no system call; otherwise one `recv` tells. A TLS session is read without waiting
    /// instead: what a server sends an idle session unasked (TLS 1.3 session tickets) is taken
    /// in, and only plaintext, a close or an error make it unusable.
    fn usable(&mut self) -> bool {
        if self.target.is_retired() {
            return false;
        }
        let mut nothing_came = Context::from_waker(Waker::noop());
        match &mut self.wire {
            Wire::Plain(stream) => {
                if stream.poll_read_ready(&mut nothing_came).is_pending() {
                    return true;
                }
                let mut probe = [0u8; 1];
                matches!(stream.try_read(&mut probe), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
            }
            Wire::Tls(stream) => {
                let mut probe = [0u8; 1];
                let mut buf = tokio::io::ReadBuf::new(&mut probe);
                tokio::io::AsyncRead::poll_read(
                    std::pin::Pin::new(stream.as_mut()),
                    &mut nothing_came,
                    &mut buf,
                )
                .is_pending()
            }
        }
    }
}

struct H2Conn {
    target: Arc<Target>,
    sender: http2::SendRequest<Full<Bytes>>,
    _driver: Arc<AbortOnDrop>,
}

/// How the client speaks, fixed for the run.
#[derive(Clone)]
pub struct Speech {
    /// HTTP/2 (h2c, or ALPN h2 over TLS) on one shared connection per target.
    pub http2: bool,
    /// Attempt timeout, for `x-deadline-ms` when `deadline` is set and `grpc-timeout` always.
    pub timeout: Duration,
    /// Send `x-deadline-ms`.
    pub deadline: bool,
    /// For `https://` targets.
    pub tls: Option<Tls>,
    /// What each attempt sends.
    pub requests: Arc<Prepared>,
}

impl Speech {
    /// The requests prepared (values read from the environment and files once, here); HTTP/2
    /// when asked (`http2`) or for gRPC; TLS when one of `targets` is `https://` or a TLS flag
    /// was given.
    pub fn new(
        requests: &RequestSet,
        tls: &TlsFlags,
        http2: bool,
        timeout: Duration,
        deadline: bool,
        targets: &Targets,
    ) -> Result<Speech, String> {
        let prepared = requests
            .prepare(&|name| std::env::var(name).ok())
            .map_err(|e| e.0)?;
        let http2 = http2 || requests.grpc;
        let tls = (targets.any_tls() || tls.any())
            .then(|| Tls::new(tls, http2))
            .transpose()?;
        Ok(Speech {
            http2,
            timeout,
            deadline,
            tls,
            requests: Arc::new(prepared),
        })
    }
}

/// TLS handshakes by kind, over every shard's client.
#[derive(Debug, Default)]
pub struct Handshakes {
    pub full: std::sync::atomic::AtomicU64,
    pub resumed: std::sync::atomic::AtomicU64,
}

/// How one attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exchanged {
    /// Success on a 2xx response read to its end (a gRPC call: status OK).
    pub outcome: AttemptOutcome,
    /// How long the answer sat unread in the socket (plain HTTP/1.1; zero otherwise), which
    /// its latency does not count.
    pub unread: Duration,
    /// The answer's HTTP status, when one came; a gRPC call's UNAVAILABLE and
    /// RESOURCE_EXHAUSTED are a 503, as they are counted.
    pub status: Option<u16>,
}

impl Exchanged {
    fn failed(kind: ErrorKind) -> Exchanged {
        Exchanged {
            outcome: AttemptOutcome::Error(kind),
            unread: Duration::ZERO,
            status: None,
        }
    }
}

/// Sends attempts to the current targets.
pub struct Client {
    targets: Arc<Targets>,
    bind: Vec<IpAddr>,
    next_bind: AtomicUsize,
    speech: Speech,
    handshakes: Arc<Handshakes>,
    idle: Mutex<Vec<H1Conn>>,
    h2: Mutex<Vec<H2Conn>>,
}

impl Client {
    pub fn new(
        targets: Arc<Targets>,
        bind: Vec<IpAddr>,
        speech: Speech,
        handshakes: Arc<Handshakes>,
    ) -> Client {
        Client {
            targets,
            bind,
            next_bind: AtomicUsize::new(0),
            speech,
            handshakes,
            idle: Mutex::new(Vec::new()),
            h2: Mutex::new(Vec::new()),
        }
    }

    /// [`Client::exchange`]'s outcome and unread time (what the trigger's capacity probe reads).
    pub async fn attempt(&self, id: &str, attempt: u32) -> (AttemptOutcome, Duration) {
        let e = self.exchange(id, attempt).await;
        (e.outcome, e.unread)
    }

    /// Sends attempt `attempt` of request `id`. The caller bounds it with the attempt timeout
    /// and drops it when that fires.
    pub async fn exchange(&self, id: &str, attempt: u32) -> Exchanged {
        let s = &self.speech;
        let deadline_ms = s
            .deadline
            .then(|| deadline_ms(SystemTime::now(), s.timeout));
        let sent = if s.requests.is_mix() {
            s.requests.pick(rand::rng().random::<f64>())
        } else {
            s.requests.pick(0.0)
        };
        if s.http2 {
            // Boxed: its state would otherwise size every HTTP/1.1 attempt's future too.
            return match Box::pin(self.attempt_h2(sent, id, attempt, deadline_ms)).await {
                Ok((outcome, status)) => Exchanged {
                    outcome,
                    unread: Duration::ZERO,
                    status: Some(status),
                },
                Err(kind) => Exchanged::failed(kind),
            };
        }
        let mut conn = match self.take_idle() {
            Some(c) => c,
            None => match self.connect_h1().await {
                Ok(c) => c,
                Err(kind) => return Exchanged::failed(kind),
            },
        };
        let request = h1::request(&conn.target, sent, id, attempt, deadline_ms);
        let head = sent.method.is_head();
        let exchanged = match &mut conn.wire {
            Wire::Plain(stream) => h1::exchange(stream, request, head).await,
            Wire::Tls(stream) => Box::pin(h1::exchange_stream(stream.as_mut(), request, head))
                .await
                .map(|answer| (answer, Duration::ZERO)),
        };
        let Ok((answer, unread)) = exchanged else {
            return Exchanged::failed(ErrorKind::Io);
        };
        if answer.reusable {
            self.put_idle(conn);
        }
        Exchanged {
            outcome: classify_status(answer.status),
            unread,
            status: Some(answer.status),
        }
    }

    /// Opens up to `n` HTTP/1.1 connections to random targets at once and keeps them idle
    /// (at most [`MAX_IDLE`]): how many opened within `limit`, and the first failure (those
    /// not open by then count as `connect`).
    pub async fn warm(self: &Arc<Self>, n: usize, limit: Duration) -> (usize, Option<ErrorKind>) {
        let deadline = tokio::time::Instant::now() + limit;
        let mut opening = JoinSet::new();
        for _ in 0..n.min(MAX_IDLE) {
            let client = self.clone();
            opening.spawn(async move { client.connect_h1().await });
        }
        let (mut opened, mut failure) = (0, None);
        while let Ok(Some(joined)) = tokio::time::timeout_at(deadline, opening.join_next()).await {
            match joined {
                Ok(Ok(conn)) => opened += usize::from(self.put_idle(conn)),
                Ok(Err(kind)) => {
                    failure.get_or_insert(kind);
                }
                Err(panic) => std::panic::resume_unwind(panic.into_panic()),
            }
        }
        if !opening.is_empty() {
            failure.get_or_insert(ErrorKind::Connect);
        }
        (opened, failure)
    }

    fn take_idle(&self) -> Option<H1Conn> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        while let Some(mut c) = idle.pop() {
            if c.usable() {
                return Some(c);
            }
        }
        None
    }

    /// Keeps `conn` for reuse if there is room; whether it was kept. Whether it is still usable
    /// is checked once, when it is taken.
    fn put_idle(&self, conn: H1Conn) -> bool {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let keep = idle.len() < MAX_IDLE;
        if keep {
            idle.push(conn);
        }
        keep
    }

    async fn connect_h1(&self) -> Result<H1Conn, ErrorKind> {
        let (target, stream) = self.connect().await?;
        let wire = if target.tls {
            // Boxed: a handshake's state (a whole TLS session) would size every attempt's future.
            Wire::Tls(Box::new(Box::pin(self.handshake(&target, stream)).await?))
        } else {
            stamp_receive_times(&stream);
            Wire::Plain(stream)
        };
        Ok(H1Conn { target, wire })
    }

    /// The TLS handshake on a new connection to an `https://` target, counted by kind.
    async fn handshake(
        &self,
        target: &Target,
        stream: TcpStream,
    ) -> Result<TlsStream<TcpStream>, ErrorKind> {
        let tls = self.speech.tls.as_ref().ok_or(ErrorKind::Tls)?;
        let (stream, kind) = tls
            .connect(target.host(), stream)
            .await
            .map_err(|e| match e {
                HandshakeFailed::Refused => ErrorKind::Tls,
                HandshakeFailed::Io(e) => classify_io(&e),
            })?;
        let counter = match kind {
            Handshake::Full => &self.handshakes.full,
            Handshake::Resumed => &self.handshakes.resumed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        Ok(stream)
    }

    /// The target's shared HTTP/2 connection, opened (and its TLS handshake made) if none.
    async fn h2_sender(
        &self,
        target: &Arc<Target>,
    ) -> Result<(http2::SendRequest<Full<Bytes>>, Arc<AbortOnDrop>), ErrorKind> {
        let shared = {
            let mut conns = self.h2.lock().unwrap_or_else(|p| p.into_inner());
            conns.retain(|c| !c.sender.is_closed() && !c.target.is_retired());
            conns
                .iter()
                .find(|c| Arc::ptr_eq(&c.target, target))
                .map(|c| (c.sender.clone(), c._driver.clone()))
        };
        if let Some(s) = shared {
            return Ok(s);
        }
        let stream = self.connect_to(target).await?;
        let (sender, driver) = if target.tls {
            h2_handshake(Box::pin(self.handshake(target, stream)).await?).await?
        } else {
            h2_handshake(stream).await?
        };
        let driver = Arc::new(AbortOnDrop(driver));
        let mut conns = self.h2.lock().unwrap_or_else(|p| p.into_inner());
        conns.push(H2Conn {
            target: target.clone(),
            sender: sender.clone(),
            _driver: driver.clone(),
        });
        Ok((sender, driver))
    }

    /// The outcome and the status it was read from.
    async fn attempt_h2(
        &self,
        kind: &PreparedRequest,
        id: &str,
        attempt: u32,
        deadline_ms: Option<u64>,
    ) -> Result<(AttemptOutcome, u16), ErrorKind> {
        let target = self.targets.pick().ok_or(ErrorKind::NoTarget)?;
        let (mut sender, _driver) = self.h2_sender(&target).await?;
        let grpc = self.speech.requests.grpc;
        let grpc_deadline = grpc.then(|| grpc_timeout(self.speech.timeout));
        let req = build_request(&target, kind, id, attempt, deadline_ms, grpc_deadline)
            .ok_or(ErrorKind::StatusOther)?;
        sender.ready().await.map_err(|_| ErrorKind::Io)?;
        let resp = sender.send_request(req).await.map_err(|_| ErrorKind::Io)?;
        let (head, body) = resp.into_parts();
        let collected = body.collect().await.map_err(|_| ErrorKind::Io)?;
        let http_status = head.status.as_u16();
        if !grpc || head.status != http::StatusCode::OK {
            return Ok((classify_status(http_status), http_status));
        }
        // A call's status is in its trailers, or in the head of a trailers-only answer.
        let status = collected
            .trailers()
            .and_then(|t| t.get("grpc-status"))
            .or_else(|| head.headers.get("grpc-status"))
            .and_then(|v| v.to_str().ok()?.parse::<u32>().ok());
        Ok(match status.map(GrpcOutcome::of) {
            Some(GrpcOutcome::Ok) => (AttemptOutcome::Success, http_status),
            Some(GrpcOutcome::Deadline) => (AttemptOutcome::Timeout, http_status),
            Some(GrpcOutcome::Unavailable) => (AttemptOutcome::Error(ErrorKind::Status5xx), 503),
            Some(GrpcOutcome::Other) => {
                (AttemptOutcome::Error(ErrorKind::StatusOther), http_status)
            }
            // No status is a broken call (RFC: the server must send one).
            None => return Err(ErrorKind::Io),
        })
    }

    /// A new TCP connection to a random target.
    async fn connect(&self) -> Result<(Arc<Target>, TcpStream), ErrorKind> {
        let target = self.targets.pick().ok_or(ErrorKind::NoTarget)?;
        let stream = self.connect_to(&target).await?;
        Ok((target, stream))
    }

    async fn connect_to(&self, target: &Target) -> Result<TcpStream, ErrorKind> {
        let addr = target.resolve().await.map_err(|_| ErrorKind::Connect)?;
        let socket = match addr {
            SocketAddr::V4(_) => TcpSocket::new_v4(),
            SocketAddr::V6(_) => TcpSocket::new_v6(),
        }
        .map_err(|e| classify_io(&e))?;
        // Closed with a reset whenever this side closes it, even mid-connect (see the module
        // doc).
        let _ = socket.set_zero_linger();
        if let Some(source) = self.source_for(addr) {
            bind_source(&socket, source).map_err(|e| classify_io(&e))?;
        }
        let stream = socket.connect(addr).await.map_err(|e| classify_io(&e))?;
        // Requests are tiny and must go out at once.
        let _ = stream.set_nodelay(true);
        Ok(stream)
    }

    /// The next `--bind` address of the destination's family, round robin.
    fn source_for(&self, dest: SocketAddr) -> Option<IpAddr> {
        if self.bind.is_empty() {
            return None;
        }
        let n = self.bind.len();
        let start = self.next_bind.fetch_add(1, Ordering::Relaxed);
        (0..n)
            .map(|k| self.bind[(start + k) % n])
            .find(|ip| ip.is_ipv4() == dest.is_ipv4())
    }
}

/// HTTP/2's connection preface on `stream`: the request sender, and the task driving the
/// connection.
async fn h2_handshake<S>(
    stream: S,
) -> Result<(http2::SendRequest<Full<Bytes>>, JoinHandle<()>), ErrorKind>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
        .await
        .map_err(|_| ErrorKind::Io)?;
    let driver = tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok((sender, driver))
}

/// Binds a source address without reserving a port: with `IP_BIND_ADDRESS_NO_PORT` the port
/// is chosen at connect time per destination, so one source address serves ~28,000
/// connections to *each* destination instead of in total.
fn bind_source(socket: &TcpSocket, ip: IpAddr) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    turn_on(socket, libc::IPPROTO_IP, libc::IP_BIND_ADDRESS_NO_PORT);
    socket.bind(SocketAddr::new(ip, 0))
}

/// Asks the kernel to stamp what the socket receives with the time it came
/// (`SO_TIMESTAMPNS`), so that an answer's latency ends when it arrived, not when a busy or
/// napping shard (see [`crate::gather`]) read it ([`h1::exchange`] reads the stamps).
pub fn stamp_receive_times(stream: &TcpStream) {
    #[cfg(target_os = "linux")]
    turn_on(stream, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS);
    #[cfg(not(target_os = "linux"))]
    let _ = stream;
}

/// Sets a boolean socket option. Best effort: without it the socket works, only less well.
#[cfg(target_os = "linux")]
fn turn_on(socket: &impl std::os::fd::AsRawFd, level: libc::c_int, option: libc::c_int) {
    let one: libc::c_int = 1;
    // SAFETY: a valid socket fd and a c_int option value of the right size.
    unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            level,
            option,
            (&one as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

/// The HTTP/2 request (HTTP/1.1 requests are written by [`h1::request`]); `None` when a
/// prepared value is not a valid HTTP/2 header (checked when prepared, so never in practice).
fn build_request(
    target: &Target,
    kind: &PreparedRequest,
    id: &str,
    attempt: u32,
    deadline_ms: Option<u64>,
    grpc_timeout: Option<String>,
) -> Option<http::Request<Full<Bytes>>> {
    let uri = match &kind.path {
        Some(path) => format!("{}://{}{path}", target.scheme(), target.authority),
        None => target.url.clone(),
    };
    let mut b = http::Request::builder()
        .method(kind.method.as_str())
        .uri(uri)
        .header(http::header::USER_AGENT, h1::USER_AGENT)
        .header("x-request-id", id)
        .header("x-attempt", attempt);
    if let Some(ms) = deadline_ms {
        b = b.header("x-deadline-ms", ms);
    }
    if let Some(t) = grpc_timeout {
        b = b.header("grpc-timeout", t);
    }
    for (name, value) in &kind.headers {
        b = b.header(name.as_str(), value.as_slice());
    }
    b.body(Full::new(Bytes::from(kind.body.clone()))).ok()
}

/// The attempt's `x-deadline-ms`: its timeout from `now`, in Unix milliseconds rounded up, so
/// that a pod dropping expired work never drops it before this client has given up.
fn deadline_ms(now: SystemTime, timeout: Duration) -> u64 {
    (now + timeout)
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos().div_ceil(1_000_000) as u64)
}

fn classify_status(status: u16) -> AttemptOutcome {
    if (200..300).contains(&status) {
        AttemptOutcome::Success
    } else if (500..600).contains(&status) {
        AttemptOutcome::Error(ErrorKind::Status5xx)
    } else {
        AttemptOutcome::Error(ErrorKind::StatusOther)
    }
}

fn classify_io(e: &std::io::Error) -> ErrorKind {
    match e.raw_os_error() {
        Some(libc::EADDRNOTAVAIL) => ErrorKind::AddrNotAvailable,
        Some(libc::EMFILE | libc::ENFILE) => ErrorKind::OpenFiles,
        _ => ErrorKind::Connect,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a waiting attempt holds besides its socket: its future. TLS and HTTP/2 state is
    /// boxed away from it, so plain HTTP/1.1 attempts to a silent server stay small (the
    /// benchmark's memory per attempt in flight).
    #[test]
    fn a_plain_attempt_future_stays_small() {
        let client = Client::new(
            Arc::new(Targets::new(Vec::new())),
            Vec::new(),
            Speech {
                http2: false,
                timeout: Duration::from_secs(1),
                deadline: false,
                tls: None,
                requests: Arc::new(Prepared::get()),
            },
            Arc::default(),
        );
        let size = size_of_val(&client.exchange("r", 0));
        assert!(size <= 1024, "an attempt's future is {size} bytes");
    }

    #[test]
    fn the_deadline_header_is_never_before_the_timeout() {
        let now = UNIX_EPOCH + Duration::from_nanos(1_000_000_000_123_456);
        // 1,000,000,000.123456 ms + 500 ms, rounded up.
        assert_eq!(deadline_ms(now, Duration::from_millis(500)), 1_000_000_501);
        let whole = UNIX_EPOCH + Duration::from_millis(2_000);
        assert_eq!(deadline_ms(whole, Duration::from_millis(500)), 2_500);
    }
}
