//! Nkey users and decentralized (operator → account → user JWT) auth, with real clients: async-nats
//! signing the nonce with a seed or a `.creds` file, and raw CONNECTs compared line for line with
//! nats-server 2.9 given the same config.

use std::path::Path;
use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use futures::StreamExt;
use nkeys::KeyPair;
use semaq_testkit::{sync, NatsServer, Raw, SemaqServer};
use serde_json::{json, Value};

/// Claims and a signature, as nsc writes them (the JWT header of nats-io/jwt v2).
pub(crate) fn mint(issuer: &KeyPair, subject: &str, nats: Value, times: Value) -> String {
    let header = URL_SAFE_NO_PAD.encode(br#"{"typ":"JWT","alg":"ed25519-nkey"}"#);
    let mut claims = json!({
        "jti": format!("{:X}", rand_id()),
        "iat": now() - 60,
        "iss": issuer.public_key(),
        "name": "test",
        "sub": subject,
        "nats": nats,
    });
    if let (Some(claims), Some(times)) = (claims.as_object_mut(), times.as_object()) {
        claims.extend(times.clone());
    }
    let signed = format!("{header}.{}", URL_SAFE_NO_PAD.encode(claims.to_string()));
    let signature = issuer.sign(signed.as_bytes()).expect("sign");
    format!("{signed}.{}", URL_SAFE_NO_PAD.encode(signature))
}

fn rand_id() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
}

fn now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64
}

pub(crate) fn unlimited_user(extra: Value) -> Value {
    let mut nats = json!({ "type": "user", "version": 2, "subs": -1, "data": -1, "payload": -1, "pub": {}, "sub": {} });
    if let (Some(nats), Some(extra)) = (nats.as_object_mut(), extra.as_object()) {
        nats.extend(extra.clone());
    }
    nats
}

/// An operator JWT, self-signed, naming `system` its system account.
pub(crate) fn operator_jwt_naming(operator: &KeyPair, system: &KeyPair) -> String {
    let claims = json!({ "type": "operator", "version": 2, "system_account": system.public_key() });
    mint(operator, &operator.public_key(), claims, json!({}))
}

/// A `resolver_preload` line: `key`'s account JWT with `limits`, signed by `operator`.
pub(crate) fn preload_line(operator: &KeyPair, key: &KeyPair, limits: Value) -> String {
    let jwt = mint(operator, &key.public_key(), account_claims(limits, json!({})), json!({}));
    format!("  {}: {jwt}\n", key.public_key())
}

pub(crate) fn account_claims(limits: Value, extra: Value) -> Value {
    let mut all = json!({
        "subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1, "wildcards": true, "conn": -1, "leaf": -1,
    });
    if let (Some(all), Some(limits)) = (all.as_object_mut(), limits.as_object()) {
        all.extend(limits.clone());
    }
    let mut nats = json!({ "type": "account", "version": 2, "limits": all });
    if let (Some(nats), Some(extra)) = (nats.as_object_mut(), extra.as_object()) {
        nats.extend(extra.clone());
    }
    nats
}

/// An operator with a system account and an application account, and the config trusting them.
pub(crate) struct Operator {
    operator: KeyPair,
    pub(crate) account: KeyPair,
    pub(crate) config: String,
}

impl Operator {
    pub(crate) fn new(dir: &Path, account_limits: Value, account_extra: Value) -> Self {
        let operator = KeyPair::new_operator();
        let system = KeyPair::new_account();
        let account = KeyPair::new_account();
        let operator_jwt = operator_jwt_naming(&operator, &system);
        let operator_file = dir.join("operator.jwt");
        std::fs::write(&operator_file, &operator_jwt).expect("write operator JWT");
        let system_jwt = mint(&operator, &system.public_key(), account_claims(json!({}), json!({})), json!({}));
        let account_jwt =
            mint(&operator, &account.public_key(), account_claims(account_limits, account_extra), json!({}));
        let config = format!(
            "operator: {:?}\nsystem_account: {}\nresolver: MEMORY\nresolver_preload {{\n  {}: {}\n  {}: {}\n}}\n",
            operator_file.display().to_string(),
            system.public_key(),
            system.public_key(),
            system_jwt,
            account.public_key(),
            account_jwt,
        );
        Self { operator, account, config }
    }

