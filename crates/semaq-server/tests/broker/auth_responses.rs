//! Response permissions (`allow_responses`): a user may answer the requests delivered to it on
//! their reply subjects, a bounded number of times within a bounded time, even where its publish
//! permissions refuse those subjects. The raw transcripts are compared with nats-server 2.9's.

use std::net::SocketAddr;
use std::time::Duration;

use futures::StreamExt;
use semaq_testkit::{NatsServer, Raw, SemaqServer};

const EXPIRES_MILLIS: u64 = 300;

fn responses_config() -> String {
    format!(
        r#"
authorization {{
  users = [
    {{ user: client, password: c }}
    {{ user: service, password: s, permissions: {{ subscribe: "help", allow_responses: true }} }}
    {{ user: twice, password: t, permissions: {{ subscribe: "help2", allow_responses: {{ max: 2 }} }} }}
    {{ user: brief, password: b, permissions: {{ subscribe: "help3", allow_responses: {{ expires: "{EXPIRES_MILLIS}ms" }} }} }}
    {{ user: status, password: st, permissions: {{ publish: "status.>", subscribe: "help4", allow_responses: true }} }}
  ]
}}
"#
    )
}

fn login(addr: SocketAddr, user: &str, password: &str) -> Raw {
    let mut raw = Raw::connect(addr);
    let connect = format!("CONNECT {{\"user\":\"{user}\",\"pass\":\"{password}\",\"verbose\":false}}\r\nPING\r\n");
    raw.send(connect.as_bytes());
    raw.expect("PONG\r\n");
    raw
}

/// Sends `commands` and a PING, and returns what came back before the PONG: errors for refused
/// publishes arrive before it, since the server handles a connection's commands in order.
fn round(raw: &mut Raw, commands: &str) -> String {
    raw.send(format!("{commands}PING\r\n").as_bytes());
    let answer = raw.read_until("PONG\r\n");
    answer.trim_end_matches("PONG\r\n").to_string()
}

fn violation(subject: &str) -> String {
    format!("-ERR 'Permissions Violation for Publish to \"{subject}\"'\r\n")
}

/// The client asks `subject` with reply `reply`; the user receives it.
fn ask(client: &mut Raw, user: &mut Raw, subject: &str, reply: &str) {
    assert_eq!(round(client, &format!("PUB {subject} {reply} 1\r\n?\r\n")), "");
    let delivered = round(user, "");
    assert_eq!(delivered, format!("MSG {subject} 1 {reply} 1\r\n?\r\n"));
}

/// What the server answers to the reply scenarios, step by step, for comparison across servers.
fn reply_transcript(addr: SocketAddr) -> Vec<String> {
    let mut client = login(addr, "client", "c");
    assert_eq!(round(&mut client, "SUB _INBOX.> 9\r\n"), "");
    let mut seen = Vec::new();
    let mut service = login(addr, "service", "s");
    seen.push(round(&mut service, "SUB help 1\r\nPUB help.other 1\r\nx\r\nPUB _INBOX.r1 1\r\nx\r\n"));
    ask(&mut client, &mut service, "help", "_INBOX.r1");
    seen.push(round(&mut service, "PUB _INBOX.r1 2\r\nok\r\n"));
    seen.push(round(&mut client, ""));
    seen.push(round(&mut service, "PUB _INBOX.r1 5\r\nagain\r\nPUB _INBOX.r2 1\r\nx\r\n"));
    let mut twice = login(addr, "twice", "t");
    assert_eq!(round(&mut twice, "SUB help2 1\r\n"), "");
    ask(&mut client, &mut twice, "help2", "_INBOX.r3");
    seen.push(round(&mut twice, "PUB _INBOX.r3 1\r\na\r\nPUB _INBOX.r3 1\r\nb\r\nPUB _INBOX.r3 1\r\nc\r\n"));
    seen.push(round(&mut client, ""));
    let mut status = login(addr, "status", "st");
    assert_eq!(round(&mut status, "SUB help4 1\r\n"), "");
    ask(&mut client, &mut status, "help4", "_INBOX.r5");
    seen.push(round(&mut status, "PUB status.up 1\r\nu\r\nPUB _INBOX.r5 1\r\nr\r\nPUB other 1\r\no\r\n"));
    seen
}

fn expected_reply_transcript() -> Vec<String> {
    vec![
        format!("{}{}", violation("help.other"), violation("_INBOX.r1")),
        String::new(),
        "MSG _INBOX.r1 9 2\r\nok\r\n".to_string(),
        format!("{}{}", violation("_INBOX.r1"), violation("_INBOX.r2")),
        violation("_INBOX.r3"),
        "MSG _INBOX.r3 9 1\r\na\r\nMSG _INBOX.r3 9 1\r\nb\r\n".to_string(),
        violation("other"),
    ]
}

