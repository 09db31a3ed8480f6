//! One HTTP/1.1 exchange on a connection the attempt owns: the request written in one go, the
//! response read to its end with `httparse` (hyper's own parser) and framed here.
//!
//! Why not hyper's connection API for HTTP/1.1: it costs about 20 KB per connection (an 8 KiB
//! write buffer, an 8 KiB read buffer, an 8 KB channel block) taken when the connection opens,
//! and every attempt to a pod that does not answer holds its own connection for the whole
//! timeout: 100,000 of them in flight would be 2 GB. Here a waiting attempt holds its socket and
//! nothing else: the answer is read into the shard's scratch buffer when it arrives, and only an
//! answer split over several reads keeps its unparsed head in a buffer of its own.
//!
//! A connection that ends before the answer does is an `io` error of the attempt, even on a
//! reused connection: the server may have read the request, and an exact count of attempts
//! matters more here than hiding the rare race with a server's idle timeout (an idle
//! connection the server has closed is found before reuse; see `client`).
//!
//! The framing is a pure state machine ([`ResponseReader`], fed read by read through
//! [`AnswerBuffer`]), so every case (content length, chunked with trailers, read until close,
//! 1xx, split reads, malformed) is tested without a socket.

use std::cell::RefCell;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, Interest};
use tokio::net::TcpStream;

use crate::request::PreparedRequest;
use crate::targets::Target;

/// A response head, or a chunk-size or trailer line, longer than this is refused (hyper's
/// default head limit is about 400 KB; the kit's pods answer with a few hundred bytes).
const MAX_HEAD: usize = 64 * 1024;
/// Response headers parsed at most.
const MAX_HEADERS: usize = 64;
/// What one read takes from the socket, into the shard's scratch buffer.
const SCRATCH: usize = 16 * 1024;

thread_local! {
    // Each shard is one thread, and a read and its parse never span an await.
    static SCRATCH_BUF: RefCell<Vec<u8>> = RefCell::new(vec![0; SCRATCH]);
}

/// What the kit's clients call themselves, on both protocols.
pub const USER_AGENT: &str = concat!("retry-debt-loadgen/", env!("CARGO_PKG_VERSION"));

/// The request of one attempt: the method, path, headers and body of `kind`, with the kit's
/// headers. The path is the kind's, else the target's.
pub fn request(
    target: &Target,
    kind: &PreparedRequest,
    id: &str,
    attempt: u32,
    deadline_ms: Option<u64>,
) -> Vec<u8> {
    let path = kind.path.as_deref().unwrap_or(&target.path);
    let extra: usize = kind
        .headers
        .iter()
        .map(|(n, v)| n.len() + v.len() + 4)
        .sum();
    let mut req =
        Vec::with_capacity(160 + path.len() + target.authority.len() + extra + kind.body.len());
    // Writing to a Vec cannot fail.
    let _ = write!(
        req,
        "{} {path} HTTP/1.1\r\nhost: {}\r\nuser-agent: {USER_AGENT}\r\nx-request-id: {id}\r\nx-attempt: {attempt}\r\n",
        kind.method, target.authority,
    );
    if let Some(ms) = deadline_ms {
        let _ = write!(req, "x-deadline-ms: {ms}\r\n");
    }
    for (name, value) in &kind.headers {
        req.extend_from_slice(name.as_bytes());
        req.extend_from_slice(b": ");
        req.extend_from_slice(value);
        req.extend_from_slice(b"\r\n");
    }
    // A body, or a method whose requests carry one (a POST without a length is refused with
    // 411 by some servers).
    if !kind.body.is_empty()
        || !matches!(kind.method.as_str(), "GET" | "HEAD" | "DELETE" | "OPTIONS")
    {
        let _ = write!(req, "content-length: {}\r\n", kind.body.len());
    }
    req.extend_from_slice(b"\r\n");
    req.extend_from_slice(&kind.body);
    req
}

/// A response read to its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    /// The connection may carry another request (HTTP/1.1, no `connection: close`, the body
    /// framed by length or chunks, nothing after it).
    pub reusable: bool,
}

/// The exchange gave no answer: the write or a read failed, the connection ended before the
/// answer did, or the answer was not HTTP/1.1 the reader can frame. The request may have
/// reached the server, so it is never sent again behind the caller's back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Broken;