    /// A user JWT of the application account.
    pub(crate) fn user_jwt(&self, user: &KeyPair, extra: Value, times: Value) -> String {
        mint(&self.account, &user.public_key(), unlimited_user(extra), times)
    }
}

/// A `.creds` file as nsc writes it.
pub(crate) fn creds(dir: &Path, name: &str, jwt: &str, seed: &str) -> std::path::PathBuf {
    let text = format!(
        "-----BEGIN NATS USER JWT-----\n{jwt}\n------END NATS USER JWT------\n\n\
         ************************* IMPORTANT *************************\n\
         NKEY Seed printed below can be used to sign and prove identity.\n\n\
         -----BEGIN USER NKEY SEED-----\n{seed}\n------END USER NKEY SEED------\n\n\
         *************************************************************\n"
    );
    let path = dir.join(format!("{name}.creds"));
    std::fs::write(&path, text).expect("write creds");
    path
}

fn write_config(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write config");
    path.display().to_string()
}

fn nats_server(dir: &Path, config: &str) -> NatsServer {
    NatsServer::with_args(&["-c", &write_config(dir, "nats.conf", config)])
}

fn semaq_server(config: &str) -> SemaqServer {
    SemaqServer::with_config(config, &[])
}

/// Connects raw, sends the CONNECT `make` builds from the server's nonce, and returns the first
/// line the server answers, and whether it then closed the connection.
pub(crate) fn raw_connect(addr: std::net::SocketAddr, make: &dyn Fn(&str) -> Value) -> (String, bool) {
    let (mut raw, info) = Raw::connect_with_info(addr);
    let nonce = info["nonce"].as_str().expect("a nonce in INFO").to_string();
    let mut connect = make(&nonce);
    connect["verbose"] = json!(false);
    connect["pedantic"] = json!(false);
    raw.send(format!("CONNECT {connect}\r\nPING\r\n").as_bytes());
    let line = raw.read_until("\r\n").trim_end().to_string();
    let closed = line.starts_with("-ERR") && raw.is_closed();
    (line, closed)
}

/// Builds a CONNECT body from the server's nonce.
type MakeConnect<'a> = Box<dyn Fn(&str) -> Value + 'a>;

pub(crate) fn sign(user: &KeyPair, nonce: &str) -> String {
    URL_SAFE_NO_PAD.encode(user.sign(nonce.as_bytes()).expect("sign"))
}

const NKEY_CONFIG: &str = r#"
authorization {
  users = [
    { nkey: NKEY_FREE }
    { nkey: NKEY_LIMITED, permissions: { publish: "orders.>", subscribe: ["orders.>", "_INBOX.>"] } }
  ]
}
"#;

#[tokio::test]
async fn nkey_users_sign_the_nonce_with_their_seed_and_keep_their_permissions() {
    let (free, limited) = (KeyPair::new_user(), KeyPair::new_user());
    let config = NKEY_CONFIG.replace("NKEY_FREE", &free.public_key()).replace("NKEY_LIMITED", &limited.public_key());
    let server = semaq_server(&config);
    let connect =
        |pair: &KeyPair| async_nats::ConnectOptions::with_nkey(pair.seed().expect("seed")).connect(server.url());
    let free_client = connect(&free).await.expect("a configured nkey connects");
    let limited_client = connect(&limited).await.expect("a configured nkey connects");
    let mut orders = free_client.subscribe("orders.>").await.unwrap();
    sync(&free_client).await;
    limited_client.publish("orders.new", "1".into()).await.unwrap();
    limited_client.publish("payments.new", "2".into()).await.unwrap();
    limited_client.flush().await.unwrap();
    let first = tokio::time::timeout(Duration::from_secs(5), orders.next()).await.expect("delivered").unwrap();
    assert_eq!(first.subject.as_str(), "orders.new");
    let stray = tokio::time::timeout(Duration::from_millis(300), orders.next()).await;
    assert!(stray.is_err(), "only the permitted publish arrives");
    let stranger = connect(&KeyPair::new_user()).await;
    assert!(stranger.is_err(), "an nkey not in the config is refused");
}

