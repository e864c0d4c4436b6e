//! `tls { verify_and_map: true }`: the client certificate names the user, on the client port
//! and on the WebSocket listener, side by side with nats-server.

use std::path::{Path, PathBuf};
use std::time::Duration;

use async_nats::{ConnectErrorKind, ConnectOptions};
use futures::StreamExt;
use rcgen::string::Ia5String;
use rcgen::{
    CertificateParams, CertifiedIssuer, DistinguishedName, DnType, DnValue, ExtendedKeyUsagePurpose, KeyPair, SanType,
};
use semaq_testkit::{NatsServer, SemaqServer};

use crate::tls::{certificate_authority, leaf, write};

const RECEIVE_TIMEOUT: Duration = Duration::from_secs(5);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The emailAddress subject attribute, which nats-server's DN parser does not know.
const EMAIL_ADDRESS: &[u64] = &[1, 2, 840, 113549, 1, 9, 1];
/// The domain component subject attribute (DC).
const DOMAIN_COMPONENT: &[u64] = &[0, 9, 2342, 19200300, 100, 1, 25];

/// A client certificate: its subject attributes in certificate order and its alternative names.
struct Client {
    subject: Vec<(DnType, &'static str)>,
    sans: Vec<SanType>,
}

/// The CA and server certificate (127.0.0.1) both servers use, and where client certificates go.
struct Pki {
    dir: PathBuf,
    ca: CertifiedIssuer<'static, KeyPair>,
    ca_file: PathBuf,
    server_cert: PathBuf,
    server_key: PathBuf,
}

fn pki(dir: &Path) -> Pki {
    let ca = certificate_authority();
    let names = vec!["127.0.0.1".to_string(), "localhost".to_string()];
    let (server_cert, server_key) = leaf(&ca, names, ExtendedKeyUsagePurpose::ServerAuth);
    Pki {
        dir: dir.to_path_buf(),
        ca_file: write(dir, "ca.pem", &ca.pem()),
        server_cert: write(dir, "server.pem", &server_cert),
        server_key: write(dir, "server-key.pem", &server_key),
        ca,
    }
}

impl Pki {
    /// Writes `client`'s certificate and key, named `name`; returns their paths.
    fn client(&self, name: &str, client: &Client) -> (PathBuf, PathBuf) {
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        for (kind, value) in &client.subject {
            let value = match kind {
                DnType::CustomDnType(_) => DnValue::Ia5String(Ia5String::try_from(*value).unwrap()),
                _ => DnValue::Utf8String((*value).to_string()),
            };
            params.distinguished_name.push(kind.clone(), value);
        }
        params.subject_alt_names = client.sans.clone();
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.ca).unwrap();
        (
            write(&self.dir, &format!("{name}.pem"), &cert.pem()),
            write(&self.dir, &format!("{name}-key.pem"), &key.serialize_pem()),
        )
    }

    /// `tls { }` with `verify_and_map`.
    fn tls_block(&self) -> String {
        format!(
            "tls {{ cert_file: {:?}, key_file: {:?}, ca_file: {:?}, verify_and_map: true }}",
            self.server_cert, self.server_key, self.ca_file
        )
    }
}

fn ia5(text: &str) -> Ia5String {
    Ia5String::try_from(text).unwrap()
}

/// Users named as a certificate can name them, each allowed to publish only `who.<tag>` and
/// `who.done`; `hank@example.com` also has a password.
fn users_block() -> String {
    let users = [
        ("alice@example.com", "email", ""),
        ("app.example.com", "dns", ""),
        ("spiffe://example.org/app", "uri", ""),
        ("CN=carol,OU=eng,O=Acme,C=US", "dn", ""),
        ("CN=dave, O=Acme", "reordered", ""),
        ("CN=erin,O=Acme", "go_subject", ""),
        ("CN=frank,DC=example", "go_subject_with_dc", ""),
        ("hank@example.com", "password", "secret"),
    ];
    let users: Vec<String> = users
        .iter()
        .map(|(user, tag, password)| {
            let password = if password.is_empty() { String::new() } else { format!(", password: {password:?}") };
            format!("{{ user: {user:?}{password}, permissions: {{ publish: [\"who.{tag}\", \"who.done\"] }} }}")
        })
        .collect();
    format!("authorization {{ users: [\n{}\n] }}", users.join("\n"))
}

