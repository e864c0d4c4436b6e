//! JetStream consumers through async-nats, pinned to nats-server's behaviour: creation (new and
//! legacy API subjects), deliver and ack policies, redelivery (NAK delay, +WPI, +TERM,
//! max_deliver, backoff), flow limits, pull status replies, push delivery, retention policies,
//! restarts and ephemeral cleanup.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use async_nats::jetstream::consumer::{self, pull, push, AckPolicy, DeliverPolicy, PullConsumer, PushConsumer};
use async_nats::jetstream::{self, stream, AckKind};
use futures::{StreamExt, TryStreamExt};
use semaq_testkit::{wait_until_async, SemaqServer};

use crate::jetstream_api::{api, assert_api_error, context, publish, publish_n, stream_config, WAIT};

// ---------------------------------------------------------------------------------------------
// Helpers.

fn durable(name: &str) -> pull::Config {
    pull::Config { durable_name: Some(name.to_string()), ..Default::default() }
}

async fn pull_consumer(stream: &stream::Stream, config: pull::Config) -> PullConsumer {
    stream.create_consumer(config).await.unwrap_or_else(|error| panic!("create consumer: {error}"))
}

/// One pull request for up to `max` messages that waits up to `expires`; returns what came
/// before the request ended (408 / 404 / 409 end it, as in async-nats).
async fn receive(consumer: &PullConsumer, max: usize, expires: Duration) -> Vec<jetstream::Message> {
    let mut batch = consumer.batch().max_messages(max).expires(expires).messages().await.expect("pull request");
    let mut received = Vec::new();
    let deadline = tokio::time::Instant::now() + expires + Duration::from_secs(2);
    while let Ok(Some(Ok(message))) = tokio::time::timeout_at(deadline, batch.next()).await {
        received.push(message);
        if received.len() == max {
            break;
        }
    }
    received
}

/// Receives exactly one message within `within`.
async fn receive_one(consumer: &PullConsumer, within: Duration) -> jetstream::Message {
    receive(consumer, 1, within).await.pop().unwrap_or_else(|| panic!("no message within {within:?}"))
}

fn stream_seq(message: &jetstream::Message) -> u64 {
    message.info().expect("ack subject").stream_sequence
}

fn deliveries(message: &jetstream::Message) -> i64 {
    message.info().expect("ack subject").delivered
}

fn seqs(messages: &[jetstream::Message]) -> Vec<u64> {
    messages.iter().map(stream_seq).collect()
}

async fn info(consumer: &mut PullConsumer) -> consumer::Info {
    consumer.info().await.expect("consumer info").clone()
}

async fn stream_messages(js: &jetstream::Context, name: &str) -> u64 {
    crate::jetstream_api::stream_info(js, name).await.state.messages
}

/// A stream `name` on `subject` holding `count` copies of `payload`, published without acks.
async fn filled_stream(
    js: &jetstream::Context,
    (name, subject): (&str, &str),
    count: usize,
    payload: bytes::Bytes,
) -> stream::Stream {
    let stream = js.create_stream(stream_config(name, &[subject])).await.unwrap();
    let client = js.client();
    for _ in 0..count {
        client.publish(subject.to_string(), payload.clone()).await.unwrap();
    }
    client.flush().await.unwrap();
    wait_until_async("all stored", WAIT, || async { stream_messages(js, name).await == count as u64 }).await;
    stream
}

// ---------------------------------------------------------------------------------------------
// Creating, listing and deleting consumers.

#[tokio::test]
async fn durable_pull_consumer_is_created_listed_and_deleted() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let stream = js.create_stream(stream_config("CRUD", &["crud.>"])).await.unwrap();
    publish_n(&js, "crud.a", 3).await;
    let mut consumer = pull_consumer(&stream, durable("worker")).await;
    let created = info(&mut consumer).await;
    assert_eq!(created.name, "worker");
    assert_eq!(created.stream_name, "CRUD");
    assert_eq!(created.config.durable_name.as_deref(), Some("worker"));
    assert_eq!(created.config.ack_policy, AckPolicy::Explicit);
    assert_eq!(created.config.ack_wait, Duration::from_secs(30), "nats-server's default ack wait");
    assert_eq!(created.config.max_ack_pending, 1000, "nats-server's default max ack pending");
    assert_eq!(created.config.max_waiting, 512, "nats-server's default max waiting");
    assert_eq!(created.num_pending, 3);
    assert_eq!(created.delivered.stream_sequence, 0);

    // Creating again with the same config is idempotent.
    pull_consumer(&stream, durable("worker")).await;
    pull_consumer(&stream, durable("other")).await;
    let mut names: Vec<String> = stream.consumer_names().try_collect().await.expect("names");
    names.sort();
    assert_eq!(names, ["other", "worker"]);
    let infos: Vec<consumer::Info> = stream.consumers().try_collect().await.expect("list");
    assert_eq!(infos.len(), 2);
    let page = api(&js.client(), "$JS.API.CONSUMER.NAMES.CRUD", "").await;
    assert_eq!(page["total"], 2, "{page}");
    assert_eq!(page["offset"], 0);
    assert_eq!(page["limit"], 1024);
    let list = api(&js.client(), "$JS.API.CONSUMER.LIST.CRUD", "").await;
    assert_eq!(list["total"], 2, "{list}");
    assert_eq!(list["limit"], 256);
    assert_eq!(crate::jetstream_api::stream_info(&js, "CRUD").await.state.consumer_count, 2);

    assert!(stream.delete_consumer("worker").await.expect("delete").success);
    let body = api(&js.client(), "$JS.API.CONSUMER.INFO.CRUD.worker", "").await;
    assert_api_error(&body, 404, 10014);
    let names: Vec<String> = stream.consumer_names().try_collect().await.expect("names");
    assert_eq!(names, ["other"]);
}

#[tokio::test]
async fn changing_a_consumer_with_action_create_is_10148() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let stream = js.create_stream(stream_config("STRICT", &["strict"])).await.unwrap();
    pull_consumer(&stream, durable("c")).await;
    let error = stream
        .create_consumer_strict(pull::Config { max_deliver: 5, ..durable("c") })
        .await
        .expect_err("a different config with action create");
    assert!(error.to_string().contains("consumer already exists"), "{error}");
}

#[tokio::test]
async fn legacy_durable_create_subject_creates_a_durable() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let stream = js.create_stream(stream_config("LEGACY", &["legacy"])).await.unwrap();
    publish_n(&js, "legacy", 2).await;
    let body = api(
        &js.client(),
        "$JS.API.CONSUMER.DURABLE.CREATE.LEGACY.worker",
        r#"{"stream_name":"LEGACY","config":{"durable_name":"worker","ack_policy":"explicit"}}"#,
    )
    .await;
    assert_eq!(body["type"], "io.nats.jetstream.api.v1.consumer_create_response", "{body}");
    assert_eq!(body["name"], "worker");
    assert_eq!(body["config"]["durable_name"], "worker");
    assert_eq!(body["num_pending"], 2);
    let consumer: PullConsumer = stream.get_consumer("worker").await.expect("get");
    let messages = receive(&consumer, 2, Duration::from_secs(1)).await;
    assert_eq!(seqs(&messages), [1, 2]);
}