#[test]
fn nkey_refusals_are_the_same_as_nats_servers() {
    let (user, other) = (KeyPair::new_user(), KeyPair::new_user());
    let config = NKEY_CONFIG.replace("NKEY_FREE", &user.public_key()).replace("NKEY_LIMITED", &other.public_key());
    let dir = tempfile::tempdir().unwrap();
    let (semaq, nats) = (semaq_server(&config), nats_server(dir.path(), &config));
    let key = user.public_key();
    let cases: Vec<(&str, MakeConnect)> = vec![
        ("signed nonce", Box::new(|nonce| json!({ "nkey": key, "sig": sign(&user, nonce) }))),
        ("another nonce", Box::new(|_| json!({ "nkey": key, "sig": sign(&user, "not-the-nonce") }))),
        ("another key's signature", Box::new(|nonce| json!({ "nkey": key, "sig": sign(&other, nonce) }))),
        ("garbage base64", Box::new(|_| json!({ "nkey": key, "sig": "%%% not base64 %%%" }))),
        ("no signature", Box::new(|_| json!({ "nkey": key }))),
        (
            "unknown nkey",
            Box::new(|nonce| {
                let stranger = KeyPair::new_user();
                json!({ "nkey": stranger.public_key(), "sig": sign(&stranger, nonce) })
            }),
        ),
        ("not an nkey", Box::new(|_| json!({ "nkey": "UNOTAKEY", "sig": "AAAA" }))),
    ];
    for (case, make) in &cases {
        let ours = raw_connect(semaq.addr(), make.as_ref());
        let theirs = raw_connect(nats.addr(), make.as_ref());
        assert_eq!(ours, theirs, "{case}: SemaQ {ours:?}, nats-server {theirs:?}");
    }
    assert_eq!(raw_connect(semaq.addr(), cases[0].1.as_ref()), ("PONG".to_string(), false));
    assert_eq!(raw_connect(semaq.addr(), cases[1].1.as_ref()), ("-ERR 'Authorization Violation'".to_string(), true));
}

#[tokio::test]
async fn jwt_users_connect_with_creds_files_and_keep_their_permissions() {
    let dir = tempfile::tempdir().unwrap();
    let operator = Operator::new(dir.path(), json!({}), json!({}));
    let server = semaq_server(&operator.config);
    let (free, limited) = (KeyPair::new_user(), KeyPair::new_user());
    let free_jwt = operator.user_jwt(&free, json!({}), json!({}));
    let limited_jwt = operator.user_jwt(
        &limited,
        json!({ "pub": { "allow": ["orders.>"] }, "sub": { "allow": ["orders.>", "_INBOX.>"], "deny": ["orders.secret"] } }),
        json!({}),
    );
    let free_creds = creds(dir.path(), "free", &free_jwt, &free.seed().unwrap());
    let free_client = async_nats::ConnectOptions::with_credentials_file(free_creds)
        .await
        .expect("creds file")
        .connect(server.url())
        .await
        .expect("a JWT user of a trusted account connects");
    let limited_client = async_nats::ConnectOptions::with_credentials(
        &std::fs::read_to_string(creds(dir.path(), "limited", &limited_jwt, &limited.seed().unwrap())).unwrap(),
    )
    .expect("creds text")
    .connect(server.url())
    .await
    .expect("connects");
    let mut orders = free_client.subscribe("orders.>").await.unwrap();
    sync(&free_client).await;
    limited_client.publish("payments.new", "no".into()).await.unwrap();
    limited_client.publish("orders.new", "yes".into()).await.unwrap();
    limited_client.flush().await.unwrap();
    let first = tokio::time::timeout(Duration::from_secs(5), orders.next()).await.expect("delivered").unwrap();
    assert_eq!(first.subject.as_str(), "orders.new", "the publish outside the JWT's allow list was dropped");
    let denied = limited_client.subscribe("orders.secret").await.unwrap();
    drop(denied);
    let mut raw = Raw::connect_with_info(server.addr());
    let nonce = raw.1["nonce"].as_str().unwrap().to_string();
    let connect = json!({ "jwt": limited_jwt, "sig": sign(&limited, &nonce), "verbose": false });
    raw.0.send(format!("CONNECT {connect}\r\nSUB orders.secret 1\r\nPUB payments.x 1\r\nx\r\n").as_bytes());
    raw.0.expect("-ERR 'Permissions Violation for Subscription to \"orders.secret\"'");
    raw.0.expect("-ERR 'Permissions Violation for Publish to \"payments.x\"'");
}

