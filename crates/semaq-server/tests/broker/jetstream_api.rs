//! The JetStream stream API, pinned to nats-server's behaviour: what async-nats' `jetstream`
//! module sees, and the exact JSON (`code`, `err_code`, `description`, paging fields) for
//! clients that read the raw API. Error numbers are nats-server's `server/errors.json`.

use std::time::{Duration, Instant};

use async_nats::jetstream::{self, stream};
use async_nats::HeaderMap;
use futures::{StreamExt, TryStreamExt};
use semaq_testkit::{wait_until_async, SemaqServer};
use serde_json::{json, Value};

// ---------------------------------------------------------------------------------------------
// Helpers shared with `jetstream_consumers`.

/// Bound on any single wait in these tests.
pub(crate) const WAIT: Duration = Duration::from_secs(5);

pub(crate) async fn context(server: &SemaqServer) -> jetstream::Context {
    jetstream::new(server.client().await)
}

pub(crate) fn stream_config(name: &str, subjects: &[&str]) -> stream::Config {
    stream::Config {
        name: name.to_string(),
        subjects: subjects.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

/// Sends a raw JetStream API request and parses the JSON reply.
pub(crate) async fn api(client: &async_nats::Client, subject: &str, body: &str) -> Value {
    let reply = tokio::time::timeout(WAIT, client.request(subject.to_string(), body.to_string().into()))
        .await
        .unwrap_or_else(|_| panic!("{subject}: no reply within {WAIT:?}"))
        .unwrap_or_else(|error| panic!("{subject}: {error}"));
    serde_json::from_slice(&reply.payload)
        .unwrap_or_else(|error| panic!("{subject}: reply is not JSON ({error}): {:?}", reply.payload))
}

/// Asserts `body` is an API error with nats-server's `code` and `err_code` and a description.
#[track_caller]
pub(crate) fn assert_api_error(body: &Value, code: u64, err_code: u64) {
    let error = &body["error"];
    assert_eq!(error["code"], code, "code of {body}");
    assert_eq!(error["err_code"], err_code, "err_code of {body}");
    assert!(error["description"].as_str().is_some_and(|d| !d.is_empty()), "description of {body}");
    assert!(body["type"].as_str().is_some_and(|t| t.starts_with("io.nats.jetstream.api.v1.")), "type of {body}");
}

pub(crate) async fn stream_info(js: &jetstream::Context, name: &str) -> stream::Info {
    js.get_stream(name).await.unwrap_or_else(|error| panic!("stream {name}: {error}")).cached_info().clone()
}

/// Publishes and waits for the PubAck; returns the stream sequence.
pub(crate) async fn publish(js: &jetstream::Context, subject: &str, payload: &str) -> u64 {
    js.publish(subject.to_string(), payload.to_string().into())
        .await
        .expect("publish")
        .await
        .unwrap_or_else(|error| panic!("publish to {subject}: {error}"))
        .sequence
}

/// Publishes through a plain request (headers optional) and returns the raw PubAck JSON.
pub(crate) async fn publish_raw(
    client: &async_nats::Client,
    subject: &str,
    headers: &[(&str, &str)],
    payload: &[u8],
) -> Value {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        map.insert(*name, *value);
    }
    let request = client.request_with_headers(subject.to_string(), map, bytes::Bytes::copy_from_slice(payload));
    let reply = tokio::time::timeout(WAIT, request).await.expect("PubAck in time").expect("PubAck");
    serde_json::from_slice(&reply.payload).expect("PubAck JSON")
}

async fn names(client: &async_nats::Client) -> Value {
    api(client, "$JS.API.STREAM.NAMES", "").await
}

// ---------------------------------------------------------------------------------------------
// Create, info, update, delete, names, list.

#[tokio::test]
async fn stream_create_info_update_delete_round_trip() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let created = js
        .create_stream(stream::Config { description: Some("first".into()), ..stream_config("ROUND", &["round.>"]) })
        .await
        .expect("create");
    let config = &created.cached_info().config;
    assert_eq!(config.name, "ROUND");
    assert_eq!(config.subjects, vec!["round.>".to_string()]);
    assert_eq!(config.storage, stream::StorageType::File);
    assert_eq!(config.num_replicas, 1);
    assert_eq!(config.duplicate_window, Duration::from_secs(120), "nats-server's default duplicate window");
    assert_eq!(config.max_messages, -1);
    assert_eq!(config.max_bytes, -1);
    assert_eq!(config.max_messages_per_subject, -1);
    assert_eq!(config.max_message_size, -1);
    assert_eq!(created.cached_info().state.messages, 0);

    publish(&js, "round.a", "1").await;
    let updated = js
        .update_stream(stream::Config {
            description: Some("second".into()),
            max_messages: 100,
            ..stream_config("ROUND", &["round.>", "other.round"])
        })
        .await
        .expect("update");
    assert_eq!(updated.config.description.as_deref(), Some("second"));
    assert_eq!(updated.config.max_messages, 100);
    assert_eq!(updated.state.messages, 1, "an update keeps the messages");
    // The added subject is captured.
    assert_eq!(publish(&js, "other.round", "2").await, 2);
    let info = stream_info(&js, "ROUND").await;
    assert_eq!(info.config.description.as_deref(), Some("second"));
    assert_eq!(info.state.messages, 2);

    assert!(js.delete_stream("ROUND").await.expect("delete").success);
    let body = api(&js.client(), "$JS.API.STREAM.INFO.ROUND", "").await;
    assert_api_error(&body, 404, 10059);
    // Its subjects are no longer captured: a JetStream publish finds no stream.
    let outcome = js.publish("round.a", "3".into()).await.expect("publish").await;
    assert!(outcome.is_err(), "publish after delete: {outcome:?}");
}