#[tokio::test]
async fn legacy_durable_create_without_durable_name_in_config_is_10018() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    js.create_stream(stream_config("LEGNAME", &["legname"])).await.unwrap();
    let body = api(
        &js.client(),
        "$JS.API.CONSUMER.DURABLE.CREATE.LEGNAME.worker",
        r#"{"stream_name":"LEGNAME","config":{"ack_policy":"explicit"}}"#,
    )
    .await;
    assert_api_error(&body, 400, 10018);
    let body = api(
        &js.client(),
        "$JS.API.CONSUMER.DURABLE.CREATE.LEGNAME.worker",
        r#"{"stream_name":"LEGNAME","config":{"durable_name":"other","ack_policy":"explicit"}}"#,
    )
    .await;
    assert_api_error(&body, 400, 10017);
    let names = api(&js.client(), "$JS.API.CONSUMER.NAMES.LEGNAME", "").await;
    assert_eq!(names["total"], 0, "{names}");
}

#[tokio::test]
async fn legacy_ephemeral_create_subject_generates_a_name() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let stream = js.create_stream(stream_config("EPHEM", &["ephem"])).await.unwrap();
    publish_n(&js, "ephem", 3).await;
    let body = api(
        &js.client(),
        "$JS.API.CONSUMER.CREATE.EPHEM",
        r#"{"stream_name":"EPHEM","config":{"ack_policy":"explicit","deliver_policy":"all"}}"#,
    )
    .await;
    assert_eq!(body["type"], "io.nats.jetstream.api.v1.consumer_create_response", "{body}");
    let name = body["name"].as_str().expect("generated name").to_string();
    assert!(!name.is_empty());
    assert!(body["config"]["durable_name"].is_null(), "ephemeral: {body}");
    let consumer: PullConsumer = stream.get_consumer(&name).await.expect("get by generated name");
    assert_eq!(seqs(&receive(&consumer, 3, Duration::from_secs(1)).await), [1, 2, 3]);
}

#[tokio::test]
async fn legacy_ephemeral_create_with_a_durable_name_is_10020() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    js.create_stream(stream_config("EPHDUR", &["ephdur"])).await.unwrap();
    let body = api(
        &js.client(),
        "$JS.API.CONSUMER.CREATE.EPHDUR",
        r#"{"stream_name":"EPHDUR","config":{"durable_name":"sneaky","ack_policy":"explicit"}}"#,
    )
    .await;
    assert_api_error(&body, 400, 10020);
    let names = api(&js.client(), "$JS.API.CONSUMER.NAMES.EPHDUR", "").await;
    assert_eq!(names["total"], 0, "{names}");
}

#[tokio::test]
async fn consumer_create_naming_another_stream_in_the_body_is_10056() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    js.create_stream(stream_config("MINE", &["mine"])).await.unwrap();
    let body = api(
        &js.client(),
        "$JS.API.CONSUMER.CREATE.MINE.c",
        r#"{"stream_name":"THEIRS","config":{"name":"c","ack_policy":"explicit"}}"#,
    )
    .await;
    assert_api_error(&body, 400, 10056);
    let body = api(
        &js.client(),
        "$JS.API.CONSUMER.CREATE.MINE.c",
        r#"{"stream_name":"MINE","config":{"durable_name":"d","ack_policy":"explicit"}}"#,
    )
    .await;
    assert_api_error(&body, 400, 10017);
    let names = api(&js.client(), "$JS.API.CONSUMER.NAMES.MINE", "").await;
    assert_eq!(names["total"], 0, "{names}");
}

