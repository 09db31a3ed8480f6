//! HTTPS for the external metrics API: the serving certificate (given or
//! self-signed at start), optional client-certificate verification, and the
//! accept loop that hands each TLS connection to the router.

use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use rustls::RootCertStore;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ServerConfig, WebPkiClientVerifier};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

use crate::Error;
use crate::k8s::ClientCert;

/// A serving certificate chain and its key, PEM files.
#[derive(Clone, Debug, PartialEq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Names the self-signed certificate is issued for (clients skip verification anyway).
const SELF_SIGNED_NAMES: [&str; 3] = ["localhost", "127.0.0.1", "meter"];

fn tls_error(what: impl std::fmt::Display) -> Error {
    Error::Tls(what.to_string())
}

fn read_pem(path: &Path) -> Result<BufReader<std::fs::File>, Error> {
    std::fs::File::open(path)
        .map(BufReader::new)
        .map_err(|e| tls_error(format!("{}: {e}", path.display())))
}

fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, Error> {
    let certs = rustls_pemfile::certs(&mut read_pem(path)?)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| tls_error(format!("{}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(tls_error(format!(
            "{}: no PEM certificate in it",
            path.display()
        )));
    }
    Ok(certs)
}

fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, Error> {
    rustls_pemfile::private_key(&mut read_pem(path)?)
        .map_err(|e| tls_error(format!("{}: {e}", path.display())))?
        .ok_or_else(|| tls_error(format!("{}: no PEM private key in it", path.display())))
}

fn self_signed() -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), Error> {
    let names: Vec<String> = SELF_SIGNED_NAMES.iter().map(|s| (*s).to_owned()).collect();
    let certified = rcgen::generate_simple_self_signed(names).map_err(tls_error)?;
    let key = PrivateKeyDer::try_from(certified.signing_key.serialize_der()).map_err(tls_error)?;
    Ok((vec![certified.cert.der().clone()], key))
}

/// The rustls configuration for the API port.
///
/// With `client_ca`, a client that presents a certificate must present one signed
/// by that CA (else the handshake fails); a client without one completes the
/// handshake and is answered 401 by the API (see `k8s::ClientCert`).
pub fn server_config(
    files: Option<&TlsFiles>,
    client_ca: Option<&Path>,
) -> Result<Arc<ServerConfig>, Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(tls_error)?;
    let builder = match client_ca {
        Some(path) => {
            let mut roots = RootCertStore::empty();
            for cert in load_certs(path)? {
                roots
                    .add(cert)
                    .map_err(|e| tls_error(format!("{}: {e}", path.display())))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .allow_unauthenticated()
                .build()
                .map_err(tls_error)?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let (certs, key) = match files {
        Some(f) => (load_certs(&f.cert)?, load_key(&f.key)?),
        None => self_signed()?,
    };
    let mut config = builder.with_single_cert(certs, key).map_err(tls_error)?;
    // Kubernetes clients (client-go, the aggregator) speak HTTP/2 when offered.
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A handshake that takes longer than this is dropped (a stuck or idle client).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves `router` over TLS until `shutdown` flips to true; open connections are then dropped.
pub async fn serve(
    listener: TcpListener,
    config: Arc<ServerConfig>,
    router: Router,
    mut shutdown: watch::Receiver<bool>,
) {
    let acceptor = TlsAcceptor::from(config);
    let mut connections = JoinSet::new();
    loop {
        while connections.try_join_next().is_some() {}
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = shutdown.wait_for(|stop| *stop) => break,
        };
        let (tcp, peer) = match accepted {
            Ok(x) => x,
            Err(e) => {
                // E.g. out of file descriptors: back off instead of spinning.
                tracing::warn!("API accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let acceptor = acceptor.clone();
        let router = router.clone();
        connections.spawn(async move {
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => return tracing::debug!("TLS handshake with {peer} failed: {e}"),
                Err(_) => return tracing::debug!("TLS handshake with {peer} timed out"),
            };
            let verified = tls
                .get_ref()
                .1
                .peer_certificates()
                .is_some_and(|c| !c.is_empty());
            let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
                if verified {
                    req.extensions_mut().insert(ClientCert);
                }
                router.clone().oneshot(req)
            });
            if let Err(e) = auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(tls), service)
                .await
            {
                tracing::debug!("API connection from {peer}: {e}");
            }
        });
    }
}
