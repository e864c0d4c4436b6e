//! Token and user/password authentication, per-user permissions, and the connection limit.

use std::time::Duration;

use semaq_testkit::{sync_via, SemaqServer};

const USERS_CONFIG: &str = r#"
authorization {
  users = [
    { user: alice, password: wonderland }
    { user: bob, password: builder,
      permissions: {
        publish: { allow: ["orders.>"], deny: ["orders.secret"] }
        subscribe: ["events.>", "_INBOX.>"]
      }
    }
  ]
}
"#;

#[tokio::test]
async fn token_auth_accepts_the_token_and_rejects_others() {
    let server = SemaqServer::with_args(&["--auth", "s3cret"]);
    assert!(server.raw_info().contains("\"auth_required\":true"));
    let good = async_nats::ConnectOptions::with_token("s3cret".into()).connect(server.url()).await;
    good.expect("right token").flush().await.unwrap();
    let wrong = async_nats::ConnectOptions::with_token("guess".into()).connect(server.url()).await;
    assert!(wrong.is_err(), "wrong token refused");
    let none = async_nats::connect(server.url()).await;
    assert!(none.is_err(), "missing token refused");
}

#[tokio::test]
async fn user_password_auth_checks_each_user() {
    let server = SemaqServer::with_config(USERS_CONFIG, &[]);
    for (user, password) in [("alice", "wonderland"), ("bob", "builder")] {
        let client = async_nats::ConnectOptions::with_user_and_password(user.into(), password.into())
            .connect(server.url())
            .await
            .expect("valid user");
        client.flush().await.unwrap();
    }
    for (user, password) in [("alice", "builder"), ("mallory", "wonderland")] {
        let refused = async_nats::ConnectOptions::with_user_and_password(user.into(), password.into())
            .connect(server.url())
            .await;
        assert!(refused.is_err(), "{user}/{password} refused");
    }
    let mut raw = server.raw();
    raw.send(b"CONNECT {\"user\":\"alice\",\"pass\":\"nope\"}\r\n");
    raw.expect("-ERR 'Authorization Violation'");
    assert!(raw.is_closed());
    assert!(server.http_json("/varz")["auth_failures"].as_u64().unwrap() >= 1);
}

#[test]
fn an_op_before_connect_is_an_authorization_violation_when_auth_is_on() {
    let server = SemaqServer::with_args(&["--auth", "s3cret"]);
    let mut raw = server.raw();
    raw.send(b"SUB foo 1\r\n");
    raw.expect("-ERR 'Authorization Violation'");
    assert!(raw.is_closed());
}

#[test]
fn a_client_that_never_connects_is_timed_out() {
    let server = SemaqServer::with_args(&["--auth", "s3cret"]);
    let mut raw = server.raw();
    raw.expect("-ERR 'Authentication Timeout'");
    assert!(raw.is_closed());
}

#[test]
fn permission_violations_are_reported_and_the_connection_stays_open() {
    let server = SemaqServer::with_config(USERS_CONFIG, &[]);
    let mut raw = server.raw();
    raw.send(b"CONNECT {\"user\":\"bob\",\"pass\":\"builder\",\"verbose\":false}\r\n");
    raw.send(b"PUB payments 1\r\nx\r\n");
    raw.expect("-ERR 'Permissions Violation for Publish to \"payments\"'");
    raw.send(b"PUB orders.secret 1\r\nx\r\n");
    raw.expect("-ERR 'Permissions Violation for Publish to \"orders.secret\"'");
    raw.send(b"SUB payments 1\r\n");
    raw.expect("-ERR 'Permissions Violation for Subscription to \"payments\"'");
    raw.send(b"SUB events.> 2\r\nPUB orders.new 2\r\nok\r\nPING\r\n");
    raw.expect("PONG");
}

#[tokio::test]
async fn allowed_traffic_flows_for_a_restricted_user() {
    let server = SemaqServer::with_config(USERS_CONFIG, &[]);
    let bob = async_nats::ConnectOptions::with_user_and_password("bob".into(), "builder".into())
        .connect(server.url())
        .await
        .unwrap();
    let alice = async_nats::ConnectOptions::with_user_and_password("alice".into(), "wonderland".into())
        .connect(server.url())
        .await
        .unwrap();
    let mut events = futures::StreamExt::fuse(bob.subscribe("events.>").await.unwrap());
    sync_via(&bob, "orders.sync").await;
    alice.publish("events.shipped", "1".into()).await.unwrap();
    let message = tokio::time::timeout(Duration::from_secs(5), futures::StreamExt::next(&mut events)).await;
    assert_eq!(message.unwrap().unwrap().payload, "1");
}

#[test]
fn connections_beyond_the_limit_are_refused() {
    let server = SemaqServer::with_config("max_connections: 2\n", &[]);
    let _first = server.raw();
    let _second = server.raw();
    let mut third = std::net::TcpStream::connect(server.addr()).unwrap();
    third.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut text = String::new();
    let _ = std::io::Read::read_to_string(&mut third, &mut text);
    assert!(text.contains("-ERR 'maximum connections exceeded'"), "{text:?}");
}
