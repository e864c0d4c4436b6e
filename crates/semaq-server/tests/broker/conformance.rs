//! Side-by-side conformance: one scripted sequence of JetStream API requests sent to Debian's
//! nats-server 2.9 and to semaq-server, the JSON answers compared field by field.
//!
//! Before comparing, both answers are normalised: timestamps, the server's ids and generated
//! names differ by nature and are masked (`MASKED`). Fields only one side has are differences
//! unless `EXPLAINED` lists them with the reason; the test fails on any other difference and
//! prints the count.

use std::collections::BTreeMap;
use std::time::Duration;

use async_nats::HeaderMap;
use semaq_testkit::{NatsServer, SemaqServer};
use serde_json::{json, Value};

/// Bound on any single request.
const WAIT: Duration = Duration::from_secs(5);

/// Fields whose values differ by nature between two servers (clocks, generated ids); both sides
/// must have them, their values are not compared.
const MASKED: &[&str] = &[
    "created",
    "ts",
    "state.first_ts",
    "state.last_ts",
    "streams.*.created",
    "streams.*.state.first_ts",
    "streams.*.state.last_ts",
    "consumers.*.created",
    "message.time",
    "delivered.last_active",
    "ack_floor.last_active",
    "consumers.*.delivered.last_active",
    "consumers.*.ack_floor.last_active",
    // The store time in a delivery's ack subject.
    "reply.timestamp",
];

/// Differences with their reason. A path matches with `*` for any one key or index; the value
/// is checked to be on one side only (`Only::Semaq`: SemaQ answers as nats-server 2.10+ does
/// and 2.9 does not have the field; `Only::Nats`: clustering data SemaQ, a single server, has
/// no answer for).
const EXPLAINED: &[(&str, Only, &str)] = &[
    ("config.compression", Only::Semaq, "2.10 stream config field"),
    ("config.consumer_limits", Only::Semaq, "2.10 stream config field"),
    ("config.first_seq", Only::Semaq, "2.10 stream config field"),
    ("config.metadata", Only::Semaq, "2.10 config field (streams and consumers)"),
    ("config.subject_transform", Only::Semaq, "2.10 stream config field"),
    ("streams.*.config.compression", Only::Semaq, "2.10 stream config field"),
    ("streams.*.config.consumer_limits", Only::Semaq, "2.10 stream config field"),
    ("ts", Only::Semaq, "2.10 adds the server time to stream and consumer info"),
    ("streams.*.ts", Only::Semaq, "2.10 adds the server time to stream info"),
    ("consumers.*.ts", Only::Semaq, "2.10 adds the server time to consumer info"),
    ("semaq", Only::Semaq, "SemaQ's own stream info section (level, enforcement)"),
    ("streams.*.semaq", Only::Semaq, "SemaQ's own stream info section (level, enforcement)"),
    ("config.name", Only::Semaq, "2.10+ set a durable's name from the create subject"),
    ("consumers.*.config.name", Only::Semaq, "2.10+ set a durable's name from the create subject"),
    ("cluster", Only::Nats, "a standalone nats-server names itself as leader; SemaQ has no cluster"),
    ("streams.*.cluster", Only::Nats, "a standalone nats-server names itself as leader; SemaQ has no cluster"),
    ("consumers.*.cluster", Only::Nats, "a standalone nats-server names itself as leader; SemaQ has no cluster"),
];

/// Differences in value both sides have, with the reason: (path pattern, reason).
const EXPLAINED_VALUES: &[(&str, &str)] = &[];

/// Whole steps where nats-server 2.9 and 2.10+ (which SemaQ follows) differ: (step index, reason).
const EXPLAINED_STEPS: &[(usize, &str)] = &[
    (11, "2.10+ checks max_age first: \"max age can not be negative\" (2.9 names the duplicates window)"),
    (66, "2.10 removed the check that a filter is a subset of the stream's subjects (10093)"),
];

