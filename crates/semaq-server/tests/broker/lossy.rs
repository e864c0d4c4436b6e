//! `Semaq-Lossy: true` messages are shed first when a client falls behind: once its outbound
//! buffer is past the high-water mark (half of `max_pending`), before any slow-consumer
//! disconnect, and every shed message is counted per subject, never silently.

use std::time::Duration;

use async_nats::HeaderMap;
use futures::StreamExt;
use semaq_testkit::{sync, wait_until_async, Raw, SemaqServer};
use serde_json::Value;

/// `max_pending`, so the high-water mark is 128 KiB. The write deadline is raised because a
/// stalled client kept below `max_pending` by shedding would otherwise be closed after the
/// default 10 s of blocked writes, which a loaded test machine could reach.
const CONFIG: &str = "max_pending: 256KB\nwrite_deadline: \"60s\"\n";
const MAX_PENDING_BYTES: u64 = 256 * 1024;
const PAYLOAD_BYTES: usize = 1024;
/// Messages published before the healthy subscriber catches up: a burst well below the mark,
/// so only the stalled client falls behind.
const CHUNK_MESSAGES: u64 = 48;
/// 40 MB in all at most: far more than a stalled client's socket buffers hold.
const CHUNKS_MAX: u64 = 800;

/// A subscriber that never reads: once its socket buffers are full, its pending bytes grow.
fn stalled_subscriber(server: &SemaqServer, subject: &str) -> Raw {
    let mut stalled = server.raw();
    stalled
        .send(format!("CONNECT {{\"name\":\"stalled\",\"headers\":true}}\r\nSUB {subject} 1\r\nPING\r\n").as_bytes());
    stalled.expect("PONG");
    stalled
}

fn lossy(value: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert("Semaq-Lossy", value);
    headers
}

fn payload() -> bytes::Bytes {
    bytes::Bytes::from(vec![b'x'; PAYLOAD_BYTES])
}

/// The `/connz` entry (open connections, or `state=closed`) of the connection called `name`.
fn connection(server: &SemaqServer, query: &str, name: &str) -> Option<Value> {
    let connz = server.http_json(&format!("/connz{query}"));
    connz["connections"].as_array()?.iter().find(|c| c["name"] == name).cloned()
}

fn shed_total(server: &SemaqServer) -> u64 {
    server.http_json("/varz")["semaq_lossy_shed"].as_u64().unwrap_or_default()
}

fn slow_consumers(server: &SemaqServer) -> u64 {
    server.http_json("/varz")["slow_consumers"].as_u64().unwrap_or_default()
}

/// Waits until `subscriber` has received `count` messages, so only a stalled client falls behind.
async fn receive(subscriber: &mut async_nats::Subscriber, count: u64) {
    for _ in 0..count {
        let message = tokio::time::timeout(Duration::from_secs(10), subscriber.next()).await;
        assert!(matches!(message, Ok(Some(_))), "the healthy subscriber gets every message");
    }
}

#[tokio::test]
async fn lossy_messages_past_the_high_water_mark_are_shed_and_counted_and_the_client_stays() {
    let server = SemaqServer::with_config(CONFIG, &[]);
    let mut stalled = stalled_subscriber(&server, "metrics.>");
    let healthy = async_nats::ConnectOptions::new().name("healthy").connect(server.url()).await.unwrap();
    let mut subscriber = healthy.subscribe("metrics.>").await.unwrap();
    sync(&healthy).await;
    let publisher = server.client().await;

    let mut published = 0;
    for _ in 0..CHUNKS_MAX {
        for n in 0..CHUNK_MESSAGES {
            let subject = if n % 2 == 0 { "metrics.cpu" } else { "metrics.mem" };
            publisher.publish_with_headers(subject, lossy("true"), payload()).await.unwrap();
        }
        published += CHUNK_MESSAGES;
        receive(&mut subscriber, CHUNK_MESSAGES).await;
        if shed_total(&server) >= 2 * CHUNK_MESSAGES {
            break;
        }
    }

    assert!(shed_total(&server) >= 2 * CHUNK_MESSAGES, "the stalled client's lossy messages are shed");
    // Every message the stalled client did not get is counted as shed for it.
    wait_until_async("each message queued or shed", Duration::from_secs(5), || {
        let entry = connection(&server, "", "stalled").unwrap_or_default();
        let accounted = entry["out_msgs"].as_u64().unwrap_or(0) + entry["lossy_shed"].as_u64().unwrap_or(0);
        async move { accounted == published }
    })
    .await;

    let total = shed_total(&server);
    let shed = server.http_json("/semaq/shed");
    assert_eq!(shed["total_msgs"], total, "/semaq/shed and /varz agree");
    let subjects = shed["subjects"].as_object().unwrap();
    let mut names: Vec<&str> = subjects.keys().map(String::as_str).collect();
    names.sort_unstable();
    assert_eq!(names, ["metrics.cpu", "metrics.mem"], "counted per subject");
    assert!(subjects.values().all(|count| count.as_u64() > Some(0)));
    assert_eq!(subjects.values().filter_map(Value::as_u64).sum::<u64>(), total);
    let bytes = shed["total_bytes"].as_u64().unwrap();
    assert!(
        (total * PAYLOAD_BYTES as u64..total * (PAYLOAD_BYTES as u64 + 64)).contains(&bytes),
        "bytes shed are the payloads and their header blocks: {bytes} for {total} messages"
    );

    let entry = connection(&server, "", "stalled").expect("the stalled client is still connected");
    assert_eq!(entry["lossy_shed"], total, "all of it was shed for the stalled client");
    let pending = entry["pending_bytes"].as_u64().unwrap();
    let message_bytes = PAYLOAD_BYTES as u64 + 128;
    assert!(pending <= MAX_PENDING_BYTES / 2 + message_bytes, "lossy traffic stops at the mark: {pending} pending");
    let healthy_entry = connection(&server, "", "healthy").unwrap();
    assert_eq!(healthy_entry["lossy_shed"], 0, "nothing is shed for a client that keeps up");
    assert_eq!(slow_consumers(&server), 0);

    // Once it reads again, it gets what was queued and its connection still answers.
    stalled.send(b"PING\r\n");
    let received = stalled.read_until("PONG");
    assert!(!received.contains("Slow Consumer"), "never told it was a slow consumer");
}