#[tokio::test]
async fn malformed_consumer_requests_get_error_json_and_create_nothing() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let client = js.client();
    js.create_stream(stream_config("KEEPC", &["keepc.>"])).await.unwrap();
    let create = |name: &str| format!("$JS.API.CONSUMER.CREATE.KEEPC.{name}");
    let cases: Vec<(String, &str, u64, &[u64])> = vec![
        (create("c"), "{bad", 400, &[10025]),
        (create("c"), r#"{"stream_name":"KEEPC","config":{"name":"c","ack_policy":"bogus"}}"#, 400, &[10025]),
        (create("c"), r#"{"stream_name":"KEEPC","config":{"name":"c","max_deliver":"many"}}"#, 400, &[10025]),
        // JSConsumerInvalidPolicyErr.
        (
            create("c"),
            r#"{"stream_name":"KEEPC","config":{"name":"c","deliver_policy":"by_start_time"}}"#,
            400,
            &[10094],
        ),
        (
            create("c"),
            r#"{"stream_name":"KEEPC","config":{"name":"c","deliver_policy":"by_start_sequence"}}"#,
            400,
            &[10094],
        ),
        // Invalid names: 10103 before nats-server 2.14, JSStreamInvalidConfigF (10052) since.
        (
            "$JS.API.CONSUMER.CREATE.KEEPC".into(),
            r#"{"stream_name":"KEEPC","config":{"name":"a.b"}}"#,
            0,
            &[10103, 10052],
        ),
        (create("c"), r#"{"stream_name":"KEEPC","config":{"name":"c","deliver_subject":"d.*"}}"#, 400, &[10079]),
        (create("c"), r#"{"stream_name":"KEEPC","config":{"name":"c","num_replicas":3}}"#, 500, &[10074]),
        (create("c"), r#"{"stream_name":"KEEPC","config":{"name":"c","idle_heartbeat":1000000000}}"#, 400, &[10088]),
        (create("c"), r#"{"stream_name":"KEEPC","config":{"name":"c","flow_control":true}}"#, 400, &[10089]),
        (create("c"), r#"{"stream_name":"OTHER","config":{"name":"c"}}"#, 400, &[10056]),
        ("$JS.API.CONSUMER.CREATE.NOPE.c".into(), r#"{"stream_name":"NOPE","config":{"name":"c"}}"#, 404, &[10059]),
    ];
    let mut mismatches = Vec::new();
    for (subject, body, code, err_codes) in &cases {
        let reply = api(&client, subject, body).await;
        let error = &reply["error"];
        let code_ok = *code == 0 || error["code"] == *code;
        let err_code_ok = error["err_code"].as_u64().is_some_and(|c| err_codes.contains(&c));
        let described = error["description"].as_str().is_some_and(|d| !d.is_empty());
        if !(code_ok && err_code_ok && described) {
            mismatches.push(format!("{subject} {body}\n  expected code {code} err_code {err_codes:?}, got {reply}"));
        }
    }
    assert!(mismatches.is_empty(), "{} mismatches:\n{}", mismatches.len(), mismatches.join("\n"));
    let names = api(&client, "$JS.API.CONSUMER.NAMES.KEEPC", "").await;
    assert_eq!(names["total"], 0, "nothing was created: {names}");
}

// ---------------------------------------------------------------------------------------------
// Deliver policies. The fixture stores dp.a dp.b dp.a dp.c dp.b as sequences 1..=5.

async fn deliver_policy_fixture(js: &jetstream::Context) -> stream::Stream {
    let stream = js.create_stream(stream_config("DP", &["dp.>"])).await.unwrap();
    for (i, subject) in ["dp.a", "dp.b", "dp.a"].iter().enumerate() {
        publish(js, subject, &(i + 1).to_string()).await;
    }
    // A gap in time before 4, for by_start_time (part of the fixture, not a wait for anything).
    tokio::time::sleep(Duration::from_millis(30)).await;
    for (i, subject) in ["dp.c", "dp.b"].iter().enumerate() {
        publish(js, subject, &(i + 4).to_string()).await;
    }
    stream
}

async fn first_delivered(stream: &stream::Stream, deliver_policy: DeliverPolicy) -> u64 {
    let consumer = pull_consumer(stream, pull::Config { deliver_policy, ..Default::default() }).await;
    stream_seq(&receive_one(&consumer, Duration::from_secs(1)).await)
}

#[tokio::test]
async fn deliver_all_starts_at_the_first_message() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let stream = deliver_policy_fixture(&js).await;
    assert_eq!(first_delivered(&stream, DeliverPolicy::All).await, 1);
}

#[tokio::test]
async fn deliver_last_starts_at_the_last_message_or_the_last_matching_the_filter() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let stream = deliver_policy_fixture(&js).await;
    assert_eq!(first_delivered(&stream, DeliverPolicy::Last).await, 5);
    let filtered = pull_consumer(
        &stream,
        pull::Config { deliver_policy: DeliverPolicy::Last, filter_subject: "dp.a".into(), ..Default::default() },
    )
    .await;
    assert_eq!(seqs(&receive(&filtered, 5, Duration::from_millis(300)).await), [3]);
}

#[tokio::test]
async fn deliver_new_skips_what_is_stored_and_delivers_the_next_publish() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let stream = deliver_policy_fixture(&js).await;
    let mut consumer =
        pull_consumer(&stream, pull::Config { deliver_policy: DeliverPolicy::New, ..Default::default() }).await;
    assert_eq!(info(&mut consumer).await.num_pending, 0);
    assert!(receive(&consumer, 1, Duration::from_millis(200)).await.is_empty(), "nothing new yet");
    publish(&js, "dp.z", "6").await;
    let message = receive_one(&consumer, Duration::from_secs(1)).await;
    assert_eq!(stream_seq(&message), 6);
    assert_eq!(message.payload, "6");
}

#[tokio::test]
async fn deliver_by_start_sequence_starts_there() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let stream = deliver_policy_fixture(&js).await;
    let mut consumer = pull_consumer(
        &stream,
        pull::Config { deliver_policy: DeliverPolicy::ByStartSequence { start_sequence: 3 }, ..Default::default() },
    )
    .await;
    assert_eq!(info(&mut consumer).await.num_pending, 3);
    assert_eq!(seqs(&receive(&consumer, 3, Duration::from_secs(1)).await), [3, 4, 5]);
}

#[tokio::test]
async fn deliver_by_start_time_starts_at_the_first_message_at_or_after_it() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let stream = deliver_policy_fixture(&js).await;
    let fourth = stream.get_raw_message(4).await.expect("message 4").time;
    let start_time = fourth - Duration::from_millis(10);
    assert_eq!(first_delivered(&stream, DeliverPolicy::ByStartTime { start_time }).await, 4);
    assert_eq!(first_delivered(&stream, DeliverPolicy::ByStartTime { start_time: fourth }).await, 4, "at or after");
}

#[tokio::test]
async fn deliver_last_per_subject_delivers_each_subjects_last_in_stream_order() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let stream = deliver_policy_fixture(&js).await;
    let mut consumer = pull_consumer(
        &stream,
        pull::Config {
            deliver_policy: DeliverPolicy::LastPerSubject,
            filter_subject: "dp.>".into(),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(info(&mut consumer).await.num_pending, 3);
    // Last of dp.a is 3, of dp.c is 4, of dp.b is 5.
    assert_eq!(seqs(&receive(&consumer, 3, Duration::from_secs(1)).await), [3, 4, 5]);
    publish(&js, "dp.a", "6").await;
    assert_eq!(stream_seq(&receive_one(&consumer, Duration::from_secs(1)).await), 6, "then new messages follow");
}

#[tokio::test]
async fn deliver_last_per_subject_requires_a_filter_subject_10094() {
    // nats-server: NewJSConsumerInvalidPolicyError(notSet("last per subject", "filter subject")).
    let server = SemaqServer::start();
    let js = context(&server).await;
    deliver_policy_fixture(&js).await;
    let body = api(
        &js.client(),
        "$JS.API.CONSUMER.CREATE.DP.lps",
        r#"{"stream_name":"DP","config":{"name":"lps","ack_policy":"explicit","deliver_policy":"last_per_subject"}}"#,
    )
    .await;
    assert_api_error(&body, 400, 10094);
}

// ---------------------------------------------------------------------------------------------
// Ack policies.

#[tokio::test]
async fn ack_explicit_acknowledges_only_the_acked_message() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let stream = js.create_stream(stream_config("EXPL", &["expl"])).await.unwrap();
    publish_n(&js, "expl", 5).await;
    let mut consumer = pull_consumer(&stream, durable("c")).await;
    let messages = receive(&consumer, 5, Duration::from_secs(1)).await;
    assert_eq!(seqs(&messages), [1, 2, 3, 4, 5]);
    messages[2].double_ack().await.expect("ack 3");
    let state = info(&mut consumer).await;
    assert_eq!(state.num_ack_pending, 4);
    assert_eq!(state.ack_floor.stream_sequence, 0, "1 and 2 still pending");
    assert_eq!(state.delivered.stream_sequence, 5);
    assert_eq!(state.delivered.consumer_sequence, 5);
    messages[0].double_ack().await.expect("ack 1");
    messages[1].double_ack().await.expect("ack 2");
    let state = info(&mut consumer).await;
    assert_eq!(state.ack_floor.stream_sequence, 3, "floor jumps over the already acked 3");
    assert_eq!(state.ack_floor.consumer_sequence, 3);
    assert_eq!(state.num_ack_pending, 2);
}

#[tokio::test]
async fn ack_all_acknowledges_everything_up_to_the_acked_message() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let stream = js.create_stream(stream_config("ACKALL", &["ackall"])).await.unwrap();
    publish_n(&js, "ackall", 10).await;
    let mut consumer = pull_consumer(&stream, pull::Config { ack_policy: AckPolicy::All, ..durable("c") }).await;
    let messages = receive(&consumer, 10, Duration::from_secs(1)).await;
    assert_eq!(messages.len(), 10);
    messages[4].double_ack().await.expect("ack 5");
    let state = info(&mut consumer).await;
    assert_eq!(state.ack_floor.stream_sequence, 5);
    assert_eq!(state.ack_floor.consumer_sequence, 5);
    assert_eq!(state.num_ack_pending, 5);
    messages[9].double_ack().await.expect("ack 10");
    let state = info(&mut consumer).await;
    assert_eq!(state.ack_floor.stream_sequence, 10);
    assert_eq!(state.num_ack_pending, 0);
}

#[tokio::test]
async fn ack_none_counts_delivered_as_acknowledged_and_never_redelivers() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let stream = js.create_stream(stream_config("ACKNONE", &["acknone"])).await.unwrap();
    publish_n(&js, "acknone", 5).await;
    let mut consumer = pull_consumer(
        &stream,
        pull::Config { ack_policy: AckPolicy::None, ack_wait: Duration::from_millis(200), ..durable("c") },
    )
    .await;
    assert_eq!(seqs(&receive(&consumer, 5, Duration::from_secs(1)).await), [1, 2, 3, 4, 5]);
    let state = info(&mut consumer).await;
    assert_eq!(state.num_ack_pending, 0);
    assert_eq!(state.ack_floor.stream_sequence, 5);
    assert!(receive(&consumer, 1, Duration::from_millis(600)).await.is_empty(), "no redelivery after ack_wait");
}