#[tokio::test]
async fn stream_names_and_list_page_with_total_offset_and_limit() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let client = js.client();
    for name in ["CHARLIE", "ALPHA", "BRAVO"] {
        let subject = format!("{}.>", name.to_lowercase());
        js.create_stream(stream_config(name, &[subject.as_str()])).await.expect("create");
    }
    let page = names(&client).await;
    assert_eq!(page["type"], "io.nats.jetstream.api.v1.stream_names_response");
    assert_eq!(page["total"], 3);
    assert_eq!(page["offset"], 0);
    assert_eq!(page["limit"], 1024, "nats-server's JSApiNamesLimit");
    assert_eq!(page["streams"], json!(["ALPHA", "BRAVO", "CHARLIE"]), "names come sorted");

    let page = api(&client, "$JS.API.STREAM.NAMES", r#"{"offset":2}"#).await;
    assert_eq!(page["total"], 3);
    assert_eq!(page["offset"], 2);
    assert_eq!(page["streams"], json!(["CHARLIE"]));

    let page = api(&client, "$JS.API.STREAM.NAMES", r#"{"subject":"bravo.x"}"#).await;
    assert_eq!(page["total"], 1, "filtered by subject: {page}");
    assert_eq!(page["streams"], json!(["BRAVO"]));

    let list = api(&client, "$JS.API.STREAM.LIST", "").await;
    assert_eq!(list["type"], "io.nats.jetstream.api.v1.stream_list_response");
    assert_eq!(list["total"], 3);
    assert_eq!(list["offset"], 0);
    assert_eq!(list["limit"], 256, "nats-server's JSApiListLimit");
    let listed: Vec<&str> =
        list["streams"].as_array().unwrap().iter().map(|s| s["config"]["name"].as_str().unwrap()).collect();
    assert_eq!(listed, ["ALPHA", "BRAVO", "CHARLIE"]);
    assert!(list["streams"][0]["state"]["messages"].is_u64());
    assert!(list["streams"][0]["created"].is_string());

    let list = api(&client, "$JS.API.STREAM.LIST", r#"{"offset":1}"#).await;
    assert_eq!(list["offset"], 1);
    assert_eq!(list["streams"].as_array().unwrap().len(), 2);

    // async-nats pages through both.
    let mut from_client: Vec<String> = js.stream_names().try_collect().await.expect("names");
    from_client.sort();
    assert_eq!(from_client, ["ALPHA", "BRAVO", "CHARLIE"]);
    let infos: Vec<stream::Info> = js.streams().try_collect().await.expect("list");
    assert_eq!(infos.len(), 3);
}

#[tokio::test]
async fn stream_names_offset_past_the_end_is_clamped_to_the_total() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    js.create_stream(stream_config("ONLY", &["only"])).await.expect("create");
    let page = api(&js.client(), "$JS.API.STREAM.NAMES", r#"{"offset":10}"#).await;
    assert_eq!(page["total"], 1);
    assert!(page["streams"].as_array().is_none_or(|names| names.is_empty()), "{page}");
    // nats-server: `if offset > numStreams { offset = numStreams }` (jsStreamNamesRequest).
    assert_eq!(page["offset"], 1, "offset is clamped to the total: {page}");
}

#[tokio::test]
async fn creating_the_same_stream_twice_is_idempotent_but_a_different_config_is_10058() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let client = js.client();
    js.create_stream(stream_config("TWICE", &["twice.>"])).await.expect("first create");
    publish(&js, "twice.a", "kept").await;
    let again = js.create_stream(stream_config("TWICE", &["twice.>"])).await.expect("same config again");
    assert_eq!(again.cached_info().state.messages, 1, "the existing stream is returned untouched");

    let body =
        api(&client, "$JS.API.STREAM.CREATE.TWICE", r#"{"name":"TWICE","subjects":["twice.>"],"max_msgs":5}"#).await;
    assert_api_error(&body, 400, 10058);
    assert_eq!(body["error"]["description"], "stream name already in use with a different configuration");
    let info = stream_info(&js, "TWICE").await;
    assert_eq!(info.config.max_messages, -1, "the refused create changed nothing");
    assert_eq!(info.state.messages, 1);
}

#[tokio::test]
async fn update_cannot_change_storage_type_or_retention_to_workqueue() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let client = js.client();
    js.create_stream(stream_config("FIXED", &["fixed"])).await.expect("create");
    publish(&js, "fixed", "1").await;

    let body =
        api(&client, "$JS.API.STREAM.UPDATE.FIXED", r#"{"name":"FIXED","subjects":["fixed"],"storage":"memory"}"#)
            .await;
    // nats-server: NewJSStreamInvalidConfigError("stream configuration update can not change storage type").
    assert_api_error(&body, 500, 10052);
    assert_eq!(body["error"]["description"], "stream configuration update can not change storage type");

    let error = js
        .update_stream(stream::Config { storage: stream::StorageType::Memory, ..stream_config("FIXED", &["fixed"]) })
        .await
        .expect_err("async-nats sees the refusal");
    assert!(error.to_string().contains("storage type"), "{error}");

    let body =
        api(&client, "$JS.API.STREAM.UPDATE.FIXED", r#"{"name":"FIXED","subjects":["fixed"],"retention":"workqueue"}"#)
            .await;
    assert_api_error(&body, 500, 10052);
    assert!(body["error"]["description"].as_str().unwrap().contains("retention policy"), "{body}");

    let info = stream_info(&js, "FIXED").await;
    assert_eq!(info.config.storage, stream::StorageType::File);
    assert_eq!(info.config.retention, stream::RetentionPolicy::Limits);
    assert_eq!(info.state.messages, 1);
}

#[tokio::test]
async fn update_of_an_unknown_stream_is_10059() {
    let server = SemaqServer::start();
    let client = server.client().await;
    let body = api(&client, "$JS.API.STREAM.UPDATE.GHOST", r#"{"name":"GHOST","subjects":["ghost"]}"#).await;
    assert_api_error(&body, 404, 10059);
    assert_eq!(names(&client).await["total"], 0);
}

#[tokio::test]
async fn update_lowering_max_msgs_drops_the_oldest_at_once() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    js.create_stream(stream_config("SHRINK", &["shrink"])).await.expect("create");
    for i in 1..=10 {
        publish(&js, "shrink", &i.to_string()).await;
    }
    let info = js
        .update_stream(stream::Config { max_messages: 3, ..stream_config("SHRINK", &["shrink"]) })
        .await
        .expect("update");
    assert_eq!(info.state.messages, 3);
    assert_eq!(info.state.first_sequence, 8);
    assert_eq!(info.state.last_sequence, 10);
}

// ---------------------------------------------------------------------------------------------
// Purge.

/// Publishes `a b a b a b a b a b` to `purge.<x>`: a = odd sequences, b = even, 1..=10.
async fn purge_fixture(js: &jetstream::Context) -> stream::Stream {
    let stream = js.create_stream(stream_config("PURGE", &["purge.>"])).await.expect("create");
    for i in 1..=10 {
        let subject = if i % 2 == 1 { "purge.a" } else { "purge.b" };
        publish(js, subject, &i.to_string()).await;
    }
    stream
}

#[tokio::test]
async fn purge_all_reports_the_count_and_keeps_the_sequence() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let stream = purge_fixture(&js).await;
    let response = stream.purge().await.expect("purge");
    assert!(response.success);
    assert_eq!(response.purged, 10);
    let info = stream_info(&js, "PURGE").await;
    assert_eq!(info.state.messages, 0);
    assert_eq!(info.state.bytes, 0);
    assert_eq!(info.state.first_sequence, 11, "first_seq moves past the purged messages");
    assert_eq!(info.state.last_sequence, 10);
    assert_eq!(publish(&js, "purge.a", "next").await, 11, "sequences continue");
}

#[tokio::test]
async fn purge_by_subject_removes_only_that_subject() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let stream = purge_fixture(&js).await;
    let response = stream.purge().filter("purge.a").await.expect("purge");
    assert_eq!(response.purged, 5);
    let info = stream_info(&js, "PURGE").await;
    assert_eq!(info.state.messages, 5);
    assert_eq!(info.state.first_sequence, 2);
    assert_eq!(info.state.last_sequence, 10);
    let last_a = stream.get_last_raw_message_by_subject("purge.a").await;
    assert!(last_a.is_err(), "no purge.a left: {last_a:?}");
    assert_eq!(stream.get_last_raw_message_by_subject("purge.b").await.expect("b").sequence, 10);
}

#[tokio::test]
async fn purge_keep_leaves_the_newest_messages() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let stream = purge_fixture(&js).await;
    let response = stream.purge().keep(3).await.expect("purge");
    assert_eq!(response.purged, 7);
    let info = stream_info(&js, "PURGE").await;
    assert_eq!(info.state.messages, 3);
    assert_eq!(info.state.first_sequence, 8);

    // With a filter, keep counts that subject only.
    let response = stream.purge().filter("purge.b").keep(1).await.expect("filtered keep");
    assert_eq!(response.purged, 1, "purge.b had 8 and 10; 10 is kept");
    let info = stream_info(&js, "PURGE").await;
    assert_eq!(info.state.messages, 2);
    assert_eq!(stream.get_raw_message(9).await.expect("9 kept").payload, "9");
    assert_eq!(stream.get_raw_message(10).await.expect("10 kept").payload, "10");
}