#[tokio::test]
async fn a_jwt_user_asks_who_it_is_and_hears_when_its_credentials_expire() {
    let dir = tempfile::tempdir().unwrap();
    let operator = Operator::new(dir.path(), json!({}), json!({}));
    let server = semaq_server(&operator.config);
    let (lasting, expiring) = (KeyPair::new_user(), KeyPair::new_user());
    let lasting_jwt = operator.user_jwt(&lasting, json!({}), json!({}));
    let expiring_jwt = operator.user_jwt(&expiring, json!({}), json!({ "exp": now() + 3600 }));
    let ask = |jwt: String, seed: String| {
        let (url, creds) = (server.url(), creds(dir.path(), "user", &jwt, &seed));
        async move {
            let options = async_nats::ConnectOptions::with_credentials_file(creds).await.unwrap();
            let client = options.connect(url).await.unwrap();
            let reply = tokio::time::timeout(Duration::from_secs(5), client.request("$SYS.REQ.USER.INFO", "".into()))
                .await
                .expect("an answer")
                .unwrap();
            serde_json::from_slice::<Value>(&reply.payload).unwrap()["data"].clone()
        }
    };
    // nats-server's UserInfo: the user's public key, its account, and (a Go duration, whole
    // seconds) the time its JWT has left.
    let lasting_info = ask(lasting_jwt, lasting.seed().unwrap()).await;
    assert_eq!(lasting_info["user"], json!(lasting.public_key()));
    assert_eq!(lasting_info["account"], json!(operator.account.public_key()));
    assert!(lasting_info.get("expires").is_none(), "a JWT without exp never expires: {lasting_info}");
    let expiring_info = ask(expiring_jwt, expiring.seed().unwrap()).await;
    let left_ns = expiring_info["expires"].as_i64().expect("expires, in nanoseconds");
    assert_eq!(left_ns % 1_000_000_000, 0, "truncated to whole seconds");
    assert!((3_590_000_000_000..=3_600_000_000_000).contains(&left_ns), "an hour left: {left_ns}");
}

