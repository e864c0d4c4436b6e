//! Exports and imports between accounts, side by side with nats-server 2.9: a stream import
//! delivers the exporter's messages (headers intact) under the importer's prefix and nothing
//! else leaks; a service import carries requests to the exporter's responders and the replies
//! back, singleton or streamed; an import that is not exported (or not to the importer) stops
//! startup with nats-server's message; a cycle is refused and mutual imports do not loop; the
//! reply mappings of unanswered requests stay bounded. Config accounts and JWT accounts alike.

use std::path::Path;
use std::time::Duration;

use async_nats::{Client, HeaderMap, RequestErrorKind};
use futures::StreamExt;
use nkeys::KeyPair;
use semaq_testkit::{sync, SemaqServer};
use serde_json::{json, Value};

use crate::account_limits::nats_server_with;
use crate::auth_nkeys::{account_claims, creds, mint, operator_jwt_naming, unlimited_user};

/// A exports orders, requests and a streamed feed; B imports them under its own subjects.
const CONFIG: &str = r#"
accounts {
  A {
    users: [{ user: a, password: a }]
    exports: [
      { stream: "orders.>" }
      { service: "req.>" }
      { service: "feed", response_type: stream }
      { service: "idle" }
      { stream: "private.>", accounts: [C] }
    ]
  }
  B {
    users: [{ user: b, password: b }]
    imports: [
      { stream: { account: A, subject: "orders.>" }, prefix: "a" }
      { service: { account: A, subject: "req.>" }, to: "areq.>" }
      { service: { account: A, subject: "feed" } }
      { service: { account: A, subject: "idle" } }
    ]
  }
  C { users: [{ user: c, password: c }] }
}
"#;

/// Longest wait for a message that should come.
const ARRIVAL: Duration = Duration::from_secs(5);

async fn login(url: &str, user: &str) -> Client {
    let options = async_nats::ConnectOptions::with_user_and_password(user.into(), user.into());
    options.connect(url).await.unwrap_or_else(|error| panic!("{user} connects to {url}: {error}"))
}

/// Subjects a leak would show up on, besides the imported ones.
const WATCHED: [&str; 5] = ["a.>", "orders.>", "private.>", "secret", "areq.>"];

/// `from` publishes on several subjects (one with a header), then `orders.end`; returns what
/// `to`, subscribed to all of them, received up to the end marker, as "subject header body".
async fn stream_seen(from: &Client, to: &Client) -> Vec<String> {
    let mut subscriptions = Vec::new();
    for subject in WATCHED {
        subscriptions.push(to.subscribe(subject).await.unwrap());
    }
    let mut everything = futures::stream::select_all(subscriptions);
    sync(to).await;
    let mut headers = HeaderMap::new();
    headers.insert("Order-Id", "42");
    from.publish_with_headers("orders.new", headers, "pizza".into()).await.unwrap();
    for subject in ["private.x", "secret", "areq.x", "a.orders.fake", "orders.end"] {
        from.publish(subject, "x".into()).await.unwrap();
    }
    from.flush().await.unwrap();
    let mut seen = Vec::new();
    while !seen.last().is_some_and(|line: &String| line.starts_with("a.orders.end")) {
        let message = tokio::time::timeout(ARRIVAL, everything.next()).await;
        let message = message.unwrap_or_else(|_| panic!("no a.orders.end after {seen:?}")).unwrap();
        let header = message.headers.as_ref().and_then(|h| h.get("Order-Id")).map(|v| v.to_string());
        let body = String::from_utf8_lossy(&message.payload);
        seen.push(format!("{} {} {body}", message.subject, header.unwrap_or_default()));
    }
    for mut subscription in everything {
        subscription.unsubscribe().await.unwrap();
    }
    sync(to).await;
    seen
}

#[tokio::test]
async fn a_stream_import_delivers_under_its_prefix_with_headers_and_nothing_else_leaks() {
    let semaq = SemaqServer::with_config(CONFIG, &[]);
    let (nats, _dir) = nats_server_with(CONFIG);
    let expected = ["a.orders.new 42 pizza", "a.orders.end  x"];
    for url in [nats.url(), semaq.url()] {
        let (a, b) = (login(&url, "a").await, login(&url, "b").await);
        assert_eq!(stream_seen(&a, &b).await, expected, "{url}");
    }
}

