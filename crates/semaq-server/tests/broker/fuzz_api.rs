//! End-to-end fuzzing of the request APIs: a real server receives a few hundred random bodies
//! on every `$JS.API` request kind (and on the schema registry's REST routes) and must answer
//! each one with JSON (an error JSON with a code and description when the body is bad) and
//! stay up. The parsers themselves are fuzzed as a library in `tests/fuzz_inputs.rs`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};

use proptest::prelude::*;
use proptest::test_runner::{TestCaseError, TestRunner};
use semaq_testkit::SemaqServer;
use serde_json::{json, Value};

use crate::jetstream_api::WAIT;

/// Request kinds whose replies are JSON: the subject after `$JS.API.` and a valid body to mutate.
const JSON_KINDS: &[(&str, &str)] = &[
    ("INFO", ""),
    ("STREAM.CREATE.FZ2", r#"{"name":"FZ2","subjects":["fz2.>"],"storage":"memory"}"#),
    ("STREAM.UPDATE.FZ", r#"{"name":"FZ","subjects":["fz.>"],"max_msgs":1000}"#),
    ("STREAM.INFO.FZ", r#"{"subjects_filter":"fz.>","offset":0}"#),
    ("STREAM.LIST", r#"{"offset":0,"subject":"fz.a"}"#),
    ("STREAM.NAMES", r#"{"offset":0,"subject":"fz.a"}"#),
    ("STREAM.DELETE.FZ2", ""),
    ("STREAM.PURGE.FZ", r#"{"filter":"fz.a","keep":2}"#),
    ("STREAM.MSG.GET.FZ", r#"{"seq":1}"#),
    ("STREAM.MSG.DELETE.FZ", r#"{"seq":2,"no_erase":true}"#),
    ("CONSUMER.CREATE.FZ", r#"{"stream_name":"FZ","config":{"ack_policy":"explicit","deliver_policy":"all"}}"#),
    (
        "CONSUMER.CREATE.FZ.D.fz.a",
        r#"{"stream_name":"FZ","config":{"name":"D","filter_subject":"fz.a","ack_policy":"explicit"},"action":"create"}"#,
    ),
    ("CONSUMER.DURABLE.CREATE.FZ.E", r#"{"stream_name":"FZ","config":{"durable_name":"E","ack_policy":"none"}}"#),
    ("CONSUMER.INFO.FZ.C", ""),
    ("CONSUMER.LIST.FZ", r#"{"offset":0}"#),
    ("CONSUMER.NAMES.FZ", r#"{"offset":0}"#),
    ("CONSUMER.DELETE.FZ.D", ""),
    ("CONSUMER.PAUSE.FZ.C", r#"{"pause_until":"2099-01-01T00:00:00Z"}"#),
    ("CONSUMER.UNPIN.FZ.C", r#"{"group":"g"}"#),
];

/// Request kinds answered with messages (or not at all): the server must only stay up.
const OTHER_KINDS: &[(&str, &str)] = &[
    ("CONSUMER.MSG.NEXT.FZ.C", r#"{"batch":2,"expires":100000000,"no_wait":true}"#),
    ("DIRECT.GET.FZ", r#"{"last_by_subj":"fz.a"}"#),
    ("DIRECT.GET.FZ.fz.a", ""),
];

/// One request: which kind, and the body sent.
#[derive(Debug, Clone)]
enum Case {
    Json {
        kind: usize,
        body: Vec<u8>,
    },
    Other {
        kind: usize,
        body: Vec<u8>,
    },
    /// An API subject no handler knows.
    Unknown {
        tail: String,
        body: Vec<u8>,
    },
    /// A JetStream publish to the stream (its PubAck is JSON too).
    Publish {
        body: Vec<u8>,
        msg_id: Option<String>,
    },
}

/// Any JSON value, a few levels deep, with the keys and values API bodies use.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        prop_oneof![Just(-1i64), Just(0), Just(1), Just(i64::MAX), any::<i64>()].prop_map(Value::from),
        prop_oneof![Just(u64::MAX), any::<u64>()].prop_map(Value::from),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from),
        prop_oneof![
            "[a-z.*>]{0,8}",
            Just("FZ".to_string()),
            Just("memory".to_string()),
            Just("explicit".to_string()),
            Just("by_start_time".to_string()),
            any::<String>()
        ]
        .prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map(key(), inner, 0..5).prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

fn key() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "name",
        "subjects",
        "storage",
        "max_msgs",
        "max_bytes",
        "max_age",
        "retention",
        "discard",
        "mirror",
        "sources",
        "config",
        "stream_name",
        "action",
        "durable_name",
        "ack_policy",
        "deliver_policy",
        "opt_start_seq",
        "opt_start_time",
        "filter_subject",
        "filter_subjects",
        "max_deliver",
        "backoff",
        "priority_groups",
        "priority_policy",
        "pause_until",
        "seq",
        "keep",
        "filter",
        "offset",
        "subject",
        "subjects_filter",
        "last_by_subj",
        "next_by_subj",
        "batch",
        "expires",
        "no_wait",
        "max_bytes",
        "group",
        "id",
        "no_erase",
        "allow_direct",
        "ack_wait",
        "max_ack_pending",
    ])
    .prop_map(str::to_string)
}

/// Mutates a valid body: one key set to a random value, or bytes cut, or noise appended.
fn mutated(valid: &'static str) -> impl Strategy<Value = Vec<u8>> {
    let as_object = serde_json::from_str::<Value>(valid).unwrap_or_else(|_| json!({}));
    prop_oneof![
        (key(), json_value()).prop_map(move |(key, value)| {
            let mut body = as_object.clone();
            body[key] = value;
            body.to_string().into_bytes()
        }),
        (0..valid.len().max(1)).prop_map(move |cut| valid.as_bytes()[..cut.min(valid.len())].to_vec()),
        prop::collection::vec(any::<u8>(), 1..8).prop_map(move |noise| [valid.as_bytes(), &noise].concat()),
    ]
}

fn body_for(valid: &'static str) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        2 => mutated(valid),
        1 => json_value().prop_map(|value| value.to_string().into_bytes()),
        1 => prop::collection::vec(any::<u8>(), 0..48),
    ]
}

fn case() -> impl Strategy<Value = Case> {
    let json_kinds = prop::sample::select((0..JSON_KINDS.len()).collect::<Vec<_>>())
        .prop_flat_map(|kind| body_for(JSON_KINDS[kind].1).prop_map(move |body| Case::Json { kind, body }));
    let other_kinds = prop::sample::select((0..OTHER_KINDS.len()).collect::<Vec<_>>())
        .prop_flat_map(|kind| body_for(OTHER_KINDS[kind].1).prop_map(move |body| Case::Other { kind, body }));
    prop_oneof![
        12 => json_kinds,
        2 => other_kinds,
        1 => ("[A-Z]{1,8}(\\.[A-Za-z0-9]{1,6}){0,3}", prop::collection::vec(any::<u8>(), 0..16))
            .prop_map(|(tail, body)| Case::Unknown { tail, body }),
        2 => (prop::collection::vec(any::<u8>(), 0..32), prop::option::of("[a-z0-9]{1,4}"))
            .prop_map(|(body, msg_id)| Case::Publish { body, msg_id }),
    ]
}

async fn request(client: &async_nats::Client, subject: String, body: Vec<u8>) -> Result<Value, TestCaseError> {
    let reply = tokio::time::timeout(WAIT, client.request(subject.clone(), body.into()))
        .await
        .map_err(|_| TestCaseError::fail(format!("{subject}: no reply within {WAIT:?}")))?
        .map_err(|error| TestCaseError::fail(format!("{subject}: {error}")))?;
    serde_json::from_slice(&reply.payload)
        .map_err(|error| TestCaseError::fail(format!("{subject}: reply is not JSON ({error}): {:?}", reply.payload)))
}

/// An answer is an object; an error in it has a numeric code and err_code and a description.
fn check_answer(subject: &str, answer: &Value) -> Result<(), TestCaseError> {
    prop_assert!(answer.is_object(), "{}: {}", subject, answer);
    if let Some(error) = answer.get("error") {
        prop_assert!(error["code"].as_u64().is_some_and(|code| (400..600).contains(&code)), "{}: {}", subject, answer);
        prop_assert!(error["err_code"].as_u64().is_some(), "{}: {}", subject, answer);
        prop_assert!(error["description"].as_str().is_some_and(|text| !text.is_empty()), "{}: {}", subject, answer);
    }
    Ok(())
}

async fn run_case(client: &async_nats::Client, case: Case) -> Result<(), TestCaseError> {
    match case {
        Case::Json { kind, body } => {
            let subject = format!("$JS.API.{}", JSON_KINDS[kind].0);
            let answer = request(client, subject.clone(), body).await?;
            check_answer(&subject, &answer)
        }
        Case::Unknown { tail, body } => {
            let subject = format!("$JS.API.{tail}");
            let answer = request(client, subject.clone(), body).await?;
            check_answer(&subject, &answer)
        }
        Case::Other { kind, body } => {
            let subject = format!("$JS.API.{}", OTHER_KINDS[kind].0);
            let inbox = client.new_inbox();
            client
                .publish_with_reply(subject, inbox, body.into())
                .await
                .map_err(|error| TestCaseError::fail(error.to_string()))?;
            Ok(())
        }
        Case::Publish { body, msg_id } => {
            let mut headers = async_nats::HeaderMap::new();
            if let Some(id) = msg_id {
                headers.insert("Nats-Msg-Id", id.as_str());
            }
            let inbox = client.new_inbox();
            let mut replies = client.subscribe(inbox.clone()).await.map_err(|e| TestCaseError::fail(e.to_string()))?;
            client
                .publish_with_reply_and_headers("fz.a", inbox, headers, body.into())
                .await
                .map_err(|error| TestCaseError::fail(error.to_string()))?;
            let reply = tokio::time::timeout(WAIT, futures::StreamExt::next(&mut replies))
                .await
                .map_err(|_| TestCaseError::fail("publish: no PubAck"))?
                .ok_or_else(|| TestCaseError::fail("publish: subscription closed"))?;
            // A random STREAM.UPDATE may have moved FZ off `fz.>`: then nothing listens on fz.a
            // and the server answers as nats-server does, with a 503 no-responders status.
            if reply.status == Some(async_nats::StatusCode::NO_RESPONDERS) {
                return Ok(());
            }
            let answer: Value = serde_json::from_slice(&reply.payload)
                .map_err(|error| TestCaseError::fail(format!("PubAck is not JSON ({error}): {:?}", reply.payload)))?;
            check_answer("fz.a", &answer)
        }
    }
}

async fn setup(client: &async_nats::Client) {
    let created = crate::jetstream_api::api(
        client,
        "$JS.API.STREAM.CREATE.FZ",
        r#"{"name":"FZ","subjects":["fz.>"],"storage":"file","allow_direct":true}"#,
    )
    .await;
    assert!(created.get("error").is_none(), "{created}");
    for index in 0..5 {
        client.request(format!("fz.{}", ["a", "b"][index % 2]), "m".into()).await.unwrap();
    }
    let consumer = crate::jetstream_api::api(
        client,
        "$JS.API.CONSUMER.DURABLE.CREATE.FZ.C",
        r#"{"stream_name":"FZ","config":{"durable_name":"C","ack_policy":"explicit"}}"#,
    )
    .await;
    assert!(consumer.get("error").is_none(), "{consumer}");
}

#[test]
fn every_api_request_kind_answers_random_bodies_with_json_and_the_server_stays_up() {
    let server = SemaqServer::start();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let client = runtime.block_on(async {
        let client = server.client().await;
        setup(&client).await;
        client
    });
    let config =
        ProptestConfig { cases: 300, failure_persistence: None, max_shrink_iters: 64, ..ProptestConfig::default() };
    let mut runner = TestRunner::new(config);
    let result = runner.run(&case(), |case| runtime.block_on(run_case(&client, case)));
    if let Err(failure) = result {
        panic!("{failure}\nserver log:\n{}", server.log_text());
    }
    runtime.block_on(async {
        let info = crate::jetstream_api::api(&client, "$JS.API.INFO", "").await;
        assert!(info.get("error").is_none(), "{info}");
        client.flush().await.unwrap();
    });
}

/// The registry's routes that take a body, with a valid body each.
const REGISTRY_ROUTES: &[(&str, &str, &str)] = &[
    ("POST", "/subjects/fz-value/versions", r#"{"schema":"{\"type\":\"string\"}"}"#),
    ("POST", "/subjects/fz-value", r#"{"schema":"{\"type\":\"string\"}"}"#),
    ("POST", "/compatibility/subjects/fz-value/versions/latest", r#"{"schema":"{\"type\":\"string\"}"}"#),
    ("POST", "/compatibility/subjects/fz-value/versions", r#"{"schemaType":"JSON","schema":"{}"}"#),
    ("PUT", "/config/fz-value", r#"{"compatibility":"FULL"}"#),
    ("PUT", "/config", r#"{"compatibility":"BACKWARD"}"#),
    ("PUT", "/mode/fz-value", r#"{"mode":"READWRITE"}"#),
];

/// One HTTP/1.1 request over a fresh connection: the status and the body.
fn http(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> Result<(u16, String), TestCaseError> {
    let fail = |error: std::io::Error| TestCaseError::fail(format!("{method} {path}: {error}"));
    let mut stream = TcpStream::connect(addr).map_err(fail)?;
    stream.set_read_timeout(Some(WAIT)).map_err(fail)?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: fuzz\r\nContent-Type: application/vnd.schemaregistry.v1+json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).and_then(|()| stream.write_all(body)).map_err(fail)?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).map_err(fail)?;
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text.split(' ').nth(1).and_then(|code| code.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, body)| body.to_string()).unwrap_or_default();
    Ok((status, body))
}

#[test]
fn the_registry_answers_random_bodies_with_a_status_and_an_error_json() {
    let server = SemaqServer::start();
    let routes = prop::sample::select((0..REGISTRY_ROUTES.len()).collect::<Vec<_>>());
    let cases = routes.prop_flat_map(|route| body_for(REGISTRY_ROUTES[route].2).prop_map(move |body| (route, body)));
    let config =
        ProptestConfig { cases: 150, failure_persistence: None, max_shrink_iters: 64, ..ProptestConfig::default() };
    let result = TestRunner::new(config).run(&cases, |(route, body)| {
        let (method, path, _) = REGISTRY_ROUTES[route];
        let (status, text) = http(server.http_addr(), method, path, &body)?;
        prop_assert!((200..600).contains(&status), "{} {}: status {}", method, path, status);
        if status >= 400 && status != 415 {
            let answer: Value = serde_json::from_str(&text).map_err(|error| {
                TestCaseError::fail(format!("{method} {path}: {status} {text:?} is not JSON: {error}"))
            })?;
            prop_assert!(answer["error_code"].as_u64().is_some(), "{} {}: {}", method, path, answer);
            prop_assert!(answer["message"].as_str().is_some_and(|m| !m.is_empty()), "{} {}: {}", method, path, answer);
        }
        Ok(())
    });
    if let Err(failure) = result {
        panic!("{failure}\nserver log:\n{}", server.log_text());
    }
    let (status, _) = http(server.http_addr(), "GET", "/subjects", b"").unwrap();
    assert_eq!(status, 200, "the registry still answers");
}

/// SemaQ's own request APIs (schema registry over NATS, filtered subscriptions, lineage,
/// provenance, the chain pages) with a valid body each.
const SEMAQ_KINDS: &[(&str, &str)] = &[
    ("SCHEMA.REGISTER", r#"{"subject":"fz","schema":"{\"type\":\"string\"}"}"#),
    ("SCHEMA.CHECK", r#"{"subject":"fz","schema":"{\"type\":\"int\"}"}"#),
    ("SCHEMA.LOOKUP", r#"{"subject":"fz","schema":"{\"type\":\"string\"}"}"#),
    ("SCHEMA.GET", r#"{"subject":"fz","version":"latest"}"#),
    ("SCHEMA.VERSIONS", r#"{"subject":"fz"}"#),
    ("SCHEMA.SUBJECTS", r#"{"subjectPrefix":"f"}"#),
    ("SCHEMA.ID", r#"{"id":1}"#),
    ("SCHEMA.USES", r#"{"id":1}"#),
    ("SCHEMA.SCHEMAS", r#"{"latestOnly":true}"#),
    ("SCHEMA.REFERENCEDBY", r#"{"subject":"fz"}"#),
    ("SCHEMA.CONFIG", r#"{"subject":"fz","compatibility":"FULL"}"#),
    ("SCHEMA.MODE", r#"{"subject":"fz","mode":"READWRITE"}"#),
    ("SCHEMA.DELETE", r#"{"subject":"gone","version":"1"}"#),
    ("SUB.CREATE", r#"{"subject":"fz.>","filter":"size(payload) > 1","deliver_subject":"_INBOX.fz"}"#),
    ("LINEAGE.FZ.1", r#"{"depth":3}"#),
    ("STREAM.PROVENANCE.FZ", r#"{"offset":0}"#),
];

#[test]
fn semaq_request_apis_answer_random_bodies_with_json() {
    let server = SemaqServer::start();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let client = runtime.block_on(async {
        let client = server.client().await;
        setup(&client).await;
        client
    });
    let kinds = prop::sample::select((0..SEMAQ_KINDS.len()).collect::<Vec<_>>());
    let cases = kinds.prop_flat_map(|kind| body_for(SEMAQ_KINDS[kind].1).prop_map(move |body| (kind, body)));
    let config =
        ProptestConfig { cases: 200, failure_persistence: None, max_shrink_iters: 64, ..ProptestConfig::default() };
    let result = TestRunner::new(config).run(&cases, |(kind, body)| {
        let subject = format!("$SEMAQ.API.{}", SEMAQ_KINDS[kind].0);
        let answer = runtime.block_on(request(&client, subject.clone(), body))?;
        // Registry answers are arrays or objects, errors `{"error_code", "message"}`; the others
        // are objects, errors `{"error": {"code", "description"}}`.
        prop_assert!(answer.is_object() || answer.is_array(), "{}: {}", subject, answer);
        if let Some(code) = answer.get("error_code") {
            prop_assert!(code.as_u64().is_some(), "{}: {}", subject, answer);
            prop_assert!(answer["message"].as_str().is_some_and(|m| !m.is_empty()), "{}: {}", subject, answer);
        }
        if let Some(error) = answer.get("error") {
            prop_assert!(error["description"].as_str().is_some_and(|d| !d.is_empty()), "{}: {}", subject, answer);
        }
        Ok(())
    });
    if let Err(failure) = result {
        panic!("{failure}\nserver log:\n{}", server.log_text());
    }
}

/// Every file of a store directory, by path relative to it.
fn store_files(root: &std::path::Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut files = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                let bytes = std::fs::read(&path).unwrap();
                files.push((path.strip_prefix(root).unwrap().to_path_buf(), bytes));
            }
        }
    }
    files.sort();
    files
}

/// A damage to one file: bits flipped, cut short, replaced by JSON of another shape, or emptied.
fn file_damage() -> impl Strategy<Value = (prop::sample::Index, u8, usize, Vec<u8>)> {
    (
        any::<prop::sample::Index>(),
        0u8..4,
        any::<usize>(),
        json_value().prop_map(|value| value.to_string().into_bytes()),
    )
}

fn damage_file(bytes: &mut Vec<u8>, (kind, at, json): (u8, usize, Vec<u8>)) {
    let length = bytes.len().max(1);
    match kind {
        0 => {
            if let Some(byte) = bytes.get_mut(at % length) {
                *byte ^= 0x5a;
            }
        }
        1 => bytes.truncate(at % length),
        2 => *bytes = json,
        _ => bytes.clear(),
    }
}

/// A store whose stream, consumer and message files were damaged on disk: the server starts on
/// it (reporting what it could not read) and answers every API request with JSON.
#[test]
fn a_server_on_a_damaged_store_starts_and_answers() {
    let fixture = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let mut server = SemaqServer::builder().store(fixture.path()).start();
    runtime.block_on(async {
        let client = server.client().await;
        setup(&client).await;
    });
    server.terminate();
    let files = store_files(fixture.path());
    assert!(files.iter().any(|(path, _)| path.extension().is_some_and(|e| e == "json")), "{files:?}");
    let config =
        ProptestConfig { cases: 12, failure_persistence: None, max_shrink_iters: 16, ..ProptestConfig::default() };
    let damages = prop::collection::vec(file_damage(), 1..3);
    let result = TestRunner::new(config).run(&damages, |damages| {
        let store = tempfile::tempdir().unwrap();
        let mut files = files.clone();
        for (which, kind, at, json) in damages {
            let position = which.index(files.len());
            damage_file(&mut files[position].1, (kind, at, json));
        }
        for (path, bytes) in &files {
            let path = store.path().join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, bytes).unwrap();
        }
        let server = SemaqServer::builder().store(store.path()).start();
        runtime.block_on(async {
            let client = server.client().await;
            for (subject, body) in [
                ("$JS.API.INFO", ""),
                ("$JS.API.STREAM.LIST", ""),
                ("$JS.API.STREAM.INFO.FZ", ""),
                ("$JS.API.CONSUMER.INFO.FZ.C", ""),
                ("$JS.API.STREAM.MSG.GET.FZ", r#"{"seq":2}"#),
            ] {
                let answer = request(&client, subject.to_string(), body.as_bytes().to_vec()).await?;
                check_answer(subject, &answer)?;
            }
            Ok(())
        })
    });
    if let Err(failure) = result {
        panic!("{failure}");
    }
}
