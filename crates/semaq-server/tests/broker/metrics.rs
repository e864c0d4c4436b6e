//! `/metrics` (Prometheus text) after a scripted workload counts exactly what the workload did;
//! `/jsz` and `/accountz` carry nats-server's field names, checked side by side with a real
//! nats-server; bad query values get an HTTP error JSON.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull, stream};
use futures::StreamExt;
use semaq_testkit::{http_get, http_get_json, sync, wait_until_async, NatsServer, SemaqServer};
use serde_json::{json, Value};

const CONFIG: &str = "metrics { detail: true, subject_depth: 1 }\n";
const ALPHA_MESSAGES: u64 = 5;
const BETA_MESSAGES: u64 = 3;
const PAYLOAD: &[u8] = b"0123456789";

/// `series` (name and labels, as written) → value, from Prometheus text.
fn parse(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("a sample line: {line:?}"));
            let value =
                if value == "+Inf" { f64::INFINITY } else { value.parse().unwrap_or_else(|_| panic!("{line}")) };
            (series.to_string(), value)
        })
        .collect()
}

fn scrape(server: &SemaqServer) -> BTreeMap<String, f64> {
    let (status, text) = server.http_text("/metrics");
    assert_eq!(status, 200, "{text}");
    parse(&text)
}

fn value(metrics: &BTreeMap<String, f64>, series: &str) -> f64 {
    *metrics.get(series).unwrap_or_else(|| panic!("no series {series} in:\n{}", names(metrics)))
}

fn names(metrics: &BTreeMap<String, f64>) -> String {
    metrics.keys().cloned().collect::<Vec<_>>().join("\n")
}

/// The sum of one family's series (`name{...}` lines).
fn sum(metrics: &BTreeMap<String, f64>, name: &str) -> f64 {
    metrics.iter().filter(|(series, _)| series.starts_with(&format!("{name}{{"))).map(|(_, v)| v).sum()
}

/// A stream of at most `max_msgs` messages that refuses more (discard new).
fn orders(max_msgs: i64) -> stream::Config {
    stream::Config {
        name: "ORDERS".into(),
        subjects: vec!["orders.>".into()],
        max_messages: max_msgs,
        discard: stream::DiscardPolicy::New,
        ..Default::default()
    }
}

/// 3 plain publishes, one with a `Nats-Msg-Id` and its duplicate, then one past `max_msgs`:
/// 4 stored, 1 duplicate, 1 refused for the stream's limits.
async fn publish_orders(js: &jetstream::Context) {
    for n in 0..3 {
        js.publish(format!("orders.{n}"), PAYLOAD.into()).await.unwrap().await.unwrap();
    }
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Nats-Msg-Id", "once");
    let first = js.publish_with_headers("orders.once", headers.clone(), PAYLOAD.into()).await.unwrap().await.unwrap();
    let again = js.publish_with_headers("orders.once", headers, PAYLOAD.into()).await.unwrap().await.unwrap();
    assert!(again.duplicate && again.sequence == first.sequence);
    let refused = js.publish("orders.more", PAYLOAD.into()).await.unwrap().await;
    assert!(refused.is_err(), "past max_msgs with discard new: {refused:?}");
}