/// Writes `request` and reads the answer: the answer, and how long its last bytes sat in the
/// socket before they were read (from the kernel's receive time; zero where there is none).
/// Dropped at the attempt timeout, it leaves the connection mid-exchange, and the caller drops
/// (resets) it.
pub async fn exchange(
    stream: &mut TcpStream,
    request: Vec<u8>,
    head: bool,
) -> Result<(Answer, Duration), Broken> {
    stream.write_all(&request).await.map_err(|_| Broken)?;
    crate::gather::sent();
    // Not held while the answer is awaited, which may be the whole timeout.
    drop(request);
    let mut buffer = AnswerBuffer::new(head);
    loop {
        stream.readable().await.map_err(|_| Broken)?;
        let mut step = Ok(None);
        let mut received = None;
        let _ = stream.try_io(Interest::READABLE, || {
            SCRATCH_BUF.with_borrow_mut(|scratch| {
                let n = recv(stream, scratch).map(|(n, at)| {
                    received = at;
                    n
                });
                step = match n {
                    Ok(0) => buffer.end_of_stream().map(Some).ok_or(Broken),
                    Ok(n) => buffer.feed(&scratch[..n]).map_err(|Malformed| Broken),
                    Err(ref e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(None),
                    Err(_) => Err(Broken),
                };
                match n {
                    // The answer is whole and the read left room in the buffer: the socket
                    // had nothing more, so tokio may forget the readiness this read used.
                    // Then taking the idle connection again costs no `recv` (see
                    // `client::H1Conn::usable`), unless something comes meanwhile: new bytes
                    // or the peer's close raise a new event, and a close (`READ_CLOSED`)
                    // is never cleared.
                    Ok(n) if n < scratch.len() && matches!(step, Ok(Some(_))) => {
                        Err(std::io::ErrorKind::WouldBlock.into())
                    }
                    other => other,
                }
            })
        });
        if let Some(answer) = step? {
            crate::gather::answered();
            let unread = received.map_or(Duration::ZERO, |at| {
                SystemTime::now().duration_since(at).unwrap_or_default()
            });
            return Ok((answer, unread));
        }
    }
}

/// [`exchange`] over a TLS stream: the same request and framing, read through the TLS
/// session's plaintext. No receive time: a record's bytes are stamped when they arrived, but
/// what it decrypts to is read later, so the latency ends when the answer was read (at most
/// `--answer-gather` late).
pub async fn exchange_stream<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    request: Vec<u8>,
    head: bool,
) -> Result<Answer, Broken> {
    stream.write_all(&request).await.map_err(|_| Broken)?;
    stream.flush().await.map_err(|_| Broken)?;
    crate::gather::sent();
    drop(request);
    let mut buffer = AnswerBuffer::new(head);
    // On the heap: held in the attempt's future it would make every attempt's future, plain
    // HTTP/1.1 included, this much larger while it waits.
    let mut scratch = vec![0u8; 4096];
    loop {
        let n = match stream.read(&mut scratch).await {
            Ok(n) => n,
            // A server that closes without TLS's close_notify: the end, for an answer framed
            // by the close (rustls reports it as an unexpected end).
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => 0,
            Err(_) => return Err(Broken),
        };
        let answer = if n == 0 {
            Some(buffer.end_of_stream().ok_or(Broken)?)
        } else {
            buffer.feed(&scratch[..n]).map_err(|Malformed| Broken)?
        };
        if let Some(answer) = answer {
            crate::gather::answered();
            return Ok(answer);
        }
    }
}

/// One read on the stream's socket, for [`TcpStream::try_io`] (which asks for a plain system
/// call, not the stream's own reads): the bytes read, and when the last of them arrived if
/// the kernel stamped them.
#[cfg(target_os = "linux")]
fn recv(stream: &TcpStream, buf: &mut [u8]) -> std::io::Result<(usize, Option<SystemTime>)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // Room for one control message carrying a timespec, aligned for its header.
    let mut control = [0u64; 8];
    // SAFETY: msghdr is plain data, valid zeroed.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = size_of_val(&control) as _;
    // SAFETY: a valid socket, and a msghdr whose buffers live across the call.
    let n = unsafe { libc::recvmsg(stream.as_raw_fd(), &mut msg, 0) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut at = None;
    // SAFETY: the kernel filled `msg` and its control buffer; the CMSG_* walk stays inside.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS {
                let ts: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                at = Some(UNIX_EPOCH + Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32));
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok((n as usize, at))
}

