//! Tracing a message through the broker: nats-server's `Nats-Trace-Dest` events (field names
//! and `type` codes as in its `server/msgtrace.go`), and the W3C `traceparent` the broker
//! continues and sends on when OTLP export is on (the collector here is a closed port: export
//! fails quietly, the message path does not).

use std::time::Duration;

use async_nats::jetstream::{self, consumer, stream};
use async_nats::HeaderMap;
use futures::StreamExt;
use semaq_testkit::{sync, wait_until_async, SemaqServer};
use serde_json::Value;

const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

async fn next(subscriber: &mut async_nats::Subscriber) -> async_nats::Message {
    tokio::time::timeout(Duration::from_secs(10), subscriber.next()).await.expect("in time").expect("a message")
}

async fn next_event(events: &mut async_nats::Subscriber) -> Value {
    serde_json::from_slice(&next(events).await.payload).expect("a JSON trace event")
}

fn traced(dest: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert("Nats-Trace-Dest", dest);
    headers.insert("App", "kept");
    headers
}

fn of_type<'a>(event: &'a Value, code: &str) -> Vec<&'a Value> {
    event["events"].as_array().expect("events").iter().filter(|e| e["type"] == code).collect()
}

#[tokio::test]
async fn a_traced_publish_to_a_subscriber_reports_ingress_and_egress() {
    let server = SemaqServer::start();
    let publisher = async_nats::ConnectOptions::new().name("pub").connect(server.url()).await.expect("connect");
    let receiver = async_nats::ConnectOptions::new().name("sub").connect(server.url()).await.expect("connect");
    let mut events = publisher.subscribe("trace.events").await.expect("subscribe");
    let mut orders = receiver.subscribe("orders.*").await.expect("subscribe");
    sync(&publisher).await;
    sync(&receiver).await;
    publisher.publish_with_headers("orders.new", traced("trace.events"), "hello".into()).await.expect("publish");
    let delivered = next(&mut orders).await;
    assert_eq!(delivered.payload, "hello");
    let headers = delivered.headers.expect("headers");
    assert_eq!(headers.get("App").map(|v| v.as_str()), Some("kept"));

    let event = next_event(&mut events).await;
    assert!(event["server"]["id"].as_str().is_some_and(|id| !id.is_empty()), "{event}");
    assert!(event["server"]["ver"].is_string(), "{event}");
    assert_eq!(event["request"]["header"]["Nats-Trace-Dest"], serde_json::json!(["trace.events"]));
    assert!(event["request"]["msgsize"].as_u64().is_some_and(|size| size > 5), "{event}");
    let ingress = &event["events"][0];
    assert_eq!(ingress["type"], "in");
    assert_eq!(ingress["kind"], 0);
    assert_eq!(ingress["subj"], "orders.new");
    assert_eq!(ingress["acc"], "$G");
    assert_eq!(ingress["name"], "pub");
    assert!(ingress["cid"].as_u64().is_some() && ingress["ts"].is_string(), "{event}");
    let egress = of_type(&event, "eg");
    assert_eq!(egress.len(), 1, "{event}");
    assert_eq!(egress[0]["sub"], "orders.*");
    assert_eq!(egress[0]["name"], "sub");
    assert_eq!(egress[0]["kind"], 0);
}

#[tokio::test]
async fn a_traced_publish_stored_in_a_stream_reports_a_jetstream_event() {
    let server = SemaqServer::start();
    let client = server.client().await;
    let js = jetstream::new(client.clone());
    let config = stream::Config { name: "TRACED".into(), subjects: vec!["traced.>".into()], ..Default::default() };
    let mut stream = js.create_stream(config).await.expect("create");
    let mut events = client.subscribe("trace.js").await.expect("subscribe");
    sync(&client).await;
    let ack = js.publish_with_headers("traced.one", traced("trace.js"), "stored".into()).await.expect("publish");
    assert_eq!(ack.await.expect("ack").sequence, 1);
    let event = next_event(&mut events).await;
    assert_eq!(event["events"][0]["type"], "in");
    let stored = of_type(&event, "js");
    assert_eq!(stored.len(), 1, "{event}");
    assert_eq!(stored[0]["stream"], "TRACED");
    assert_eq!(stored[0]["subject"], "traced.one");
    assert_eq!(stream.info().await.expect("info").state.messages, 1);
}