#[test]
fn bad_user_jwts_are_refused_as_nats_server_refuses_them() {
    let dir = tempfile::tempdir().unwrap();
    let revoked = KeyPair::new_user();
    let scoped = KeyPair::new_account();
    let extra = json!({
        "revocations": { revoked.public_key(): now() },
        "signing_keys": [{ "kind": "user_scope", "key": scoped.public_key(), "role": "r",
                           "template": { "pub": { "allow": ["scoped.>"] }, "sub": {}, "subs": -1, "data": -1, "payload": -1 } }],
    });
    let operator = Operator::new(dir.path(), json!({}), extra);
    let (semaq, nats) = (semaq_server(&operator.config), nats_server(dir.path(), &operator.config));
    let user = KeyPair::new_user();
    let good = operator.user_jwt(&user, json!({}), json!({}));
    let expired = operator.user_jwt(&user, json!({}), json!({ "exp": now() - 10 }));
    let not_yet = operator.user_jwt(&user, json!({}), json!({ "nbf": now() + 3600 }));
    let stranger = KeyPair::new_account();
    let foreign = mint(&stranger, &user.public_key(), unlimited_user(json!({})), json!({}));
    let bearer = operator.user_jwt(&user, json!({ "bearer_token": true }), json!({}));
    let revoked_jwt =
        mint(&operator.account, &revoked.public_key(), unlimited_user(json!({})), json!({ "iat": now() - 100 }));
    // nats-server wants a scoped key's users to set nothing themselves: the template decides.
    let scoped_claims = json!({ "type": "user", "version": 2, "issuer_account": operator.account.public_key() });
    let by_scope = mint(&scoped, &user.public_key(), scoped_claims, json!({}));
    let scoped_with_own_limits = json!({ "issuer_account": operator.account.public_key() });
    let by_scope_with_limits = mint(&scoped, &user.public_key(), unlimited_user(scoped_with_own_limits), json!({}));
    let by_operator = mint(&operator.operator, &user.public_key(), unlimited_user(json!({})), json!({}));
    let mut forged = good.clone();
    forged.replace_range(forged.len() - 4.., "AAAA");
    let oversized = operator.user_jwt(&user, json!({ "pub": { "allow": vec!["x".repeat(60); 80] } }), json!({}));
    let sig = |nonce: &str| sign(&user, nonce);
    let cases: Vec<(&str, MakeConnect)> = vec![
        ("good", Box::new(|nonce| json!({ "jwt": good, "sig": sig(nonce) }))),
        ("bearer token, no signature", Box::new(|_| json!({ "jwt": bearer }))),
        ("signed by a scoped signing key", Box::new(|nonce| json!({ "jwt": by_scope, "sig": sig(nonce) }))),
        ("scoped, with limits of its own", Box::new(|nonce| json!({ "jwt": by_scope_with_limits, "sig": sig(nonce) }))),
        ("malformed JWT", Box::new(|nonce| json!({ "jwt": "eyJ.not.a-jwt", "sig": sig(nonce) }))),
        ("expired", Box::new(|nonce| json!({ "jwt": expired, "sig": sig(nonce) }))),
        ("not yet valid", Box::new(|nonce| json!({ "jwt": not_yet, "sig": sig(nonce) }))),
        ("signed by an unknown account", Box::new(|nonce| json!({ "jwt": foreign, "sig": sig(nonce) }))),
        ("signed by the operator", Box::new(|nonce| json!({ "jwt": by_operator, "sig": sig(nonce) }))),
        ("JWT signature forged", Box::new(|nonce| json!({ "jwt": forged, "sig": sig(nonce) }))),
        ("nonce signature of another nonce", Box::new(|_| json!({ "jwt": good, "sig": sig("other") }))),
        ("garbage signature", Box::new(|_| json!({ "jwt": good, "sig": "!!!" }))),
        ("no signature", Box::new(|_| json!({ "jwt": good }))),
        ("no JWT", Box::new(|nonce| json!({ "nkey": user.public_key(), "sig": sig(nonce) }))),
        ("revoked", Box::new(|nonce| json!({ "jwt": revoked_jwt, "sig": sign(&revoked, nonce) }))),
    ];
    for (case, make) in &cases {
        let ours = raw_connect(semaq.addr(), make.as_ref());
        let theirs = raw_connect(nats.addr(), make.as_ref());
        assert_eq!(ours, theirs, "{case}: SemaQ {ours:?}, nats-server {theirs:?}");
    }
    // A JWT beyond the control line: both refuse the line itself (nats-server appends details).
    let oversized = |nonce: &str| json!({ "jwt": oversized, "sig": sig(nonce) });
    for addr in [semaq.addr(), nats.addr()] {
        let (line, closed) = raw_connect(addr, &oversized);
        assert!(line.to_lowercase().starts_with("-err 'maximum control line exceeded"), "{addr}: {line}");
        assert!(closed, "{addr}: closed after {line}");
    }
    assert_eq!(raw_connect(semaq.addr(), cases[0].1.as_ref()), ("PONG".to_string(), false), "still serving");
}

#[test]
fn account_jwt_limits_bound_connections_subscriptions_and_payload_as_in_nats_server() {
    let dir = tempfile::tempdir().unwrap();
    let operator = Operator::new(dir.path(), json!({ "conn": 2, "subs": 2, "payload": 64 }), json!({}));
    let (semaq, nats) = (semaq_server(&operator.config), nats_server(dir.path(), &operator.config));
    let user = KeyPair::new_user();
    let jwt = operator.user_jwt(&user, json!({}), json!({}));
    for addr in [semaq.addr(), nats.addr()] {
        let login = |raw: &mut Raw, nonce: &str| {
            let connect = json!({ "jwt": jwt, "sig": sign(&user, nonce), "verbose": false, "pedantic": false });
            raw.send(format!("CONNECT {connect}\r\nPING\r\n").as_bytes());
        };
        let (mut first, info) = Raw::connect_with_info(addr);
        login(&mut first, info["nonce"].as_str().unwrap());
        first.expect("PONG\r\n");
        let (mut second, info) = Raw::connect_with_info(addr);
        login(&mut second, info["nonce"].as_str().unwrap());
        second.expect("PONG\r\n");
        let (mut third, info) = Raw::connect_with_info(addr);
        login(&mut third, info["nonce"].as_str().unwrap());
        third.expect("-ERR 'maximum account active connections exceeded'\r\n");
        assert!(third.is_closed(), "{addr}: the third connection of the account is closed");
        first.send(b"SUB a 1\r\nSUB b 2\r\nSUB c 3\r\nPING\r\n");
        first.expect("-ERR 'maximum subscriptions exceeded'\r\n");
        first.expect("PONG\r\n");
        second.send(format!("PUB a 65\r\n{}\r\nPING\r\n", "x".repeat(65)).as_bytes());
        second.expect("-ERR 'Maximum Payload Violation'\r\n");
        assert!(second.is_closed(), "{addr}: a payload above the account's limit closes the connection");
        let (mut again, info) = Raw::connect_with_info(addr);
        login(&mut again, info["nonce"].as_str().unwrap());
        again.expect("PONG\r\n");
    }
}