#[test]
fn a_user_with_allow_responses_answers_each_delivered_request_up_to_max_as_nats_server_does() {
    let config = responses_config();
    let semaq = SemaqServer::with_config(&config, &[]);
    let nats = NatsServer::with_config(&config);
    let ours = reply_transcript(semaq.addr());
    assert_eq!(ours, expected_reply_transcript());
    assert_eq!(ours, reply_transcript(nats.addr()), "semaq and nats-server answer alike");
}

/// Asks the `brief` user, waits past its expiry, and returns what its late reply gets.
fn late_reply(addr: SocketAddr) -> String {
    let mut client = login(addr, "client", "c");
    let mut brief = login(addr, "brief", "b");
    assert_eq!(round(&mut brief, "SUB help3 1\r\n"), "");
    ask(&mut client, &mut brief, "help3", "_INBOX.r4");
    // Past the expiry whatever the scheduling: the refusal cannot come early.
    std::thread::sleep(Duration::from_millis(EXPIRES_MILLIS + 100));
    round(&mut brief, "PUB _INBOX.r4 1\r\nx\r\n")
}

#[test]
fn a_reply_after_expires_is_refused_as_by_nats_server() {
    let config = responses_config();
    let semaq = SemaqServer::with_config(&config, &[]);
    let nats = NatsServer::with_config(&config);
    assert_eq!(late_reply(semaq.addr()), violation("_INBOX.r4"));
    assert_eq!(late_reply(nats.addr()), violation("_INBOX.r4"));
}

#[tokio::test]
async fn a_service_answers_an_async_nats_request_on_an_inbox_it_may_not_publish_to() {
    let server = SemaqServer::with_config(&responses_config(), &[]);
    let connect = |user: &str, password: &str| {
        async_nats::ConnectOptions::with_user_and_password(user.into(), password.into()).connect(server.url())
    };
    let client = connect("client", "c").await.expect("client connects");
    let service = connect("service", "s").await.expect("service connects");
    let mut requests = service.subscribe("help").await.unwrap();
    let answering = tokio::spawn(async move {
        let request = requests.next().await.expect("a request");
        let reply = request.reply.expect("a reply subject");
        service.publish(reply, "answer".into()).await.unwrap();
        service.flush().await.unwrap();
    });
    let answer = tokio::time::timeout(Duration::from_secs(5), request_once_subscribed(&client))
        .await
        .expect("answered in time")
        .expect("answered");
    assert_eq!(&answer.payload[..], b"answer");
    tokio::time::timeout(Duration::from_secs(5), answering).await.expect("service done").unwrap();
}

/// Asks `help`, again while nobody listens yet: async-nats's flush is no round trip, and the
/// service may not publish the request a round trip would take.
async fn request_once_subscribed(client: &async_nats::Client) -> Result<async_nats::Message, async_nats::RequestError> {
    loop {
        match client.request("help", "question".into()).await {
            Err(error) if error.kind() == async_nats::RequestErrorKind::NoResponders => {
                tokio::time::sleep(Duration::from_millis(10)).await
            }
            outcome => return outcome,
        }
    }
}

#[tokio::test]
async fn user_info_shows_the_response_permissions() {
    let config = r#"
accounts {
  $SYS { users [ { user: sys, password: sys } ] }
  A { users [ { user: asker, password: a, permissions: {
      publish: "$SYS.REQ.USER.INFO", subscribe: "_INBOX.>", allow_responses: { max: 3, expires: "1m" } } } ] }
}
"#;
    let semaq = SemaqServer::with_config(config, &[]);
    let client = async_nats::ConnectOptions::with_user_and_password("asker".into(), "a".into())
        .connect(semaq.url())
        .await
        .expect("asker connects");
    let reply = tokio::time::timeout(Duration::from_secs(5), client.request("$SYS.REQ.USER.INFO", "".into()))
        .await
        .expect("answered in time")
        .expect("answered");
    let info: serde_json::Value = serde_json::from_slice(&reply.payload).expect("JSON");
    // As nats-server's source answers it (nats-server 2.9 has no user info import to compare with).
    let expected = serde_json::json!({
        "publish": { "allow": ["$SYS.REQ.USER.INFO"] },
        "subscribe": { "allow": ["_INBOX.>"] },
        "responses": { "max": 3, "ttl": 60_000_000_000_i64 },
    });
    assert_eq!(info["data"]["permissions"], expected);
}
