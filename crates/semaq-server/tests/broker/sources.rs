//! Mirrors, sources and subject transforms, as nats-server 2.10: a mirror copies its origin with
//! the origin's sequences, a source copies what its filters and transforms select and marks
//! each copy with `Nats-Stream-Source`, both follow through restarts without loss or
//! duplicates, stream info reports them, and bad configs get nats-server's errors (the ones
//! nats-server 2.9 knows too are compared with it side by side).

use std::collections::BTreeMap;
use std::time::Duration;

use async_nats::jetstream::{self, kv, stream};
use semaq_testkit::{wait_until_async, NatsServer, SemaqServer};
use serde_json::{json, Value};

use crate::jetstream_api::{api, context, publish, stream_info};

/// Sourcing is asynchronous: copies appear within this.
const FOLLOW: Duration = Duration::from_secs(10);

async fn create(client: &async_nats::Client, config: Value) -> Value {
    let name = config["name"].as_str().expect("name").to_string();
    api(client, &format!("$JS.API.STREAM.CREATE.{name}"), &config.to_string()).await
}

async fn info(client: &async_nats::Client, name: &str) -> Value {
    api(client, &format!("$JS.API.STREAM.INFO.{name}"), "").await
}

async fn wait_for_messages(client: &async_nats::Client, name: &str, count: u64) -> Value {
    wait_for_info(client, name, &format!("{name} holds {count} messages"), |info| info["state"]["messages"] == count)
        .await
}