#[tokio::test]
async fn trace_only_reports_but_neither_delivers_nor_stores() {
    let server = SemaqServer::start();
    let client = server.client().await;
    let js = jetstream::new(client.clone());
    let config = stream::Config { name: "ONLY".into(), subjects: vec!["only.>".into()], ..Default::default() };
    let mut stream = js.create_stream(config).await.expect("create");
    let mut events = client.subscribe("trace.only").await.expect("subscribe");
    let mut watched = client.subscribe("only.>").await.expect("subscribe");
    sync(&client).await;
    let mut headers = traced("trace.only");
    headers.insert("Nats-Trace-Only", "true");
    client.publish_with_headers("only.x", headers, "not delivered".into()).await.expect("publish");
    let event = next_event(&mut events).await;
    assert_eq!(of_type(&event, "eg").len(), 1, "{event}");
    assert_eq!(of_type(&event, "js").len(), 1, "{event}");
    client.publish("only.y", "delivered".into()).await.expect("publish");
    assert_eq!(next(&mut watched).await.payload, "delivered");
    // The stream stores behind the core delivery; once the later message is stored, the
    // trace-only one (queued before it) would have been too.
    let stored = || {
        let stream = stream.clone();
        async move { stream.get_raw_message(1).await.is_ok() }
    };
    wait_until_async("the plain message stored", Duration::from_secs(5), stored).await;
    assert_eq!(stream.info().await.expect("info").state.messages, 1);
    assert_eq!(stream.get_raw_message(1).await.expect("stored").payload, "delivered");
}

#[tokio::test]
async fn an_invalid_trace_destination_is_ignored() {
    let server = SemaqServer::start();
    let client = server.client().await;
    let mut events = client.subscribe("trace.>").await.expect("subscribe");
    let mut watched = client.subscribe("plain").await.expect("subscribe");
    sync(&client).await;
    for bad in ["trace.*", "trace.>", "trace..x", ""] {
        client.publish_with_headers("plain", traced(bad), bad.to_string().into()).await.expect("publish");
        assert_eq!(next(&mut watched).await.payload, bad);
    }
    client.publish_with_headers("plain", traced("trace.ok"), "ok".into()).await.expect("publish");
    assert_eq!(next(&mut watched).await.payload, "ok");
    let event = next_event(&mut events).await;
    assert_eq!(event["request"]["header"]["Nats-Trace-Dest"], serde_json::json!(["trace.ok"]), "only the valid one");
}

/// A server exporting to a closed port, so spans are made (and their export fails quietly).
fn exporting() -> SemaqServer {
    SemaqServer::builder()
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
        .env("OTEL_SERVICE_NAME", "semaq-test")
        .start()
}

fn traceparent(headers: &HeaderMap) -> String {
    headers.get("traceparent").map(|v| v.as_str().to_string()).expect("a traceparent")
}

#[tokio::test]
async fn deliveries_continue_the_publishers_trace_and_keep_other_headers() {
    let server = exporting();
    let client = server.client().await;
    let mut subscriber = client.subscribe("spans").await.expect("subscribe");
    sync(&client).await;
    let mut headers = HeaderMap::new();
    headers.insert("A", "1");
    headers.insert("traceparent", PARENT);
    headers.insert("tracestate", "vendor=x");
    client.publish_with_headers("spans", headers, "x".into()).await.expect("publish");
    let delivered = next(&mut subscriber).await.headers.expect("headers");
    let sent_on = traceparent(&delivered);
    assert_eq!(&sent_on[..36], &PARENT[..36], "same version and trace id");
    assert_ne!(&sent_on[36..52], &PARENT[36..52], "the broker's deliver span is the parent");
    assert!(sent_on.ends_with("-01"));
    assert_eq!(delivered.get("A").map(|v| v.as_str()), Some("1"));
    assert_eq!(delivered.get("tracestate").map(|v| v.as_str()), Some("vendor=x"));
}

#[tokio::test]
async fn bad_traceparents_start_a_new_trace() {
    let server = exporting();
    let client = server.client().await;
    let mut subscriber = client.subscribe("bad").await.expect("subscribe");
    sync(&client).await;
    for bad in ["garbage", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", &PARENT.to_uppercase(), ""] {
        let mut headers = HeaderMap::new();
        headers.insert("traceparent", bad);
        client.publish_with_headers("bad", headers, "x".into()).await.expect("publish");
        let delivered = next(&mut subscriber).await.headers.expect("headers");
        let sent_on = traceparent(&delivered);
        assert_eq!(sent_on.len(), 55, "{sent_on}");
        assert!(sent_on.starts_with("00-") && !sent_on.contains(&PARENT[3..35]), "{sent_on}");
        assert_eq!(delivered.get_all("traceparent").count(), 1);
    }
    // A message without headers gets a block with just the new traceparent.
    client.publish("bad", "plain".into()).await.expect("publish");
    let delivered = next(&mut subscriber).await;
    assert_eq!(traceparent(&delivered.headers.expect("headers")).len(), 55);
}