#[cfg(not(target_os = "linux"))]
fn recv(stream: &TcpStream, buf: &mut [u8]) -> std::io::Result<(usize, Option<SystemTime>)> {
    // SAFETY: a valid socket and a buffer of `buf.len()` writable bytes.
    let n = unsafe { libc::recv(stream.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok((n as usize, None))
    }
}

/// The answer on one connection, from the reads that bring it.
#[derive(Debug, Default)]
pub struct AnswerBuffer {
    reader: ResponseReader,
    /// What a read left unparsed (a head, chunk-size or trailer line split over reads); empty,
    /// and unallocated, in the usual case.
    pending: Vec<u8>,
}

impl AnswerBuffer {
    /// The answer to a request; `head`: a `HEAD`, whose answer has no body whatever its
    /// length says.
    pub fn new(head: bool) -> AnswerBuffer {
        AnswerBuffer {
            reader: ResponseReader {
                head,
                ..ResponseReader::default()
            },
            pending: Vec::new(),
        }
    }

    /// One read's bytes: the answer once it is complete.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<Option<Answer>, Malformed> {
        let fed = if self.pending.is_empty() {
            bytes
        } else {
            self.pending.extend_from_slice(bytes);
            &self.pending[..]
        };
        let (used, done) = self.reader.advance(fed)?;
        if let Some(mut answer) = done {
            // Bytes after the answer were never asked for: do not reuse the connection.
            answer.reusable &= used == fed.len();
            return Ok(Some(answer));
        }
        // A line with no end, in the head or the body framing.
        if fed.len() - used > MAX_HEAD {
            return Err(Malformed);
        }
        self.pending = fed[used..].to_vec();
        Ok(None)
    }

    /// The connection ended: the answer, if its framing says it ends here.
    pub fn end_of_stream(&mut self) -> Option<Answer> {
        self.reader.end_of_stream()
    }
}

/// The answer is not HTTP/1.1 the reader can frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Malformed;

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Framing {
    #[default]
    Head,
    Length(u64),
    ChunkSize,
    ChunkData(u64),
    ChunkEnd,
    Trailers,
    UntilClose,
}

/// Frames one response from the bytes fed to it.
#[derive(Debug, Default)]
pub struct ResponseReader {
    framing: Framing,
    status: u16,
    keep_alive: bool,
    /// The request was a `HEAD`.
    head: bool,
}