#[tokio::test]
async fn max_ack_pending_with_ack_none_is_refused_for_push_consumers_only() {
    // nats-server checks `MaxAckPending > 0 && AckPolicy == AckNone` in its push-mode branch
    // (checkConsumerCfg); a pull consumer with ack none may carry max_ack_pending.
    let server = SemaqServer::start();
    let js = context(&server).await;
    js.create_stream(stream_config("NONEMAP", &["nonemap"])).await.unwrap();
    let body = api(
        &js.client(),
        "$JS.API.CONSUMER.CREATE.NONEMAP.push",
        r#"{"stream_name":"NONEMAP","config":{"name":"push","deliver_subject":"d.nonemap","ack_policy":"none","max_ack_pending":10}}"#,
    )
    .await;
    assert_api_error(&body, 400, 10082);
    let body = api(
        &js.client(),
        "$JS.API.CONSUMER.CREATE.NONEMAP.pull",
        r#"{"stream_name":"NONEMAP","config":{"name":"pull","ack_policy":"none","max_ack_pending":10}}"#,
    )
    .await;
    assert!(body["error"].is_null(), "pull consumer with ack none and max_ack_pending: {body}");
    assert_eq!(body["config"]["ack_policy"], "none");
}

#[tokio::test]
async fn consumer_config_without_ack_policy_defaults_to_ack_none() {
    // In nats-server the zero value of AckPolicy is AckNone: a raw request that leaves
    // `ack_policy` out gets a consumer that needs no acks.
    let server = SemaqServer::start();
    let js = context(&server).await;
    js.create_stream(stream_config("DEFACK", &["defack"])).await.unwrap();
    let body =
        api(&js.client(), "$JS.API.CONSUMER.CREATE.DEFACK.c", r#"{"stream_name":"DEFACK","config":{"name":"c"}}"#)
            .await;
    assert!(body["error"].is_null(), "{body}");
    assert_eq!(body["config"]["ack_policy"], "none", "{body}");
    assert_eq!(body["config"]["deliver_policy"], "all");
    assert_eq!(body["config"]["replay_policy"], "instant");
}

// ---------------------------------------------------------------------------------------------
// Redelivery: NAK, +WPI, +TERM, max_deliver, backoff, double ack.

#[tokio::test]
async fn nak_with_delay_redelivers_after_the_delay_and_not_before() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let stream = js.create_stream(stream_config("NAKD", &["nakd"])).await.unwrap();
    publish(&js, "nakd", "job").await;
    let consumer = pull_consumer(&stream, pull::Config { ack_wait: Duration::from_secs(10), ..durable("c") }).await;
    let message = receive_one(&consumer, Duration::from_secs(1)).await;
    message.ack_with(AckKind::Nak(Some(Duration::from_millis(700)))).await.expect("nak");
    let naked = Instant::now();
    let again = receive_one(&consumer, Duration::from_secs(3)).await;
    let waited = naked.elapsed();
    assert!(waited >= Duration::from_millis(600), "redelivered after {waited:?}, before the 700ms delay");
    assert!(waited < Duration::from_millis(2000), "redelivered only after {waited:?}");
    assert_eq!(stream_seq(&again), 1);
    assert_eq!(deliveries(&again), 2);
}

#[tokio::test]
async fn nak_without_delay_redelivers_at_once() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let stream = js.create_stream(stream_config("NAK", &["nak"])).await.unwrap();
    publish_n(&js, "nak", 2).await;
    let mut consumer = pull_consumer(&stream, pull::Config { ack_wait: Duration::from_secs(10), ..durable("c") }).await;
    let first = receive_one(&consumer, Duration::from_secs(1)).await;
    first.double_ack_with(AckKind::Nak(None)).await.expect("nak");
    let naked = Instant::now();
    let again = receive_one(&consumer, Duration::from_secs(2)).await;
    assert!(naked.elapsed() < Duration::from_millis(500), "redelivered after {:?}", naked.elapsed());
    assert_eq!(stream_seq(&again), 1, "the redelivery comes before the next new message");
    assert_eq!(deliveries(&again), 2);
    assert_eq!(info(&mut consumer).await.num_redelivered, 1);
}

#[tokio::test]
async fn progress_postpones_redelivery_by_a_full_ack_wait() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let stream = js.create_stream(stream_config("WPI", &["wpi"])).await.unwrap();
    publish(&js, "wpi", "slow job").await;
    let consumer = pull_consumer(&stream, pull::Config { ack_wait: Duration::from_millis(800), ..durable("c") }).await;
    let message = receive_one(&consumer, Duration::from_secs(1)).await;
    let delivered = Instant::now();
    // The scenario: the worker is busy for 500 ms of its 800 ms ack wait before it sends +WPI.
    tokio::time::sleep(Duration::from_millis(500)).await;
    message.ack_with(AckKind::Progress).await.expect("+WPI");
    let again = receive_one(&consumer, Duration::from_secs(3)).await;
    let waited = delivered.elapsed();
    assert!(waited >= Duration::from_millis(1200), "redelivered {waited:?} after delivery: +WPI at 500ms was ignored");
    assert!(waited < Duration::from_millis(2500), "redelivered only after {waited:?}");
    assert_eq!(deliveries(&again), 2);
}

#[tokio::test]
async fn term_stops_redelivery() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let stream = js.create_stream(stream_config("TERM", &["term"])).await.unwrap();
    publish(&js, "term", "poison").await;
    let mut consumer =
        pull_consumer(&stream, pull::Config { ack_wait: Duration::from_millis(200), ..durable("c") }).await;
    let message = receive_one(&consumer, Duration::from_secs(1)).await;
    message.ack_with(AckKind::Term).await.expect("+TERM");
    assert!(receive(&consumer, 1, Duration::from_millis(700)).await.is_empty(), "terminated message came back");
    let state = info(&mut consumer).await;
    assert_eq!(state.num_ack_pending, 0);
    assert_eq!(state.ack_floor.stream_sequence, 1);
}

