//! HTTPS against a server the kit did not write: Debian's nginx on loopback with a test CA
//! (made here with rcgen), client-certificate verification, HTTP/2 and an auth header it
//! checks itself. Each run is about a second of load.
//!
//! Checks: mutual TLS with a header from the environment and a POST body succeeds; every
//! connection after the first resumes its TLS session (nginx closing each after one answer);
//! HTTP/2 over ALPN; a certificate from another CA is a `tls` failure of every attempt; no
//! client certificate gets nginx's 400; the planted secret, from the environment and as a
//! literal header value, is in no file the run wrote.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use clap::Parser;
use loadgen::{Config, Summary};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};

const SECRET: &str = "planted-secret-7f3a9c";

struct Nginx {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl Drop for Nginx {
    /// TERM, then reaped; KILL only if it has not gone in 5 s.
    fn drop(&mut self) {
        // SAFETY: signalling our own child, which has not been reaped yet.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Nginx {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.port)
    }
}

fn nginx_binary() -> PathBuf {
    for p in ["/usr/sbin/nginx", "/usr/bin/nginx"] {
        if Path::new(p).exists() {
            return p.into();
        }
    }
    panic!("needs nginx (apt-get install nginx-light): the TLS test runs against it");
}

/// A CA, a server certificate for 127.0.0.1 and localhost, and a client certificate, all
/// signed by the CA; and another CA's certificate, which signed none of them.
fn pki(dir: &Path) {
    let ca = |name: &str| {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
    };
    let issuer = ca("retry-debt test CA");
    std::fs::write(dir.join("ca.pem"), issuer.pem()).unwrap();
    std::fs::write(dir.join("other-ca.pem"), ca("another CA").pem()).unwrap();
    for (name, sans) in [
        (
            "server",
            vec!["127.0.0.1".to_string(), "localhost".to_string()],
        ),
        ("client", vec!["retry-debt-client".to_string()]),
    ] {
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(sans)
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
        std::fs::write(dir.join(format!("{name}.pem")), cert.pem()).unwrap();
        std::fs::write(dir.join(format!("{name}.key")), key.serialize_pem()).unwrap();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// nginx as one process (no master, whose stop the test would have to wait on for its
/// workers): `/work` answers 200 to a request with the planted bearer token
/// (401 otherwise) and keeps the connection; `/once` the same, closing each connection after
/// its answer, so every request needs a new connection and a handshake.
fn nginx() -> Nginx {
    let dir = tempfile::tempdir().unwrap();
    pki(dir.path());
    let port = free_port();
    let d = dir.path().display();
    let conf = format!(
        r#"master_process off;
daemon off;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log {d}/access.log;
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    server {{
        listen 127.0.0.1:{port} ssl http2;
        ssl_certificate {d}/server.pem;
        ssl_certificate_key {d}/server.key;
        ssl_client_certificate {d}/ca.pem;
        ssl_verify_client on;
        ssl_protocols TLSv1.2 TLSv1.3;
        ssl_session_cache shared:TLS:1m;
        ssl_session_tickets on;
        keepalive_requests 100000;
        location /work {{
            if ($http_authorization != "Bearer {SECRET}") {{ return 401; }}
            return 200 "ok";
        }}
        location /once {{
            keepalive_timeout 0;
            if ($http_authorization != "Bearer {SECRET}") {{ return 401; }}
            return 200 "ok";
        }}
    }}
}}
"#
    );
    std::fs::write(dir.path().join("nginx.conf"), conf).unwrap();
    let child = Command::new(nginx_binary())
        .args([
            "-p",
            &format!("{d}/"),
            "-c",
            &format!("{d}/nginx.conf"),
            "-e",
        ])
        .arg(dir.path().join("error.log"))
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "nginx did not listen in 10 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    Nginx { child, port, dir }
}

async fn run(args: &str) -> (Summary, tempfile::TempDir) {
    let out = tempfile::tempdir().unwrap();
    let mut argv: Vec<String> = vec!["loadgen".into()];
    argv.extend(args.split_whitespace().map(str::to_string));
    argv.push(format!("--out={}", out.path().display()));
    let config = Config::try_parse_from(&argv).unwrap_or_else(|e| panic!("{args}: {e}"));
    let summary = loadgen::run(config, std::future::pending()).await.unwrap();
    (summary, out)
}

fn mtls(n: &Nginx) -> String {
    format!(
        "--cacert={} --cert={} --key={}",
        n.path("ca.pem").display(),
        n.path("client.pem").display(),
        n.path("client.key").display()
    )
}

const LOAD: &str = "--rate=100 --duration=1s --timeout=2s --retries=1 --threads=1 --seed=3";

/// Every file under `dir` (and the access log) is free of the secret.
fn assert_no_secret(dir: &Path) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            assert_no_secret(&path);
        } else if let Ok(bytes) = std::fs::read(&path) {
            let text = String::from_utf8_lossy(&bytes);
            assert!(
                !text.contains(SECRET),
                "{} holds the secret",
                path.display()
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_with_headers_and_bodies_resumes_sessions() {
    let n = nginx();
    // SAFETY: set before any thread of this test reads the environment; no other test in this
    // binary reads it.
    unsafe { std::env::set_var("RDK_TEST_TOKEN", format!("Bearer {SECRET}")) };
    let header = "-H=authorization:@env:RDK_TEST_TOKEN";

    let (s, out) = run(&format!(
        "{LOAD} --target={} {} {header} --body={{\"sku\":1}} -H=content-type:application/json \
         -H=x-literal:{SECRET}",
        n.url("/work"),
        mtls(&n)
    ))
    .await;
    assert!(s.first_attempts >= 50, "{s:?}");
    assert_eq!(
        s.succeeded, s.first_attempts,
        "every POST answered 200: {s:?}"
    );
    assert!(
        s.meta.requests[0].starts_with("POST"),
        "{:?}",
        s.meta.requests
    );
    let hs = s.tls_handshakes.expect("handshakes counted");
    assert!(hs.full >= 1, "{hs:?}");
    let written: Summary =
        serde_json::from_slice(&std::fs::read(out.path().join("summary.json")).unwrap()).unwrap();
    assert_eq!(
        written.tls_handshakes,
        Some(hs),
        "summary.json counts them too"
    );
    assert_no_secret(out.path());
    let access = std::fs::read_to_string(n.path("access.log")).unwrap();
    assert!(access.contains("\"POST /work HTTP/1.1\" 200"), "{access}");

    // A new connection per request: all but the first few (the first connections open at
    // once, before any ticket came) resume.
    let (s, _) = run(&format!(
        "{LOAD} --target={} {} {header}",
        n.url("/once"),
        mtls(&n)
    ))
    .await;
    assert_eq!(s.succeeded, s.first_attempts, "{s:?}");
    let hs = s.tls_handshakes.unwrap();
    assert!(
        hs.resumed + hs.full >= s.first_attempts
            && hs.resumed as f64 >= 0.8 * s.first_attempts as f64,
        "a retry on a new connection resumes: {hs:?} for {} requests",
        s.first_attempts
    );

    // HTTP/2 by ALPN, on one connection.
    let (s, _) = run(&format!(
        "{LOAD} --target={} {} {header} --http2",
        n.url("/work"),
        mtls(&n)
    ))
    .await;
    assert_eq!(s.succeeded, s.first_attempts, "{s:?}");
    assert!(s.meta.http2 && s.tls_handshakes.unwrap().full == 1, "{s:?}");
    let access = std::fs::read_to_string(n.path("access.log")).unwrap();
    assert!(access.contains("\"GET /work HTTP/2.0\" 200"), "{access}");

    // The wrong token: nginx's 401, no success.
    let (s, _) = run(&format!(
        "{LOAD} --target={} {} -H=authorization:Bearer-wrong",
        n.url("/work"),
        mtls(&n)
    ))
    .await;
    assert_eq!(
        (s.succeeded, s.errors["status_other"]),
        (0, s.attempts),
        "{s:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_from_another_ca_is_a_tls_failure() {
    let n = nginx();
    let (s, _) = run(&format!(
        "{LOAD} --target={} --cacert={} --retry-on=connect",
        n.url("/work"),
        n.path("other-ca.pem").display()
    ))
    .await;
    assert_eq!(s.succeeded, 0, "{s:?}");
    // Every attempt's handshake failed, but for the odd connection refused or reset while
    // connecting (2 of 208 once, with the other test's nginx busy beside it).
    assert_eq!(
        s.errors["tls"] + s.errors["connect"],
        s.attempts,
        "every attempt failed to connect: {s:?}"
    );
    assert!(
        s.errors["tls"] as f64 >= 0.95 * s.attempts as f64,
        "the handshakes failed: {s:?}"
    );
    assert_eq!(
        s.attempts,
        2 * s.first_attempts,
        "a tls failure is retried as a connect failure"
    );
    // Trusting the CA but sending no client certificate: nginx completes the handshake and
    // answers 400.
    let (s, _) = run(&format!(
        "{LOAD} --target={} --cacert={}",
        n.url("/work"),
        n.path("ca.pem").display()
    ))
    .await;
    assert_eq!(
        (s.succeeded, s.errors["status_other"]),
        (0, s.attempts),
        "{s:?}"
    );
    // --insecure takes the certificate without a CA.
    let (s, _) = run(&format!(
        "{LOAD} --target={} --insecure --cert={} --key={} -H=authorization:Bearer-x",
        n.url("/work"),
        n.path("client.pem").display(),
        n.path("client.key").display()
    ))
    .await;
    assert_eq!(
        (s.errors["tls"], s.errors["status_other"]),
        (0, s.attempts),
        "{s:?}"
    );
}