/// What a request on `subject` got: the reply's body, or why not.
async fn ask(client: &Client, subject: &str) -> String {
    match tokio::time::timeout(ARRIVAL, client.request(subject.to_string(), "?".into())).await {
        Ok(Ok(reply)) => String::from_utf8_lossy(&reply.payload).to_string(),
        Ok(Err(error)) if error.kind() == RequestErrorKind::NoResponders => "no responders".to_string(),
        Ok(Err(error)) => format!("error: {error}"),
        Err(_) => "no answer".to_string(),
    }
}

/// A responder in A answering `req.>` with the subject it saw, and `feed` with three messages.
async fn serve(a: &Client) -> tokio::task::JoinHandle<()> {
    let mut requests = a.subscribe("req.>").await.unwrap();
    let mut feed = a.subscribe("feed").await.unwrap();
    sync(a).await;
    let a = a.clone();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                Some(request) = requests.next() => {
                    if let Some(reply) = request.reply {
                        a.publish(reply, format!("served {}", request.subject).into()).await.unwrap();
                    }
                }
                Some(request) = feed.next() => {
                    for part in 1..=3 {
                        if let Some(reply) = request.reply.clone() {
                            a.publish(reply, format!("part {part}").into()).await.unwrap();
                        }
                    }
                }
                else => break,
            }
            a.flush().await.unwrap();
        }
    })
}

/// What [`service_seen`] sees. A request through an import with no responder behind it gets a
/// 503 from nats-server since 2.11 (ce309b79d, "respond with no responders"), as from SemaQ;
/// 2.9, run here side by side, lets it time out: [`as_in_nats_2_9`].
const SERVICE_SEEN: [&str; 7] = [
    "areq.one: served req.one",
    "areq.two.three: served req.two.three",
    "req.one: no responders",
    "idle: no responders",
    "feed: part 1",
    "feed: part 2",
    "feed: part 3",
];

/// [`SERVICE_SEEN`] as nats-server 2.9 gives it.
fn as_in_nats_2_9(seen: &[&str]) -> Vec<String> {
    seen.iter().map(|line| line.replace("idle: no responders", "idle: no answer")).collect()
}

async fn service_seen(a: &Client, b: &Client) -> Vec<String> {
    let serving = serve(a).await;
    let mut seen = Vec::new();
    for subject in ["areq.one", "areq.two.three", "req.one", "idle"] {
        seen.push(format!("{subject}: {}", ask(b, subject).await));
    }
    let mut inbox = b.subscribe("feed.inbox").await.unwrap();
    sync(b).await;
    b.publish_with_reply("feed", "feed.inbox", "?".into()).await.unwrap();
    for _ in 0..3 {
        let part = tokio::time::timeout(ARRIVAL, inbox.next()).await.expect("a streamed part").unwrap();
        seen.push(format!("feed: {}", String::from_utf8_lossy(&part.payload)));
    }
    serving.abort();
    seen
}

#[tokio::test]
async fn a_service_import_carries_requests_to_the_exporter_and_singleton_or_streamed_replies_back() {
    let semaq = SemaqServer::with_config(CONFIG, &[]);
    let (nats, _dir) = nats_server_with(CONFIG);
    let (a, b) = (login(&nats.url(), "a").await, login(&nats.url(), "b").await);
    assert_eq!(service_seen(&a, &b).await, as_in_nats_2_9(&SERVICE_SEEN), "nats-server 2.9");
    let (a, b) = (login(&semaq.url(), "a").await, login(&semaq.url(), "b").await);
    assert_eq!(service_seen(&a, &b).await, SERVICE_SEEN);
}

/// The server's stderr when started with `config`, which must stop it.
pub(crate) fn refusal(config: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.conf");
    std::fs::write(&path, config).unwrap();
    let output = SemaqServer::builder().bare().arg("-c").arg(&path).output();
    assert!(!output.status.success(), "the server should not start");
    String::from_utf8_lossy(&output.stderr).to_string()
}