#[test]
fn operator_configs_semaq_cannot_honour_are_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let operator = Operator::new(dir.path(), json!({}), json!({}));
    let cases = [
        (operator.config.replace("resolver: MEMORY\n", ""), "operators require an account resolver"),
        (format!("{}authorization {{ user: a, password: b }}\n", operator.config), "operators do not allow users"),
        ("operator: \"eyJub3QiOiJhIEpXVCJ9.e30.AAAA\"\nresolver: MEMORY\n".to_string(), "operator JWT is not valid"),
        (operator.config.replace("MEMORY", "URL(http://localhost:9090/jwt/v1/accounts/)"), "resolver: MEMORY"),
        ("authorization { users [ { nkey: UNOTAKEY } ] }\n".to_string(), "not a valid public nkey"),
    ];
    for (config, expected) in cases {
        let output = SemaqServer::builder().config(&config).output();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "refused: {config}");
        assert!(stderr.contains(expected), "{expected:?} in {stderr}");
    }
}

#[test]
fn a_user_whose_jwt_expires_while_connected_is_closed_as_by_nats_server() {
    let dir = tempfile::tempdir().unwrap();
    let operator = Operator::new(dir.path(), json!({}), json!({}));
    let (semaq, nats) = (semaq_server(&operator.config), nats_server(dir.path(), &operator.config));
    let user = KeyPair::new_user();
    let jwt = operator.user_jwt(&user, json!({}), json!({ "exp": now() + 2 }));
    let mut connections: Vec<Raw> = [semaq.addr(), nats.addr()]
        .into_iter()
        .map(|addr| {
            let (mut raw, info) = Raw::connect_with_info(addr);
            let nonce = info["nonce"].as_str().unwrap().to_string();
            let connect = json!({ "jwt": jwt, "sig": sign(&user, &nonce), "verbose": false, "pedantic": false });
            raw.send(format!("CONNECT {connect}\r\nPING\r\n").as_bytes());
            raw.expect("PONG\r\n");
            raw
        })
        .collect();
    for raw in &mut connections {
        raw.expect("-ERR 'User Authentication Expired'\r\n");
        assert!(raw.is_closed());
    }
}

/// Logs a JWT user in over a raw connection, past its first PONG.
pub(crate) fn jwt_login(addr: std::net::SocketAddr, jwt: &str, user: &KeyPair) -> Raw {
    let (mut raw, info) = Raw::connect_with_info(addr);
    let nonce = info["nonce"].as_str().expect("a nonce").to_string();
    let connect = json!({ "jwt": jwt, "sig": sign(user, &nonce), "verbose": false, "pedantic": false });
    raw.send(format!("CONNECT {connect}\r\nPING\r\n").as_bytes());
    raw.expect("PONG\r\n");
    raw
}

/// Sends `commands` and a PING; returns what came back before the PONG.
pub(crate) fn round(raw: &mut Raw, commands: &str) -> String {
    raw.send(format!("{commands}PING\r\n").as_bytes());
    raw.read_until("PONG\r\n").trim_end_matches("PONG\r\n").to_string()
}

