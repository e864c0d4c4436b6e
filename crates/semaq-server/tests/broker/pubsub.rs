//! Core publish/subscribe through the async-nats client.

use std::time::Duration;

use async_nats::HeaderMap;
use futures::StreamExt;
use semaq_testkit::{sync, wait_until_async, SemaqServer};

const RECEIVE_TIMEOUT: Duration = Duration::from_secs(5);

async fn next(subscriber: &mut async_nats::Subscriber) -> async_nats::Message {
    tokio::time::timeout(RECEIVE_TIMEOUT, subscriber.next()).await.expect("message in time").expect("open")
}

async fn nothing_more(subscriber: &mut async_nats::Subscriber) {
    let extra = tokio::time::timeout(Duration::from_millis(200), subscriber.next()).await;
    assert!(extra.is_err(), "unexpected message: {extra:?}");
}

#[tokio::test]
async fn published_messages_reach_a_subscriber_in_order() {
    let server = SemaqServer::start();
    let client = server.client().await;
    let mut subscriber = client.subscribe("greet.joe").await.unwrap();
    client.flush().await.unwrap();
    for i in 0..100 {
        client.publish("greet.joe", format!("hello {i}").into()).await.unwrap();
    }
    for i in 0..100 {
        let message = next(&mut subscriber).await;
        assert_eq!(message.subject.as_str(), "greet.joe");
        assert_eq!(message.payload, format!("hello {i}").as_bytes());
    }
}

#[tokio::test]
async fn single_token_wildcard_matches_one_token_only() {
    let server = SemaqServer::start();
    let client = server.client().await;
    let mut subscriber = client.subscribe("orders.*.created").await.unwrap();
    client.flush().await.unwrap();
    client.publish("orders.eu.created", "a".into()).await.unwrap();
    client.publish("orders.eu.west.created", "b".into()).await.unwrap();
    client.publish("orders.us.created", "c".into()).await.unwrap();
    assert_eq!(next(&mut subscriber).await.payload, "a");
    assert_eq!(next(&mut subscriber).await.payload, "c");
    nothing_more(&mut subscriber).await;
}

#[tokio::test]
async fn tail_wildcard_matches_one_or_more_tokens() {
    let server = SemaqServer::start();
    let client = server.client().await;
    let mut subscriber = client.subscribe("ai.>").await.unwrap();
    client.flush().await.unwrap();
    client.publish("ai", "no".into()).await.unwrap();
    client.publish("ai.inference", "a".into()).await.unwrap();
    client.publish("ai.inference.llama.eu", "b".into()).await.unwrap();
    assert_eq!(next(&mut subscriber).await.payload, "a");
    assert_eq!(next(&mut subscriber).await.payload, "b");
    nothing_more(&mut subscriber).await;
}

#[tokio::test]
async fn a_queue_group_delivers_each_message_to_exactly_one_member() {
    let server = SemaqServer::start();
    let publisher = server.client().await;
    let mut members = Vec::new();
    for _ in 0..3 {
        let client = server.client().await;
        let subscriber = client.queue_subscribe("work", "workers".into()).await.unwrap();
        sync(&client).await;
        members.push((client, subscriber));
    }
    let mut plain = publisher.subscribe("work").await.unwrap();
    publisher.flush().await.unwrap();
    const TOTAL: usize = 300;
    for i in 0..TOTAL {
        publisher.publish("work", i.to_string().into()).await.unwrap();
    }
    publisher.flush().await.unwrap();
    let mut seen = Vec::new();
    let mut per_member = Vec::new();
    for (_, subscriber) in members.iter_mut() {
        let mut count = 0;
        while let Ok(Some(message)) = tokio::time::timeout(Duration::from_millis(500), subscriber.next()).await {
            seen.push(String::from_utf8(message.payload.to_vec()).unwrap().parse::<usize>().unwrap());
            count += 1;
        }
        per_member.push(count);
    }
    seen.sort_unstable();
    assert_eq!(seen, (0..TOTAL).collect::<Vec<_>>(), "each message exactly once across the group");
    assert!(per_member.iter().all(|count| *count > 0), "load spread over members: {per_member:?}");
    for _ in 0..TOTAL {
        next(&mut plain).await;
    }
}

#[tokio::test]
async fn request_reply_round_trips() {
    let server = SemaqServer::start();
    let responder = server.client().await;
    let mut requests = responder.subscribe("math.double").await.unwrap();
    sync(&responder).await;
    tokio::spawn(async move {
        while let Some(request) = requests.next().await {
            let n: i64 = std::str::from_utf8(&request.payload).unwrap().parse().unwrap();
            responder.publish(request.reply.unwrap(), (n * 2).to_string().into()).await.unwrap();
        }
    });
    let requester = server.client().await;
    for n in [1, 21, -4] {
        let reply = requester.request("math.double", n.to_string().into()).await.unwrap();
        assert_eq!(reply.payload, (n * 2).to_string().as_bytes());
    }
}