#[tokio::test]
async fn metrics_count_exactly_what_a_workload_did() {
    let server = SemaqServer::with_config(CONFIG, &[]);
    let subscriber = server.client().await;
    let mut alpha = subscriber.subscribe("alpha.>").await.unwrap();
    sync(&subscriber).await;
    let publisher = server.client().await;
    for _ in 0..ALPHA_MESSAGES {
        publisher.publish("alpha.x", PAYLOAD.into()).await.unwrap();
    }
    for _ in 0..BETA_MESSAGES {
        publisher.publish("beta.y", PAYLOAD.into()).await.unwrap();
    }
    for _ in 0..ALPHA_MESSAGES {
        tokio::time::timeout(Duration::from_secs(10), alpha.next()).await.unwrap().unwrap();
    }
    sync(&publisher).await;

    let js = jetstream::new(publisher.clone());
    js.create_stream(orders(4)).await.unwrap();
    publish_orders(&js).await;
    let stream = js.get_stream("ORDERS").await.unwrap();
    let consumer =
        stream.create_consumer(pull::Config { durable_name: Some("proc".into()), ..Default::default() }).await.unwrap();
    let mut batch = consumer.fetch().max_messages(4).messages().await.unwrap();
    let mut fetched = 0;
    while let Some(message) = batch.next().await {
        let message = message.unwrap();
        fetched += 1;
        if fetched <= 2 {
            message.double_ack().await.unwrap();
        }
    }
    assert_eq!(fetched, 4);

    let metrics = scrape(&server);
    // Streams: publishes, duplicates and refusals by reason, state.
    assert_eq!(value(&metrics, r#"semaq_stream_publishes_total{stream="ORDERS"}"#), 4.0);
    assert_eq!(value(&metrics, r#"semaq_stream_duplicates_total{stream="ORDERS"}"#), 1.0);
    assert_eq!(value(&metrics, r#"semaq_stream_refusals_total{stream="ORDERS",reason="limits"}"#), 1.0);
    assert_eq!(sum(&metrics, "semaq_stream_refusals_total"), 1.0, "no other refusal");
    assert_eq!(value(&metrics, r#"semaq_stream_messages{stream="ORDERS"}"#), 4.0);
    assert_eq!(value(&metrics, r#"semaq_stream_first_seq{stream="ORDERS"}"#), 1.0);
    assert_eq!(value(&metrics, r#"semaq_stream_last_seq{stream="ORDERS"}"#), 4.0);
    assert_eq!(value(&metrics, r#"semaq_stream_consumers{stream="ORDERS"}"#), 1.0);
    assert!(value(&metrics, r#"semaq_stream_bytes{stream="ORDERS"}"#) > 4.0 * PAYLOAD.len() as f64);
    assert_eq!(value(&metrics, "semaq_jetstream_streams"), 1.0);
    assert_eq!(value(&metrics, "semaq_jetstream_consumers"), 1.0);
    // Every one of the 6 publishes was answered; each stored batch was synced at least once.
    assert_eq!(value(&metrics, "semaq_jetstream_publish_ack_seconds_count"), 6.0);
    assert_eq!(value(&metrics, r#"semaq_jetstream_publish_ack_seconds_bucket{le="+Inf"}"#), 6.0);
    assert!(value(&metrics, "semaq_store_sync_seconds_count") >= 1.0);
    // The consumer (detail): 4 delivered, 2 acked.
    let proc = r#"{stream="ORDERS",consumer="proc"}"#;
    assert_eq!(value(&metrics, &format!("semaq_consumer_ack_pending_messages{proc}")), 2.0);
    assert_eq!(value(&metrics, &format!("semaq_consumer_pending_messages{proc}")), 0.0);
    assert_eq!(value(&metrics, &format!("semaq_consumer_redelivered_messages{proc}")), 0.0);
    assert_eq!(value(&metrics, &format!("semaq_consumer_delivered_stream_seq{proc}")), 4.0);
    assert_eq!(value(&metrics, &format!("semaq_consumer_ack_floor_stream_seq{proc}")), 2.0);
    // Traffic per subject prefix (detail), and the totals are their sums.
    assert_eq!(value(&metrics, r#"semaq_subject_in_messages_total{prefix="alpha"}"#), ALPHA_MESSAGES as f64);
    assert_eq!(value(&metrics, r#"semaq_subject_in_messages_total{prefix="beta"}"#), BETA_MESSAGES as f64);
    assert_eq!(value(&metrics, r#"semaq_subject_in_messages_total{prefix="orders"}"#), 6.0);
    let alpha_bytes = (ALPHA_MESSAGES * PAYLOAD.len() as u64) as f64;
    assert_eq!(value(&metrics, r#"semaq_subject_in_bytes_total{prefix="alpha"}"#), alpha_bytes);
    assert_eq!(value(&metrics, r#"semaq_subject_out_messages_total{prefix="alpha"}"#), ALPHA_MESSAGES as f64);
    assert_eq!(value(&metrics, r#"semaq_subject_out_messages_total{prefix="beta"}"#), 0.0, "nobody got beta");
    assert_eq!(sum(&metrics, "semaq_subject_in_messages_total"), value(&metrics, "semaq_in_messages_total"));
    assert_eq!(sum(&metrics, "semaq_subject_in_bytes_total"), value(&metrics, "semaq_in_bytes_total"));
    assert_eq!(sum(&metrics, "semaq_subject_out_messages_total"), value(&metrics, "semaq_out_messages_total"));
    assert_eq!(value(&metrics, "semaq_connections"), 2.0);
    assert_eq!(value(&metrics, "semaq_slow_consumers_total"), 0.0);
    assert_eq!(value(&metrics, "semaq_lossy_shed_messages_total"), 0.0);
    assert!(value(&metrics, "semaq_jetstream_api_requests_total") >= 3.0);
    assert_eq!(value(&metrics, "semaq_agents"), 0.0);
    assert!(metrics.keys().any(|k| k.starts_with("semaq_build_info{")), "{}", names(&metrics));
}

#[tokio::test]
async fn the_default_level_leaves_out_per_consumer_and_per_prefix_series() {
    let server = SemaqServer::start();
    let client = server.client().await;
    let js = jetstream::new(client.clone());
    js.create_stream(orders(10)).await.unwrap();
    js.publish("orders.a", PAYLOAD.into()).await.unwrap().await.unwrap();
    let stream = js.get_stream("ORDERS").await.unwrap();
    stream.create_consumer(pull::Config { durable_name: Some("proc".into()), ..Default::default() }).await.unwrap();
    let metrics = scrape(&server);
    assert_eq!(value(&metrics, r#"semaq_stream_publishes_total{stream="ORDERS"}"#), 1.0);
    assert!(!metrics.keys().any(|k| k.starts_with("semaq_consumer_")), "{}", names(&metrics));
    assert!(!metrics.keys().any(|k| k.starts_with("semaq_subject_")), "{}", names(&metrics));
    assert!(value(&metrics, "semaq_in_messages_total") >= 1.0);
}

#[tokio::test]
async fn openmetrics_is_served_when_asked_for() {
    let server = SemaqServer::start();
    let (status, text) = http_get(server.http_addr(), "/metrics", &[("Accept", "application/openmetrics-text")]);
    assert_eq!(status, 200);
    assert!(text.trim_end().ends_with("# EOF"), "{text}");
    assert!(text.contains("# TYPE semaq_in_messages counter"), "{text}");
}

/// Every key `reference` has, `ours` has too, recursively (arrays: their first elements);
/// returns the paths missing.
fn missing_keys(reference: &Value, ours: &Value, path: &str, missing: &mut BTreeSet<String>) {
    match (reference, ours) {
        (Value::Object(theirs), Value::Object(mine)) => {
            for (key, value) in theirs {
                let at = format!("{path}.{key}");
                match mine.get(key) {
                    Some(own) => missing_keys(value, own, &at, missing),
                    None => {
                        missing.insert(at);
                    }
                }
            }
        }
        (Value::Array(theirs), Value::Array(mine)) => {
            if let (Some(first), Some(own)) = (theirs.first(), mine.first()) {
                missing_keys(first, own, &format!("{path}[0]"), missing);
            }
        }
        _ => {}
    }
}

async fn jsz_workload(url: String) {
    let client = async_nats::connect(url).await.unwrap();
    let js = jetstream::new(client.clone());
    js.create_stream(orders(100)).await.unwrap();
    for n in 0..3 {
        js.publish(format!("orders.{n}"), PAYLOAD.into()).await.unwrap().await.unwrap();
    }
    let stream = js.get_stream("ORDERS").await.unwrap();
    let consumer =
        stream.create_consumer(pull::Config { durable_name: Some("proc".into()), ..Default::default() }).await.unwrap();
    let mut batch = consumer.fetch().max_messages(2).messages().await.unwrap();
    let first = batch.next().await.unwrap().unwrap();
    first.double_ack().await.unwrap();
    while batch.next().await.is_some() {}
    client.flush().await.unwrap();
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// nats-server with JetStream in a temp dir (kept while it runs) and its monitoring address.
fn nats_with_jetstream_and_monitoring() -> (NatsServer, std::net::SocketAddr, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let http_port = free_port();
    let store = dir.path().display().to_string();
    let nats = NatsServer::with_args(&["-js", "-sd", &store, "-m", &http_port.to_string()]);
    (nats, format!("127.0.0.1:{http_port}").parse().unwrap(), dir)
}

/// Reserved bytes in `/jsz` on a server whose streams set `max_bytes` (1 KiB in memory, 8 KiB
/// and 2 KiB on file) and one does not.
async fn reserved_in_jsz(url: String, http: impl Fn(&str) -> Value) -> (Value, Value) {
    let js = jetstream::new(async_nats::connect(url).await.unwrap());
    let streams = [("MEM", stream::StorageType::Memory, 1024), ("FILE", stream::StorageType::File, 8192)];
    for (name, storage, max_bytes) in streams.into_iter().chain([("SMALL", stream::StorageType::File, 2048)]) {
        let subjects = vec![format!("{name}.>")];
        js.create_stream(stream::Config { name: name.into(), subjects, storage, max_bytes, ..Default::default() })
            .await
            .unwrap();
    }
    let subjects = vec!["free.>".to_string()];
    js.create_stream(stream::Config { name: "FREE".into(), subjects, ..Default::default() }).await.unwrap();
    let jsz = http("/jsz");
    (jsz["reserved_memory"].clone(), jsz["reserved_storage"].clone())
}

#[tokio::test]
async fn jsz_reserves_the_max_bytes_of_streams_as_nats_server_does() {
    let (nats, nats_http, _dir) = nats_with_jetstream_and_monitoring();
    let server = SemaqServer::start();
    let ours = reserved_in_jsz(server.url(), |path| server.http_json(path)).await;
    assert_eq!(ours, (json!(1024), json!(8192 + 2048)));
    assert_eq!(reserved_in_jsz(nats.url(), |path| http_get_json(nats_http, path)).await, ours);
}

#[tokio::test]
async fn jsz_has_nats_servers_field_names() {
    let (nats, nats_http, _dir) = nats_with_jetstream_and_monitoring();
    let server = SemaqServer::start();
    jsz_workload(nats.url()).await;
    jsz_workload(server.url()).await;

    // The last but one is what prometheus-nats-exporter's JetStream collector asks for.
    let queries = ["", "?accounts=true", "?streams=true", "?consumers=true&config=true&raft=true", "?acc=$G&streams=1"];
    for query in queries {
        let path = format!("/jsz{query}");
        let reference = http_get_json(nats_http, &path);
        let ours = server.http_json(&path);
        let mut missing = BTreeSet::new();
        missing_keys(&reference, &ours, "", &mut missing);
        assert!(missing.is_empty(), "{path}: fields nats-server has and SemaQ lacks: {missing:?}\n{ours:#}");
        let details = |body: &Value| body["account_details"].as_array().map(Vec::len);
        assert_eq!(details(&ours), details(&reference), "{path}: account_details as nats-server");
    }
    let jsz = server.http_json("/jsz?consumers=true");
    let account = &jsz["account_details"][0];
    assert_eq!(account["name"], "$G");
    let stream = &account["stream_detail"][0];
    assert_eq!(stream["name"], "ORDERS");
    assert_eq!(stream["state"]["messages"], 3);
    assert!(stream.get("config").is_none(), "config only with config=true");
    let consumer = &stream["consumer_detail"][0];
    assert_eq!(consumer["name"], "proc");
    assert_eq!(consumer["num_ack_pending"], 1);
    for key in ["delivered", "ack_floor"] {
        let last_active = consumer[key]["last_active"].as_str().unwrap_or_default();
        assert!(last_active.ends_with('Z') && last_active.contains('T'), "{key}.last_active: {consumer:#}");
    }
    assert_eq!(consumer["num_pending"], 1);
    assert!(consumer.get("config").is_none());
    assert_eq!(jsz["messages"], 3);
    assert_eq!(jsz["streams"], 1);
    assert_eq!(jsz["consumers"], 1);
    assert!(jsz["api"]["total"].as_u64().unwrap() >= 3);
    let paged = server.http_json("/jsz?accounts=true&offset=1");
    assert!(paged.get("account_details").is_none(), "one account: an offset of 1 lists none");

    // /accountz: the list, and $G's detail, with nats-server's names.
    let reference = http_get_json(nats_http, "/accountz?acc=$G");
    let ours = server.http_json("/accountz?acc=$G");
    let mut missing = BTreeSet::new();
    missing_keys(&reference, &ours, "", &mut missing);
    missing.retain(|path| !path.starts_with(".account_detail.imports"));
    assert!(missing.is_empty(), "/accountz?acc=$G lacks {missing:?}\n{ours:#}");
    let accountz = server.http_json("/accountz");
    assert_eq!(accountz["accounts"], json!(["$G", "$SYS"]), "the global and the implicit system account");
    assert_eq!(accountz["system_account"], http_get_json(nats_http, "/accountz")["system_account"]);
}

#[tokio::test]
async fn bad_query_values_get_an_error_json_and_unknown_parameters_are_ignored() {
    let server = SemaqServer::start();
    for (path, named) in [
        ("/jsz?streams=maybe", "'streams'"),
        ("/jsz?consumers=2", "'consumers'"),
        ("/jsz?limit=ten", "'limit'"),
        ("/jsz?offset=1.5", "'offset'"),
        ("/accountz?acc=nope", "nope"),
    ] {
        let (status, body) = server.http_text(path);
        assert_eq!(status, 400, "{path}: {body}");
        let body: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: not JSON ({e}): {body}"));
        assert_eq!(body["error"]["code"], 400);
        let description = body["error"]["description"].as_str().unwrap();
        assert!(description.contains(named), "{path}: {description}");
    }
    let (status, _) = server.http_text("/jsz?whatever=1&streams=true");
    assert_eq!(status, 200, "unknown parameters are ignored, as nats-server");
    wait_until_async("the server still answers", Duration::from_secs(5), || {
        let ok = server.http_json("/healthz")["status"] == "ok";
        async move { ok }
    })
    .await;
}

#[tokio::test]
async fn agents_are_counted_per_intent_and_agent() {
    let server = SemaqServer::start();
    let agent = server.client().await;
    let mut inbox = agent.subscribe("agents.a1").await.unwrap();
    let beat = serde_json::json!({ "agent_id": "a1", "intents": ["summarize"], "inbox": "agents.a1", "capacity": 4 });
    let reply = agent.request("$SEMAQ.AGENT.HB", beat.to_string().into()).await.unwrap();
    assert_eq!(serde_json::from_slice::<Value>(&reply.payload).unwrap()["ok"], true);
    // Answers the first two requests ok, the third with an error.
    let serving = tokio::spawn({
        let agent = agent.clone();
        async move {
            for n in 0..3 {
                let message = inbox.next().await.unwrap();
                let mut headers = async_nats::HeaderMap::new();
                headers.insert("Semaq-Status", if n < 2 { "ok" } else { "error" });
                agent.publish_with_headers(message.reply.unwrap(), headers, "done".into()).await.unwrap();
                agent.flush().await.unwrap();
            }
        }
    });
    let requester = server.client().await;
    for _ in 0..3 {
        requester.request("intent.summarize", "text".into()).await.unwrap();
    }
    serving.await.unwrap();

    let metrics = scrape(&server);
    let member = r#"{intent="summarize",agent="a1"}"#;
    assert_eq!(value(&metrics, "semaq_agents"), 1.0);
    assert_eq!(value(&metrics, r#"semaq_intent_routed_total{intent="summarize"}"#), 3.0);
    assert_eq!(value(&metrics, r#"semaq_intent_waiting_requests{intent="summarize"}"#), 0.0);
    assert_eq!(value(&metrics, &format!("semaq_agent_requests_total{member}")), 3.0);
    assert_eq!(value(&metrics, &format!("semaq_agent_ok_total{member}")), 2.0);
    assert_eq!(value(&metrics, &format!("semaq_agent_errors_total{member}")), 1.0);
    assert_eq!(value(&metrics, &format!("semaq_agent_in_flight_requests{member}")), 0.0);
    let agents = server.http_json("/semaq/agents");
    let weight = agents["intents"][0]["agents"][0]["weight"].as_f64().unwrap();
    assert_eq!(value(&metrics, &format!("semaq_agent_weight{member}")), weight, "the weight /semaq/agents shows");
}
