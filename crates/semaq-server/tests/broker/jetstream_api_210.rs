//! The consumer API of nats-server 2.10–2.12: create/update actions, the filter in the create
//! subject, several filter subjects, headers-only deliveries, pausing, priority groups
//! (overflow and pinned client) and `next_by_subj` gets. Error numbers and texts are
//! nats-server's `server/errors.json`; status lines are those nats-server sends.

use std::time::Duration;

use futures::StreamExt;
use semaq_testkit::SemaqServer;
use serde_json::{json, Value};

use crate::jetstream_api::{api, assert_api_error, context, publish, stream_config, WAIT};

/// Creates stream `S` on `orders.>` and publishes `subjects` in order (payload = subject).
async fn orders(server: &SemaqServer, subjects: &[&str]) -> async_nats::Client {
    let client = server.client().await;
    let js = context(server).await;
    js.create_stream(stream_config("S", &["orders.>"])).await.expect("stream");
    for subject in subjects {
        publish(&js, subject, subject).await;
    }
    client
}

async fn create(client: &async_nats::Client, subject: &str, body: Value) -> Value {
    api(client, subject, &body.to_string()).await
}

/// A pull request sent on a fresh inbox; returns what arrived until `count` messages, a status
/// or `wait` passed: (subject, payload, headers as "Name: value" lines, status code).
async fn pull(client: &async_nats::Client, consumer: &str, body: Value, count: usize, wait: Duration) -> Vec<Delivery> {
    let inbox = client.new_inbox();
    let mut replies = client.subscribe(inbox.clone()).await.expect("subscribe");
    let subject = format!("$JS.API.CONSUMER.MSG.NEXT.S.{consumer}");
    client.publish_with_reply(subject, inbox, body.to_string().into()).await.expect("pull");
    let mut got = Vec::new();
    while got.len() < count {
        let Ok(Some(message)) = tokio::time::timeout(wait, replies.next()).await else { break };
        let status = message.status.map(|s| s.as_u16());
        let headers = message
            .headers
            .iter()
            .flat_map(|map| {
                map.iter().map(|(n, v)| format!("{n}: {}", v.iter().map(|v| v.as_str()).collect::<String>()))
            })
            .collect();
        got.push(Delivery {
            subject: message.subject.to_string(),
            payload: String::from_utf8_lossy(&message.payload).into_owned(),
            headers,
            status,
            description: message.description.clone(),
        });
        if status.is_some() {
            break;
        }
    }
    got
}

#[derive(Debug)]
struct Delivery {
    subject: String,
    payload: String,
    headers: Vec<String>,
    status: Option<u16>,
    description: Option<String>,
}

impl Delivery {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find_map(|line| line.strip_prefix(name).and_then(|rest| rest.strip_prefix(": ")))
    }
}

#[tokio::test]
async fn create_action_refuses_a_different_existing_config_and_update_a_missing_consumer() {
    let server = SemaqServer::start();
    let client = orders(&server, &[]).await;
    let config = json!({"durable_name": "C", "ack_policy": "explicit"});
    let subject = "$JS.API.CONSUMER.CREATE.S.C";

    let missing = create(&client, subject, json!({"stream_name": "S", "config": config, "action": "update"})).await;
    assert_api_error(&missing, 400, 10149);
    assert_eq!(missing["error"]["description"], "consumer does not exist");

    let created = create(&client, subject, json!({"stream_name": "S", "config": config, "action": "create"})).await;
    assert_eq!(created["name"], "C", "{created}");
    let again = create(&client, subject, json!({"stream_name": "S", "config": config, "action": "create"})).await;
    assert!(again.get("error").is_none(), "the same config again is not an error: {again}");

    let changed = json!({"durable_name": "C", "ack_policy": "explicit", "description": "new"});
    let exists = create(&client, subject, json!({"stream_name": "S", "config": changed, "action": "create"})).await;
    assert_api_error(&exists, 400, 10148);
    assert_eq!(exists["error"]["description"], "consumer already exists");

    let updated = create(&client, subject, json!({"stream_name": "S", "config": changed, "action": "update"})).await;
    assert_eq!(updated["config"]["description"], "new", "{updated}");

    let ack_all = json!({"durable_name": "C", "ack_policy": "all"});
    let refused = create(&client, subject, json!({"stream_name": "S", "config": ack_all, "action": "update"})).await;
    assert_api_error(&refused, 500, 10012);
    assert_eq!(refused["error"]["description"], "ack policy can not be updated");

    let bogus = create(&client, subject, json!({"stream_name": "S", "config": config, "action": "upsert"})).await;
    assert_api_error(&bogus, 400, 10025);
}