#[tokio::test]
async fn purge_up_to_sequence_removes_everything_below_it() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let stream = purge_fixture(&js).await;
    let response = stream.purge().sequence(4).await.expect("purge");
    assert_eq!(response.purged, 3, "`seq` is exclusive: 1, 2 and 3 go");
    let info = stream_info(&js, "PURGE").await;
    assert_eq!(info.state.messages, 7);
    assert_eq!(info.state.first_sequence, 4);

    let body = api(&js.client(), "$JS.API.STREAM.PURGE.PURGE", r#"{"seq":8,"keep":1}"#).await;
    assert_api_error(&body, 400, 10003);
    assert_eq!(stream_info(&js, "PURGE").await.state.messages, 7, "seq with keep is refused and purges nothing");
}

// ---------------------------------------------------------------------------------------------
// Message get and delete.

#[tokio::test]
async fn message_get_by_sequence_and_last_by_subject_returns_headers_and_payload() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let stream = js.create_stream(stream_config("GET", &["get.>"])).await.expect("create");
    publish(&js, "get.a", "a1").await;
    let mut headers = HeaderMap::new();
    headers.insert("X-Trace", "t-42");
    js.publish_with_headers("get.b", headers, "b1".into()).await.unwrap().await.unwrap();
    publish(&js, "get.a", "a2").await;

    let message = stream.get_raw_message(2).await.expect("get 2");
    assert_eq!(message.sequence, 2);
    assert_eq!(message.subject.as_str(), "get.b");
    assert_eq!(message.payload, "b1");
    assert_eq!(message.headers.get("X-Trace").map(|v| v.as_str()), Some("t-42"));

    let last = stream.get_last_raw_message_by_subject("get.a").await.expect("last get.a");
    assert_eq!(last.sequence, 3);
    assert_eq!(last.payload, "a2");

    let body = api(&js.client(), "$JS.API.STREAM.MSG.GET.GET", r#"{"last_by_subj":"get.b"}"#).await;
    assert_eq!(body["type"], "io.nats.jetstream.api.v1.stream_msg_get_response");
    assert_eq!(body["message"]["seq"], 2);
    assert_eq!(body["message"]["subject"], "get.b");
    assert_eq!(body["message"]["data"], "YjE=", "payload in base64");
    assert!(body["message"]["hdrs"].is_string());
    assert!(body["message"]["time"].is_string());

    let body = api(&js.client(), "$JS.API.STREAM.MSG.GET.GET", r#"{"seq":99}"#).await;
    assert_api_error(&body, 404, 10037);
    let body = api(&js.client(), "$JS.API.STREAM.MSG.GET.GET", r#"{"last_by_subj":"get.none"}"#).await;
    assert_api_error(&body, 404, 10037);
}

#[tokio::test]
async fn deleted_message_is_gone_and_getting_it_is_10037() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let stream = js.create_stream(stream_config("DEL", &["del"])).await.expect("create");
    for i in 1..=5 {
        publish(&js, "del", &i.to_string()).await;
    }
    assert!(stream.delete_message(3).await.expect("delete 3"));
    let info = stream_info(&js, "DEL").await;
    assert_eq!(info.state.messages, 4);
    assert_eq!(info.state.deleted_count, Some(1), "num_deleted counts the hole");
    assert_eq!(info.state.first_sequence, 1);
    assert_eq!(info.state.last_sequence, 5);

    let body = api(&js.client(), "$JS.API.STREAM.MSG.GET.DEL", r#"{"seq":3}"#).await;
    assert_api_error(&body, 404, 10037);
    assert_eq!(body["error"]["description"], "no message found");
    assert!(stream.get_raw_message(3).await.is_err());
    assert_eq!(stream.get_raw_message(4).await.expect("neighbour intact").payload, "4");

    // Deleting it again is an error and changes nothing.
    let body = api(&js.client(), "$JS.API.STREAM.MSG.DELETE.DEL", r#"{"seq":3}"#).await;
    assert!(body["error"]["err_code"].is_u64(), "second delete: {body}");
    assert_eq!(stream_info(&js, "DEL").await.state.messages, 4);

    // Deleting the first message moves first_seq.
    assert!(stream.delete_message(1).await.expect("delete 1"));
    assert_eq!(stream_info(&js, "DEL").await.state.first_sequence, 2);
}

#[tokio::test]
async fn deleting_a_missing_message_says_why() {
    // nats-server (jsMsgDeleteRequest): a sequence already deleted is JSSequenceNotFoundErrF,
    // one past the last is the store's error wrapped in JSStreamMsgDeleteFailedF.
    let server = SemaqServer::start();
    let js = context(&server).await;
    let client = js.client();
    js.create_stream(stream_config("MISSING", &["missing"])).await.expect("create");
    publish_n(&js, "missing", 5).await;
    let body = api(&client, "$JS.API.STREAM.MSG.DELETE.MISSING", r#"{"seq":3}"#).await;
    assert_eq!(body["success"], true, "{body}");
    let body = api(&client, "$JS.API.STREAM.MSG.DELETE.MISSING", r#"{"seq":3}"#).await;
    assert_api_error(&body, 400, 10043);
    assert_eq!(body["error"]["description"], "sequence 3 not found");
    let body = api(&client, "$JS.API.STREAM.MSG.DELETE.MISSING", r#"{"seq":9}"#).await;
    assert_api_error(&body, 500, 10057);
    assert_eq!(stream_info(&js, "MISSING").await.state.messages, 4);
}

pub(crate) async fn publish_n(js: &jetstream::Context, subject: &str, n: usize) {
    for i in 1..=n {
        publish(js, subject, &i.to_string()).await;
    }
}

// ---------------------------------------------------------------------------------------------
// Publish expectations.

#[tokio::test]
async fn expected_last_subject_sequence_guards_each_subject() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let client = js.client();
    js.create_stream(stream_config("SUBSEQ", &["subseq.>"])).await.expect("create");
    const HEADER: &str = "Nats-Expected-Last-Subject-Sequence";

    // No message on the subject yet: 0 is the expected value.
    let ack = publish_raw(&client, "subseq.a", &[(HEADER, "0")], b"a1").await;
    assert_eq!(ack["seq"], 1, "{ack}");
    publish(&js, "subseq.b", "b1").await; // seq 2
    let ack = publish_raw(&client, "subseq.a", &[(HEADER, "1")], b"a2").await;
    assert_eq!(ack["seq"], 3, "last on subseq.a was 1, whatever the stream's last: {ack}");

    let ack = publish_raw(&client, "subseq.a", &[(HEADER, "1")], b"stale").await;
    assert_eq!(ack["error"]["err_code"], 10071, "{ack}");
    assert_eq!(ack["error"]["description"], "wrong last sequence: 3");
    let ack = publish_raw(&client, "subseq.b", &[(HEADER, "0")], b"stale").await;
    assert_eq!(ack["error"]["description"], "wrong last sequence: 2", "{ack}");

    let info = stream_info(&js, "SUBSEQ").await;
    assert_eq!(info.state.messages, 3, "refused publishes are not stored");
    assert_eq!(info.state.last_sequence, 3);
}

#[tokio::test]
async fn expected_last_msg_id_must_match_the_last_stored_msg_id() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let client = js.client();
    js.create_stream(stream_config("LASTID", &["lastid"])).await.expect("create");
    const EXPECT: &str = "Nats-Expected-Last-Msg-Id";

    let ack = publish_raw(&client, "lastid", &[("Nats-Msg-Id", "one")], b"1").await;
    assert_eq!(ack["seq"], 1);
    let ack = publish_raw(&client, "lastid", &[("Nats-Msg-Id", "two"), (EXPECT, "one")], b"2").await;
    assert_eq!(ack["seq"], 2, "{ack}");
    let ack = publish_raw(&client, "lastid", &[("Nats-Msg-Id", "three"), (EXPECT, "one")], b"3").await;
    assert_eq!(ack["error"]["err_code"], 10070, "{ack}");
    assert_eq!(ack["error"]["description"], "wrong last msg ID: two");
    assert_eq!(stream_info(&js, "LASTID").await.state.messages, 2);

    // Through async-nats the refusal is a publish error.
    let mut headers = HeaderMap::new();
    headers.insert(EXPECT, "nope");
    let error = js.publish_with_headers("lastid", headers, "4".into()).await.unwrap().await.unwrap_err();
    assert!(error.to_string().contains("wrong last"), "{error}");
}

#[tokio::test]
async fn a_message_without_msg_id_resets_the_last_msg_id() {
    // nats-server sets `mset.lmsgId = msgId` for every stored message, so after a message
    // without Nats-Msg-Id the last msg id is "" and expecting the older id fails.
    let server = SemaqServer::start();
    let js = context(&server).await;
    let client = js.client();
    js.create_stream(stream_config("RESETID", &["resetid"])).await.expect("create");
    publish_raw(&client, "resetid", &[("Nats-Msg-Id", "one")], b"1").await;
    publish(&js, "resetid", "no id").await;
    let ack = publish_raw(&client, "resetid", &[("Nats-Expected-Last-Msg-Id", "one")], b"3").await;
    assert_eq!(ack["error"]["err_code"], 10070, "last stored message had no id: {ack}");
    assert_eq!(ack["error"]["description"], "wrong last msg ID: ");
    assert_eq!(stream_info(&js, "RESETID").await.state.messages, 2);
}

// ---------------------------------------------------------------------------------------------
// Limits.

#[tokio::test]
async fn max_msgs_with_discard_old_keeps_the_newest() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let stream =
        js.create_stream(stream::Config { max_messages: 5, ..stream_config("OLD", &["old"]) }).await.expect("create");
    for i in 1..=12 {
        assert_eq!(publish(&js, "old", &i.to_string()).await, i, "every publish is accepted");
    }
    let info = stream_info(&js, "OLD").await;
    assert_eq!(info.state.messages, 5);
    assert_eq!(info.state.first_sequence, 8);
    assert_eq!(info.state.last_sequence, 12);
    assert_eq!(stream.get_raw_message(8).await.expect("8").payload, "8");
    assert!(stream.get_raw_message(7).await.is_err(), "7 was discarded");
}

#[tokio::test]
async fn max_msgs_with_discard_new_refuses_with_maximum_messages_exceeded() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let client = js.client();
    js.create_stream(stream::Config {
        max_messages: 3,
        discard: stream::DiscardPolicy::New,
        ..stream_config("NEW", &["new"])
    })
    .await
    .expect("create");
    for i in 1..=3 {
        publish(&js, "new", &i.to_string()).await;
    }
    let error = js.publish("new", "4".into()).await.unwrap().await.expect_err("stream is full");
    assert!(error.to_string().contains("maximum messages exceeded"), "{error}");
    let ack = publish_raw(&client, "new", &[], b"5").await;
    assert_eq!(ack["error"]["code"], 503, "{ack}");
    assert_eq!(ack["error"]["err_code"], 10077);
    assert_eq!(ack["error"]["description"], "maximum messages exceeded");
    let info = stream_info(&js, "NEW").await;
    assert_eq!(info.state.messages, 3);
    assert_eq!(info.state.first_sequence, 1, "the old messages stay");
    assert_eq!(info.state.last_sequence, 3);
}

#[tokio::test]
async fn max_bytes_with_discard_old_stays_under_the_limit() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    js.create_stream(stream::Config { max_bytes: 1000, ..stream_config("BYTES", &["bytes"]) }).await.expect("create");
    let payload = "x".repeat(100);
    for _ in 0..20 {
        publish(&js, "bytes", &payload).await;
    }
    let info = stream_info(&js, "BYTES").await;
    assert!(info.state.bytes <= 1000, "bytes {} over max_bytes", info.state.bytes);
    // Each message costs its payload plus per-message overhead; nats-server keeps 7 here.
    assert!((5..=9).contains(&info.state.messages), "messages {}", info.state.messages);
    assert_eq!(info.state.last_sequence, 20);
    assert_eq!(info.state.first_sequence, 20 - info.state.messages + 1, "the newest are kept");
}

#[tokio::test]
async fn max_bytes_with_discard_new_refuses_with_maximum_bytes_exceeded() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let client = js.client();
    js.create_stream(stream::Config {
        max_bytes: 1000,
        discard: stream::DiscardPolicy::New,
        ..stream_config("BYTESNEW", &["bytesnew"])
    })
    .await
    .expect("create");
    let payload = vec![b'x'; 100];
    let mut stored = 0;
    let mut refusal = None;
    for _ in 0..20 {
        let ack = publish_raw(&client, "bytesnew", &[], &payload).await;
        if ack["error"].is_object() {
            refusal = Some(ack);
            break;
        }
        stored += 1;
    }
    let refusal = refusal.expect("a publish is refused once the stream is full");
    assert_eq!(refusal["error"]["err_code"], 10077, "{refusal}");
    assert_eq!(refusal["error"]["description"], "maximum bytes exceeded");
    let info = stream_info(&js, "BYTESNEW").await;
    assert_eq!(info.state.messages, stored);
    assert_eq!(info.state.first_sequence, 1);
    assert!(info.state.bytes <= 1000);
}

