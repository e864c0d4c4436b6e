//! rustls configuration for the client listener, including mutual TLS.

use std::fs::File;
use std::io::BufReader;
use std::path::Path;
use std::sync::Arc;

use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{self, RootCertStore, ServerConfig};
use tokio_rustls::TlsAcceptor;

use crate::options::TlsOptions;

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A certificate or key file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The file held no usable certificate or key.
    #[error("no {what} found in {path}")]
    Missing {
        /// "certificate" or "private key".
        what: &'static str,
        /// The file.
        path: String,
    },
    /// `verify` was asked for without a CA file.
    #[error("tls verify requires a CA file (--tlscacert or tls.ca_file)")]
    VerifyWithoutCa,
    /// rustls refused the configuration.
    #[error("invalid TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
    /// The client verifier could not be built.
    #[error("invalid client CA: {0}")]
    Verifier(String),
}

/// Builds the acceptor for client connections.
pub fn acceptor(options: &TlsOptions) -> Result<TlsAcceptor, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs = read_certs(&options.cert_file)?;
    let key = read_key(&options.key_file)?;
    let builder = ServerConfig::builder_with_provider(provider.clone()).with_safe_default_protocol_versions()?;
    let builder = if options.verify {
        let ca_file = options.ca_file.as_ref().ok_or(TlsError::VerifyWithoutCa)?;
        let mut roots = RootCertStore::empty();
        for cert in read_certs(ca_file)? {
            roots.add(cert)?;
        }
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .map_err(|error| TlsError::Verifier(error.to_string()))?;
        builder.with_client_cert_verifier(verifier)
    } else {
        builder.with_no_client_auth()
    };
    let config = builder.with_single_cert(certs, key)?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

fn open(path: &Path) -> Result<BufReader<File>, TlsError> {
    File::open(path).map(BufReader::new).map_err(|source| TlsError::Read { path: path.display().to_string(), source })
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = rustls_pemfile::certs(&mut open(path)?)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| TlsError::Read { path: path.display().to_string(), source })?;
    if certs.is_empty() {
        return Err(TlsError::Missing { what: "certificate", path: path.display().to_string() });
    }
    Ok(certs)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    rustls_pemfile::private_key(&mut open(path)?)
        .map_err(|source| TlsError::Read { path: path.display().to_string(), source })?
        .ok_or(TlsError::Missing { what: "private key", path: path.display().to_string() })
}