const TAGS: &[&str] = &["email", "dns", "uri", "dn", "reordered", "go_subject", "go_subject_with_dc", "password"];

/// Which user `cert` logs in as at `url`: the one tag of [`TAGS`] it may publish to, or why it
/// was refused.
async fn mapped_tag(url: &str, ca: &Path, (cert, key): &(PathBuf, PathBuf)) -> Result<String, ConnectErrorKind> {
    let options = ConnectOptions::new()
        .require_tls(url.starts_with("nats"))
        .add_root_certificates(ca.to_path_buf())
        .add_client_certificate(cert.clone(), key.clone())
        .connection_timeout(CONNECT_TIMEOUT);
    let client = options.connect(url).await.map_err(|error| error.kind())?;
    let mut who = client.subscribe("who.>").await.unwrap();
    for tag in TAGS.iter().chain(&["done"]) {
        client.publish(format!("who.{tag}"), "".into()).await.unwrap();
    }
    let mut allowed = Vec::new();
    loop {
        let message = tokio::time::timeout(RECEIVE_TIMEOUT, who.next()).await.expect("who.done in time").unwrap();
        match message.subject.strip_prefix("who.") {
            Some("done") => break,
            Some(tag) => allowed.push(tag.to_string()),
            None => unreachable!(),
        }
    }
    assert_eq!(allowed.len(), 1, "exactly one user's subject: {allowed:?}");
    Ok(allowed.remove(0))
}

fn subject_client(subject: Vec<(DnType, &'static str)>) -> Client {
    Client { subject, sans: Vec::new() }
}

fn email_address() -> DnType {
    DnType::CustomDnType(EMAIL_ADDRESS.to_vec())
}

fn domain_component() -> DnType {
    DnType::CustomDnType(DOMAIN_COMPONENT.to_vec())
}

/// The certificates of the cases, each with the tag of the user nats-server maps it to (`None`:
/// refused).
fn cases() -> Vec<(&'static str, Client, Option<&'static str>)> {
    use DnType::{CommonName, CountryName, OrganizationName, OrganizationalUnitName};
    vec![
        (
            "email_before_dns",
            Client {
                subject: vec![(CommonName, "alice")],
                sans: vec![SanType::DnsName(ia5("app.example.com")), SanType::Rfc822Name(ia5("alice@example.com"))],
            },
            Some("email"),
        ),
        (
            "dns_before_uri",
            Client {
                subject: vec![(CommonName, "app")],
                sans: vec![SanType::URI(ia5("spiffe://example.org/app")), SanType::DnsName(ia5("app.example.com"))],
            },
            Some("dns"),
        ),
        ("uri", Client { subject: Vec::new(), sans: vec![SanType::URI(ia5("spiffe://example.org/app"))] }, Some("uri")),
        (
            "dn",
            subject_client(vec![
                (CountryName, "US"),
                (OrganizationName, "Acme"),
                (OrganizationalUnitName, "eng"),
                (CommonName, "carol"),
            ]),
            Some("dn"),
        ),
        ("reordered_dn", subject_client(vec![(CommonName, "dave"), (OrganizationName, "Acme")]), Some("reordered")),
        (
            "go_subject_without_unknown_attributes",
            subject_client(vec![
                (OrganizationName, "Acme"),
                (CommonName, "erin"),
                (email_address(), "erin@example.com"),
            ]),
            Some("go_subject"),
        ),
        (
            "go_subject_with_domain_components",
            subject_client(vec![
                (domain_component(), "example"),
                (CommonName, "frank"),
                (email_address(), "frank@example.com"),
            ]),
            Some("go_subject_with_dc"),
        ),
        ("unknown", subject_client(vec![(CommonName, "nobody")]), None),
        (
            "password_not_sent",
            Client { subject: Vec::new(), sans: vec![SanType::Rfc822Name(ia5("hank@example.com"))] },
            None,
        ),
    ]
}

/// What nats-server and SemaQ make of each case's certificate on the client port.
#[tokio::test]
async fn verify_and_map_names_the_user_by_certificate_as_nats_server_does() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path());
    let config = format!("{}\n{}\n", pki.tls_block(), users_block());
    let semaq = SemaqServer::with_config(&config, &[]);
    let nats = NatsServer::with_config(&config);
    for (name, client, expected) in cases() {
        let files = pki.client(name, &client);
        let ours = mapped_tag(&semaq.url(), &pki.ca_file, &files).await;
        let theirs = mapped_tag(&nats.url(), &pki.ca_file, &files).await;
        assert_eq!(format!("{ours:?}"), format!("{theirs:?}"), "{name}: SemaQ and nats-server differ");
        match expected {
            Some(tag) => assert_eq!(ours, Ok(tag.to_string()), "{name}"),
            None => assert_eq!(ours, Err(ConnectErrorKind::AuthorizationViolation), "{name}"),
        }
    }
}