#[tokio::test]
async fn max_msgs_per_subject_keeps_the_newest_of_each_subject() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let stream = js
        .create_stream(stream::Config { max_messages_per_subject: 2, ..stream_config("PERSUBJ", &["per.>"]) })
        .await
        .expect("create");
    for i in 1..=5 {
        publish(&js, "per.a", &format!("a{i}")).await; // odd sequences 1,3,5,7,9
        publish(&js, "per.b", &format!("b{i}")).await; // even sequences
    }
    publish(&js, "per.c", "c1").await; // 11
    let info = stream_info(&js, "PERSUBJ").await;
    assert_eq!(info.state.messages, 5);
    assert_eq!(info.state.first_sequence, 7);
    assert_eq!(stream.get_raw_message(7).await.expect("7").payload, "a4");
    assert_eq!(stream.get_raw_message(9).await.expect("9").payload, "a5");
    assert!(stream.get_raw_message(5).await.is_err(), "a3 was dropped");
    assert_eq!(stream.get_last_raw_message_by_subject("per.c").await.expect("c").sequence, 11);
}

#[tokio::test]
async fn max_msg_size_refuses_larger_messages_with_10054() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let client = js.client();
    js.create_stream(stream::Config { max_message_size: 64, ..stream_config("SIZE", &["size"]) })
        .await
        .expect("create");
    let ack = publish_raw(&client, "size", &[], &[b'x'; 64]).await;
    assert_eq!(ack["seq"], 1, "exactly max_msg_size is accepted: {ack}");
    let ack = publish_raw(&client, "size", &[], &[b'x'; 65]).await;
    assert_eq!(ack["error"]["code"], 400, "{ack}");
    assert_eq!(ack["error"]["err_code"], 10054);
    assert_eq!(ack["error"]["description"], "message size exceeds maximum allowed");
    // Headers count towards the size.
    let ack = publish_raw(&client, "size", &[("X-Pad", "padding")], &[b'x'; 60]).await;
    assert_eq!(ack["error"]["err_code"], 10054, "{ack}");
    let error = js.publish("size", vec![b'x'; 100].into()).await.unwrap().await.unwrap_err();
    assert!(error.to_string().contains("message size exceeds maximum allowed"), "{error}");
    assert_eq!(stream_info(&js, "SIZE").await.state.messages, 1);
}