#[test]
fn a_jwt_user_with_resp_answers_one_delivered_request_as_in_nats_server() {
    let dir = tempfile::tempdir().unwrap();
    let operator = Operator::new(dir.path(), json!({}), json!({}));
    let (semaq, nats) = (semaq_server(&operator.config), nats_server(dir.path(), &operator.config));
    let (asker, service) = (KeyPair::new_user(), KeyPair::new_user());
    let asker_jwt = operator.user_jwt(&asker, json!({}), json!({}));
    let service_claims = json!({ "sub": { "allow": ["help"] }, "resp": { "max": 0, "ttl": 0 } });
    let service_jwt = operator.user_jwt(&service, service_claims, json!({}));
    let violation = |subject: &str| format!("-ERR 'Permissions Violation for Publish to \"{subject}\"'\r\n");
    for addr in [semaq.addr(), nats.addr()] {
        let mut asking = jwt_login(addr, &asker_jwt, &asker);
        let mut serving = jwt_login(addr, &service_jwt, &service);
        assert_eq!(round(&mut asking, "SUB _INBOX.> 7\r\n"), "", "{addr}");
        assert_eq!(round(&mut serving, "SUB help 1\r\nPUB _INBOX.a 1\r\nx\r\n"), violation("_INBOX.a"), "{addr}");
        assert_eq!(round(&mut asking, "PUB help _INBOX.a 1\r\n?\r\n"), "", "{addr}");
        assert_eq!(round(&mut serving, ""), "MSG help 1 _INBOX.a 1\r\n?\r\n", "{addr}");
        let answers = round(&mut serving, "PUB _INBOX.a 2\r\nok\r\nPUB _INBOX.a 2\r\nno\r\nPUB help 1\r\nx\r\n");
        let refused = format!("{}{}", violation("_INBOX.a"), violation("help"));
        assert_eq!(answers, refused, "{addr}: one reply (max 0 is the default, 1), and nothing else");
        assert_eq!(round(&mut asking, ""), "MSG _INBOX.a 7 2\r\nok\r\n", "{addr}");
    }
}

/// The UTC time of day `offset` seconds from now, as a user JWT's `times` write it.
fn clock_in(offset: i64) -> String {
    let seconds = (now() + offset).rem_euclid(86_400);
    format!("{:02}:{:02}:{:02}", seconds / 3600, seconds / 60 % 60, seconds % 60)
}

#[test]
fn jwt_src_and_times_refuse_clients_from_elsewhere_or_at_other_times_as_nats_server_does() {
    let dir = tempfile::tempdir().unwrap();
    let operator = Operator::new(dir.path(), json!({}), json!({}));
    let (semaq, nats) = (semaq_server(&operator.config), nats_server(dir.path(), &operator.config));
    let user = KeyPair::new_user();
    let hour = 3600;
    let utc = |start: i64, end: i64| json!({ "times": [{ "start": clock_in(start), "end": clock_in(end) }], "times_location": "UTC" });
    let cases = [
        ("src string with loopback", json!({ "src": "10.0.0.0/8, 127.0.0.0/8" }), true),
        ("src list with loopback", json!({ "src": ["127.0.0.1/32"] }), true),
        ("src without loopback", json!({ "src": ["10.0.0.0/8", "192.168.0.0/16"] }), false),
        ("times around now", utc(-hour, hour), true),
        ("times after now", utc(hour, 2 * hour), false),
        ("times before now", utc(-2 * hour, -hour), false),
        ("src allowed, times not", json!({ "src": "127.0.0.0/8", "times": utc(hour, 2 * hour)["times"] }), false),
    ];
    for (case, claims, admitted) in cases {
        let jwt = operator.user_jwt(&user, claims, json!({}));
        let make = |nonce: &str| json!({ "jwt": jwt, "sig": sign(&user, nonce) });
        let ours = raw_connect(semaq.addr(), &make);
        let theirs = raw_connect(nats.addr(), &make);
        assert_eq!(ours, theirs, "{case}: SemaQ {ours:?}, nats-server {theirs:?}");
        let expected =
            if admitted { ("PONG".to_string(), false) } else { ("-ERR 'Authorization Violation'".to_string(), true) };
        assert_eq!(ours, expected, "{case}");
    }
}

#[test]
fn a_jwt_user_is_closed_when_its_time_range_ends_as_by_nats_server() {
    let dir = tempfile::tempdir().unwrap();
    let operator = Operator::new(dir.path(), json!({}), json!({}));
    let (semaq, nats) = (semaq_server(&operator.config), nats_server(dir.path(), &operator.config));
    let user = KeyPair::new_user();
    let range = json!({ "times": [{ "start": clock_in(-3600), "end": clock_in(4) }], "times_location": "UTC" });
    let jwt = operator.user_jwt(&user, range, json!({}));
    let mut connections: Vec<Raw> =
        [semaq.addr(), nats.addr()].into_iter().map(|addr| jwt_login(addr, &jwt, &user)).collect();
    for raw in &mut connections {
        raw.expect("-ERR 'User Authentication Expired'\r\n");
        assert!(raw.is_closed(), "closed when the range ended");
    }
}