#[tokio::test]
async fn the_filter_in_the_create_subject_must_match_the_config() {
    let server = SemaqServer::start();
    let client = orders(&server, &["orders.new", "orders.paid"]).await;

    let config = json!({"name": "P", "filter_subject": "orders.new"});
    let mismatch =
        create(&client, "$JS.API.CONSUMER.CREATE.S.P.orders.paid", json!({"stream_name": "S", "config": config})).await;
    assert_api_error(&mismatch, 400, 10131);
    assert_eq!(
        mismatch["error"]["description"],
        "Consumer create request did not match filtered subject from create subject"
    );

    let taken = create(
        &client,
        "$JS.API.CONSUMER.CREATE.S.P.orders.paid",
        json!({"stream_name": "S", "config": {"name": "P"}}),
    )
    .await;
    assert_eq!(taken["config"]["filter_subject"], "orders.paid", "{taken}");
    assert_eq!(taken["num_pending"], 1, "{taken}");
}

#[tokio::test]
async fn several_filter_subjects_deliver_only_their_subjects_and_may_not_overlap() {
    let server = SemaqServer::start();
    let client = orders(&server, &["orders.new", "orders.paid", "orders.shipped", "orders.new"]).await;
    let subject = "$JS.API.CONSUMER.CREATE.S.F";

    let overlapping = json!({"name": "F", "filter_subjects": ["orders.*", "orders.new"]});
    let refused = create(&client, subject, json!({"stream_name": "S", "config": overlapping})).await;
    assert_api_error(&refused, 400, 10138);
    let empty = json!({"name": "F", "filter_subjects": ["orders.new", ""]});
    assert_api_error(&create(&client, subject, json!({"stream_name": "S", "config": empty})).await, 400, 10139);
    let both = json!({"name": "F", "filter_subject": "orders.paid", "filter_subjects": ["orders.new"]});
    assert_api_error(&create(&client, subject, json!({"stream_name": "S", "config": both})).await, 400, 10136);

    let config = json!({"name": "F", "ack_policy": "none", "filter_subjects": ["orders.new", "orders.shipped"]});
    let info = create(&client, subject, json!({"stream_name": "S", "config": config})).await;
    assert_eq!(info["num_pending"], 3, "{info}");
    let got = pull(&client, "F", json!({"batch": 10, "expires": 300_000_000}), 10, WAIT).await;
    let subjects: Vec<&str> = got.iter().filter(|d| d.status.is_none()).map(|d| d.subject.as_str()).collect();
    assert_eq!(subjects, ["orders.new", "orders.shipped", "orders.new"]);
}

#[tokio::test]
async fn filter_subjects_work_through_async_nats_pull_consumers() {
    let server = SemaqServer::start();
    let _client = orders(&server, &["orders.a", "orders.b", "orders.c"]).await;
    let js = context(&server).await;
    let stream = js.get_stream("S").await.expect("stream");
    let consumer = stream
        .create_consumer(async_nats::jetstream::consumer::pull::Config {
            durable_name: Some("multi".into()),
            filter_subjects: vec!["orders.a".into(), "orders.c".into()],
            ..Default::default()
        })
        .await
        .expect("consumer with filter_subjects");
    let mut messages =
        consumer.fetch().max_messages(5).expires(Duration::from_millis(500)).messages().await.expect("fetch");
    let mut subjects = Vec::new();
    while let Some(message) = messages.next().await {
        let message = message.expect("message");
        subjects.push(message.subject.to_string());
        message.ack().await.expect("ack");
    }
    assert_eq!(subjects, ["orders.a", "orders.c"]);
}