#[tokio::test]
async fn jetstream_deliveries_carry_the_brokers_deliver_span() {
    let server = exporting();
    let client = server.client().await;
    let js = jetstream::new(client.clone());
    let config = stream::Config { name: "SPANS".into(), subjects: vec!["stored.>".into()], ..Default::default() };
    let stream = js.create_stream(config).await.expect("create");
    let mut headers = HeaderMap::new();
    headers.insert("traceparent", PARENT);
    headers.insert("Nats-Msg-Id", "m-1");
    js.publish_with_headers("stored.a", headers, "x".into()).await.expect("publish").await.expect("ack");
    let consumer = stream
        .create_consumer(consumer::pull::Config { durable_name: Some("C".into()), ..Default::default() })
        .await
        .expect("consumer");
    let mut messages = consumer.fetch().max_messages(1).messages().await.expect("fetch");
    let message = tokio::time::timeout(Duration::from_secs(10), messages.next())
        .await
        .expect("in time")
        .expect("a message")
        .expect("ok");
    let headers = message.headers.clone().expect("headers");
    let sent_on = traceparent(&headers);
    assert_eq!(&sent_on[..36], &PARENT[..36]);
    assert_ne!(&sent_on[36..52], &PARENT[36..52]);
    assert_eq!(headers.get("Nats-Msg-Id").map(|v| v.as_str()), Some("m-1"));
    // The stored message is as published.
    let stored = stream.get_raw_message(1).await.expect("get");
    assert_eq!(traceparent(&stored.headers), PARENT);
}

/// A minimal OTLP/HTTP collector: answers every POST with 200 and keeps the bodies (protobuf
/// strings appear in them as written, which is all this test reads).
fn collector() -> (String, std::sync::Arc<std::sync::Mutex<Vec<u8>>>) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}/v1/traces", listener.local_addr().expect("addr"));
    let bodies = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = bodies.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut request = Vec::new();
            let mut chunk = [0u8; 4096];
            let complete = |request: &[u8]| {
                let text = String::from_utf8_lossy(request);
                let Some(end) = text.find("\r\n\r\n") else { return false };
                let length = text[..end]
                    .lines()
                    .find_map(|line| line.strip_prefix("Content-Length: "))
                    .and_then(|n| n.trim().parse::<usize>().ok())
                    .unwrap_or(0);
                request.len() >= end + 4 + length
            };
            while !complete(&request) {
                match stream.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => request.extend_from_slice(&chunk[..n]),
                }
            }
            kept.lock().expect("lock").extend_from_slice(&request);
            let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
        }
    });
    (url, bodies)
}

fn count(haystack: &[u8], needle: &str) -> usize {
    haystack.windows(needle.len()).filter(|w| *w == needle.as_bytes()).count()
}