/// Single fields of single steps, with the reason: (step index, path, reason).
const EXPLAINED_AT: &[(usize, &str, &str)] = &[
    (
        57,
        "ack_floor.stream_seq",
        "a new deliver-last consumer: SemaQ sets the ack floor below its start as 2.12's \
         selectStartingSeqNo does; 2.9 reports 0 (ack none)",
    ),
    (83, "consumers.0.ack_floor.stream_seq", "the consumer of step 57, listed"),
    (83, "consumers.3.config.filter_subject", "step 66 (explained) updated X's filter on SemaQ"),
    (83, "consumers.3.num_pending", "step 66 (explained) updated X's filter on SemaQ"),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Only {
    Semaq,
    Nats,
}

/// One request of the script: an API (or publish) subject, headers and body.
struct Step {
    subject: &'static str,
    headers: &'static [(&'static str, &'static str)],
    body: &'static str,
}

const fn step(subject: &'static str, body: &'static str) -> Step {
    Step { subject, headers: &[], body }
}

const fn publish(subject: &'static str, headers: &'static [(&'static str, &'static str)], body: &'static str) -> Step {
    Step { subject, headers, body }
}

const ORDERS: &str = r#"{"name":"ORDERS","subjects":["orders.>"],"storage":"file","retention":"limits","max_consumers":-1,"max_msgs":-1,"max_bytes":-1,"max_age":0,"max_msgs_per_subject":-1,"max_msg_size":-1,"discard":"old","num_replicas":1,"duplicate_window":120000000000}"#;

/// The script: every request in order, both servers get exactly these.
const SCRIPT: &[Step] = &[
    // Stream create: success, idempotence and its error cases.
    step("$JS.API.STREAM.CREATE.ORDERS", ORDERS),
    step("$JS.API.STREAM.CREATE.ORDERS", ORDERS),
    step("$JS.API.STREAM.CREATE.ORDERS", r#"{"name":"ORDERS","subjects":["other.>"]}"#),
    step("$JS.API.STREAM.CREATE.OVERLAP", r#"{"name":"OVERLAP","subjects":["orders.new"]}"#),
    step("$JS.API.STREAM.CREATE.BAD", r#"{"name":"BAD","subjects":["bad.>"#),
    step("$JS.API.STREAM.CREATE.BAD", ""),
    step("$JS.API.STREAM.CREATE.BAD", r#"{"name":"OTHER","subjects":["bad.>"]}"#),
    step("$JS.API.STREAM.CREATE.BAD", r#"{"name":"BAD","subjects":["bad.>"],"num_replicas":3}"#),
    step("$JS.API.STREAM.CREATE.BAD", r#"{"name":"BAD","subjects":["bad.*.>.x"]}"#),
    step("$JS.API.STREAM.CREATE.BAD", r#"{"name":"BAD","subjects":["bad.a","bad.*"]}"#),
    step("$JS.API.STREAM.CREATE.BAD", r#"{"name":"BAD","subjects":["bad.>"],"retention":"sometimes"}"#),
    step("$JS.API.STREAM.CREATE.BAD", r#"{"name":"BAD","subjects":["bad.>"],"max_age":-5}"#),
    step("$JS.API.STREAM.CREATE.BAD", r#"{"name":"BAD","subjects":["bad.>"],"duplicate_window":-1}"#),
    step(
        "$JS.API.STREAM.CREATE.LOGS",
        r#"{"name":"LOGS","subjects":["logs.*"],"storage":"memory","max_msgs":3,"discard":"new"}"#,
    ),
    // Publishes: PubAcks, duplicates, expectations, limits.
    publish("orders.new", &[], "one"),
    publish("orders.new", &[], "two"),
    publish("orders.paid", &[("Nats-Msg-Id", "p1")], "three"),
    publish("orders.paid", &[("Nats-Msg-Id", "p1")], "three again"),
    publish("orders.shipped", &[("Nats-Expected-Stream", "LOGS")], "wrong stream"),
    publish("orders.shipped", &[("Nats-Expected-Last-Sequence", "1")], "wrong last"),
    publish("orders.shipped", &[("Nats-Expected-Last-Subject-Sequence", "0")], "first shipped"),
    publish("orders.shipped", &[("Nats-Expected-Last-Msg-Id", "nope")], "wrong id"),
    publish("orders.new", &[("Trace", "x")], "five"),
    publish("logs.a", &[], "1"),
    publish("logs.a", &[], "2"),
    publish("logs.b", &[], "3"),
    publish("logs.b", &[], "4"),
    // Info, update, names and list.
    step("$JS.API.STREAM.INFO.ORDERS", ""),
    step("$JS.API.STREAM.INFO.ORDERS", r#"{"subjects_filter":"orders.*"}"#),
    step("$JS.API.STREAM.INFO.NOPE", ""),
    step("$JS.API.STREAM.INFO.ORDERS", "{bad"),
    step(
        "$JS.API.STREAM.UPDATE.LOGS",
        r#"{"name":"LOGS","subjects":["logs.*","audit"],"storage":"memory","max_msgs":10,"discard":"new"}"#,
    ),
    step("$JS.API.STREAM.UPDATE.LOGS", r#"{"name":"LOGS","subjects":["logs.*"],"storage":"file"}"#),
    step("$JS.API.STREAM.UPDATE.LOGS", r#"{"name":"LOGS","subjects":["orders.x"],"storage":"memory"}"#),
    step("$JS.API.STREAM.UPDATE.NOPE", r#"{"name":"NOPE","subjects":["nope"]}"#),
    step("$JS.API.STREAM.UPDATE.LOGS", r#"{"name":"OTHER"}"#),
    step("$JS.API.STREAM.NAMES", ""),
    step("$JS.API.STREAM.NAMES", r#"{"subject":"logs.a"}"#),
    step("$JS.API.STREAM.NAMES", r#"{"offset":1}"#),
    step("$JS.API.STREAM.LIST", ""),
    // Message get and delete.
    step("$JS.API.STREAM.MSG.GET.ORDERS", r#"{"seq":1}"#),
    step("$JS.API.STREAM.MSG.GET.ORDERS", r#"{"seq":5}"#),
    step("$JS.API.STREAM.MSG.GET.ORDERS", r#"{"last_by_subj":"orders.new"}"#),
    step("$JS.API.STREAM.MSG.GET.ORDERS", r#"{"next_by_subj":"orders.new","seq":2}"#),
    step("$JS.API.STREAM.MSG.GET.ORDERS", r#"{"seq":99}"#),
    step("$JS.API.STREAM.MSG.GET.ORDERS", r#"{"last_by_subj":"orders.none"}"#),
    step("$JS.API.STREAM.MSG.GET.NOPE", r#"{"seq":1}"#),
    step("$JS.API.STREAM.MSG.GET.ORDERS", "{bad"),
    step("$JS.API.STREAM.MSG.DELETE.ORDERS", r#"{"seq":2}"#),
    step("$JS.API.STREAM.MSG.DELETE.ORDERS", r#"{"seq":2}"#),
    step("$JS.API.STREAM.MSG.DELETE.ORDERS", r#"{"seq":99}"#),
    step("$JS.API.STREAM.MSG.GET.ORDERS", r#"{"seq":2}"#),
    step("$JS.API.STREAM.MSG.DELETE.NOPE", r#"{"seq":1}"#),
    // Consumers: create forms, info, names, list and their error cases.
    step(
        "$JS.API.CONSUMER.CREATE.ORDERS.WORKER",
        r#"{"stream_name":"ORDERS","config":{"durable_name":"WORKER","ack_policy":"explicit","filter_subject":"orders.new"}}"#,
    ),
    step(
        "$JS.API.CONSUMER.CREATE.ORDERS.WORKER",
        r#"{"stream_name":"ORDERS","config":{"durable_name":"WORKER","ack_policy":"explicit","filter_subject":"orders.new"}}"#,
    ),
    step(
        "$JS.API.CONSUMER.CREATE.ORDERS.WORKER",
        r#"{"stream_name":"ORDERS","config":{"durable_name":"WORKER","ack_policy":"explicit","filter_subject":"orders.new","max_ack_pending":5,"description":"updated"}}"#,
    ),
    step(
        "$JS.API.CONSUMER.CREATE.ORDERS.WORKER",
        r#"{"stream_name":"ORDERS","config":{"durable_name":"WORKER","ack_policy":"all","filter_subject":"orders.new"}}"#,
    ),
    step(
        "$JS.API.CONSUMER.DURABLE.CREATE.ORDERS.AUDIT",
        r#"{"stream_name":"ORDERS","config":{"durable_name":"AUDIT","ack_policy":"none","deliver_policy":"last"}}"#,
    ),
    step(
        "$JS.API.CONSUMER.DURABLE.CREATE.ORDERS.AUDIT",
        r#"{"stream_name":"ORDERS","config":{"durable_name":"OTHER","ack_policy":"none"}}"#,
    ),
    step("$JS.API.CONSUMER.DURABLE.CREATE.ORDERS.AUDIT", r#"{"stream_name":"ORDERS","config":{"ack_policy":"none"}}"#),
    step("$JS.API.CONSUMER.CREATE.ORDERS.X", r#"{"stream_name":"ORDERS"}"#),
    step("$JS.API.CONSUMER.CREATE.ORDERS.X", ""),
    step("$JS.API.CONSUMER.CREATE.ORDERS.X", "{bad"),
    step("$JS.API.CONSUMER.CREATE.NOPE.X", r#"{"stream_name":"NOPE","config":{"durable_name":"X"}}"#),
    step("$JS.API.CONSUMER.CREATE.ORDERS.X", r#"{"stream_name":"LOGS","config":{"durable_name":"X"}}"#),
    step("$JS.API.CONSUMER.CREATE.ORDERS.X", r#"{"stream_name":"ORDERS","config":{"durable_name":"Y"}}"#),
    step(
        "$JS.API.CONSUMER.CREATE.ORDERS.X",
        r#"{"stream_name":"ORDERS","config":{"name":"X","filter_subject":"logs.a"}}"#,
    ),
    step(
        "$JS.API.CONSUMER.CREATE.ORDERS.X",
        r#"{"stream_name":"ORDERS","config":{"name":"X","deliver_policy":"by_start_sequence"}}"#,
    ),
    step(
        "$JS.API.CONSUMER.CREATE.ORDERS.X",
        r#"{"stream_name":"ORDERS","config":{"name":"X","deliver_policy":"all","opt_start_seq":3}}"#,
    ),
    step(
        "$JS.API.CONSUMER.CREATE.ORDERS.X",
        r#"{"stream_name":"ORDERS","config":{"name":"X","deliver_policy":"last_per_subject"}}"#,
    ),
    step(
        "$JS.API.CONSUMER.CREATE.ORDERS.X",
        r#"{"stream_name":"ORDERS","config":{"name":"X","deliver_subject":"push.*"}}"#,
    ),
    step(
        "$JS.API.CONSUMER.CREATE.ORDERS.X",
        r#"{"stream_name":"ORDERS","config":{"name":"X","idle_heartbeat":1000000000}}"#,
    ),
    step(
        "$JS.API.CONSUMER.CREATE.ORDERS.X",
        r#"{"stream_name":"ORDERS","config":{"name":"X","deliver_subject":"push.x","flow_control":true}}"#,
    ),
    step(
        "$JS.API.CONSUMER.CREATE.ORDERS.X",
        r#"{"stream_name":"ORDERS","config":{"name":"X","deliver_subject":"push.x","max_waiting":4}}"#,
    ),
    step(
        "$JS.API.CONSUMER.CREATE.ORDERS.X",
        r#"{"stream_name":"ORDERS","config":{"name":"X","ack_policy":"explicit","backoff":[1000000000,2000000000],"max_deliver":1}}"#,
    ),
    step("$JS.API.CONSUMER.CREATE.ORDERS.X", r#"{"stream_name":"ORDERS","config":{"name":"X","durable_name":"Z"}}"#),
    step(
        "$JS.API.CONSUMER.CREATE.ORDERS.X.orders.paid",
        r#"{"stream_name":"ORDERS","config":{"name":"X","filter_subject":"orders.new"}}"#,
    ),
    step(
        "$JS.API.CONSUMER.CREATE.ORDERS.PAID.orders.paid",
        r#"{"stream_name":"ORDERS","config":{"name":"PAID","ack_policy":"explicit","filter_subject":"orders.paid","inactive_threshold":60000000000}}"#,
    ),
    step("$JS.API.CONSUMER.INFO.ORDERS.WORKER", ""),
    step("$JS.API.CONSUMER.INFO.ORDERS.NOPE", ""),
    step("$JS.API.CONSUMER.INFO.NOPE.WORKER", ""),
    step("$JS.API.CONSUMER.NAMES.ORDERS", ""),
    step("$JS.API.CONSUMER.NAMES.NOPE", ""),
    step("$JS.API.CONSUMER.LIST.ORDERS", ""),
    // Pull deliveries and acks.
    step("$JS.API.CONSUMER.MSG.NEXT.ORDERS.WORKER", r#"{"batch":1}"#),
    step("$JS.API.CONSUMER.MSG.NEXT.ORDERS.PAID", ""),
    step("$JS.API.CONSUMER.MSG.NEXT.ORDERS.PAID", r#"{"batch":1,"no_wait":true}"#),
    step("$JS.API.CONSUMER.MSG.NEXT.ORDERS.NOPE", r#"{"batch":1,"no_wait":true}"#),
    step("$JS.API.CONSUMER.INFO.ORDERS.WORKER", ""),
    // Purges.
    step("$JS.API.STREAM.PURGE.ORDERS", r#"{"filter":"orders.shipped"}"#),
    step("$JS.API.STREAM.PURGE.ORDERS", r#"{"seq":3,"keep":1}"#),
    step("$JS.API.STREAM.PURGE.ORDERS", r#"{"keep":1}"#),
    step("$JS.API.STREAM.PURGE.NOPE", ""),
    step("$JS.API.STREAM.INFO.ORDERS", ""),
    step("$JS.API.STREAM.PURGE.ORDERS", ""),
    // Deletes.
    step("$JS.API.CONSUMER.DELETE.ORDERS.WORKER", ""),
    step("$JS.API.CONSUMER.DELETE.ORDERS.WORKER", ""),
    step("$JS.API.CONSUMER.DELETE.NOPE.WORKER", ""),
    step("$JS.API.CONSUMER.NAMES.ORDERS", ""),
    step("$JS.API.STREAM.DELETE.LOGS", ""),
    step("$JS.API.STREAM.DELETE.LOGS", ""),
    step("$JS.API.STREAM.NAMES", ""),
    step("$JS.API.STREAM.DELETE.ORDERS", ""),
    step("$JS.API.STREAM.LIST", ""),
];

/// Sends the script to one server and returns each answer as JSON.
async fn run_script(url: String) -> Vec<Value> {
    let client = async_nats::connect(url).await.expect("connect");
    let mut answers = Vec::with_capacity(SCRIPT.len());
    for step in SCRIPT {
        let mut headers = HeaderMap::new();
        for (name, value) in step.headers {
            headers.insert(*name, *value);
        }
        let request = client.request_with_headers(step.subject.to_string(), headers, step.body.to_string().into());
        let answer = match tokio::time::timeout(WAIT, request).await {
            Ok(Ok(reply)) => answer_json(&reply),
            // "no responders" is an answer too (nats-server's for a missing consumer's NEXT).
            Ok(Err(error)) => json!({ "request_error": format!("{:?}", error.kind()) }),
            Err(_) => json!({ "request_error": "timed out" }),
        };
        answers.push(answer);
    }
    answers
}

/// An answer as JSON: API replies are JSON already; deliveries and status messages become an
/// object of their subject, ack subject (split into its tokens), status, headers and body.
fn answer_json(reply: &async_nats::Message) -> Value {
    if reply.status.is_none() && reply.headers.is_none() {
        if let Ok(body) = serde_json::from_slice::<Value>(&reply.payload) {
            if body.is_object() {
                return body;
            }
        }
    }
    let mut answer = json!({ "data": String::from_utf8_lossy(&reply.payload) });
    match reply.status {
        Some(status) => {
            answer["status"] = json!(status.as_u16());
            answer["description"] = json!(reply.description);
        }
        // A status comes on the request's own inbox: only a delivery's subject is compared.
        None => answer["subject"] = json!(reply.subject.as_str()),
    }
    if let Some(headers) = &reply.headers {
        let map: BTreeMap<String, String> = headers
            .iter()
            .map(|(name, values)| (name.to_string(), values.iter().map(|v| v.as_str()).collect()))
            .collect();
        answer["headers"] = json!(map);
    }
    if let Some(ack) = &reply.reply {
        let tokens: Vec<&str> = ack.split('.').collect();
        if let ["$JS", "ACK", stream, consumer, deliveries, stream_seq, consumer_seq, timestamp, pending] =
            tokens.as_slice()
        {
            answer["reply"] = json!({
                "stream": stream, "consumer": consumer, "deliveries": deliveries, "stream_seq": stream_seq,
                "consumer_seq": consumer_seq, "timestamp": timestamp, "pending": pending,
            });
        } else {
            answer["reply"] = json!(ack.as_str());
        }
    }
    answer
}

/// Whether `path` (dot-separated) matches `pattern`, where `*` is any one segment.
fn path_matches(pattern: &str, path: &str) -> bool {
    let pattern: Vec<&str> = pattern.split('.').collect();
    let path: Vec<&str> = path.split('.').collect();
    pattern.len() == path.len() && pattern.iter().zip(&path).all(|(p, s)| *p == "*" || p == s)
}

/// Where two answers differ: (path, nats-server's value, SemaQ's value), `Null` for absent.
fn differences(path: &str, nats: &Value, semaq: &Value, out: &mut Vec<(String, Value, Value)>) {
    let child = |key: &str| if path.is_empty() { key.to_string() } else { format!("{path}.{key}") };
    if MASKED.iter().any(|masked| path_matches(masked, path)) && !nats.is_null() && !semaq.is_null() {
        return;
    }
    match (nats, semaq) {
        (Value::Object(a), Value::Object(b)) => {
            for key in a.keys().chain(b.keys().filter(|k| !a.contains_key(*k))) {
                let (x, y) = (a.get(key).unwrap_or(&Value::Null), b.get(key).unwrap_or(&Value::Null));
                differences(&child(key), x, y, out);
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (index, (x, y)) in a.iter().zip(b).enumerate() {
                differences(&child(&index.to_string()), x, y, out);
            }
        }
        _ if nats == semaq => {}
        _ => out.push((path.to_string(), nats.clone(), semaq.clone())),
    }
}

/// Whether a difference is one `EXPLAINED` or `EXPLAINED_VALUES` lists, or an invalid JSON error
/// whose detail differs: 2.10+ append the decoder's message ("invalid JSON: <err>", 2.9 says
/// only "invalid JSON"), and Go's decoder words its messages unlike serde's.
fn explained(path: &str, nats: &Value, semaq: &Value) -> bool {
    let invalid_json = |v: &Value| v.as_str().is_some_and(|text| text.starts_with("invalid JSON"));
    if path == "error.description" && invalid_json(nats) && invalid_json(semaq) {
        return true;
    }
    let both = !nats.is_null() && !semaq.is_null();
    if both && EXPLAINED_VALUES.iter().any(|(pattern, _)| path_matches(pattern, path)) {
        return true;
    }
    EXPLAINED.iter().any(|(pattern, only, _)| {
        path_matches(pattern, path)
            && match only {
                Only::Semaq => nats.is_null(),
                Only::Nats => semaq.is_null(),
            }
    })
}

#[tokio::test]
async fn jetstream_api_answers_match_nats_server_2_9_field_by_field() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = dir.path().display().to_string();
    let nats = NatsServer::with_args(&["-js", "-sd", &store]);
    let semaq = SemaqServer::start();
    let (reference, ours) = tokio::join!(run_script(nats.url()), run_script(semaq.url()));
    assert!(SCRIPT.len() >= 60, "the script covers at least 60 requests");

    let (mut unexplained, mut explained_count) = (Vec::new(), 0);
    for (index, (step, (nats_answer, semaq_answer))) in SCRIPT.iter().zip(reference.iter().zip(&ours)).enumerate() {
        if EXPLAINED_STEPS.iter().any(|(explained, _)| *explained == index) {
            explained_count += 1;
            continue;
        }
        let mut found = Vec::new();
        differences("", nats_answer, semaq_answer, &mut found);
        for (path, nats_value, semaq_value) in found {
            let at = EXPLAINED_AT.iter().any(|(step, explained, _)| *step == index && *explained == path);
            if at || explained(&path, &nats_value, &semaq_value) {
                explained_count += 1;
            } else {
                unexplained.push(format!(
                    "#{index} {} {}\n    {path}: nats-server {nats_value} | semaq {semaq_value}",
                    step.subject, step.body
                ));
            }
        }
    }
    println!(
        "conformance: {} requests, {explained_count} explained and {} unexplained differences",
        SCRIPT.len(),
        unexplained.len()
    );
    assert!(unexplained.is_empty(), "{} unexplained differences:\n{}", unexplained.len(), unexplained.join("\n"));
}