impl ResponseReader {
    /// Consumes what it can of `buf`: how many bytes it used, and the answer once complete.
    /// Bytes not used (an incomplete head or chunk-size line) must be fed again with more.
    pub fn advance(&mut self, buf: &[u8]) -> Result<(usize, Option<Answer>), Malformed> {
        let mut used = 0;
        loop {
            let rest = &buf[used..];
            match self.framing {
                Framing::Head => {
                    let Some(n) = self.head(rest)? else {
                        return Ok((used, None));
                    };
                    used += n;
                }
                Framing::Length(0) => return Ok((used, Some(self.answer(true)))),
                Framing::Length(left) => {
                    let n = left.min(rest.len() as u64);
                    used += n as usize;
                    self.framing = Framing::Length(left - n);
                    if left > n {
                        return Ok((used, None));
                    }
                }
                // httparse reads a size line without digits as 0, the last chunk: refuse it.
                Framing::ChunkSize if rest.first().is_some_and(|b| !b.is_ascii_hexdigit()) => {
                    return Err(Malformed);
                }
                Framing::ChunkSize => match httparse::parse_chunk_size(rest) {
                    Ok(httparse::Status::Complete((n, 0))) => {
                        used += n;
                        self.framing = Framing::Trailers;
                    }
                    Ok(httparse::Status::Complete((n, size))) => {
                        used += n;
                        self.framing = Framing::ChunkData(size);
                    }
                    Ok(httparse::Status::Partial) => return Ok((used, None)),
                    Err(_) => return Err(Malformed),
                },
                Framing::ChunkData(left) => {
                    let n = left.min(rest.len() as u64);
                    used += n as usize;
                    if left > n {
                        self.framing = Framing::ChunkData(left - n);
                        return Ok((used, None));
                    }
                    self.framing = Framing::ChunkEnd;
                }
                Framing::ChunkEnd => {
                    if rest.len() < 2 {
                        return Ok((used, None));
                    }
                    if &rest[..2] != b"\r\n" {
                        return Err(Malformed);
                    }
                    used += 2;
                    self.framing = Framing::ChunkSize;
                }
                Framing::Trailers => {
                    // Trailer lines up to an empty line; their content is not needed.
                    let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") else {
                        return Ok((used, None));
                    };
                    used += eol + 2;
                    if eol == 0 {
                        return Ok((used, Some(self.answer(true))));
                    }
                }
                Framing::UntilClose => return Ok((buf.len(), None)),
            }
        }
    }

    /// The connection ended: the answer, if its framing says it ends here.
    pub fn end_of_stream(&mut self) -> Option<Answer> {
        (self.framing == Framing::UntilClose).then(|| self.answer(false))
    }

    fn answer(&self, framed: bool) -> Answer {
        Answer {
            status: self.status,
            reusable: framed && self.keep_alive,
        }
    }

    /// Parses a head from the start of `buf`: its length once complete, and the body framing.
    fn head(&mut self, buf: &[u8]) -> Result<Option<usize>, Malformed> {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut resp = httparse::Response::new(&mut headers);
        let n = match resp.parse(buf) {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(_) => return Err(Malformed),
        };
        let status = resp.code.ok_or(Malformed)?;
        if (100..200).contains(&status) {
            // An informational answer (100 Continue, 103 Early Hints) precedes the real one;
            // 101 would switch protocols, which a GET of the kit's never asks for.
            return if status == 101 {
                Err(Malformed)
            } else {
                Ok(Some(n))
            };
        }
        self.status = status;
        self.keep_alive = resp.version == Some(1);
        let mut length = None;
        // Some(last coding is chunked) when a transfer-encoding header came.
        let mut chunked = None;
        for h in resp.headers.iter() {
            if h.name.eq_ignore_ascii_case("connection") {
                if has_token(h.value, "close") {
                    self.keep_alive = false;
                }
            } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                // Chunked must be the last coding; with any other the body runs until close,
                // whatever content-length says (RFC 9112, 6.3).
                chunked = Some(last_token_is(h.value, "chunked"));
            } else if h.name.eq_ignore_ascii_case("content-length") {
                let v = content_length(h.value).ok_or(Malformed)?;
                if length.is_some_and(|l| l != v) {
                    return Err(Malformed);
                }
                length = Some(v);
            }
        }
        if chunked.is_some() && length.is_some() {
            // A message framed two ways may be a smuggling attempt (RFC 9112, 6.3): read
            // this one by its transfer coding, then close.
            self.keep_alive = false;
        }
        self.framing = if status == 204 || status == 304 || self.head {
            Framing::Length(0)
        } else if chunked == Some(true) {
            Framing::ChunkSize
        } else if let (None, Some(l)) = (chunked, length) {
            Framing::Length(l)
        } else {
            self.keep_alive = false;
            Framing::UntilClose
        };
        Ok(Some(n))
    }
}