#[tokio::test]
async fn spans_are_exported_over_otlp_http_including_an_atomic_batchs_store_spans() {
    let (url, bodies) = collector();
    let server = SemaqServer::builder()
        .env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &url)
        .env("OTEL_EXPORTER_OTLP_HEADERS", "x-test=yes")
        .start();
    let client = server.client().await;
    let config = serde_json::json!({"name": "BATCHED", "subjects": ["batched.>"], "allow_atomic": true});
    let created = client.request("$JS.API.STREAM.CREATE.BATCHED", config.to_string().into()).await.expect("create");
    assert!(serde_json::from_slice::<Value>(&created.payload).expect("json")["error"].is_null());
    for (seq, commit) in [("1", None), ("2", Some("1"))] {
        let mut headers = HeaderMap::new();
        headers.insert("traceparent", PARENT);
        headers.insert("Nats-Batch-Id", "b1");
        headers.insert("Nats-Batch-Sequence", seq);
        if let Some(commit) = commit {
            headers.insert("Nats-Batch-Commit", commit);
            let ack = client.request_with_headers("batched.x", headers, "x".into()).await.expect("ack");
            let ack: Value = serde_json::from_slice(&ack.payload).expect("json");
            assert_eq!(ack["count"], 2, "{ack}");
        } else {
            client.publish_with_headers("batched.x", headers, "x".into()).await.expect("publish");
        }
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let received = bodies.lock().expect("lock").clone();
        if count(&received, "store BATCHED") >= 2 {
            assert!(count(&received, "semaq.batch") >= 2);
            assert!(count(&received, "publish batched.x") >= 2);
            assert!(count(&received, "x-test: yes") >= 1);
            assert!(count(&received, "POST /v1/traces HTTP/1.1") >= 1);
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{}", String::from_utf8_lossy(&received));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A exports two streams and two services, one of each letting traces in; B imports them all,
/// letting in the trace of `feed.open` only.
const ACCOUNTS: &str = r#"
accounts {
  A {
    users: [{ user: a, password: a }]
    exports: [
      { stream: "feed.>" }
      { service: "svc.open", allow_trace: true }
      { service: "svc.shut" }
    ]
  }
  B {
    users: [{ user: b, password: b }]
    imports: [
      { stream: { account: A, subject: "feed.open" }, allow_trace: true }
      { stream: { account: A, subject: "feed.shut" } }
      { service: { account: A, subject: "svc.open" } }
      { service: { account: A, subject: "svc.shut" } }
    ]
  }
}
"#;

async fn login(server: &SemaqServer, user: &str) -> async_nats::Client {
    let options = async_nats::ConnectOptions::with_user_and_password(user.into(), user.into()).name(user);
    options.connect(server.url()).await.expect("connect")
}

/// What `from` publishing traced on `subject` (and `received` by `to`) reports to `from`'s
/// `trace.events`: the event and the message `to` got, if any.
async fn crossing(
    from: &async_nats::Client,
    to: &async_nats::Client,
    subject: &str,
    only: bool,
) -> (Value, Option<async_nats::Message>) {
    let mut events = from.subscribe("trace.events").await.expect("subscribe");
    let mut received = to.subscribe(subject.to_string()).await.expect("subscribe");
    sync(from).await;
    sync(to).await;
    let mut headers = traced("trace.events");
    if only {
        headers.insert("Nats-Trace-Only", "true");
    }
    from.publish_with_headers(subject.to_string(), headers, "x".into()).await.expect("publish");
    let event = next_event(&mut events).await;
    let got = tokio::time::timeout(Duration::from_millis(300), received.next()).await.ok().flatten();
    (event, got)
}

#[tokio::test]
async fn a_trace_crosses_a_stream_import_only_when_the_import_allows_it() {
    let server = SemaqServer::with_config(ACCOUNTS, &[]);
    let (a, b) = (login(&server, "a").await, login(&server, "b").await);
    let (event, got) = crossing(&a, &b, "feed.open", false).await;
    let exported = of_type(&event, "se");
    assert_eq!((exported.len(), &exported[0]["acc"], &exported[0]["to"]), (1, &"B".into(), &"feed.open".into()));
    let egress = of_type(&event, "eg");
    assert_eq!((egress.len(), &egress[0]["acc"]), (1, &"B".into()), "the egress names the other account: {event}");
    assert!(got.is_some(), "delivered");

    let (event, got) = crossing(&a, &b, "feed.shut", false).await;
    assert_eq!(of_type(&event, "se").len(), 1, "{event}");
    assert!(of_type(&event, "eg").is_empty(), "the trace stops at the import: {event}");
    assert!(got.is_some(), "delivered all the same");

    let (event, got) = crossing(&a, &b, "feed.shut", true).await;
    assert_eq!(of_type(&event, "se").len(), 1, "{event}");
    assert!(got.is_none(), "traced only: nothing goes past the import");
}

#[tokio::test]
async fn a_trace_crosses_a_service_import_only_when_the_export_allows_it() {
    let server = SemaqServer::with_config(ACCOUNTS, &[]);
    let (a, b) = (login(&server, "a").await, login(&server, "b").await);
    let (event, got) = crossing(&b, &a, "svc.open", false).await;
    let imported = of_type(&event, "si");
    assert_eq!(imported.len(), 1, "{event}");
    assert_eq!(
        (&imported[0]["acc"], &imported[0]["from"], &imported[0]["to"]),
        (&"A".into(), &"svc.open".into(), &"svc.open".into())
    );
    let egress = of_type(&event, "eg");
    assert_eq!((egress.len(), &egress[0]["acc"]), (1, &"A".into()), "{event}");
    let headers = got.expect("delivered").headers.expect("headers");
    let dest = headers.get("Nats-Trace-Dest").map(|v| v.to_string()).unwrap_or_default();
    assert!(dest.starts_with("_R_."), "a reply subject of the exporter, as nats-server 2.11 sets it: {dest}");

    let (event, got) = crossing(&b, &a, "svc.shut", false).await;
    assert_eq!(of_type(&event, "si").len(), 1, "{event}");
    assert!(of_type(&event, "eg").is_empty(), "the trace stops at the import: {event}");
    let headers = got.expect("delivered all the same").headers.expect("headers");
    assert_eq!(headers.get("Nats-Trace-Dest").map(|v| v.as_str()), Some("trace disabled"), "as nats-server marks it");

    let (_, got) = crossing(&b, &a, "svc.shut", true).await;
    assert!(got.is_none(), "traced only: nothing goes past the import");
}

/// As nats-server 2.11+ (`msgTrace.setupResponseServiceImport`): past an `allow_trace` export the
/// request's `Nats-Trace-Dest` is a fresh `_R_.` subject of the exporter, whose mapping back to
/// the requester's destination serves only events of other servers the message was routed to
/// (none here), and the response import never lets a trace back across it.
#[tokio::test]
async fn a_response_carrying_the_trace_back_is_traced_in_the_exporter_and_stops_at_the_response_import() {
    let server = SemaqServer::with_config(ACCOUNTS, &[]);
    let (a, b) = (login(&server, "a").await, login(&server, "b").await);
    let mut events = b.subscribe("trace.events").await.expect("subscribe");
    let mut inbox = b.subscribe("re.1").await.expect("subscribe");
    let mut requests = a.subscribe("svc.open").await.expect("subscribe");
    let mut replies_in_a = a.subscribe("_R_.>").await.expect("subscribe");
    sync(&a).await;
    sync(&b).await;
    b.publish_with_reply_and_headers("svc.open", "re.1", traced("trace.events"), "?".into()).await.expect("request");
    let request = next(&mut requests).await;
    let request_event = next_event(&mut events).await;
    assert_eq!(of_type(&request_event, "eg").len(), 1, "{request_event}");
    let headers = request.headers.clone().expect("headers");
    let dest = headers.get("Nats-Trace-Dest").map(|v| v.to_string()).unwrap_or_default();
    let reply = request.reply.clone().expect("a reply subject").to_string();
    assert!(dest.starts_with("_R_.") && dest != reply, "{dest}, {reply}");

    // A responder passing the request's headers on with its response.
    a.publish_with_headers(reply.clone(), headers, "!".into()).await.expect("respond");
    let response = next(&mut inbox).await;
    let response_dest = response.headers.expect("headers").get("Nats-Trace-Dest").map(|v| v.to_string());
    assert_eq!(response_dest.as_deref(), Some("trace disabled"), "as nats-server marks it past the import");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let response_event = loop {
        let message = tokio::time::timeout_at(deadline, replies_in_a.next()).await.ok().flatten().expect("the event");
        if message.subject.as_str() == dest {
            break serde_json::from_slice::<Value>(&message.payload).expect("a JSON trace event");
        }
    };
    assert_eq!(of_type(&response_event, "in")[0]["acc"], "A", "{response_event}");
    let crossed = of_type(&response_event, "si");
    assert_eq!(crossed.len(), 1, "{response_event}");
    assert_eq!(
        (&crossed[0]["acc"], &crossed[0]["from"], &crossed[0]["to"]),
        (&"B".into(), &reply.into(), &"re.1".into())
    );
    let egress = of_type(&response_event, "eg");
    // Only this test's own `_R_.>` subscriber in A: none past the response import, in B.
    assert_eq!(
        (egress.len(), &egress[0]["sub"], &egress[0]["acc"]),
        (1, &"_R_.>".into(), &Value::Null),
        "{response_event}"
    );
    let more = tokio::time::timeout(Duration::from_millis(300), events.next()).await;
    assert!(more.is_err(), "the requester's destination gets only the request's event");
}

#[test]
fn allow_trace_on_the_wrong_side_stops_startup_with_nats_servers_message() {
    let cases = [
        (
            "{ stream: \"feed.>\" }",
            "{ stream: \"feed.>\", allow_trace: true }",
            "Detected allow_trace directive on non-service",
        ),
        (
            "{ service: { account: A, subject: \"svc.shut\" } }",
            "{ service: { account: A, subject: \"svc.shut\" }, allow_trace: true }",
            "Detected allow_trace directive on a non-stream",
        ),
    ];
    for (from, to, message) in cases {
        let stderr = crate::imports::refusal(&ACCOUNTS.replace(from, to));
        assert!(stderr.contains(message), "{to}: {stderr}");
    }
}
