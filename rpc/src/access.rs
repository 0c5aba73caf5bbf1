//! Who may talk to a coordinator: gRPC over TLS (rustls) and a shared-secret
//! token in the `authorization: Bearer` header, checked by an interceptor.
//! The token comes from a file or the `PARAFORGE_TOKEN` environment variable,
//! never from a command-line argument (those show in `ps`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::service::Interceptor;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};
use tonic::{Request, Status};

use crate::proto::coordinator_client::CoordinatorClient;

/// Environment variable holding the shared secret.
pub const TOKEN_ENV: &str = "PARAFORGE_TOKEN";

// Largest gRPC message either side accepts unless configured otherwise
// (`[coordinator] max_message_bytes`'s default).
pub use paraforge_job::config::DEFAULT_MAX_MESSAGE_BYTES;

#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    #[error("{path}: {message}")]
    File { path: PathBuf, message: String },
    #[error("coordinator URL {url}: {message}")]
    Url { url: String, message: String },
    #[error("connecting to {url}: {message}")]
    Connect { url: String, message: String },
}

fn read_file(path: &Path) -> Result<Vec<u8>, AccessError> {
    std::fs::read(path).map_err(|e| AccessError::File {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

/// The shared secret: the first line of `file` when given, else
/// `$PARAFORGE_TOKEN`; `None` when neither is set. An empty token or one
/// that cannot travel in a header is an error naming its source.
pub fn load_token(file: Option<&Path>) -> Result<Option<String>, AccessError> {
    let (token, source) = match file {
        Some(p) => {
            let bytes = read_file(p)?;
            let text = String::from_utf8(bytes).map_err(|_| AccessError::File {
                path: p.to_path_buf(),
                message: "the token file is not UTF-8".into(),
            })?;
            (
                text.lines().next().unwrap_or("").trim().to_string(),
                p.display().to_string(),
            )
        }
        None => match std::env::var(TOKEN_ENV) {
            Ok(t) => (t.trim().to_string(), format!("${TOKEN_ENV}")),
            Err(_) => return Ok(None),
        },
    };
    let bad = |message: &str| AccessError::File {
        path: PathBuf::from(&source),
        message: message.into(),
    };
    if token.is_empty() {
        return Err(bad("the access token is empty"));
    }
    if token.parse::<MetadataValue<Ascii>>().is_err() || token.contains(' ') {
        return Err(bad(
            "the access token must be printable ASCII without spaces",
        ));
    }
    Ok(Some(token))
}

/// Compares secrets in time that does not depend on where they differ
/// (the length leaks; the contents do not).
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Server side: refuses requests without the right token (UNAUTHENTICATED),
/// logging the peer.
#[derive(Clone, Default)]
pub struct RequireToken {
    expected: Option<Arc<str>>,
}

impl RequireToken {
    pub fn new(token: Option<String>) -> RequireToken {
        RequireToken {
            expected: token.map(Arc::from),
        }
    }
}

impl Interceptor for RequireToken {
    fn call(&mut self, req: Request<()>) -> Result<Request<()>, Status> {
        let Some(want) = &self.expected else {
            return Ok(req);
        };
        let got = req
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        match got {
            Some(g) if ct_eq(g.as_bytes(), want.as_bytes()) => Ok(req),
            _ => {
                tracing::warn!(
                    peer = ?req.remote_addr(),
                    had_token = got.is_some(),
                    "request refused: missing or wrong access token"
                );
                Err(Status::unauthenticated("missing or wrong access token"))
            }
        }
    }
}

/// Client side: adds the token to every request.
#[derive(Clone, Default)]
pub struct BearerToken(Option<MetadataValue<Ascii>>);

impl Interceptor for BearerToken {
    fn call(&mut self, mut req: Request<()>) -> Result<Request<()>, Status> {
        if let Some(v) = &self.0 {
            req.metadata_mut().insert("authorization", v.clone());
        }
        Ok(req)
    }
}

/// A coordinator client with the token attached.
pub type Client = CoordinatorClient<InterceptedService<Channel, BearerToken>>;

/// How a client reaches a coordinator.
#[derive(Debug, Clone, Default)]
pub struct ClientAccess {
    pub token: Option<String>,
    /// CA certificate (PEM) that signed the coordinator's certificate;
    /// setting it turns TLS on.
    pub ca_cert: Option<PathBuf>,
    /// Name to check the coordinator's certificate against (default: the
    /// URL's host).
    pub domain: Option<String>,
    /// Largest message accepted (default 4 MiB).
    pub max_message_bytes: Option<usize>,
}

/// Selects rustls's crypto provider once per process (both ring and
/// aws-lc-rs are compiled in through other crates, so rustls cannot guess).
pub fn init_tls() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// rustls's WebPKI verifier that also takes a self-signed certificate the
/// client was given to trust as the server's own.
///
/// `openssl req -x509` marks the certificate it makes a CA (basic
/// constraints CA:TRUE), and WebPKI refuses a CA certificate as a server's
/// (`CaUsedAsEndEntity`), although trusting the server's own self-signed
/// certificate is the simplest TLS setup there is. So when WebPKI's one
/// objection is that, and the server presented, byte for byte, a
/// certificate the client trusts, it is accepted if it names the host:
/// WebPKI checks the validity dates before the CA flag, and the handshake
/// signature, checked by WebPKI's own code below, proves the server holds
/// its key.
#[derive(Debug)]
struct PinnedSelfSigned {
    webpki: Arc<WebPkiServerVerifier>,
    trusted: Vec<CertificateDer<'static>>,
}

impl ServerCertVerifier for PinnedSelfSigned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let refused = match self.webpki.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            Ok(ok) => return Ok(ok),
            Err(e) => e,
        };
        let ca_as_leaf = matches!(
            &refused,
            rustls::Error::InvalidCertificate(CertificateError::Other(other))
                if matches!(other.0.downcast_ref::<webpki::Error>(), Some(webpki::Error::CaUsedAsEndEntity))
        );
        if !ca_as_leaf {
            return Err(refused);
        }
        if !self
            .trusted
            .iter()
            .any(|c| c.as_ref() == end_entity.as_ref())
        {
            // WebPKI stops at the CA flag before it looks for an issuer.
            return Err(rustls::Error::General(
                "the server's certificate is marked a CA (basicConstraints CA:TRUE) and is not one of the certificates this client trusts".into(),
            ));
        }
        let cert = rustls::server::ParsedCertificate::try_from(end_entity)?;
        rustls::client::verify_server_name(&cert, server_name)?;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

/// The verifier for the certificates in the PEM file `ca`.
fn verifier(ca: &Path) -> Result<Arc<PinnedSelfSigned>, AccessError> {
    let bad = |message: String| AccessError::File {
        path: ca.to_path_buf(),
        message,
    };
    let pem = read_file(ca)?;
    let trusted = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(format!("not a PEM certificate file: {e}")))?;
    if trusted.is_empty() {
        return Err(bad("holds no PEM certificate".into()));
    }
    let mut roots = rustls::RootCertStore::empty();
    for c in &trusted {
        roots
            .add(c.clone())
            .map_err(|e| bad(format!("not a usable CA certificate: {e}")))?;
    }
    let webpki = WebPkiServerVerifier::builder_with_provider(
        Arc::new(roots),
        Arc::new(rustls::crypto::ring::default_provider()),
    )
    .build()
    .map_err(|e| bad(e.to_string()))?;
    Ok(Arc::new(PinnedSelfSigned { webpki, trusted }))
}

/// What a server answered the HTTP/2 connection preface with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Speaks {
    /// A TLS record (an alert): a TLS server reading plain text.
    Tls,
    /// An HTTP/2 frame: a plain-text gRPC server.
    PlainHttp2,
}

