//! TLS for `https://` targets: one rustls client configuration for the whole run, shared by the
//! shards, so that a session one shard's connection got resumes on any other's.
//!
//! Trust is `--cacert`'s certificates or the system's store (as curl and oha read it);
//! `--insecure` checks nothing about the certificate but still the handshake's signatures.
//! ALPN offers `h2` with `--http2`/`--grpc`, else `http/1.1`. Resumption is rustls's default:
//! TLS 1.3 tickets and TLS 1.2 session IDs and tickets, in memory for 256 server names (up to 8
//! TLS 1.3 tickets each): an attempt on a
//! new connection (every retry after a timeout is one: the timed-out connection was reset)
//! resumes rather than paying a full handshake, which the record counts apart.

use std::io::BufReader;
use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, HandshakeKind, RootCertStore, SignatureScheme};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use crate::config::TlsFlags;

/// The run's TLS client.
#[derive(Clone)]
pub struct Tls {
    connector: TlsConnector,
    /// `--tls-server-name`, else each target's host.
    server_name: Option<ServerName<'static>>,
    http2: bool,
}

/// How a handshake went, for the record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handshake {
    Full,
    Resumed,
}

/// Why a handshake gave no usable connection.
#[derive(Debug)]
pub enum HandshakeFailed {
    /// TLS refused it: the certificate, the name, no common version or ALPN protocol.
    Refused,
    /// The connection failed during it (a reset, an end), as a connect failure would.
    Io(std::io::Error),
}

impl Tls {
    /// The configuration the flags describe; errors name the flag and the file.
    pub fn new(flags: &TlsFlags, http2: bool) -> Result<Tls, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS: {e}"))?;
        let builder = if flags.insecure {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(NoCertificateCheck(provider)))
        } else {
            builder.with_root_certificates(roots(flags.cacert.as_deref())?)
        };
        let mut config = match (&flags.cert, &flags.key) {
            (Some(cert), Some(key)) => builder
                .with_client_auth_cert(read_certs("--cert", cert)?, read_key(key)?)
                .map_err(|e| format!("--cert {} / --key {}: {e}", cert.display(), key.display()))?,
            _ => builder.with_no_client_auth(),
        };
        config.alpn_protocols = vec![if http2 {
            b"h2".to_vec()
        } else {
            b"http/1.1".to_vec()
        }];
        let server_name = flags
            .tls_server_name
            .as_deref()
            .map(|n| {
                ServerName::try_from(n.to_string())
                    .map_err(|e| format!("--tls-server-name {n}: {e}"))
            })
            .transpose()?;
        Ok(Tls {
            connector: TlsConnector::from(Arc::new(config)),
            server_name,
            http2,
        })
    }

    /// The handshake on a connected socket to `host`, and whether it resumed a session. With
    /// HTTP/2 the server must pick `h2`.
    pub async fn connect(
        &self,
        host: &str,
        tcp: TcpStream,
    ) -> Result<(TlsStream<TcpStream>, Handshake), HandshakeFailed> {
        let name = match &self.server_name {
            Some(n) => n.clone(),
            None => ServerName::try_from(host.to_string()).map_err(|_| HandshakeFailed::Refused)?,
        };
        // tokio-rustls reports what TLS refused as `InvalidData`.
        let stream = self.connector.connect(name, tcp).await.map_err(|e| {
            if e.kind() == std::io::ErrorKind::InvalidData {
                HandshakeFailed::Refused
            } else {
                HandshakeFailed::Io(e)
            }
        })?;
        let session = stream.get_ref().1;
        if self.http2 && session.alpn_protocol() != Some(b"h2") {
            return Err(HandshakeFailed::Refused);
        }
        let kind = match session.handshake_kind() {
            Some(HandshakeKind::Resumed) => Handshake::Resumed,
            _ => Handshake::Full,
        };
        Ok((stream, kind))
    }
}

fn roots(cacert: Option<&Path>) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    match cacert {
        Some(path) => {
            for cert in read_certs("--cacert", path)? {
                roots
                    .add(cert)
                    .map_err(|e| format!("--cacert {}: {e}", path.display()))?;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err(
                    "TLS: the system's trust store has no certificate; give --cacert".into(),
                );
            }
        }
    }
    Ok(roots)
}

fn read_certs(flag: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("{flag} {}: {e}", path.display()))?;
    let certs = rustls_pemfile::certs(&mut BufReader::new(file))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{flag} {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "{flag} {}: no PEM certificate in it",
            path.display()
        ));
    }
    Ok(certs)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("--key {}: {e}", path.display()))?;
    rustls_pemfile::private_key(&mut BufReader::new(file))
        .map_err(|e| format!("--key {}: {e}", path.display()))?
        .ok_or_else(|| format!("--key {}: no PEM private key in it", path.display()))
}

/// `--insecure`: any certificate is taken; the handshake's signatures are still checked
/// (with the certificate's key), so the connection is at least one TLS session.
#[derive(Debug)]
struct NoCertificateCheck(Arc<CryptoProvider>);

impl ServerCertVerifier for NoCertificateCheck {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_files_are_named_with_their_flag() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "").unwrap();
        let flags = TlsFlags {
            cacert: Some(empty.clone()),
            ..TlsFlags::default()
        };
        let e = Tls::new(&flags, false).err().unwrap();
        assert!(e.contains("--cacert") && e.contains("empty.pem"), "{e}");
        let flags = TlsFlags {
            cacert: Some(dir.path().join("missing.pem")),
            ..TlsFlags::default()
        };
        let e = Tls::new(&flags, false).err().unwrap();
        assert!(e.contains("missing.pem"), "{e}");
        let flags = TlsFlags {
            insecure: true,
            cert: Some(empty.clone()),
            key: Some(empty),
            ..TlsFlags::default()
        };
        let e = Tls::new(&flags, false).err().unwrap();
        assert!(e.starts_with("--cert"), "{e}");
        let flags = TlsFlags {
            insecure: true,
            tls_server_name: Some("bad name!".into()),
            ..TlsFlags::default()
        };
        let e = Tls::new(&flags, true).err().unwrap();
        assert!(e.contains("--tls-server-name bad name!"), "{e}");
    }
}