#[test]
fn an_import_not_exported_to_the_importer_stops_startup_with_nats_servers_message() {
    let not_to_b = CONFIG.replace(
        "{ service: { account: A, subject: \"feed\" } }",
        "{ stream: { account: A, subject: \"private.>\" } }",
    );
    let stderr = refusal(&not_to_b);
    assert!(stderr.contains("Error adding stream import \"private.>\": stream import not authorized"), "{stderr}");
    let not_exported = CONFIG.replace("subject: \"feed\"", "subject: \"hidden\"");
    let stderr = refusal(&not_exported);
    assert!(stderr.contains("Error adding service import \"hidden\": service import not authorized"), "{stderr}");
}

/// A and B each export `foo.>` and import the other's: as is, a loop; under prefixes, not.
fn mutual(prefixes: bool) -> String {
    let import = |from: &str, prefix: &str| match prefixes {
        true => format!("{{ stream: {{ account: {from}, subject: \"foo.>\" }}, prefix: {prefix} }}"),
        false => format!("{{ stream: {{ account: {from}, subject: \"foo.>\" }} }}"),
    };
    format!(
        "accounts {{\n  A {{ users: [{{user: a, password: a}}], exports: [{{stream: \"foo.>\"}}], imports: [{}] }}\n  \
         B {{ users: [{{user: b, password: b}}], exports: [{{stream: \"foo.>\"}}], imports: [{}] }}\n}}\n",
        import("B", "b"),
        import("A", "a"),
    )
}

#[tokio::test]
async fn an_import_cycle_is_refused_and_mutual_imports_under_prefixes_deliver_once() {
    let stderr = refusal(&mutual(false));
    assert!(stderr.contains("import forms a cycle"), "{stderr}");
    let config = mutual(true);
    let semaq = SemaqServer::with_config(&config, &[]);
    let (nats, _dir) = nats_server_with(&config);
    for url in [nats.url(), semaq.url()] {
        let (a, b) = (login(&url, "a").await, login(&url, "b").await);
        let watch = |client: &Client| {
            let client = client.clone();
            async move {
                let mut subscriptions = Vec::new();
                for subject in ["foo.>", "a.>", "b.>"] {
                    subscriptions.push(client.subscribe(subject).await.unwrap());
                }
                futures::stream::select_all(subscriptions)
            }
        };
        let (mut a_all, mut b_all) = (watch(&a).await, watch(&b).await);
        sync(&a).await;
        sync(&b).await;
        a.publish("foo.1", "x".into()).await.unwrap();
        a.publish("foo.end", "x".into()).await.unwrap();
        a.flush().await.unwrap();
        let mut seen = Vec::new();
        for (name, subscription) in [("a", &mut a_all), ("b", &mut b_all)] {
            let mut subjects = Vec::new();
            while !subjects.last().is_some_and(|s: &String| s.ends_with("foo.end")) {
                let message = tokio::time::timeout(ARRIVAL, subscription.next()).await.expect("foo.end").unwrap();
                subjects.push(message.subject.to_string());
            }
            seen.push(format!("{name}: {}", subjects.join(" ")));
        }
        let late = tokio::time::timeout(Duration::from_millis(300), b_all.next()).await;
        assert!(late.is_err(), "{url}: nothing more comes round: {late:?}");
        assert_eq!(seen, ["a: foo.1 foo.end", "b: a.foo.1 a.foo.end"], "{url}");
    }
}