/// Sends the HTTP/2 preface to `authority` and reads the first bytes of the
/// answer, to name a TLS mismatch instead of leaving the client with an
/// "h2 protocol error" or a failed handshake; `None` when the answer (or
/// its absence, within a short time) says neither.
async fn probe(authority: &str) -> Option<Speaks> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let ask = async {
        let mut s = tokio::net::TcpStream::connect(authority).await.ok()?;
        // The preface, then an empty SETTINGS frame.
        s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
            .await
            .ok()?;
        let mut head = [0u8; 5];
        s.read_exact(&mut head).await.ok()?;
        match head {
            // Content type alert or handshake, protocol version 3.x.
            [0x15 | 0x16, 0x03, ..] => Some(Speaks::Tls),
            // A frame header: 24-bit length, then type SETTINGS.
            [_, _, _, 0x04, _] => Some(Speaks::PlainHttp2),
            _ => None,
        }
    };
    tokio::time::timeout(Duration::from_secs(3), ask)
        .await
        .ok()
        .flatten()
}

/// `host:port` of a coordinator URL (the scheme's port when it names none).
fn authority(ep: &Endpoint) -> Option<String> {
    let uri = ep.uri();
    let host = uri.host()?;
    let default = if uri.scheme_str() == Some("https") {
        443
    } else {
        80
    };
    let port = uri.port_u16().unwrap_or(default);
    Some(format!("{host}:{port}"))
}