/// The `wss://` URL a server logged.
fn wss_url(log: &str) -> String {
    let line = log.lines().find_map(|line| line.split("Listening for websocket clients on ").nth(1));
    line.expect("websocket listener logged").trim().to_string()
}

/// The WebSocket listener's own `verify_and_map` names the user as the client port's does,
/// side by side with nats-server; the client port here maps nothing and is not used.
#[tokio::test]
async fn websocket_verify_and_map_names_the_user_by_certificate_as_nats_server_does() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path());
    let config = format!("websocket {{ host: \"127.0.0.1\", port: -1, {} }}\n{}\n", pki.tls_block(), users_block());
    let semaq = SemaqServer::with_config(&config, &[]);
    let nats = NatsServer::with_config(&config);
    let (ours_url, theirs_url) = (wss_url(&semaq.log_text()), wss_url(&nats.log_text()));
    for (name, client, expected) in cases().into_iter().filter(|(name, ..)| ["dn", "uri", "unknown"].contains(name)) {
        let files = pki.client(name, &client);
        let ours = mapped_tag(&ours_url, &pki.ca_file, &files).await;
        let theirs = mapped_tag(&theirs_url, &pki.ca_file, &files).await;
        assert_eq!(format!("{ours:?}"), format!("{theirs:?}"), "{name}: SemaQ and nats-server differ");
        assert_eq!(ours.ok().as_deref(), expected, "{name}");
    }
}

/// A password-less user a certificate can name on the client port cannot log in by name alone
/// on the WebSocket listener, which does not map (nats-server 2.11's `canTLSMap`; 2.9 let it).
#[tokio::test]
async fn a_user_a_certificate_names_cannot_log_in_without_password_where_certificates_do_not_map() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path());
    let config = format!(
        "{}\nwebsocket {{ host: \"127.0.0.1\", port: -1, no_tls: true }}\n{}\n",
        pki.tls_block(),
        users_block()
    );
    let semaq = SemaqServer::with_config(&config, &[]);
    let by_name = ConnectOptions::with_user_and_password("alice@example.com".into(), String::new())
        .connection_timeout(CONNECT_TIMEOUT)
        .connect(wss_url(&semaq.log_text()))
        .await;
    assert_eq!(by_name.err().map(|error| error.kind()), Some(ConnectErrorKind::AuthorizationViolation));
    let with_password = ConnectOptions::with_user_and_password("hank@example.com".into(), "secret".into())
        .connection_timeout(CONNECT_TIMEOUT)
        .connect(wss_url(&semaq.log_text()))
        .await;
    assert!(with_password.is_ok(), "a user with a password still logs in by name");
}
