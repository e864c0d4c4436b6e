//! The `websocket { }` block's own authentication, as nats-server has it: its `authorization`
//! (user and password, or token, and timeout) and `no_auth_user` replace the server's for
//! WebSocket clients only, and cookies of the upgrade request stand in for credentials a
//! CONNECT leaves out.

use async_nats::{ConnectErrorKind, ConnectOptions};
use semaq_testkit::SemaqServer;

use super::websocket::{frame, upgrade, upgrade_request, ws_addr, ws_url, RawWs, BINARY};

/// A WebSocket listener on a free port of 127.0.0.1 with `extra` keys in its block.
fn ws_block(extra: &str) -> String {
    format!("websocket {{ host: \"127.0.0.1\", port: -1, no_tls: true\n{extra}\n}}")
}

async fn ws_connect(server: &SemaqServer, options: ConnectOptions) -> Result<async_nats::Client, ConnectErrorKind> {
    let client = options.connect(ws_url(server)).await.map_err(|error| error.kind())?;
    client.flush().await.expect("flush after connect");
    Ok(client)
}

async fn ws_user(server: &SemaqServer, user: &str, password: &str) -> Result<async_nats::Client, ConnectErrorKind> {
    ws_connect(server, ConnectOptions::with_user_and_password(user.into(), password.into())).await
}

async fn tcp_user(server: &SemaqServer, user: &str, password: &str) -> Result<async_nats::Client, ConnectErrorKind> {
    let options = ConnectOptions::with_user_and_password(user.into(), password.into());
    options.connect(server.url()).await.map_err(|error| error.kind())
}

fn violation<T>(outcome: Result<T, ConnectErrorKind>) -> bool {
    matches!(outcome, Err(ConnectErrorKind::AuthorizationViolation))
}

/// The users `/connz` lists, sorted.
fn connected_users(server: &SemaqServer) -> Vec<String> {
    let connz = server.http_json("/connz");
    let connections = connz["connections"].as_array().cloned().unwrap_or_default();
    let mut users: Vec<String> =
        connections.iter().map(|c| c["authorized_user"].as_str().unwrap_or("-").to_string()).collect();
    users.sort();
    users
}

#[tokio::test]
async fn websocket_user_replaces_the_servers_single_user_for_websocket_clients_only() {
    let config = format!(
        "authorization {{ user: tcp, password: tcppass }}\n{}",
        ws_block("authorization { user: web, password: webpass }")
    );
    let server = SemaqServer::with_config(&config, &[]);
    let _web = ws_user(&server, "web", "webpass").await.expect("the websocket user over ws://");
    assert!(violation(ws_user(&server, "web", "wrong").await), "wrong password");
    assert!(violation(ws_user(&server, "tcp", "tcppass").await), "the server's user is not the websocket's");
    assert!(violation(ws_connect(&server, ConnectOptions::new()).await), "no credentials");
    let _tcp = tcp_user(&server, "tcp", "tcppass").await.expect("the server's user over TCP");
    assert!(tcp_user(&server, "web", "webpass").await.is_err(), "the websocket user is not the server's");
    assert_eq!(connected_users(&server), ["tcp", "web"]);
}

#[tokio::test]
async fn websocket_token_is_required_of_websocket_clients_even_when_the_server_requires_nothing() {
    let server = SemaqServer::with_config(&ws_block("authorization { token: wstoken }"), &[]);
    let _good = ws_connect(&server, ConnectOptions::with_token("wstoken".into())).await.expect("right token");
    assert!(violation(ws_connect(&server, ConnectOptions::with_token("guess".into())).await), "wrong token");
    assert!(violation(ws_connect(&server, ConnectOptions::new()).await), "no token");
    // The client port still asks for nothing, and says so; the WebSocket INFO asks.
    let tcp = server.client().await;
    tcp.flush().await.unwrap();
    assert!(server.raw_info().contains("\"auth_required\":false") || !server.raw_info().contains("auth_required"));
    let (status, stream) = upgrade(ws_addr(&server), &upgrade_request("/", &[]));
    assert!(status.starts_with("HTTP/1.1 101"), "{status}");
    let (_, info) = RawWs { stream }.read_frame();
    let info: serde_json::Value = serde_json::from_slice(&info[5..]).unwrap();
    assert_eq!(info["auth_required"], true, "{info}");
}