#[tokio::test]
async fn max_deliver_stops_redelivering_after_that_many_deliveries() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let stream = js.create_stream(stream_config("MAXDEL", &["maxdel"])).await.unwrap();
    publish(&js, "maxdel", "never acked").await;
    let consumer =
        pull_consumer(&stream, pull::Config { ack_wait: Duration::from_millis(200), max_deliver: 2, ..durable("c") })
            .await;
    let received = receive(&consumer, 5, Duration::from_millis(1200)).await;
    let counts: Vec<i64> = received.iter().map(deliveries).collect();
    assert_eq!(counts, [1, 2], "delivered exactly max_deliver times");
    assert_eq!(seqs(&received), [1, 1]);
}

#[tokio::test]
async fn backoff_spaces_redeliveries_by_its_delays() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let stream = js.create_stream(stream_config("BACKOFF", &["backoff"])).await.unwrap();
    publish(&js, "backoff", "flaky").await;
    let consumer = pull_consumer(
        &stream,
        pull::Config {
            backoff: vec![Duration::from_millis(200), Duration::from_millis(600)],
            max_deliver: 3,
            ..durable("c")
        },
    )
    .await;
    let mut batch =
        consumer.batch().max_messages(3).expires(Duration::from_secs(3)).messages().await.expect("pull request");
    let mut arrivals = Vec::new();
    while arrivals.len() < 3 {
        let message = tokio::time::timeout(WAIT, batch.next()).await.expect("delivery").expect("open").expect("ok");
        arrivals.push((Instant::now(), deliveries(&message)));
    }
    assert_eq!(arrivals.iter().map(|(_, n)| *n).collect::<Vec<_>>(), [1, 2, 3]);
    let first_gap = arrivals[1].0 - arrivals[0].0;
    let second_gap = arrivals[2].0 - arrivals[1].0;
    assert!((150..600).contains(&first_gap.as_millis()), "first redelivery after {first_gap:?}, backoff[0] = 200ms");
    assert!(
        (500..1100).contains(&second_gap.as_millis()),
        "second redelivery after {second_gap:?}, backoff[1] = 600ms"
    );
}

#[tokio::test]
async fn backoff_sets_ack_wait_to_its_first_delay() {
    // nats-server's setConsumerConfigDefaults: `if len(config.BackOff) > 0 { config.AckWait = config.BackOff[0] }`.
    let server = SemaqServer::start();
    let js = context(&server).await;
    let stream = js.create_stream(stream_config("BOWAIT", &["bowait"])).await.unwrap();
    let mut consumer = pull_consumer(
        &stream,
        pull::Config {
            backoff: vec![Duration::from_millis(250), Duration::from_secs(1)],
            max_deliver: 5,
            ..durable("c")
        },
    )
    .await;
    assert_eq!(info(&mut consumer).await.config.ack_wait, Duration::from_millis(250));
}

#[tokio::test]
async fn backoff_may_be_as_long_as_max_deliver() {
    // nats-server refuses only `len(backoff) > max_deliver` (JSConsumerMaxDeliverBackoffErr, 10116).
    let server = SemaqServer::start();
    let js = context(&server).await;
    let stream = js.create_stream(stream_config("BOLEN", &["bolen"])).await.unwrap();
    let backoff = vec![Duration::from_millis(100), Duration::from_millis(200)];
    let accepted =
        stream.create_consumer(pull::Config { backoff: backoff.clone(), max_deliver: 2, ..durable("equal") }).await;
    assert!(accepted.is_ok(), "len(backoff) == max_deliver: {:?}", accepted.err());
    let body = api(
        &js.client(),
        "$JS.API.CONSUMER.CREATE.BOLEN.longer",
        r#"{"stream_name":"BOLEN","config":{"name":"longer","max_deliver":1,"backoff":[100000000,200000000]}}"#,
    )
    .await;
    assert_api_error(&body, 400, 10116);
}

#[tokio::test]
async fn double_ack_is_confirmed_and_applied_before_it_returns() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let stream = js.create_stream(stream_config("DOUBLE", &["double"])).await.unwrap();
    publish_n(&js, "double", 3).await;
    let mut consumer = pull_consumer(&stream, durable("c")).await;
    let messages = receive(&consumer, 3, Duration::from_secs(1)).await;
    for message in &messages {
        tokio::time::timeout(WAIT, message.double_ack()).await.expect("confirmed in time").expect("double ack");
    }
    let state = info(&mut consumer).await;
    assert_eq!(state.num_ack_pending, 0);
    assert_eq!(state.ack_floor.stream_sequence, 3);
    // NAK and TERM can be confirmed the same way.
    publish(&js, "double", "4").await;
    let fourth = receive_one(&consumer, Duration::from_secs(1)).await;
    fourth.double_ack_with(AckKind::Term).await.expect("double term");
    assert_eq!(info(&mut consumer).await.ack_floor.stream_sequence, 4);
}

// ---------------------------------------------------------------------------------------------
// Flow limits and filters.

#[tokio::test]
async fn max_ack_pending_caps_outstanding_deliveries() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let stream = js.create_stream(stream_config("MAP", &["map"])).await.unwrap();
    publish_n(&js, "map", 10).await;
    let mut consumer = pull_consumer(&stream, pull::Config { max_ack_pending: 3, ..durable("c") }).await;
    let first = receive(&consumer, 10, Duration::from_millis(500)).await;
    assert_eq!(seqs(&first), [1, 2, 3], "only max_ack_pending are outstanding");
    let state = info(&mut consumer).await;
    assert_eq!(state.num_ack_pending, 3);
    assert_eq!(state.num_pending, 7);
    first[0].double_ack().await.unwrap();
    first[1].double_ack().await.unwrap();
    let second = receive(&consumer, 10, Duration::from_millis(500)).await;
    assert_eq!(seqs(&second), [4, 5], "two acks free two slots");
}

#[tokio::test]
async fn filter_subject_delivers_only_matching_messages() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let stream = js.create_stream(stream_config("FILT", &["f.>"])).await.unwrap();
    for subject in ["f.a", "f.b", "f.c", "f.a", "f.b"] {
        publish(&js, subject, subject).await;
    }
    let mut consumer = pull_consumer(&stream, pull::Config { filter_subject: "f.b".into(), ..durable("b") }).await;
    assert_eq!(info(&mut consumer).await.num_pending, 2);
    let messages = receive(&consumer, 5, Duration::from_millis(300)).await;
    assert_eq!(seqs(&messages), [2, 5]);
    assert!(messages.iter().all(|m| m.subject.as_str() == "f.b"));
}