#[tokio::test]
async fn headers_round_trip() {
    let server = SemaqServer::start();
    let client = server.client().await;
    let mut subscriber = client.subscribe("h").await.unwrap();
    client.flush().await.unwrap();
    let mut headers = HeaderMap::new();
    headers.insert("Semaq-Model", "llama3-70b");
    headers.insert("X-Multi", "one");
    headers.append("X-Multi", "two");
    client.publish_with_headers("h", headers, "body".into()).await.unwrap();
    let message = next(&mut subscriber).await;
    let received = message.headers.expect("headers");
    assert_eq!(received.get("Semaq-Model").map(|v| v.as_str()), Some("llama3-70b"));
    let multi: Vec<_> = received.get_all("X-Multi").map(|v| v.as_str().to_string()).collect();
    assert_eq!(multi, ["one", "two"]);
    assert_eq!(message.payload, "body");
}

#[tokio::test]
async fn a_request_with_no_responders_fails_at_once() {
    let server = SemaqServer::start();
    let client = server.client().await;
    let started = std::time::Instant::now();
    let error = client.request("nobody.home", "?".into()).await.expect_err("no responders");
    assert_eq!(error.kind(), async_nats::RequestErrorKind::NoResponders);
    assert!(started.elapsed() < Duration::from_secs(4), "answered by the 503 status, not the timeout");
}

#[tokio::test]
async fn auto_unsubscribe_stops_after_max_messages() {
    let server = SemaqServer::start();
    let client = server.client().await;
    let internal = server.http_json("/varz")["subscriptions"].as_u64().unwrap();
    let mut subscriber = client.subscribe("limited").await.unwrap();
    subscriber.unsubscribe_after(3).await.unwrap();
    client.flush().await.unwrap();
    for i in 0..10 {
        client.publish("limited", i.to_string().into()).await.unwrap();
    }
    client.flush().await.unwrap();
    for i in 0..3 {
        assert_eq!(next(&mut subscriber).await.payload, i.to_string().as_bytes());
    }
    let end = tokio::time::timeout(RECEIVE_TIMEOUT, subscriber.next()).await.expect("ends");
    assert!(end.is_none(), "subscription ended after 3 messages");
    wait_until_async("only the server's own subscriptions remain", RECEIVE_TIMEOUT, || {
        let remain = server.http_json("/varz")["subscriptions"] == internal;
        async move { remain }
    })
    .await;
    assert_eq!(server.http_json("/varz")["subscriptions"], internal, "only the server's own remain");
}

#[tokio::test]
async fn echo_off_hides_a_clients_own_messages() {
    let server = SemaqServer::start();
    let quiet = async_nats::ConnectOptions::new().no_echo().connect(server.url()).await.unwrap();
    let other = server.client().await;
    let mut own = quiet.subscribe("chat").await.unwrap();
    let mut theirs = other.subscribe("chat").await.unwrap();
    sync(&quiet).await;
    sync(&other).await;
    quiet.publish("chat", "from quiet".into()).await.unwrap();
    assert_eq!(next(&mut theirs).await.payload, "from quiet");
    nothing_more(&mut own).await;
    other.publish("chat", "from other".into()).await.unwrap();
    assert_eq!(next(&mut own).await.payload, "from other");
}

#[tokio::test]
async fn a_message_over_max_payload_is_refused() {
    let server = SemaqServer::start();
    let client = server.client().await;
    assert_eq!(client.server_info().max_payload, 1024 * 1024);
    let error = client.publish("big", vec![0u8; 1024 * 1024 + 1].into()).await.expect_err("too big");
    assert!(error.to_string().contains("payload"), "{error}");
    let mut raw = server.raw();
    raw.send(b"PUB big 1048577\r\n");
    raw.expect("-ERR 'Maximum Payload Violation'");
    assert!(raw.is_closed());
    let still_up = server.client().await;
    still_up.flush().await.unwrap();
}

#[tokio::test]
async fn monitoring_counts_messages_per_connection() {
    let server = SemaqServer::start();
    let internal = server.http_json("/subsz")["num_subscriptions"].as_u64().unwrap();
    let client = async_nats::ConnectOptions::new().name("counter").connect(server.url()).await.unwrap();
    let mut subscriber = client.subscribe("count").await.unwrap();
    client.flush().await.unwrap();
    for _ in 0..5 {
        client.publish("count", "12345".into()).await.unwrap();
    }
    for _ in 0..5 {
        next(&mut subscriber).await;
    }
    let varz = server.http_json("/varz");
    assert_eq!(varz["in_msgs"], 5);
    assert_eq!(varz["out_msgs"], 5);
    assert_eq!(varz["in_bytes"], 25);
    let connz = server.http_json("/connz");
    let connection = &connz["connections"][0];
    assert_eq!(connection["name"], "counter");
    assert_eq!(connection["in_msgs"], 5);
    assert_eq!(connection["out_bytes"], 25);
    assert_eq!(connection["subscriptions"], 1);
    assert_eq!(server.http_json("/subsz")["num_subscriptions"], internal + 1);
    assert_eq!(server.http_json("/healthz")["status"], "ok");
}