impl ClientAccess {
    pub async fn connect(&self, url: &str) -> Result<Client, AccessError> {
        let url_err = |message: String| AccessError::Url {
            url: url.to_string(),
            message,
        };
        let mut ep = Endpoint::from_shared(url.to_string())
            .map_err(|e| url_err(e.to_string()))?
            .connect_timeout(Duration::from_secs(10));
        let tls = url.starts_with("https://");
        if let Some(ca) = &self.ca_cert {
            init_tls();
            if !tls {
                return Err(url_err(
                    "TLS is on (a CA certificate is set): use an https:// URL".into(),
                ));
            }
            let mut config = ClientTlsConfig::new();
            if let Some(d) = &self.domain {
                config = config.domain_name(d.clone());
            }
            ep = ep
                .tls_config_with_verifier(config, verifier(ca)?)
                .map_err(|e| AccessError::File {
                    path: ca.clone(),
                    message: e.to_string(),
                })?;
        } else if tls {
            return Err(url_err(
                "an https:// URL needs the CA certificate that signed the coordinator's (--ca-cert or PARAFORGE_CA_CERT)".into(),
            ));
        }
        let addr = authority(&ep);
        // A plain-text client's first request to a TLS server fails with an
        // "h2 protocol error" that names nothing: ask first (one round trip).
        if !tls {
            if let Some(Speaks::Tls) = match &addr {
                Some(a) => probe(a).await,
                None => None,
            } {
                return Err(url_err(format!(
                    "the coordinator speaks TLS: use https://{} with --ca-cert (or PARAFORGE_CA_CERT) naming the CA certificate that signed its certificate",
                    addr.as_deref().unwrap_or_default()
                )));
            }
        }
        let channel = match ep.connect().await {
            Ok(c) => c,
            Err(e) => {
                // A TLS handshake with a plain-text server fails on the
                // server's first frame: say so rather than "corrupt message".
                if tls {
                    if let Some(Speaks::PlainHttp2) = match &addr {
                        Some(a) => probe(a).await,
                        None => None,
                    } {
                        return Err(url_err(format!(
                            "the coordinator does not speak TLS (it has no tls_cert): use http://{}, without --ca-cert",
                            addr.as_deref().unwrap_or_default()
                        )));
                    }
                }
                return Err(AccessError::Connect {
                    url: url.to_string(),
                    message: format!("{e}: {}", source_chain(&e)),
                });
            }
        };
        let token = match &self.token {
            Some(t) => Some(
                format!("Bearer {t}")
                    .parse()
                    .map_err(|_| url_err("invalid token".into()))?,
            ),
            None => None,
        };
        let max = self.max_message_bytes.unwrap_or(DEFAULT_MAX_MESSAGE_BYTES);
        Ok(
            CoordinatorClient::with_interceptor(channel, BearerToken(token))
                .max_decoding_message_size(max)
                .max_encoding_message_size(max),
        )
    }
}

fn source_chain(e: &dyn std::error::Error) -> String {
    let mut out = Vec::new();
    let mut s = e.source();
    while let Some(x) = s {
        out.push(x.to_string());
        s = x.source();
    }
    out.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_load_from_a_file_and_bad_ones_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("token");
        std::fs::write(&p, "s3cret-value\n").unwrap();
        assert_eq!(
            load_token(Some(&p)).unwrap().as_deref(),
            Some("s3cret-value")
        );
        std::fs::write(&p, "\n").unwrap();
        let e = load_token(Some(&p)).unwrap_err().to_string();
        assert!(e.contains("token") && e.contains("empty"), "{e}");
        std::fs::write(&p, "two words").unwrap();
        assert!(load_token(Some(&p)).is_err());
        let e = load_token(Some(&dir.path().join("missing")))
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing"), "{e}");
        assert!(ct_eq(b"abc", b"abc") && !ct_eq(b"abc", b"abd") && !ct_eq(b"abc", b"ab"));
    }
}