#[tokio::test]
async fn headers_only_delivers_the_size_and_no_payload() {
    let server = SemaqServer::start();
    let client = orders(&server, &["orders.new"]).await;
    let config = json!({"name": "H", "ack_policy": "none", "headers_only": true});
    create(&client, "$JS.API.CONSUMER.CREATE.S.H", json!({"stream_name": "S", "config": config})).await;
    let got = pull(&client, "H", json!({"batch": 1}), 1, WAIT).await;
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].payload, "");
    assert_eq!(got[0].header("Nats-Msg-Size"), Some("10"), "{got:?}");
}

#[tokio::test]
async fn a_paused_consumer_delivers_nothing_until_resumed() {
    let server = SemaqServer::start();
    let client = orders(&server, &["orders.new"]).await;
    let future = "2200-01-01T00:00:00Z";
    let config = json!({"durable_name": "P", "ack_policy": "explicit", "pause_until": future});
    let info = create(&client, "$JS.API.CONSUMER.CREATE.S.P", json!({"stream_name": "S", "config": config})).await;
    assert_eq!(info["paused"], true, "{info}");
    assert!(info["pause_remaining"].as_u64().is_some_and(|ns| ns > 0), "{info}");

    let got = pull(&client, "P", json!({"batch": 1, "expires": 300_000_000}), 1, WAIT).await;
    assert_eq!(got.iter().map(|d| d.status).collect::<Vec<_>>(), [Some(408)], "nothing while paused: {got:?}");

    let resumed = api(&client, "$JS.API.CONSUMER.PAUSE.S.P", "").await;
    assert_eq!(resumed["type"], "io.nats.jetstream.api.v1.consumer_pause_response");
    assert_eq!(resumed["paused"], false, "{resumed}");
    let got = pull(&client, "P", json!({"batch": 1, "expires": 1_000_000_000}), 1, WAIT).await;
    assert_eq!(got.first().map(|d| d.payload.as_str()), Some("orders.new"), "{got:?}");

    let paused = api(&client, "$JS.API.CONSUMER.PAUSE.S.P", &json!({"pause_until": future}).to_string()).await;
    assert_eq!(paused["paused"], true, "{paused}");
    assert_eq!(paused["pause_until"], future, "{paused}");
    let info = api(&client, "$JS.API.CONSUMER.INFO.S.P", "").await;
    assert_eq!(info["config"]["pause_until"], future, "{info}");
    assert_api_error(&api(&client, "$JS.API.CONSUMER.PAUSE.S.NOPE", "").await, 404, 10014);
}

#[tokio::test]
async fn overflow_requests_get_messages_only_past_their_min_pending() {
    let server = SemaqServer::start();
    let client = orders(&server, &["orders.1", "orders.2", "orders.3"]).await;
    let config = json!({"durable_name": "O", "ack_policy": "explicit", "priority_policy": "overflow", "priority_groups": ["jobs"]});
    let info = create(&client, "$JS.API.CONSUMER.CREATE.S.O", json!({"stream_name": "S", "config": config})).await;
    assert_eq!(info["config"]["priority_groups"], json!(["jobs"]), "{info}");

    let missing = pull(&client, "O", json!({"batch": 1}), 1, WAIT).await;
    assert_eq!(missing[0].status, Some(400));
    assert_eq!(missing[0].description.as_deref(), Some("Bad Request - Priority Group missing"));
    let unknown = pull(&client, "O", json!({"batch": 1, "group": "other"}), 1, WAIT).await;
    assert_eq!(unknown[0].description.as_deref(), Some("Bad Request - Invalid Priority Group"));

    let idle =
        pull(&client, "O", json!({"batch": 1, "group": "jobs", "min_pending": 10, "expires": 300_000_000}), 1, WAIT)
            .await;
    assert_eq!(idle.iter().map(|d| d.status).collect::<Vec<_>>(), [Some(408)], "3 pending < 10: {idle:?}");
    let overflow = pull(&client, "O", json!({"batch": 1, "group": "jobs", "min_pending": 3}), 1, WAIT).await;
    assert_eq!(overflow.first().map(|d| d.payload.as_str()), Some("orders.1"), "{overflow:?}");

    let push =
        json!({"name": "X", "deliver_subject": "out", "priority_policy": "overflow", "priority_groups": ["jobs"]});
    assert_api_error(
        &create(&client, "$JS.API.CONSUMER.CREATE.S.X", json!({"stream_name": "S", "config": push})).await,
        400,
        10178,
    );
    let no_group = json!({"name": "X", "priority_policy": "overflow"});
    assert_api_error(
        &create(&client, "$JS.API.CONSUMER.CREATE.S.X", json!({"stream_name": "S", "config": no_group})).await,
        400,
        10159,
    );
    let bad_name = json!({"name": "X", "priority_policy": "overflow", "priority_groups": ["a group"]});
    assert_api_error(
        &create(&client, "$JS.API.CONSUMER.CREATE.S.X", json!({"stream_name": "S", "config": bad_name})).await,
        400,
        10162,
    );
    let no_policy = json!({"name": "X", "priority_groups": ["jobs"]});
    assert_api_error(
        &create(&client, "$JS.API.CONSUMER.CREATE.S.X", json!({"stream_name": "S", "config": no_policy})).await,
        400,
        10196,
    );
}