/// A content-length value: digits only (`u64::from_str` would also take a leading `+`).
fn content_length(value: &[u8]) -> Option<u64> {
    let digits = value.trim_ascii();
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

fn tokens(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value.split(|&b| b == b',').map(|t| t.trim_ascii())
}

fn has_token(value: &[u8], token: &str) -> bool {
    tokens(value).any(|t| t.eq_ignore_ascii_case(token.as_bytes()))
}

fn last_token_is(value: &[u8], token: &str) -> bool {
    tokens(value)
        .last()
        .is_some_and(|t| t.eq_ignore_ascii_case(token.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An answer's latency ends when it arrived: one that sat in the socket for about 40 ms
    /// before the exchange read it says so.
    #[cfg(target_os = "linux")]
    #[tokio::test(flavor = "current_thread")]
    async fn an_answer_that_waited_in_the_socket_says_how_long() {
        use std::io::Write as _;
        use std::os::fd::AsRawFd as _;
        // Linux turns receive stamps on for the whole machine a moment after the first socket
        // asks (a static key flipped by deferred work): a packet that comes before carries none,
        // and its wait reads 0 (CI saw it on a fresh runner). A socket that asks first, and a
        // pause, make sure the answer below is stamped.
        let early = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let one: libc::c_int = 1;
        // SAFETY: a valid socket fd and a c_int option value of the right size.
        let set = unsafe {
            libc::setsockopt(
                early.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_TIMESTAMPNS,
                (&one as *const libc::c_int).cast(),
                size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        assert_eq!(set, 0);
        std::thread::sleep(Duration::from_millis(100));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (stamped, stamped_rx) = std::sync::mpsc::channel();
        let (written, written_rx) = std::sync::mpsc::channel();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            // Answered before it is asked, once the client has set the option: the bytes
            // wait in the client's socket.
            stamped_rx.recv().unwrap();
            s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                .unwrap();
            written.send(()).unwrap();
            std::thread::sleep(Duration::from_millis(200));
        });
        let mut stream = TcpStream::connect(addr).await.unwrap();
        crate::client::stamp_receive_times(&stream);
        stamped.send(()).unwrap();
        // The 50 ms count from the server's write, not from the request to write: a server
        // thread that wakes late on a loaded machine (CI saw 0 ns) cannot shorten the wait.
        written_rx.recv().unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let (answer, unread) = exchange(&mut stream, b"GET / HTTP/1.1\r\n\r\n".to_vec(), false)
            .await
            .unwrap();
        assert_eq!(answer.status, 200);
        // Wide band: the server thread may wake a little late.
        assert!(unread >= Duration::from_millis(25), "{unread:?}");
        assert!(unread < Duration::from_secs(5), "{unread:?}");
        server.join().unwrap();
        drop(early);
    }

    /// Feeds `parts` one after another as reads would, then ends the stream.
    fn read(parts: &[&[u8]]) -> Result<Option<Answer>, Malformed> {
        let mut answer = AnswerBuffer::default();
        for part in parts {
            if let Some(a) = answer.feed(part)? {
                return Ok(Some(a));
            }
        }
        Ok(answer.end_of_stream())
    }

    fn ok(status: u16, reusable: bool) -> Result<Option<Answer>, Malformed> {
        Ok(Some(Answer { status, reusable }))
    }

    #[test]
    fn content_length_in_one_read_and_split_anywhere() {
        let whole: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nx-a: b\r\n\r\nhello";
        assert_eq!(read(&[whole]), ok(200, true));
        for cut in 1..whole.len() {
            assert_eq!(
                read(&[&whole[..cut], &whole[cut..]]),
                ok(200, true),
                "cut {cut}"
            );
        }
        // Not all of the body yet: no answer, and the end of the stream does not make one.
        assert_eq!(read(&[&whole[..whole.len() - 1]]), Ok(None));
    }

    #[test]
    fn chunked_with_extensions_and_trailers_split_anywhere() {
        let whole: &[u8] =
            b"HTTP/1.1 503 Busy\r\ntransfer-encoding: gzip, chunked\r\n\r\n4;ext=1\r\nRust\r\n10\r\n0123456789abcdef\r\n0\r\nx-trailer: 1\r\n\r\n";
        assert_eq!(read(&[whole]), ok(503, true));
        for cut in 1..whole.len() {
            assert_eq!(
                read(&[&whole[..cut], &whole[cut..]]),
                ok(503, true),
                "cut {cut}"
            );
        }
        assert_eq!(
            read(&[b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n4\r\nRustXX"]),
            Err(Malformed),
            "chunk data must end with CRLF"
        );
        for bad_size in [&b"zz\r\n"[..], b"\r\n\r\n", b";ext\r\n\r\n"] {
            let mut answer = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
            answer.extend_from_slice(bad_size);
            assert_eq!(read(&[&answer]), Err(Malformed), "{bad_size:?}");
        }
    }

    #[test]
    fn what_ends_reuse() {
        let close =
            b"HTTP/1.1 200 OK\r\nconnection: keep-alive, Close\r\ncontent-length: 0\r\n\r\n";
        assert_eq!(read(&[close]), ok(200, false));
        let http10 = b"HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\nok";
        assert_eq!(read(&[http10]), ok(200, false));
        let extra = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nokHTTP/1.1";
        assert_eq!(read(&[extra]), ok(200, false), "bytes nobody asked for");
        // No length and not chunked: the body runs until the server closes.
        let until_close = b"HTTP/1.1 200 OK\r\n\r\nsome body";
        assert_eq!(read(&[until_close, b" and more"]), ok(200, false));
        // A coding other than chunked last is also read until close.
        // Framed two ways: read by the coding, then close.
        let both =
            b"HTTP/1.1 200 OK\r\ncontent-length: 99\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n";
        assert_eq!(read(&[both]), ok(200, false));
        let gzip_only =
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\ncontent-length: 3\r\n\r\nabc";
        assert_eq!(read(&[gzip_only]), ok(200, false));
    }

    #[test]
    fn no_body_statuses_and_informational_answers() {
        assert_eq!(
            read(&[b"HTTP/1.1 204 No Content\r\ncontent-length: 10\r\n\r\n"]),
            ok(204, true)
        );
        assert_eq!(
            read(&[b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early\r\nlink: x\r\n\r\nHTTP/1.1 404 Not Found\r\ncontent-length: 1\r\n\r\n!"]),
            ok(404, true)
        );
        assert_eq!(
            read(&[b"HTTP/1.1 101 Switching Protocols\r\nupgrade: ws\r\n\r\n"]),
            Err(Malformed)
        );
    }

    #[test]
    fn malformed_answers_are_refused() {
        assert_eq!(read(&[b"SSH-2.0-OpenSSH\r\n\r\n"]), Err(Malformed));
        for bad_length in ["x", "+5", "-1", "", "5 5"] {
            let answer = format!("HTTP/1.1 200 OK\r\ncontent-length: {bad_length}\r\n\r\n");
            assert_eq!(read(&[answer.as_bytes()]), Err(Malformed), "{bad_length:?}");
        }
        assert_eq!(
            read(&[b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\n"]),
            Err(Malformed)
        );
        let mut endless = b"HTTP/1.1 200 OK\r\n".to_vec();
        endless.extend(std::iter::repeat_n(b'a', MAX_HEAD + 1));
        assert_eq!(read(&[&endless]), Err(Malformed), "a head with no end");
    }

    #[test]
    fn the_request_carries_the_kit_headers() {
        let t = Target::parse("http://pod.local:8080/work?x=1").unwrap();
        let get = crate::request::Prepared::get();
        let get = get.pick(0.0);
        let req = String::from_utf8(request(&t, get, "r-7", 2, Some(1_700_000_000_123))).unwrap();
        assert!(
            req.starts_with("GET /work?x=1 HTTP/1.1\r\nhost: pod.local:8080\r\n"),
            "{req}"
        );
        assert!(
            req.contains("\r\nx-request-id: r-7\r\nx-attempt: 2\r\n"),
            "{req}"
        );
        assert!(
            req.ends_with("x-deadline-ms: 1700000000123\r\n\r\n"),
            "{req}"
        );
        let plain = String::from_utf8(request(&t, get, "r-7", 0, None)).unwrap();
        assert!(!plain.contains("x-deadline-ms") && plain.ends_with("\r\n\r\n"));
        assert!(!plain.contains("content-length"), "a GET has no body");
    }

    #[test]
    fn a_request_carries_its_method_headers_and_body() {
        let t = Target::parse("http://pod.local:8080/work").unwrap();
        let kind = PreparedRequest {
            method: "POST".parse().unwrap(),
            path: Some("/orders".into()),
            headers: vec![("authorization".into(), b"Bearer x".to_vec())],
            body: b"{\"sku\":1}".to_vec(),
        };
        let req = String::from_utf8(request(&t, &kind, "r-1", 0, None)).unwrap();
        assert!(req.starts_with("POST /orders HTTP/1.1\r\n"), "{req}");
        assert!(
            req.ends_with("authorization: Bearer x\r\ncontent-length: 9\r\n\r\n{\"sku\":1}"),
            "{req}"
        );
        let empty_post = PreparedRequest {
            body: Vec::new(),
            ..kind
        };
        let req = String::from_utf8(request(&t, &empty_post, "r-1", 0, None)).unwrap();
        assert!(req.ends_with("content-length: 0\r\n\r\n"), "{req}");
    }

    #[test]
    fn a_head_answer_has_no_body() {
        let mut b = AnswerBuffer::new(true);
        let answer = b
            .feed(b"HTTP/1.1 200 OK\r\ncontent-length: 500\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!((answer.status, answer.reusable), (200, true));
    }
}