/// Polls stream info until `done` holds; returns the last info.
async fn wait_for_info(client: &async_nats::Client, name: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + FOLLOW;
    loop {
        let last = info(client, name).await;
        if done(&last) {
            return last;
        }
        assert!(tokio::time::Instant::now() < deadline, "{what}: not within {FOLLOW:?}; last info {last}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The message at `seq` of `stream`: subject, `Nats-Stream-Source` and payload.
async fn message(js: &jetstream::Context, stream: &str, seq: u64) -> (String, Option<String>, String) {
    let stream = js.get_stream(stream).await.expect("stream");
    let message = stream.get_raw_message(seq).await.unwrap_or_else(|error| panic!("seq {seq}: {error}"));
    let source = message.headers.get("Nats-Stream-Source").map(|value| value.to_string());
    (message.subject.to_string(), source, String::from_utf8_lossy(&message.payload).into_owned())
}

#[tokio::test]
async fn a_mirror_keeps_its_origins_sequences_and_follows_new_messages() {
    let server = SemaqServer::start();
    let client = server.client().await;
    let js = context(&server).await;
    create(&client, json!({"name": "ORDERS", "subjects": ["orders.>"]})).await;
    for i in 1..=5 {
        publish(&js, &format!("orders.{i}"), &format!("order {i}")).await;
    }
    // The origin now starts at 3: the mirror starts there too.
    api(&client, "$JS.API.STREAM.PURGE.ORDERS", r#"{"seq":3}"#).await;
    let created = create(&client, json!({"name": "BACKUP", "mirror": {"name": "ORDERS"}})).await;
    assert!(created.get("error").is_none(), "{created}");
    assert_eq!(created["config"]["subjects"], Value::Null, "a mirror captures no subjects");

    let state = wait_for_messages(&client, "BACKUP", 3).await;
    assert_eq!((state["state"]["first_seq"].as_u64(), state["state"]["last_seq"].as_u64()), (Some(3), Some(5)));
    assert_eq!(message(&js, "BACKUP", 4).await, ("orders.4".into(), None, "order 4".into()));

    publish(&js, "orders.6", "order 6").await;
    let state = wait_for_messages(&client, "BACKUP", 4).await;
    assert_eq!(state["state"]["last_seq"], 6);
    assert_eq!(state["mirror"]["name"], "ORDERS");
    assert_eq!(state["mirror"]["lag"], 0);
    assert!(state["mirror"]["active"].as_i64().is_some_and(|ns| ns >= 0), "{state}");
    assert!(state["mirror"].get("error").is_none(), "{state}");

    // Nothing captures the origin's subjects for the mirror: a publish is stored once, by ORDERS.
    let ack = crate::jetstream_api::publish_raw(&client, "orders.7", &[], b"order 7").await;
    assert_eq!(ack["stream"], "ORDERS");
}

#[tokio::test]
async fn sources_copy_what_their_filters_and_transforms_select_with_a_source_header() {
    let server = SemaqServer::start();
    let client = server.client().await;
    let js = context(&server).await;
    create(&client, json!({"name": "EU", "subjects": ["eu.>"]})).await;
    create(&client, json!({"name": "US", "subjects": ["us.>"]})).await;
    let config = json!({"name": "ALL", "subjects": ["all.local"], "sources": [
        {"name": "EU", "filter_subject": "eu.keep.>"},
        {"name": "US", "subject_transforms": [{"src": "us.*", "dest": "copied.us.{{wildcard(1)}}"}]},
    ]});
    let created = create(&client, config).await;
    assert!(created.get("error").is_none(), "{created}");

    publish(&js, "eu.drop.1", "not selected").await;
    publish(&js, "eu.keep.1", "kept").await;
    publish(&js, "us.orders", "transformed").await;
    publish(&js, "all.local", "its own").await;
    let state = wait_for_messages(&client, "ALL", 3).await;

    let mut found = BTreeMap::new();
    for seq in 1..=3 {
        let (subject, source, payload) = message(&js, "ALL", seq).await;
        found.insert(subject, (source, payload));
    }
    assert_eq!(found["eu.keep.1"], (Some("EU 2 eu.keep.> > eu.keep.1".into()), "kept".into()));
    assert_eq!(
        found["copied.us.orders"],
        (Some("US 1 us.* copied.us.{{wildcard(1)}} us.orders".into()), "transformed".into())
    );
    assert_eq!(found["all.local"], (None, "its own".into()));

    let sources = state["sources"].as_array().expect("sources in stream info");
    assert_eq!(sources.len(), 2, "{state}");
    let eu = sources.iter().find(|s| s["name"] == "EU").expect("EU");
    assert_eq!((eu["lag"].as_u64(), eu["filter_subject"].as_str()), (Some(0), Some("eu.keep.>")));
    let us = sources.iter().find(|s| s["name"] == "US").expect("US");
    assert_eq!(us["subject_transforms"], json!([{"src": "us.*", "dest": "copied.us.{{wildcard(1)}}"}]));
}

#[tokio::test]
async fn mirrors_and_sources_resume_after_a_crash_without_loss_or_duplicates() {
    const ORIGIN_MESSAGES: u64 = 1000;
    let mut server = SemaqServer::start();
    let client = server.client().await;
    let js = context(&server).await;
    create(&client, json!({"name": "LOG", "subjects": ["log.>"]})).await;
    create(&client, json!({"name": "LOG_MIRROR", "mirror": {"name": "LOG"}})).await;
    create(&client, json!({"name": "LOG_COPY", "sources": [{"name": "LOG"}]})).await;
    let half = ORIGIN_MESSAGES / 2;
    for i in 1..=half {
        js.publish(format!("log.{}", i % 7), format!("{i}").into()).await.expect("publish");
    }
    wait_for_messages(&client, "LOG_COPY", half).await;
    wait_for_messages(&client, "LOG_MIRROR", half).await;
    for i in half + 1..ORIGIN_MESSAGES {
        js.publish(format!("log.{}", i % 7), format!("{i}").into()).await.expect("publish");
    }
    // Acknowledged in order: every publish before it is on disk too. The crash comes while
    // the followers copy the second half.
    publish(&js, "log.last", "last").await;
    server.kill();
    server.restart();

    let client = server.client().await;
    let js = context(&server).await;
    let mirror = wait_for_messages(&client, "LOG_MIRROR", ORIGIN_MESSAGES).await;
    assert_eq!(mirror["state"]["last_seq"], ORIGIN_MESSAGES);
    wait_for_messages(&client, "LOG_COPY", ORIGIN_MESSAGES).await;
    publish(&js, "log.after", "after the restart").await;
    wait_for_messages(&client, "LOG_COPY", ORIGIN_MESSAGES + 1).await;

    let mut origin_seqs = Vec::new();
    for seq in 1..=ORIGIN_MESSAGES + 1 {
        let (_, source, _) = message(&js, "LOG_COPY", seq).await;
        let source = source.expect("Nats-Stream-Source");
        origin_seqs.push(source.split(' ').nth(1).expect("seq").parse::<u64>().expect("number"));
    }
    assert_eq!(origin_seqs, (1..=ORIGIN_MESSAGES + 1).collect::<Vec<u64>>(), "each origin message once, in order");
    let (subject, _, payload) = message(&js, "LOG_MIRROR", 150).await;
    assert_eq!((subject, payload), ("log.3".into(), "150".into()));
}

#[tokio::test]
async fn an_update_adds_a_source_without_copying_the_first_one_again() {
    let server = SemaqServer::start();
    let client = server.client().await;
    let js = context(&server).await;
    create(&client, json!({"name": "A", "subjects": ["a"]})).await;
    create(&client, json!({"name": "B", "subjects": ["b"]})).await;
    create(&client, json!({"name": "AB", "sources": [{"name": "A"}]})).await;
    publish(&js, "a", "a1").await;
    publish(&js, "b", "b1").await;
    wait_for_messages(&client, "AB", 1).await;

    let update = json!({"name": "AB", "sources": [{"name": "A"}, {"name": "B"}]});
    let updated = api(&client, "$JS.API.STREAM.UPDATE.AB", &update.to_string()).await;
    assert!(updated.get("error").is_none(), "{updated}");
    publish(&js, "a", "a2").await;
    wait_for_messages(&client, "AB", 3).await;
    // A copy made after the others shows any a1 copied again: it would come before it.
    publish(&js, "b", "b2").await;
    let state = wait_for_messages(&client, "AB", 4).await;
    let mut payloads = Vec::new();
    for seq in 1..=4 {
        payloads.push(message(&js, "AB", seq).await.2);
    }
    assert_eq!(payloads[3], "b2");
    payloads.sort();
    assert_eq!(payloads, ["a1", "a2", "b1", "b2"]);
    assert_eq!(state["sources"].as_array().map(Vec::len), Some(2), "{state}");
}

#[tokio::test]
async fn stream_info_reports_a_missing_origin_until_it_exists() {
    let server = SemaqServer::start();
    let client = server.client().await;
    let js = context(&server).await;
    create(&client, json!({"name": "LATER_MIRROR", "mirror": {"name": "LATER"}})).await;
    let state = wait_for_info(&client, "LATER_MIRROR", "the mirror reports its origin missing", |info| {
        info["mirror"]["error"]["err_code"] == 10059
    })
    .await;
    assert_eq!(state["mirror"]["error"], json!({"code": 404, "err_code": 10059, "description": "stream not found"}));
    assert_eq!(state["mirror"]["active"], -1, "never heard from the origin");

    create(&client, json!({"name": "LATER", "subjects": ["later"]})).await;
    publish(&js, "later", "now").await;
    let state = wait_for_messages(&client, "LATER_MIRROR", 1).await;
    assert!(state["mirror"].get("error").is_none(), "{state}");

    // async-nats reads the same state.
    let info = stream_info(&js, "LATER_MIRROR").await;
    let mirror = info.mirror.expect("mirror info");
    assert_eq!((mirror.name.as_str(), mirror.lag), ("LATER", 0));
}

#[tokio::test]
async fn a_stream_subject_transform_rewrites_what_it_captures() {
    let server = SemaqServer::start();
    let client = server.client().await;
    let js = context(&server).await;
    let created = create(
        &client,
        json!({"name": "T", "subjects": ["in.>"],
        "subject_transform": {"src": "in.*.*", "dest": "out.{{wildcard(2)}}.{{partition(3,1)}}"}}),
    )
    .await;
    assert!(created.get("error").is_none(), "{created}");
    assert_eq!(publish(&js, "in.a.b", "moved").await, 1);
    assert_eq!(publish(&js, "in.a.b.c", "no match: kept").await, 2);
    let (subject, _, _) = message(&js, "T", 1).await;
    let partition = subject.rsplit('.').next().expect("token").parse::<u32>().expect("number");
    assert_eq!(&subject[..6], "out.b.");
    assert!(partition < 3);
    assert_eq!(message(&js, "T", 2).await.0, "in.a.b.c");
}

#[tokio::test]
async fn a_key_value_bucket_with_a_source_reads_its_origins_keys() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let origin =
        js.create_key_value(kv::Config { bucket: "PROFILES".into(), ..Default::default() }).await.expect("origin");
    origin.put("alice", "admin".into()).await.expect("put");
    let source = stream::Source {
        name: "PROFILES".into(),
        subject_transforms: vec![stream::SubjectTransform {
            source: "$KV.PROFILES.>".into(),
            destination: "$KV.PROFILES_COPY.>".into(),
        }],
        ..Default::default()
    };
    let copy = js
        .create_key_value(kv::Config {
            bucket: "PROFILES_COPY".into(),
            sources: Some(vec![source]),
            ..Default::default()
        })
        .await
        .expect("bucket with a source");
    wait_until_async("the copy has alice", FOLLOW, || {
        let copy = copy.clone();
        async move { copy.get("alice").await.ok().flatten().is_some_and(|value| value.as_ref() == b"admin") }
    })
    .await;
    origin.put("bob", "viewer".into()).await.expect("put");
    origin.put("alice", "owner".into()).await.expect("update");
    wait_until_async("the copy has bob and alice's update", FOLLOW, || {
        let copy = copy.clone();
        async move {
            let bob = copy.get("bob").await.ok().flatten();
            let alice = copy.get("alice").await.ok().flatten();
            bob.is_some_and(|v| v.as_ref() == b"viewer") && alice.is_some_and(|v| v.as_ref() == b"owner")
        }
    })
    .await;
}

/// Requests both servers answer with the same error (nats-server 2.9 knows these checks).
fn shared_config_errors() -> Vec<(&'static str, Value)> {
    vec![
        ("CREATE.M", json!({"name": "M", "subjects": ["m"], "mirror": {"name": "O"}})),
        ("CREATE.M", json!({"name": "M", "mirror": {"name": "O"}, "sources": [{"name": "O"}]})),
        ("UPDATE.MIRROR", json!({"name": "MIRROR", "mirror": {"name": "O", "filter_subject": "o.a"}})),
        ("CREATE.CYCLE_B", json!({"name": "CYCLE_B", "subjects": ["b"], "sources": [{"name": "CYCLE_A"}]})),
        ("CREATE.E", json!({"name": "E", "sources": [{"name": "O", "external": {"api": "$JS.API", "deliver": ""}}]})),
        (
            "CREATE.E",
            json!({"name": "E", "sources": [{"name": "O", "external": {"api": "$JS.x.API", "deliver": "d.*"}}]}),
        ),
    ]
}

async fn config_errors(client: &async_nats::Client) -> Vec<Value> {
    create(client, json!({"name": "O", "subjects": ["o.>"]})).await;
    create(client, json!({"name": "MIRROR", "mirror": {"name": "O"}})).await;
    create(client, json!({"name": "CYCLE_A", "subjects": ["a"], "sources": [{"name": "CYCLE_B"}]})).await;
    let mut errors = Vec::new();
    for (action, body) in shared_config_errors() {
        let reply = api(client, &format!("$JS.API.STREAM.{action}"), &body.to_string()).await;
        errors.push(reply["error"].clone());
    }
    errors
}

#[tokio::test]
async fn config_errors_match_nats_server_side_by_side() {
    let semaq = SemaqServer::start();
    let store = tempfile::tempdir().expect("tempdir");
    let nats = NatsServer::with_args(&["-js", "-sd", store.path().to_str().expect("path")]);
    let ours = config_errors(&semaq.client().await).await;
    let theirs = config_errors(&nats.client().await).await;
    for ((action, body), (ours, theirs)) in shared_config_errors().iter().zip(ours.iter().zip(&theirs)) {
        assert!(theirs.is_object(), "nats-server accepted {action} {body}");
        assert_eq!(ours, theirs, "{action} {body}");
    }
}

#[tokio::test]
async fn transform_config_errors_carry_nats_server_2_10_codes() {
    let server = SemaqServer::start();
    let client = server.client().await;
    create(&client, json!({"name": "O", "subjects": ["o.>"]})).await;
    let cases = [
        (json!({"name": "S", "sources": [{"name": "a.b"}]}), 10141, "sourced stream name is invalid".to_string()),
        (
            json!({"name": "S", "sources": [{"name": "O"}, {"name": "O"}]}),
            10140,
            "duplicate source configuration detected".into(),
        ),
        (
            json!({"name": "S", "sources": [{"name": "O", "filter_subject": "o.a", "subject_transforms": [{"src": "o.b", "dest": "x"}]}]}),
            10144,
            "source with multiple subject transforms cannot also have a single subject filter".into(),
        ),
        (
            json!({"name": "S", "sources": [{"name": "O", "subject_transforms": [{"src": "o..b", "dest": "x"}]}]}),
            10145,
            "source transform source: invalid subject o..b".into(),
        ),
        (
            json!({"name": "S", "sources": [{"name": "O", "subject_transforms": [{"src": "o.*", "dest": "x.{{wildcard(2)}}"}]}]}),
            10146,
            "source transform: invalid mapping destination: wildcard index out of range in {{wildcard(2)}}: [2]".into(),
        ),
        (
            json!({"name": "S", "sources": [{"name": "O", "subject_transforms": [{"src": "o.>", "dest": "x.>"}, {"src": "o.a", "dest": "y"}]}]}),
            10147,
            "source filters can not overlap".into(),
        ),
        (
            json!({"name": "S", "mirror": {"name": "O", "subject_transforms": [{"src": "o.*", "dest": "{{nope(1)}}"}]}}),
            10154,
            "mirror transform: invalid mapping destination: unknown function in {{nope(1)}}".into(),
        ),
        (
            json!({"name": "S", "first_seq": 5, "mirror": {"name": "O"}}),
            10143,
            "stream mirrors can not have first sequence configured".into(),
        ),
        (
            json!({"name": "S", "subjects": ["s"], "subject_transform": {"src": "s..x", "dest": "t"}}),
            10155,
            "stream transform source: invalid subject s..x".into(),
        ),
    ];
    for (config, err_code, description) in cases {
        let reply = create(&client, config.clone()).await;
        assert_eq!(reply["error"]["err_code"], err_code, "{config} → {reply}");
        assert_eq!(reply["error"]["description"], description, "{config}");
        assert_eq!(info(&client, "S").await["error"]["err_code"], 10059, "nothing was created by {config}");
    }
}

/// A direct get by sequence: status (none for a message), `Nats-Sequence`, subject, payload.
async fn direct_get(client: &async_nats::Client, stream: &str, seq: u64) -> (Option<u16>, String, String, String) {
    let body = json!({ "seq": seq }).to_string();
    let reply = client.request(format!("$JS.API.DIRECT.GET.{stream}"), body.into()).await.expect("direct get");
    let header =
        |name: &str| reply.headers.as_ref().and_then(|h| h.get(name)).map(|v| v.to_string()).unwrap_or_default();
    let payload = String::from_utf8_lossy(&reply.payload).into_owned();
    (reply.status.map(|s| s.as_u16()), header("Nats-Sequence"), header("Nats-Subject"), payload)
}

/// What a client sees of a stream's sequences: state, and a direct get of every sequence.
async fn sequences_seen(
    client: &async_nats::Client,
    stream: &str,
    through: u64,
) -> (Value, Vec<(Option<u16>, String, String, String)>) {
    let state = info(client, stream).await["state"].clone();
    let state = json!({
        "messages": state["messages"], "bytes": state["bytes"], "first_seq": state["first_seq"],
        "last_seq": state["last_seq"], "num_deleted": state["num_deleted"],
    });
    let mut gets = Vec::new();
    for seq in 1..=through {
        gets.push(direct_get(client, stream, seq).await);
    }
    (state, gets)
}

/// The origin deleted messages in the middle and purged its front before the mirror came: the
/// mirror jumps over the gaps (nats-server's `skipMsgs`), so every sequence holds what it holds
/// in the origin, a gap counts as deleted, and new messages keep the origin's numbers, also
/// after a restart.
#[tokio::test]
async fn a_mirror_keeps_the_gaps_its_origin_has() {
    let mut server = SemaqServer::start();
    let client = server.client().await;
    let js = context(&server).await;
    create(&client, json!({"name": "HOLEY", "subjects": ["holey.>"], "allow_direct": true})).await;
    for i in 1..=10 {
        publish(&js, &format!("holey.{}", i % 3), &format!("message {i}")).await;
    }
    api(&client, "$JS.API.STREAM.PURGE.HOLEY", r#"{"seq":3}"#).await;
    for seq in [4, 7, 8] {
        let deleted = api(&client, "$JS.API.STREAM.MSG.DELETE.HOLEY", &json!({ "seq": seq }).to_string()).await;
        assert_eq!(deleted["success"], true, "{deleted}");
    }
    create(&client, json!({"name": "COPY", "mirror": {"name": "HOLEY"}, "allow_direct": true})).await;
    wait_for_messages(&client, "COPY", 5).await;
    let origin = sequences_seen(&client, "HOLEY", 12).await;
    assert_eq!(origin.0["num_deleted"], 3, "{}", origin.0);
    assert_eq!(sequences_seen(&client, "COPY", 12).await, origin, "the mirror's sequences are the origin's");

    publish(&js, "holey.new", "message 11").await;
    wait_for_messages(&client, "COPY", 6).await;
    assert_eq!(direct_get(&client, "COPY", 11).await.1, "11");

    drop((client, js));
    server.terminate();
    server.restart();
    let client = server.client().await;
    let origin = sequences_seen(&client, "HOLEY", 12).await;
    assert_eq!(sequences_seen(&client, "COPY", 12).await, origin, "the gaps survive a restart");
}