#[tokio::test]
async fn max_age_expires_messages_without_further_activity() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    js.create_stream(stream::Config { max_age: Duration::from_secs(1), ..stream_config("AGE", &["age"]) })
        .await
        .expect("create");
    let info = stream_info(&js, "AGE").await;
    assert_eq!(info.config.max_age, Duration::from_secs(1));
    assert_eq!(info.config.duplicate_window, Duration::from_secs(1), "duplicate window is capped by max_age");
    for i in 0..3 {
        publish(&js, "age", &i.to_string()).await;
    }
    let published = Instant::now();
    assert_eq!(stream_info(&js, "AGE").await.state.messages, 3);
    // Nothing else happens on the stream: the server must expire on its own.
    wait_until_async("messages older than max_age removed", Duration::from_secs(3), || async {
        stream_info(&js, "AGE").await.state.messages == 0
    })
    .await;
    assert!(published.elapsed() >= Duration::from_millis(900), "not removed before max_age");
    let info = stream_info(&js, "AGE").await;
    assert_eq!(info.state.first_sequence, 4);
    assert_eq!(info.state.last_sequence, 3);
}

#[tokio::test]
async fn memory_stream_stores_reads_and_reports_memory_usage() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let stream = js
        .create_stream(stream::Config { storage: stream::StorageType::Memory, ..stream_config("MEM", &["mem.>"]) })
        .await
        .expect("create");
    assert_eq!(stream.cached_info().config.storage, stream::StorageType::Memory);
    for i in 1..=5 {
        publish(&js, "mem.x", &i.to_string()).await;
    }
    assert_eq!(stream.get_raw_message(4).await.expect("get").payload, "4");
    let info = stream_info(&js, "MEM").await;
    assert_eq!(info.state.messages, 5);
    assert!(info.state.bytes > 0);
    let account = js.query_account().await.expect("account");
    assert!(account.memory > 0, "memory usage counts the memory stream: {account:?}");
    assert_eq!(account.storage, 0, "no file storage used");
    assert_eq!(stream.purge().await.expect("purge").purged, 5);
}