#[tokio::test]
async fn filter_subjects_deliver_the_union_in_stream_order() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let stream = js.create_stream(stream_config("FILTS", &["f.>"])).await.unwrap();
    for subject in ["f.a", "f.b", "f.c", "f.a", "f.b", "f.c.deep"] {
        publish(&js, subject, subject).await;
    }
    let mut consumer =
        pull_consumer(&stream, pull::Config { filter_subjects: vec!["f.a".into(), "f.c.>".into()], ..durable("ac") })
            .await;
    assert_eq!(info(&mut consumer).await.num_pending, 3);
    assert_eq!(seqs(&receive(&consumer, 5, Duration::from_millis(300)).await), [1, 4, 6]);

    let body = api(
        &js.client(),
        "$JS.API.CONSUMER.CREATE.FILTS.bad",
        r#"{"stream_name":"FILTS","config":{"name":"bad","filter_subjects":["f.*","f.a"]}}"#,
    )
    .await;
    assert_api_error(&body, 400, 10138);
}

// ---------------------------------------------------------------------------------------------
// Pull requests: no messages, expiry, max_bytes.

#[tokio::test]
async fn fetch_with_no_messages_returns_promptly() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let stream = js.create_stream(stream_config("EMPTY", &["empty"])).await.unwrap();
    let consumer = pull_consumer(&stream, durable("c")).await;
    let started = Instant::now();
    let mut messages = consumer.fetch().max_messages(10).messages().await.expect("fetch");
    let next = tokio::time::timeout(WAIT, messages.next()).await.expect("the fetch ends");
    assert!(next.is_none(), "no message: {:?}", next.map(|m| m.map(|m| m.subject.to_string())));
    assert!(started.elapsed() < Duration::from_millis(500), "404 took {:?}", started.elapsed());

    // With messages, fetch returns what there is and ends.
    publish_n(&js, "empty", 2).await;
    let fetched: Vec<jetstream::Message> = tokio::time::timeout(
        WAIT,
        consumer.fetch().max_messages(10).messages().await.expect("fetch").try_collect::<Vec<_>>(),
    )
    .await
    .expect("the fetch ends")
    .expect("fetch ok");
    assert_eq!(seqs(&fetched), [1, 2]);
}

#[tokio::test]
async fn batch_with_expires_ends_with_request_timeout_at_expiry() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let stream = js.create_stream(stream_config("EXPIRE", &["expire"])).await.unwrap();
    let consumer = pull_consumer(&stream, durable("c")).await;
    let started = Instant::now();
    let mut batch =
        consumer.batch().max_messages(5).expires(Duration::from_millis(500)).messages().await.expect("batch");
    // async-nats gives up on its own only 5 s after expires: an earlier end is the server's 408.
    let next = tokio::time::timeout(WAIT, batch.next()).await.expect("the batch ends");
    assert!(next.is_none());
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(450), "ended after {waited:?}, before expires");
    assert!(waited < Duration::from_millis(1500), "ended after {waited:?}: no 408 from the server");

    // A message published while the request waits is delivered to it.
    let js2 = js.clone();
    let publisher = tokio::spawn(async move {
        // The scenario: the publish comes while the pull request is already waiting.
        tokio::time::sleep(Duration::from_millis(200)).await;
        publish(&js2, "expire", "late").await
    });
    let received = receive(&consumer, 1, Duration::from_secs(2)).await;
    assert_eq!(publisher.await.unwrap(), 1);
    assert_eq!(seqs(&received), [1]);
}

#[tokio::test]
async fn pull_max_bytes_limits_the_batch() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let stream = js.create_stream(stream_config("MAXB", &["maxb"])).await.unwrap();
    let payload = "x".repeat(1000);
    for _ in 0..5 {
        publish(&js, "maxb", &payload).await;
    }
    let consumer = pull_consumer(&stream, durable("c")).await;
    let received = batch_with_max_bytes(&consumer, 5, 2500).await;
    assert_eq!(seqs(&received), [1, 2], "a third 1000-byte message would exceed 2500 bytes");
    // The rest is delivered to the next request.
    assert_eq!(seqs(&receive(&consumer, 5, Duration::from_millis(300)).await), [3, 4, 5]);
}

#[tokio::test]
async fn pull_max_bytes_counts_subject_reply_headers_and_payload() {
    // nats-server sizes a delivery as len(subject) + len(ack reply) + len(headers) + len(payload)
    // (consumer.go, getNextMsg: `sz = len(pmsg.subj) + len(ackReply) + len(pmsg.hdr) + len(pmsg.msg)`).
    // With 100-byte payloads every delivery is over 140 bytes, so 250 bytes hold one, not two.
    let server = SemaqServer::start();
    let js = context(&server).await;
    let stream = js.create_stream(stream_config("MB", &["mb.x"])).await.unwrap();
    let payload = "x".repeat(100);
    for _ in 0..3 {
        publish(&js, "mb.x", &payload).await;
    }
    let consumer = pull_consumer(&stream, durable("c")).await;
    assert_eq!(seqs(&batch_with_max_bytes(&consumer, 3, 250).await), [1]);
}

/// One pull request for up to `messages` and `max_bytes`; what it delivered.
async fn batch_with_max_bytes(consumer: &PullConsumer, messages: usize, max_bytes: usize) -> Vec<jetstream::Message> {
    let mut batch = consumer
        .batch()
        .max_messages(messages)
        .max_bytes(max_bytes)
        .expires(Duration::from_secs(1))
        .messages()
        .await
        .expect("batch");
    let mut received = Vec::new();
    while let Ok(Some(Ok(message))) = tokio::time::timeout(WAIT, batch.next()).await {
        received.push(message);
    }
    received
}

// ---------------------------------------------------------------------------------------------
// Push consumers.

#[tokio::test]
async fn push_consumer_with_deliver_group_delivers_each_message_once_across_members() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let stream = js.create_stream(stream_config("QUEUE", &["queue"])).await.unwrap();
    let config = push::Config {
        durable_name: Some("group".into()),
        deliver_subject: "deliver.queue".into(),
        deliver_group: Some("workers".into()),
        ..Default::default()
    };
    stream.create_consumer(config).await.expect("create");
    let mut members = Vec::new();
    for _ in 0..2 {
        let member_js = context(&server).await;
        let consumer: PushConsumer =
            member_js.get_stream("QUEUE").await.unwrap().get_consumer("group").await.expect("get");
        members.push(consumer.messages().await.expect("subscribe"));
    }
    let (mut one, mut two) = (members.remove(0), members.remove(0));
    semaq_testkit::sync(&js.client()).await;
    for i in 1..=40 {
        publish(&js, "queue", &i.to_string()).await;
    }
    let mut seen = Vec::new();
    let mut per_member = [0usize; 2];
    let deadline = tokio::time::Instant::now() + WAIT;
    while seen.len() < 40 {
        let (index, message) = tokio::select! {
            Some(message) = one.next() => (0, message),
            Some(message) = two.next() => (1, message),
            _ = tokio::time::sleep_until(deadline) => panic!("only {} of 40 delivered", seen.len()),
        };
        let message = message.expect("message");
        message.ack().await.unwrap();
        per_member[index] += 1;
        seen.push(stream_seq(&message));
    }
    // Nothing more arrives: no message went to both members.
    let extra = tokio::time::timeout(Duration::from_millis(300), async {
        tokio::select! {
            Some(message) = one.next() => message.map(|m| stream_seq(&m)).ok(),
            Some(message) = two.next() => message.map(|m| stream_seq(&m)).ok(),
        }
    })
    .await;
    assert!(extra.is_err(), "an extra delivery: {extra:?}");
    let unique: BTreeSet<u64> = seen.iter().copied().collect();
    assert_eq!(unique.len(), 40, "each message once: {seen:?}");
    assert!(per_member.iter().all(|count| *count > 0), "both members got work: {per_member:?}");
}