#[tokio::test]
async fn non_lossy_messages_still_end_in_a_slow_consumer_disconnect_after_lossy_ones_are_shed() {
    let server = SemaqServer::with_config(CONFIG, &[]);
    let stalled = stalled_subscriber(&server, "mixed");
    let healthy = server.client().await;
    let mut subscriber = healthy.subscribe("mixed").await.unwrap();
    sync(&healthy).await;
    let publisher = server.client().await;

    for _ in 0..CHUNKS_MAX {
        for n in 0..CHUNK_MESSAGES {
            let value = if n % 2 == 0 { "true" } else { "false" };
            publisher.publish_with_headers("mixed", lossy(value), payload()).await.unwrap();
        }
        receive(&mut subscriber, CHUNK_MESSAGES).await;
        if slow_consumers(&server) > 0 {
            break;
        }
    }

    wait_until_async("slow consumer counted", Duration::from_secs(5), || {
        let counted = slow_consumers(&server) == 1;
        async move { counted }
    })
    .await;
    let closed = connection(&server, "?state=closed", "stalled").expect("the stalled client was closed");
    assert!(closed["reason"].as_str().unwrap().starts_with("Slow Consumer"), "{closed}");
    let shed = closed["lossy_shed"].as_u64().unwrap();
    assert!(shed > 0, "the lossy half was shed first, between the mark and the bound");
    assert_eq!(server.http_json("/semaq/shed")["subjects"]["mixed"], shed);
    drop(stalled);
}

#[tokio::test]
async fn only_a_true_semaq_lossy_is_shed_and_its_name_and_value_are_read_in_any_case() {
    let server = SemaqServer::with_config(CONFIG, &[]);
    let stalled = stalled_subscriber(&server, "case.>");
    // A raw publisher, to spell the header exactly.
    let mut publisher = server.raw();
    publisher.send(b"CONNECT {\"headers\":true}\r\n");
    let payload = "x".repeat(PAYLOAD_BYTES);
    let spellings = [
        ("case.true", "NATS/1.0\r\nsemaq-LOSSY: True\r\n\r\n"),
        ("case.false", "NATS/1.0\r\nSemaq-Lossy: false\r\n\r\n"),
        ("case.yes", "NATS/1.0\r\nSemaq-Lossy: yes\r\n\r\n"),
        ("case.absent", "NATS/1.0\r\nSemaq-Model: m\r\n\r\n"),
    ];
    let mut chunk = String::new();
    for (subject, headers) in spellings {
        let (header_len, total_len) = (headers.len(), headers.len() + payload.len());
        chunk.push_str(&format!("HPUB {subject} {header_len} {total_len}\r\n{headers}{payload}\r\n"));
    }

    for _ in 0..CHUNKS_MAX {
        for _ in 0..CHUNK_MESSAGES / 4 {
            publisher.send(chunk.as_bytes());
        }
        publisher.send(b"PING\r\n");
        publisher.expect("PONG");
        if slow_consumers(&server) > 0 {
            break;
        }
    }

    assert_eq!(slow_consumers(&server), 1, "the messages that may not be shed filled the stalled client");
    let shed = server.http_json("/semaq/shed");
    let subjects: Vec<&String> = shed["subjects"].as_object().unwrap().keys().collect();
    assert_eq!(subjects, ["case.true"], "false, other values and no header are never shed");
    assert!(shed["total_msgs"].as_u64() > Some(0));
    drop(stalled);
}
