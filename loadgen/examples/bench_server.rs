//! Bench-only loopback server for `scripts/bench-loadgen.sh`.
//!
//! `bench_server ok [ADDR]`: answers every request `200 ok` at once (keep-alive).
//! `bench_server silent [ADDR]`: accepts and never answers; closes when the client does.
//! Prints the bound address on the first line of stdout, then serves until killed.

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::Full;
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;

#[tokio::main]
async fn main() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_default();
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:0".into());
    let limit = loadgen::limits::raise_open_files_limit(400_000).map_err(|e| e.to_string())?;
    if limit < 200_000 {
        eprintln!("bench_server: open-files limit {limit}: fewer connections can be held");
    }
    let socket = tokio::net::TcpSocket::new_v4().map_err(|e| e.to_string())?;
    socket.set_reuseaddr(true).map_err(|e| e.to_string())?;
    socket
        .bind(addr.parse().map_err(|e| format!("address `{addr}`: {e}"))?)
        .map_err(|e| format!("bind {addr}: {e}"))?;
    let listener: TcpListener = socket.listen(65_535).map_err(|e| e.to_string())?;
    println!("{}", listener.local_addr().map_err(|e| e.to_string())?);
    match mode.as_str() {
        "ok" => serve_ok(listener).await,
        "silent" => serve_silent(listener).await,
        other => Err(format!("mode `{other}`: expected ok or silent")),
    }
}

async fn serve_ok(listener: TcpListener) -> Result<(), String> {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(|_req| async {
                Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from_static(b"ok"))))
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                .await;
        });
    }
}

async fn serve_silent(listener: TcpListener) -> Result<(), String> {
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            continue;
        };
        tokio::spawn(async move {
            let mut buf = [0u8; 256];
            while let Ok(n) = stream.read(&mut buf).await {
                if n == 0 {
                    break;
                }
            }
        });
    }
}
