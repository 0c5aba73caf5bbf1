//! Who may talk to a coordinator: gRPC over TLS (rustls) and a shared-secret
//! token in the `authorization: Bearer` header, checked by an interceptor.
//! The token comes from a file or the `PARAFORGE_TOKEN` environment variable,
//! never from a command-line argument (those show in `ps`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::service::Interceptor;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};
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

impl ClientAccess {
    pub async fn connect(&self, url: &str) -> Result<Client, AccessError> {
        let url_err = |message: String| AccessError::Url {
            url: url.to_string(),
            message,
        };
        let mut ep = Endpoint::from_shared(url.to_string())
            .map_err(|e| url_err(e.to_string()))?
            .connect_timeout(Duration::from_secs(10));
        if let Some(ca) = &self.ca_cert {
            init_tls();
            if !url.starts_with("https://") {
                return Err(url_err(
                    "TLS is on (a CA certificate is set): use an https:// URL".into(),
                ));
            }
            let mut tls =
                ClientTlsConfig::new().ca_certificate(Certificate::from_pem(read_file(ca)?));
            if let Some(d) = &self.domain {
                tls = tls.domain_name(d.clone());
            }
            ep = ep.tls_config(tls).map_err(|e| AccessError::File {
                path: ca.clone(),
                message: e.to_string(),
            })?;
        }
        let channel = ep.connect().await.map_err(|e| AccessError::Connect {
            url: url.to_string(),
            message: format!("{e}: {}", source_chain(&e)),
        })?;
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