#[test]
fn websocket_authorization_timeout_replaces_the_servers_for_websocket_clients() {
    // The server's own timeout is far longer than the receive timeout of the raw client, so
    // the error can only come from the websocket block's.
    let config =
        format!("authorization {{ token: t, timeout: 60 }}\n{}", ws_block("authorization { token: w, timeout: 0.5 }"));
    let server = SemaqServer::with_config(&config, &[]);
    let (status, stream) = upgrade(ws_addr(&server), &upgrade_request("/", &[]));
    assert!(status.starts_with("HTTP/1.1 101"), "{status}");
    let mut ws = RawWs { stream };
    ws.read_frame();
    assert!(ws.read_text_until("\r\n").contains("-ERR 'Authentication Timeout'"));
}

const USERS: &str = r#"
authorization {
  users = [
    { user: alice, password: wonderland }
    { user: guest, password: "", permissions: { publish: "public.>" } }
  ]
}
"#;

#[tokio::test]
async fn websocket_no_auth_user_is_who_a_websocket_client_without_credentials_becomes() {
    let server = SemaqServer::with_config(&format!("{USERS}\n{}", ws_block("no_auth_user: guest")), &[]);
    let _anonymous = ws_connect(&server, ConnectOptions::new()).await.expect("no credentials over ws://");
    let _alice = ws_user(&server, "alice", "wonderland").await.expect("a real user over ws://");
    assert!(violation(ws_user(&server, "alice", "wrong").await), "wrong password");
    assert!(async_nats::connect(server.url()).await.is_err(), "TCP has no no_auth_user");
    assert_eq!(connected_users(&server), ["alice", "guest"]);
}

#[tokio::test]
async fn websocket_no_auth_user_may_be_an_account_user() {
    let config = format!(
        "accounts {{ APP {{ users: [{{ user: app, password: secret }}] }} }}\n{}",
        ws_block("no_auth_user: app")
    );
    let server = SemaqServer::with_config(&config, &[]);
    let _anonymous = ws_connect(&server, ConnectOptions::new()).await.expect("no credentials over ws://");
    let connz = server.http_json("/connz");
    assert_eq!(connz["connections"][0]["account"], "APP", "{connz}");
}