#[tokio::test]
async fn push_consumer_with_heartbeat_and_flow_control_consumes_5000_messages() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let stream = filled_stream(&js, ("FLOW", "flow"), 5000, bytes::Bytes::from(vec![b'f'; 1024])).await;
    let consumer: PushConsumer = stream
        .create_consumer(push::Config {
            durable_name: Some("fc".into()),
            deliver_subject: "deliver.flow".into(),
            ack_policy: AckPolicy::None,
            flow_control: true,
            idle_heartbeat: Duration::from_millis(500),
            ..Default::default()
        })
        .await
        .expect("create");
    let mut messages = consumer.messages().await.expect("subscribe");
    let mut next_seq = 1;
    while next_seq <= 5000 {
        let message = tokio::time::timeout(WAIT, messages.next())
            .await
            .unwrap_or_else(|_| panic!("stalled after {} messages", next_seq - 1))
            .expect("open")
            .unwrap_or_else(|error| panic!("after {} messages: {error}", next_seq - 1));
        assert_eq!(stream_seq(&message), next_seq, "in order, no gaps");
        assert_eq!(message.payload.len(), 1024);
        next_seq += 1;
    }
    // Once idle, heartbeats keep the subscription healthy (async-nats errors on missed ones).
    let idle = tokio::time::timeout(Duration::from_millis(1300), messages.next()).await;
    assert!(idle.is_err(), "after the last message: {:?}", idle.map(|m| m.map(|m| m.map(|m| m.subject.to_string()))));
}

/// Messages in 40 of a consumer's delivery rounds (`PUMP_MESSAGES_MAX`, 1024).
const FORTY_ROUNDS: usize = 40 * 1024;
/// Long enough for 40 rounds that each wait for a timer, so a failure says how long they took.
const ROUNDS_WAIT: Duration = Duration::from_secs(60);

/// Before a round that stopped at its bound woke its task, the next round waited for the
/// consumer's next timer (the 100 ms state-save tick): these 40 rounds took at least 4 s per
/// consumer, against ~0.2 s now.
#[tokio::test]
async fn push_and_pull_consumers_go_on_past_a_delivery_round_without_waiting_for_a_timer() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let stream = filled_stream(&js, ("ROUNDS", "rounds"), FORTY_ROUNDS, bytes::Bytes::from_static(b"r")).await;
    let bound = Duration::from_secs(2);

    let push: PushConsumer = stream
        .create_consumer(push::Config {
            deliver_subject: "deliver.rounds".into(),
            ack_policy: AckPolicy::None,
            ..Default::default()
        })
        .await
        .expect("create push");
    let started = Instant::now();
    let received = push.messages().await.expect("subscribe").take(FORTY_ROUNDS).try_collect::<Vec<_>>();
    let received = tokio::time::timeout(ROUNDS_WAIT, received).await.expect("all pushed").expect("no error");
    assert_eq!(received.len(), FORTY_ROUNDS);
    assert!(started.elapsed() < bound, "pushed in {:?}: rounds waited for a timer", started.elapsed());

    let pull = pull_consumer(&stream, pull::Config { ack_policy: AckPolicy::None, ..Default::default() }).await;
    let started = Instant::now();
    let received = receive(&pull, FORTY_ROUNDS, ROUNDS_WAIT).await;
    assert_eq!(received.len(), FORTY_ROUNDS);
    assert!(started.elapsed() < bound, "pulled in {:?}: rounds waited for a timer", started.elapsed());
}

// ---------------------------------------------------------------------------------------------
// Retention policies.

#[tokio::test]
async fn workqueue_stream_removes_a_message_when_it_is_acked() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let stream = js
        .create_stream(stream::Config {
            retention: stream::RetentionPolicy::WorkQueue,
            ..stream_config("WQ", &["wq.>"])
        })
        .await
        .unwrap();
    publish_n(&js, "wq.job", 5).await;
    let consumer = pull_consumer(&stream, durable("worker")).await;
    let jobs = receive(&consumer, 5, Duration::from_secs(1)).await;
    assert_eq!(jobs.len(), 5);
    assert_eq!(stream_messages(&js, "WQ").await, 5, "delivered is not removed");
    jobs[1].double_ack().await.unwrap();
    jobs[3].double_ack().await.unwrap();
    assert_eq!(stream_messages(&js, "WQ").await, 3);
    for job in [&jobs[0], &jobs[2], &jobs[4]] {
        job.double_ack().await.unwrap();
    }
    let info = crate::jetstream_api::stream_info(&js, "WQ").await;
    assert_eq!(info.state.messages, 0);
    assert_eq!(info.state.last_sequence, 5);
}

#[tokio::test]
async fn workqueue_stream_refuses_a_second_unfiltered_consumer_with_10099() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let stream = js
        .create_stream(stream::Config {
            retention: stream::RetentionPolicy::WorkQueue,
            ..stream_config("WQ2", &["wq2.>"])
        })
        .await
        .unwrap();
    pull_consumer(&stream, durable("first")).await;
    let error = stream.create_consumer(durable("second")).await.expect_err("second unfiltered consumer");
    assert!(error.to_string().contains("multiple non-filtered consumers not allowed on workqueue stream"), "{error}");
    let body = api(
        &js.client(),
        "$JS.API.CONSUMER.CREATE.WQ2.third",
        r#"{"stream_name":"WQ2","config":{"name":"third","ack_policy":"explicit"}}"#,
    )
    .await;
    assert_api_error(&body, 400, 10099);
    let names: Vec<String> = stream.consumer_names().try_collect().await.unwrap();
    assert_eq!(names, ["first"]);
}

#[tokio::test]
async fn workqueue_stream_allows_filtered_consumers_that_do_not_overlap() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let stream = js
        .create_stream(stream::Config {
            retention: stream::RetentionPolicy::WorkQueue,
            ..stream_config("WQ3", &["wq3.>"])
        })
        .await
        .unwrap();
    pull_consumer(&stream, pull::Config { filter_subject: "wq3.a".into(), ..durable("a") }).await;
    pull_consumer(&stream, pull::Config { filter_subject: "wq3.b".into(), ..durable("b") }).await;
    let body = api(
        &js.client(),
        "$JS.API.CONSUMER.CREATE.WQ3.overlap",
        r#"{"stream_name":"WQ3","config":{"name":"overlap","ack_policy":"explicit","filter_subject":"wq3.*"}}"#,
    )
    .await;
    assert_api_error(&body, 400, 10100);
    // nats-server: JSConsumerPullRequiresAckErr for a pull consumer with ack none,
    // JSConsumerWQRequiresExplicitAckErr for any other non-explicit ack policy.
    let body = api(
        &js.client(),
        "$JS.API.CONSUMER.CREATE.WQ3.acknone",
        r#"{"stream_name":"WQ3","config":{"name":"acknone","ack_policy":"none","filter_subject":"wq3.c"}}"#,
    )
    .await;
    assert_api_error(&body, 400, 10084);
    let body = api(
        &js.client(),
        "$JS.API.CONSUMER.CREATE.WQ3.ackall",
        r#"{"stream_name":"WQ3","config":{"name":"ackall","ack_policy":"all","filter_subject":"wq3.d"}}"#,
    )
    .await;
    assert_api_error(&body, 400, 10098);
}