// ---------------------------------------------------------------------------------------------
// Stream info with subject details.

#[tokio::test]
async fn stream_info_subjects_filter_reports_per_subject_counts() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let stream = js.create_stream(stream_config("SUBJ", &["subj.>"])).await.expect("create");
    for (subject, count) in [("subj.a", 3), ("subj.b", 1), ("subj.c.x", 2)] {
        for _ in 0..count {
            publish(&js, subject, "x").await;
        }
    }
    let mut counts: Vec<(String, usize)> =
        stream.info_with_subjects("subj.*").await.expect("info").try_collect().await.expect("subjects");
    counts.sort();
    assert_eq!(counts, [("subj.a".to_string(), 3), ("subj.b".to_string(), 1)]);

    let body = api(&js.client(), "$JS.API.STREAM.INFO.SUBJ", r#"{"subjects_filter":">"}"#).await;
    assert_eq!(body["state"]["subjects"], json!({"subj.a": 3, "subj.b": 1, "subj.c.x": 2}), "{body}");
    assert_eq!(body["state"]["num_subjects"], 3);
    // nats-server pages subject details and says so.
    assert_eq!(body["total"], 3, "{body}");
    assert_eq!(body["offset"], 0);
    assert!(body["limit"].as_u64().is_some_and(|limit| limit > 0), "{body}");

    let info = stream_info(&js, "SUBJ").await;
    assert_eq!(info.state.subjects_count, 3);
}