fn config_error(config: &str) -> String {
    let output = SemaqServer::builder().config(config).output();
    assert!(!output.status.success(), "started with {config}");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn websocket_auth_settings_nats_server_refuses_are_refused_with_its_words() {
    let cases = [
        (
            format!("{USERS}\n{}", ws_block("no_auth_user: ghost")),
            "no_auth_user: \"ghost\" not present as user or nkey in authorization block or account configuration",
        ),
        (ws_block("no_auth_user: ghost"), "no_auth_user: \"ghost\" present, but users/nkeys are not defined"),
        (
            format!("{USERS}\n{}", ws_block("authorization { user: web, password: p }")),
            "websocket authentication username not compatible with presence of users/nkeys",
        ),
        (
            format!("{USERS}\n{}", ws_block("authorization { token: t }")),
            "websocket authentication token not compatible with presence of users/nkeys",
        ),
        (
            ws_block("jwt_cookie: jwt"),
            "trusted operators or trusted keys configuration is required for JWT authentication via cookie \"jwt\"",
        ),
    ];
    for (config, expected) in cases {
        let text = config_error(&config);
        assert!(text.contains(expected), "{config}\n=> {text}");
    }
}

// --- Cookies -------------------------------------------------------------------------------

/// A raw WebSocket client whose upgrade request carries `cookie`, past the server's INFO.
fn raw_with_cookie(server: &SemaqServer, cookie: &str) -> RawWs {
    let header = format!("Cookie: {cookie}");
    let (status, stream) = upgrade(ws_addr(server), &upgrade_request("/", &[&header]));
    assert!(status.starts_with("HTTP/1.1 101"), "{status}");
    let mut ws = RawWs { stream };
    let (opcode, info) = ws.read_frame();
    assert!(opcode == BINARY && info.starts_with(b"INFO {"), "{}", String::from_utf8_lossy(&info));
    ws
}

/// Sends `connect` (a CONNECT's JSON) and a PING: what the server answers up to the PONG or
/// the error.
fn answer_to(ws: &mut RawWs, connect: &str) -> String {
    ws.send(&frame(BINARY, true, true, format!("CONNECT {connect}\r\nPING\r\n").as_bytes()));
    let mut seen = String::new();
    while !seen.contains("PONG") && !seen.contains("-ERR") {
        seen.push_str(&ws.read_text_until("\r\n"));
    }
    seen
}

const COOKIES: &str = "user_cookie: wsuser, pass_cookie: wspass, token_cookie: wstoken";

#[test]
fn user_and_password_cookies_log_in_a_client_whose_connect_has_none() {
    let config = format!("authorization {{ users: [{{ user: web, password: webpass }}] }}\n{}", ws_block(COOKIES));
    let server = SemaqServer::with_config(&config, &[]);
    let mut ws = raw_with_cookie(&server, "theme=dark; wsuser=web; wspass=\"webpass\"");
    assert!(answer_to(&mut ws, "{}").contains("PONG"), "cookie credentials accepted");
    assert_eq!(connected_users(&server), ["web"]);
    let mut wrong = raw_with_cookie(&server, "wsuser=web; wspass=nope");
    assert!(answer_to(&mut wrong, "{}").contains("-ERR 'Authorization Violation'"));
    // Credentials in the CONNECT come first; a cookie only fills what it leaves empty.
    let mut connect_first = raw_with_cookie(&server, "wsuser=web; wspass=nope");
    let answer = answer_to(&mut connect_first, r#"{"user":"web","pass":"webpass"}"#);
    assert!(answer.contains("PONG"), "{answer}");
    let mut password_only = raw_with_cookie(&server, "wspass=webpass");
    assert!(answer_to(&mut password_only, r#"{"user":"web"}"#).contains("PONG"), "user sent, password from the cookie");
}

#[test]
fn a_token_cookie_stands_in_for_the_websocket_token() {
    let server = SemaqServer::with_config(&ws_block(&format!("authorization {{ token: s3cret }}\n{COOKIES}")), &[]);
    let mut ws = raw_with_cookie(&server, "wstoken=s3cret");
    assert!(answer_to(&mut ws, "{}").contains("PONG"), "token from the cookie");
    let mut wrong = raw_with_cookie(&server, "wstoken=guess");
    assert!(answer_to(&mut wrong, "{}").contains("-ERR 'Authorization Violation'"));
    // A cookie of another name is not read.
    let mut other = raw_with_cookie(&server, "token=s3cret");
    assert!(answer_to(&mut other, "{}").contains("-ERR 'Authorization Violation'"));
}

#[test]
fn a_jwt_cookie_logs_in_a_bearer_jwt_user_in_operator_mode() {
    let dir = tempfile::tempdir().unwrap();
    let operator = super::auth_nkeys::Operator::new(dir.path(), serde_json::json!({}), serde_json::json!({}));
    let config = format!("{}\n{}", operator.config, ws_block("jwt_cookie: session"));
    let server = SemaqServer::with_config(&config, &[]);
    let user = nkeys::KeyPair::new_user();
    let jwt = operator.user_jwt(&user, serde_json::json!({ "bearer_token": true }), serde_json::json!({}));
    let mut ws = raw_with_cookie(&server, &format!("session={jwt}"));
    let answer = answer_to(&mut ws, "{}");
    assert!(answer.contains("PONG"), "{answer}");
    let connz = server.http_json("/connz");
    assert_eq!(connz["connections"][0]["account"], operator.account.public_key(), "{connz}");
    let mut without = raw_with_cookie(&server, "other=1");
    assert!(answer_to(&mut without, "{}").contains("-ERR 'Authorization Violation'"));
}