#[tokio::test]
async fn unanswered_requests_through_a_service_import_do_not_grow_the_reply_table_without_bound() {
    let semaq = SemaqServer::with_config(CONFIG, &[]);
    let (a, b) = (login(&semaq.url(), "a").await, login(&semaq.url(), "b").await);
    let mut requests = a.subscribe("req.slow").await.unwrap();
    sync(&a).await;
    let mut first_inbox = b.subscribe("inbox.first").await.unwrap();
    let mut last_inbox = b.subscribe("inbox.last").await.unwrap();
    sync(&b).await;
    // More unanswered requests than the table holds (SERVICE_RESPONSES_PENDING_MAX, 20,000)
    // between the first and the last.
    b.publish_with_reply("areq.slow", "inbox.first", "first".into()).await.unwrap();
    for n in 0..25_000u32 {
        b.publish_with_reply("areq.slow", format!("inbox.filler.{n}"), "filler".into()).await.unwrap();
    }
    b.publish_with_reply("areq.slow", "inbox.last", "last".into()).await.unwrap();
    b.flush().await.unwrap();
    let mut first_reply = None;
    loop {
        let request = tokio::time::timeout(ARRIVAL, requests.next()).await.expect("the requests").unwrap();
        first_reply = first_reply.or(request.reply.clone());
        if &request.payload[..] == b"last" {
            let (first, last) = (first_reply.clone().unwrap(), request.reply.clone().unwrap());
            assert!(first.starts_with("_R_.") && last.starts_with("_R_."), "{first} {last}");
            a.publish(first, "late".into()).await.unwrap();
            a.publish(last, "on time".into()).await.unwrap();
            a.flush().await.unwrap();
            break;
        }
    }
    let answer = tokio::time::timeout(ARRIVAL, last_inbox.next()).await.expect("the last answer").unwrap();
    assert_eq!(&answer.payload[..], b"on time");
    let late = tokio::time::timeout(Duration::from_millis(300), first_inbox.next()).await;
    assert!(late.is_err(), "the first request's mapping was dropped for newer ones: {late:?}");
}

/// An operator trusting X, which exports a stream and a service, and Y, which imports them.
fn jwt_config(dir: &Path) -> (String, KeyPair, KeyPair) {
    let operator = KeyPair::new_operator();
    let (system, x, y) = (KeyPair::new_account(), KeyPair::new_account(), KeyPair::new_account());
    let operator_jwt = operator_jwt_naming(&operator, &system);
    let exports = json!({ "exports": [
        { "name": "orders", "subject": "orders.>", "type": "stream" },
        { "name": "req", "subject": "req.>", "type": "service" },
        { "name": "feed", "subject": "feed", "type": "service", "response_type": "Stream" },
        { "name": "idle", "subject": "idle", "type": "service" },
    ]});
    let imports = json!({ "imports": [
        { "name": "orders", "subject": "orders.>", "account": x.public_key(), "to": "a", "type": "stream" },
        { "name": "req", "subject": "req.>", "account": x.public_key(), "local_subject": "areq.>", "type": "service" },
        { "name": "feed", "subject": "feed", "account": x.public_key(), "type": "service" },
        { "name": "idle", "subject": "idle", "account": x.public_key(), "type": "service" },
    ]});
    let account = |key: &KeyPair, extra: Value| {
        format!(
            "  {}: {}\n",
            key.public_key(),
            mint(&operator, &key.public_key(), account_claims(json!({}), extra), json!({}))
        )
    };
    let config = format!(
        "operator: {operator_jwt}\nsystem_account: {}\nresolver: MEMORY\nresolver_preload {{\n{}{}{}}}\n",
        system.public_key(),
        account(&system, json!({})),
        account(&x, exports),
        account(&y, imports),
    );
    let _ = dir;
    (config, x, y)
}

pub(crate) async fn jwt_user(dir: &Path, url: &str, account: &KeyPair, name: &str) -> Client {
    let user = KeyPair::new_user();
    let jwt = mint(account, &user.public_key(), unlimited_user(json!({})), json!({}));
    let path = creds(dir, name, &jwt, &user.seed().unwrap());
    let options = async_nats::ConnectOptions::with_credentials_file(path).await.expect("creds file");
    options.connect(url).await.unwrap_or_else(|error| panic!("{name} connects to {url}: {error}"))
}

#[tokio::test]
async fn jwt_account_exports_and_imports_work_as_config_ones() {
    let dir = tempfile::tempdir().unwrap();
    let (config, x, y) = jwt_config(dir.path());
    let semaq = SemaqServer::with_config(&config, &[]);
    let (nats, _nats_dir) = nats_server_with(&config);
    for url in [nats.url(), semaq.url()] {
        let (a, b) = (jwt_user(dir.path(), &url, &x, "x").await, jwt_user(dir.path(), &url, &y, "y").await);
        assert_eq!(stream_seen(&a, &b).await, ["a.orders.new 42 pizza", "a.orders.end  x"], "{url}");
        let expected =
            if url == nats.url() { as_in_nats_2_9(&SERVICE_SEEN) } else { SERVICE_SEEN.map(String::from).to_vec() };
        assert_eq!(service_seen(&a, &b).await, expected, "{url}");
    }
}