#[tokio::test]
async fn a_pinned_client_gets_every_message_until_unpinned() {
    let server = SemaqServer::start();
    let client = orders(&server, &["orders.1", "orders.2", "orders.3"]).await;
    let config = json!({"durable_name": "PIN", "ack_policy": "none", "priority_policy": "pinned_client", "priority_groups": ["g"]});
    let info = create(&client, "$JS.API.CONSUMER.CREATE.S.PIN", json!({"stream_name": "S", "config": config})).await;
    assert_eq!(info["config"]["priority_timeout"], 120_000_000_000u64, "nats-server's default: {info}");

    let first = pull(&client, "PIN", json!({"batch": 1, "group": "g"}), 1, WAIT).await;
    let pin = first[0].header("Nats-Pin-Id").expect("the first delivery pins its client").to_string();
    let info = api(&client, "$JS.API.CONSUMER.INFO.S.PIN", "").await;
    assert_eq!(info["priority_groups"][0]["pinned_client_id"], pin.as_str(), "{info}");

    let other = pull(&client, "PIN", json!({"batch": 1, "group": "g", "expires": 300_000_000}), 1, WAIT).await;
    assert_eq!(other.iter().map(|d| d.status).collect::<Vec<_>>(), [Some(408)], "not pinned, no messages: {other:?}");
    let wrong = pull(&client, "PIN", json!({"batch": 1, "group": "g", "id": "stale"}), 1, WAIT).await;
    assert_eq!((wrong[0].status, wrong[0].description.as_deref()), (Some(423), Some("Nats-Pin-Id mismatch")));
    let pinned = pull(&client, "PIN", json!({"batch": 1, "group": "g", "id": pin}), 1, WAIT).await;
    assert_eq!(pinned[0].payload, "orders.2", "{pinned:?}");

    let unpinned = api(&client, "$JS.API.CONSUMER.UNPIN.S.PIN", r#"{"group":"g"}"#).await;
    assert!(unpinned.get("error").is_none(), "{unpinned}");
    assert_api_error(&api(&client, "$JS.API.CONSUMER.UNPIN.S.PIN", r#"{"group":"nope"}"#).await, 400, 10160);
    let next = pull(&client, "PIN", json!({"batch": 1, "group": "g"}), 1, WAIT).await;
    let new_pin = next[0].header("Nats-Pin-Id").expect("a new pin");
    assert_ne!(new_pin, pin, "unpinning hands out a new pin id");
    assert_eq!(next[0].payload, "orders.3");
}

#[tokio::test]
async fn msg_get_next_by_subject_starts_at_seq() {
    let server = SemaqServer::start();
    let client = orders(&server, &["orders.a.1", "orders.b.1", "orders.a.2", "orders.b.2"]).await;
    let get = |body: Value| {
        let client = client.clone();
        async move { api(&client, "$JS.API.STREAM.MSG.GET.S", &body.to_string()).await }
    };
    let first = get(json!({"next_by_subj": "orders.b.*"})).await;
    assert_eq!(first["message"]["seq"], 2, "{first}");
    let from_three = get(json!({"next_by_subj": "orders.b.*", "seq": 3})).await;
    assert_eq!(from_three["message"]["seq"], 4, "{from_three}");
    assert_eq!(from_three["message"]["subject"], "orders.b.2");
    assert_api_error(&get(json!({"next_by_subj": "orders.a.*", "seq": 4})).await, 404, 10037);
    assert_api_error(&get(json!({"seq": 1, "last_by_subj": "orders.a.1"})).await, 400, 10003);
    assert_api_error(&get(json!({"next_by_subj": "orders.a.*", "last_by_subj": "orders.a.1"})).await, 400, 10003);
}

#[tokio::test]
async fn counter_streams_store_the_sum_of_nats_incr_per_subject() {
    use crate::jetstream_api::publish_raw;
    use base64::Engine;
    let server = SemaqServer::start();
    let client = orders(&server, &[]).await;
    let config = json!({"name": "HITS", "subjects": ["hits.>"], "allow_msg_counter": true});
    let created = api(&client, "$JS.API.STREAM.CREATE.HITS", &config.to_string()).await;
    assert_eq!(created["config"]["allow_msg_counter"], true, "{created}");

    for incr in ["5", "-2", "10"] {
        let ack = publish_raw(&client, "hits.a", &[("Nats-Incr", incr)], b"").await;
        assert!(ack.get("error").is_none(), "{ack}");
    }
    publish_raw(&client, "hits.b", &[("Nats-Incr", "1")], b"").await;
    let last = api(&client, "$JS.API.STREAM.MSG.GET.HITS", r#"{"last_by_subj":"hits.a"}"#).await;
    let data = base64::engine::general_purpose::STANDARD.decode(last["message"]["data"].as_str().unwrap()).unwrap();
    assert_eq!(data, br#"{"val":"13"}"#);

    let refusals = [
        ("hits.a", vec![], &b""[..], 10169, "message counter increment is missing"),
        ("hits.a", vec![("Nats-Incr", "1")], &b"x"[..], 10170, "message counter has payload"),
        ("hits.a", vec![("Nats-Incr", "one")], &b""[..], 10171, "message counter increment is invalid"),
        (
            "hits.a",
            vec![("Nats-Incr", "1"), ("Nats-Expected-Stream", "HITS")],
            &b""[..],
            10171,
            "message counter increment is invalid",
        ),
        ("orders.a", vec![("Nats-Incr", "1")], &b""[..], 10168, "message counters is disabled"),
    ];
    for (subject, headers, payload, code, description) in refusals {
        let ack = publish_raw(&client, subject, &headers, payload).await;
        assert_eq!(ack["error"]["err_code"], code, "{subject} {headers:?}: {ack}");
        assert_eq!(ack["error"]["description"], description);
    }

    let update = json!({"name": "HITS", "subjects": ["hits.>"], "allow_msg_counter": false});
    let refused = api(&client, "$JS.API.STREAM.UPDATE.HITS", &update.to_string()).await;
    assert_api_error(&refused, 500, 10052);
    let discard_new = json!({"name": "D", "subjects": ["d"], "allow_msg_counter": true, "discard": "new"});
    assert_api_error(&api(&client, "$JS.API.STREAM.CREATE.D", &discard_new.to_string()).await, 500, 10052);
}

#[tokio::test]
async fn an_ephemeral_filtered_push_consumer_counts_pending_of_its_filter_only() {
    use async_nats::jetstream::consumer::push;
    let server = SemaqServer::start();
    let client = orders(&server, &["orders.a", "orders.b", "orders.a", "orders.b", "orders.a"]).await;
    let js = context(&server).await;
    let stream = js.get_stream("S").await.expect("stream");
    let mut consumer = stream
        .create_consumer(push::Config {
            deliver_subject: client.new_inbox(),
            filter_subject: "orders.a".into(),
            ..Default::default()
        })
        .await
        .expect("ephemeral push consumer");
    let info = consumer.info().await.expect("info").clone();
    assert!(info.config.durable_name.is_none());
    let mut messages = consumer.messages().await.expect("messages");
    let mut pending = Vec::new();
    while pending.len() < 3 {
        let message = tokio::time::timeout(WAIT, messages.next()).await.expect("delivery in time").unwrap().unwrap();
        pending.push(message.info().expect("ack subject").pending);
        message.ack().await.expect("ack");
    }
    assert_eq!(pending, [2, 1, 0], "pending counts only orders.a");
    let info = consumer.info().await.expect("info");
    assert_eq!(info.num_pending, 0);
}