#[tokio::test]
async fn stream_info_without_subjects_filter_has_no_subject_details() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    js.create_stream(stream_config("NOSUBJ", &["nosubj.>"])).await.expect("create");
    publish(&js, "nosubj.a", "x").await;
    // async-nats' `info_builder().fetch()` sends `"subjects_filter": ""`; nats-server only adds
    // details when the filter is not empty.
    for body in ["", "{}", r#"{"subjects_filter":""}"#] {
        let info = api(&js.client(), "$JS.API.STREAM.INFO.NOSUBJ", body).await;
        assert!(info["state"]["subjects"].is_null(), "request {body:?}: {info}");
        assert_eq!(info["state"]["messages"], 1);
    }
}

// ---------------------------------------------------------------------------------------------
// Malformed requests.

#[tokio::test]
async fn malformed_stream_requests_get_error_json_and_change_nothing() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let client = js.client();
    js.create_stream(stream_config("KEEP", &["keep.>"])).await.expect("create");
    publish(&js, "keep.a", "1").await;

    let cases: &[(&str, &str, u64, u64)] = &[
        // Bad JSON and wrong types: JSInvalidJSONErr.
        ("$JS.API.STREAM.CREATE.NEW", "{not json", 400, 10025),
        ("$JS.API.STREAM.CREATE.NEW", r#"{"name":"NEW","subjects":"new.>"}"#, 400, 10025),
        ("$JS.API.STREAM.CREATE.NEW", r#"{"name":"NEW","subjects":["new"],"max_msgs":"lots"}"#, 400, 10025),
        ("$JS.API.STREAM.CREATE.NEW", r#"{"name":"NEW","subjects":["new"],"storage":"tape"}"#, 400, 10025),
        ("$JS.API.STREAM.UPDATE.KEEP", "[1,2", 400, 10025),
        ("$JS.API.STREAM.PURGE.KEEP", r#"{"keep":"all"}"#, 400, 10025),
        ("$JS.API.STREAM.MSG.GET.KEEP", r#"{"seq":"one"}"#, 400, 10025),
        // The name in the subject and in the body differ: JSStreamMismatchErr.
        ("$JS.API.STREAM.CREATE.NEW", r#"{"name":"OTHER","subjects":["new"]}"#, 400, 10056),
        // Invalid names: JSStreamInvalidConfigF (`isValidAssetName`).
        ("$JS.API.STREAM.CREATE.bad*name", r#"{"name":"bad*name","subjects":["bad"]}"#, 500, 10052),
        ("$JS.API.STREAM.CREATE.bad>", r#"{"name":"bad>","subjects":["bad"]}"#, 500, 10052),
        // Invalid subjects and overlaps.
        ("$JS.API.STREAM.CREATE.NEW", r#"{"name":"NEW","subjects":["new..x"]}"#, 500, 10052),
        ("$JS.API.STREAM.CREATE.NEW", r#"{"name":"NEW","subjects":["keep.a"]}"#, 400, 10065),
        // Replicas in a single server: JSStreamReplicasNotSupportedErr.
        ("$JS.API.STREAM.CREATE.NEW", r#"{"name":"NEW","subjects":["new"],"num_replicas":3}"#, 500, 10074),
        // Unknown streams: JSStreamNotFoundErr.
        ("$JS.API.STREAM.INFO.NOPE", "", 404, 10059),
        ("$JS.API.STREAM.DELETE.NOPE", "", 404, 10059),
        ("$JS.API.STREAM.PURGE.NOPE", "", 404, 10059),
        ("$JS.API.STREAM.MSG.GET.NOPE", r#"{"seq":1}"#, 404, 10059),
        ("$JS.API.STREAM.MSG.DELETE.NOPE", r#"{"seq":1}"#, 404, 10059),
        ("$JS.API.CONSUMER.NAMES.NOPE", "", 404, 10059),
        ("$JS.API.CONSUMER.CREATE.NOPE.c", r#"{"stream_name":"NOPE","config":{"name":"c"}}"#, 404, 10059),
        // Unknown consumers: JSConsumerNotFoundErr.
        ("$JS.API.CONSUMER.INFO.KEEP.nobody", "", 404, 10014),
        ("$JS.API.CONSUMER.DELETE.KEEP.nobody", "", 404, 10014),
    ];
    let mut mismatches = Vec::new();
    for (subject, body, code, err_code) in cases {
        let reply = api(&client, subject, body).await;
        let error = &reply["error"];
        let codes_ok = (error["code"].as_u64(), error["err_code"].as_u64()) == (Some(*code), Some(*err_code));
        let described = error["description"].as_str().is_some_and(|d| !d.is_empty());
        if !(codes_ok && described) {
            mismatches.push(format!("{subject} {body}\n  expected code {code} err_code {err_code}, got {reply}"));
        }
    }
    assert!(mismatches.is_empty(), "{} mismatches:\n{}", mismatches.len(), mismatches.join("\n"));

    let page = names(&client).await;
    assert_eq!(page["total"], 1, "{page}");
    assert_eq!(page["streams"], json!(["KEEP"]));
    let list = api(&client, "$JS.API.STREAM.LIST", "").await;
    assert_eq!(list["total"], 1);
    let info = stream_info(&js, "KEEP").await;
    assert_eq!(info.state.messages, 1);
    assert_eq!(info.state.consumer_count, 0);
    assert_eq!(info.config.subjects, vec!["keep.>".to_string()]);
}

#[tokio::test]
async fn stream_create_body_without_a_name_is_a_mismatch_10056() {
    // nats-server compares the subject's name with `cfg.Name` as sent: an empty name differs.
    let server = SemaqServer::start();
    let client = server.client().await;
    let body = api(&client, "$JS.API.STREAM.CREATE.NONAME", r#"{"subjects":["noname"]}"#).await;
    assert_api_error(&body, 400, 10056);
    assert_eq!(names(&client).await["total"], 0);
}

#[tokio::test]
async fn async_nats_refuses_invalid_names_before_asking_the_server() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    assert!(js.create_stream(stream_config("a.b", &["ab"])).await.is_err());
    assert!(js.get_stream("NOPE").await.is_err());
    let Err(error) = js.delete_stream("NOPE").await else { panic!("deleting an unknown stream succeeded") };
    assert!(error.to_string().contains("stream not found"), "{error}");
    let names: Vec<String> = js.stream_names().try_collect().await.expect("names");
    assert!(names.is_empty());
    assert_eq!(js.streams().count().await, 0);
}
