//! TLS and mutual TLS with certificates generated for the test.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose,
};
use semaq_testkit::SemaqServer;

/// PEM files of a CA, a server certificate for 127.0.0.1/localhost and a client certificate.
struct Pki {
    ca: PathBuf,
    server_cert: PathBuf,
    server_key: PathBuf,
    client_cert: PathBuf,
    client_key: PathBuf,
}

/// Writes `pem` to `name` in `dir`; returns its path.
pub(crate) fn write(dir: &Path, name: &str, pem: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, pem).unwrap();
    path
}

/// A new self-signed CA.
pub(crate) fn certificate_authority() -> CertifiedIssuer<'static, KeyPair> {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap()
}

/// A certificate `ca` signs for `names` and `usage`: its PEM and its key's.
pub(crate) fn leaf(
    ca: &CertifiedIssuer<'static, KeyPair>,
    names: Vec<String>,
    usage: ExtendedKeyUsagePurpose,
) -> (String, String) {
    let mut params = CertificateParams::new(names).unwrap();
    params.extended_key_usages = vec![usage];
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, ca).unwrap();
    (cert.pem(), key.serialize_pem())
}

fn pki(dir: &Path) -> Pki {
    let ca = certificate_authority();
    let (server_cert, server_key) =
        leaf(&ca, vec!["127.0.0.1".into(), "localhost".into()], ExtendedKeyUsagePurpose::ServerAuth);
    let (client_cert, client_key) = leaf(&ca, vec!["client".into()], ExtendedKeyUsagePurpose::ClientAuth);
    Pki {
        ca: write(dir, "ca.pem", &ca.pem()),
        server_cert: write(dir, "server.pem", &server_cert),
        server_key: write(dir, "server-key.pem", &server_key),
        client_cert: write(dir, "client.pem", &client_cert),
        client_key: write(dir, "client-key.pem", &client_key),
    }
}

fn tls_server(pki: &Pki, verify: bool) -> SemaqServer {
    let (cert, key, ca) =
        (pki.server_cert.to_str().unwrap(), pki.server_key.to_str().unwrap(), pki.ca.to_str().unwrap());
    let mut args = vec!["--tls", "--tlscert", cert, "--tlskey", key];
    if verify {
        args.extend(["--tlsverify", "--tlscacert", ca]);
    }
    SemaqServer::with_args(&args)
}

#[tokio::test]
async fn tls_clients_connect_and_exchange_messages() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path());
    let server = tls_server(&pki, false);
    assert!(server.raw_info().contains("\"tls_required\":true"));
    let client = async_nats::ConnectOptions::new()
        .require_tls(true)
        .add_root_certificates(pki.ca.clone())
        .connect(server.url())
        .await
        .expect("TLS connect");
    let mut subscriber = client.subscribe("secure").await.unwrap();
    client.publish("secure", "sealed".into()).await.unwrap();
    let message = futures::StreamExt::next(&mut subscriber).await.unwrap();
    assert_eq!(message.payload, "sealed");
    assert_eq!(server.http_json("/connz")["connections"][0]["tls"], true);
}

#[tokio::test]
async fn a_client_that_does_not_trust_the_ca_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path());
    let server = tls_server(&pki, false);
    let refused = async_nats::ConnectOptions::new().require_tls(true).connect(server.url()).await;
    assert!(refused.is_err(), "untrusted server certificate must fail");
}

#[tokio::test]
async fn mutual_tls_requires_a_client_certificate_signed_by_the_ca() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path());
    let server = tls_server(&pki, true);
    assert!(server.raw_info().contains("\"tls_verify\":true"));
    let client = async_nats::ConnectOptions::new()
        .require_tls(true)
        .add_root_certificates(pki.ca.clone())
        .add_client_certificate(pki.client_cert.clone(), pki.client_key.clone())
        .connect(server.url())
        .await
        .expect("mTLS connect");
    client.flush().await.unwrap();
    let without_cert = async_nats::ConnectOptions::new()
        .require_tls(true)
        .add_root_certificates(pki.ca.clone())
        .connection_timeout(std::time::Duration::from_secs(2))
        .connect(server.url())
        .await;
    match without_cert {
        Err(_) => {}
        // TLS 1.3 reports a refused client certificate only on the first read.
        Ok(client) => assert!(client.flush().await.is_err(), "no client certificate must fail"),
    }
}