#[tokio::test]
async fn interest_stream_removes_a_message_once_every_consumer_acked_it() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let stream = js
        .create_stream(stream::Config {
            retention: stream::RetentionPolicy::Interest,
            ..stream_config("INTEREST", &["interest"])
        })
        .await
        .unwrap();
    let first = pull_consumer(&stream, durable("first")).await;
    let second = pull_consumer(&stream, durable("second")).await;
    publish_n(&js, "interest", 3).await;
    assert_eq!(stream_messages(&js, "INTEREST").await, 3);

    for message in receive(&first, 3, Duration::from_secs(1)).await {
        message.double_ack().await.unwrap();
    }
    assert_eq!(stream_messages(&js, "INTEREST").await, 3, "the second consumer has not acked yet");
    let pending = receive(&second, 3, Duration::from_secs(1)).await;
    pending[0].double_ack().await.unwrap();
    assert_eq!(stream_messages(&js, "INTEREST").await, 2);
    pending[1].double_ack().await.unwrap();
    pending[2].double_ack().await.unwrap();
    assert_eq!(stream_messages(&js, "INTEREST").await, 0);
}

#[tokio::test]
async fn interest_stream_without_consumers_does_not_keep_messages() {
    // nats-server (processJetStreamMsg): with interest retention and no interested consumer the
    // message is acknowledged with its sequence but not stored.
    let server = SemaqServer::start();
    let js = context(&server).await;
    let stream = js
        .create_stream(stream::Config {
            retention: stream::RetentionPolicy::Interest,
            ..stream_config("NOINT", &["noint.>"])
        })
        .await
        .unwrap();
    assert_eq!(publish(&js, "noint.a", "nobody listens").await, 1);
    let info = crate::jetstream_api::stream_info(&js, "NOINT").await;
    assert_eq!(info.state.messages, 0, "no consumer, no interest");
    assert_eq!(info.state.last_sequence, 1);

    let consumer = pull_consumer(&stream, pull::Config { filter_subject: "noint.b".into(), ..durable("b") }).await;
    publish(&js, "noint.a", "still nobody").await;
    assert_eq!(stream_messages(&js, "NOINT").await, 0, "the consumer filters noint.a out");
    publish(&js, "noint.b", "wanted").await;
    assert_eq!(stream_messages(&js, "NOINT").await, 1);
    assert_eq!(seqs(&receive(&consumer, 1, Duration::from_secs(1)).await), [3]);
}

// ---------------------------------------------------------------------------------------------
// Restarts and ephemeral cleanup.

/// Starts `semaq-server` on `store`, which outlives the process.
fn server_on(store: &Path) -> SemaqServer {
    SemaqServer::builder().store(store).start()
}

#[tokio::test]
async fn durable_consumer_state_survives_a_restart() {
    let store = tempfile::tempdir().expect("store dir");
    let mut server = server_on(store.path());
    {
        let js = context(&server).await;
        let stream = js.create_stream(stream_config("RESTART", &["restart"])).await.unwrap();
        publish_n(&js, "restart", 10).await;
        let consumer =
            pull_consumer(&stream, pull::Config { ack_wait: Duration::from_millis(500), ..durable("keeper") }).await;
        let messages = receive(&consumer, 6, Duration::from_secs(1)).await;
        assert_eq!(seqs(&messages), [1, 2, 3, 4, 5, 6]);
        for message in &messages[..4] {
            message.double_ack().await.unwrap();
        }
    }
    assert_eq!(server.terminate(), Some(0), "clean shutdown");

    let server = server_on(store.path());
    let js = context(&server).await;
    let stream = js.get_stream("RESTART").await.expect("stream restored");
    assert_eq!(stream.cached_info().state.messages, 10);
    let mut consumer: PullConsumer = stream.get_consumer("keeper").await.expect("consumer restored");
    let state = info(&mut consumer).await;
    assert_eq!(state.delivered.stream_sequence, 6);
    assert_eq!(state.delivered.consumer_sequence, 6);
    assert_eq!(state.ack_floor.stream_sequence, 4);
    assert_eq!(state.ack_floor.consumer_sequence, 4);
    assert_eq!(state.num_ack_pending, 2);
    assert_eq!(state.num_pending, 4);
    assert_eq!(state.config.ack_wait, Duration::from_millis(500));

    // Once their ack wait has passed, the unacknowledged 5 and 6 come back as redeliveries,
    // ahead of the rest. The scenario: let the 500 ms ack wait expire before pulling.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let messages = receive(&consumer, 6, Duration::from_secs(2)).await;
    assert_eq!(seqs(&messages), [5, 6, 7, 8, 9, 10]);
    assert_eq!(messages.iter().map(deliveries).collect::<Vec<_>>(), [2, 2, 1, 1, 1, 1]);
}

#[tokio::test]
async fn ephemeral_consumer_is_removed_after_its_inactive_threshold() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let client = js.client();
    js.create_stream(stream_config("INACTIVE", &["inactive"])).await.unwrap();
    let body = api(
        &client,
        "$JS.API.CONSUMER.CREATE.INACTIVE",
        r#"{"stream_name":"INACTIVE","config":{"ack_policy":"explicit","inactive_threshold":500000000}}"#,
    )
    .await;
    let name = body["name"].as_str().unwrap_or_else(|| panic!("created: {body}")).to_string();
    assert_eq!(body["config"]["inactive_threshold"], 500_000_000);
    let created = Instant::now();
    let info_subject = format!("$JS.API.CONSUMER.INFO.INACTIVE.{name}");
    wait_until_async("inactive ephemeral removed", Duration::from_secs(3), || async {
        api(&client, &info_subject, "").await["error"]["err_code"] == 10014
    })
    .await;
    assert!(created.elapsed() >= Duration::from_millis(450), "removed after {:?}", created.elapsed());
    let names = api(&client, "$JS.API.CONSUMER.NAMES.INACTIVE", "").await;
    assert_eq!(names["total"], 0, "{names}");

    // A durable without inactive_threshold is never removed for inactivity.
    let stream = js.get_stream("INACTIVE").await.unwrap();
    pull_consumer(&stream, durable("stays")).await;
    // The scenario: stay idle longer than the ephemeral's 500 ms threshold above.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let names: Vec<String> = stream.consumer_names().try_collect().await.unwrap();
    assert_eq!(names, ["stays"]);
}
