//! Mirrors and sources of a stream on another server: the stream's metadata names the origin's
//! URL (`"semaq.url.<origin>": "nats://host:port"`) and SemaQ follows it as a NATS client
//! through an ordered consumer, against a real nats-server 2.9 and a second semaq-server. The
//! copies are those a local source or mirror makes (`Nats-Stream-Source`, origin sequences
//! for mirrors), and following resumes after the last copy stored when either side restarts:
//! nothing lost, nothing twice.

use std::time::Duration;

use async_nats::jetstream;
use semaq_testkit::{NatsServer, SemaqServer};
use serde_json::{json, Value};

use crate::jetstream_api::{api, assert_api_error, publish};

/// Following is asynchronous: copies appear within this.
const FOLLOW: Duration = Duration::from_secs(15);

async fn create(client: &async_nats::Client, config: &Value) -> Value {
    let name = config["name"].as_str().expect("name").to_string();
    api(client, &format!("$JS.API.STREAM.CREATE.{name}"), &config.to_string()).await
}

/// Polls stream info until it holds `count` messages; returns the info.
async fn wait_for_messages(client: &async_nats::Client, name: &str, count: u64) -> Value {
    let deadline = tokio::time::Instant::now() + FOLLOW;
    loop {
        let info = api(client, &format!("$JS.API.STREAM.INFO.{name}"), "").await;
        if info["state"]["messages"] == count {
            return info;
        }
        assert!(tokio::time::Instant::now() < deadline, "{name} does not hold {count} within {FOLLOW:?}: {info}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every message of `stream`: (sequence, subject, Nats-Stream-Source, payload).
async fn messages(js: &jetstream::Context, stream: &str, count: u64) -> Vec<(u64, String, Option<String>, String)> {
    let stream = js.get_stream(stream).await.expect("stream");
    let mut all = Vec::new();
    let mut seq = 1;
    while (all.len() as u64) < count {
        if let Ok(message) = stream.get_raw_message(seq).await {
            let source = message.headers.get("Nats-Stream-Source").map(|v| v.to_string());
            let payload = String::from_utf8_lossy(&message.payload).into_owned();
            all.push((message.sequence, message.subject.to_string(), source, payload));
        }
        seq += 1;
        assert!(seq < 10_000, "fewer than {count} messages");
    }
    all
}

async fn publish_orders(js: &jetstream::Context, range: std::ops::RangeInclusive<u32>) {
    for i in range {
        publish(js, &format!("orders.{i}"), &format!("order {i}")).await;
    }
}

#[tokio::test]
async fn a_stream_sources_a_nats_server_stream_by_url_and_resumes_after_its_restart() {
    let nats =
        NatsServer::with_args(&["-js", "-sd", tempfile::tempdir().expect("dir").path().to_str().expect("utf-8")]);
    let origin = jetstream::new(nats.client().await);
    origin
        .create_stream(jetstream::stream::Config {
            name: "ORDERS".into(),
            subjects: vec!["orders.>".into()],
            ..Default::default()
        })
        .await
        .expect("origin stream");
    publish_orders(&origin, 1..=5).await;

    let mut semaq = SemaqServer::start();
    let client = semaq.client().await;
    let config = json!({
        "name": "COPY", "subjects": ["copy.>"],
        "sources": [{"name": "ORDERS", "filter_subject": "orders.>"}],
        "metadata": {"semaq.url.ORDERS": nats.url()},
    });
    let created = create(&client, &config).await;
    assert!(created.get("error").is_none(), "{created}");
    assert_eq!(created["config"]["metadata"]["semaq.url.ORDERS"], nats.url(), "{created}");
    wait_for_messages(&client, "COPY", 5).await;
    publish_orders(&origin, 6..=7).await;
    wait_for_messages(&client, "COPY", 7).await;

    drop(client);
    semaq.terminate();
    publish_orders(&origin, 8..=9).await;
    semaq.restart();
    let client = semaq.client().await;
    let info = wait_for_messages(&client, "COPY", 9).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let again = api(&client, "$JS.API.STREAM.INFO.COPY", "").await;
    assert_eq!(again["state"]["messages"], 9, "nothing twice after the restart: {again}");
    assert_eq!(info["sources"][0]["name"], "ORDERS", "{info}");
    assert!(info["sources"][0].get("error").is_none(), "{info}");

    let js = jetstream::new(client);
    let copies = messages(&js, "COPY", 9).await;
    for (i, (seq, subject, source, payload)) in copies.iter().enumerate() {
        let n = i as u64 + 1;
        assert_eq!(
            (*seq, subject.as_str(), payload.as_str()),
            (n, format!("orders.{n}").as_str(), format!("order {n}").as_str())
        );
        assert_eq!(source.as_deref(), Some(format!("ORDERS {n} orders.> > orders.{n}").as_str()));
    }
}

#[tokio::test]
async fn a_mirror_of_another_semaq_server_keeps_origin_sequences_across_the_origins_restart() {
    let mut origin_server = SemaqServer::start();
    let origin = jetstream::new(origin_server.client().await);
    origin
        .create_stream(jetstream::stream::Config {
            name: "ORDERS".into(),
            subjects: vec!["orders.>".into()],
            ..Default::default()
        })
        .await
        .expect("origin stream");
    publish_orders(&origin, 1..=4).await;
    // The mirror keeps origin sequences: it starts at the origin's first, 2.
    origin.get_stream("ORDERS").await.expect("stream").delete_message(1).await.expect("delete");

    let server = SemaqServer::start();
    let client = server.client().await;
    let mut config = json!({
        "name": "M", "mirror": {"name": "ORDERS"},
        "metadata": {"semaq.url.ORDERS": origin_server.url()},
    });
    let created = create(&client, &config).await;
    assert!(created.get("error").is_none(), "{created}");
    let first = wait_for_messages(&client, "M", 3).await;
    assert_eq!((&first["state"]["first_seq"], &first["state"]["last_seq"]), (&json!(2), &json!(4)), "{first}");

    drop(origin);
    origin_server.terminate();
    origin_server.restart();
    let origin = jetstream::new(origin_server.client().await);
    publish_orders(&origin, 5..=6).await;
    // The origin listens on a new port: the stream is pointed there and resumes after seq 4.
    config["metadata"]["semaq.url.ORDERS"] = json!(origin_server.url());
    let updated = api(&client, "$JS.API.STREAM.UPDATE.M", &config.to_string()).await;
    assert!(updated.get("error").is_none(), "{updated}");
    let info = wait_for_messages(&client, "M", 5).await;
    assert_eq!(info["state"]["last_seq"], 6, "{info}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let again = api(&client, "$JS.API.STREAM.INFO.M", "").await;
    assert_eq!(again["state"]["messages"], 5, "nothing twice after the restart: {again}");
    assert_eq!(info["mirror"]["name"], "ORDERS", "{info}");

    let js = jetstream::new(client);
    let copies = messages(&js, "M", 5).await;
    let seqs: Vec<u64> = copies.iter().map(|(seq, ..)| *seq).collect();
    assert_eq!(seqs, [2, 3, 4, 5, 6]);
    assert!(copies.iter().all(|(seq, subject, source, _)| *subject == format!("orders.{seq}") && source.is_none()));
}

#[tokio::test]
async fn remote_origins_are_checked_and_an_unreachable_one_is_reported() {
    let server = SemaqServer::start();
    let client = server.client().await;
    // Without a URL, `$JS.API` is this server's own API: nats-server's refusal.
    let looping = json!({"name": "A", "sources": [{"name": "O", "external": {"api": "$JS.API"}}]});
    assert_api_error(&create(&client, &looping).await, 400, 10021);
    let bad_url = json!({"name": "A", "sources": [{"name": "O"}], "metadata": {"semaq.url.O": "not a url"}});
    assert_api_error(&create(&client, &bad_url).await, 500, 10052);

    // A closed port: accepted, and stream info says why nothing comes.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr");
    let unreachable = json!({
        "name": "A", "sources": [{"name": "O", "external": {"api": "$JS.API"}}],
        "metadata": {"semaq.url.O": format!("nats://{closed}")},
    });
    assert!(create(&client, &unreachable).await.get("error").is_none());
    let deadline = tokio::time::Instant::now() + FOLLOW;
    loop {
        let info = api(&client, "$JS.API.STREAM.INFO.A", "").await;
        if let Some(error) = info["sources"][0].get("error") {
            assert_eq!(error["err_code"], 10460, "{info}");
            assert!(error["description"].as_str().is_some_and(|d| d.contains(&closed.to_string())), "{info}");
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "no error reported: {info}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn an_external_api_of_this_servers_own_domain_is_this_server() {
    let server = SemaqServer::with_config("jetstream { domain: hub }\n", &[]);
    let client = server.client().await;
    let js = jetstream::new(client.clone());
    create(&client, &json!({"name": "ORDERS", "subjects": ["orders.>"]})).await;
    publish_orders(&js, 1..=3).await;
    let config = json!({"name": "COPY", "sources": [{"name": "ORDERS", "external": {"api": "$JS.hub.API"}}]});
    assert!(create(&client, &config).await.get("error").is_none());
    let info = wait_for_messages(&client, "COPY", 3).await;
    assert_eq!(info["sources"][0]["external"]["api"], "$JS.hub.API", "{info}");
    assert!(info["sources"][0].get("error").is_none(), "{info}");
    // Another domain would need a leafnode: accepted, and reported as out of reach.
    let elsewhere = json!({"name": "FAR", "sources": [{"name": "ORDERS", "external": {"api": "$JS.edge.API"}}]});
    assert!(create(&client, &elsewhere).await.get("error").is_none());
    let deadline = tokio::time::Instant::now() + FOLLOW;
    loop {
        let info = api(&client, "$JS.API.STREAM.INFO.FAR", "").await;
        if info["sources"][0]["error"]["err_code"] == 10460 {
            assert_eq!(info["state"]["messages"], 0, "{info}");
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "no error reported: {info}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_source_reconnects_by_itself_when_the_nats_server_origin_comes_back() {
    let dir = tempfile::tempdir().expect("dir");
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port().to_string();
    let args = ["-js", "-sd", dir.path().to_str().expect("utf-8"), "-p", port.as_str()];
    let nats = NatsServer::with_args(&args);
    let url = nats.url();
    let origin = jetstream::new(nats.client().await);
    let config =
        jetstream::stream::Config { name: "ORDERS".into(), subjects: vec!["orders.>".into()], ..Default::default() };
    origin.create_stream(config).await.expect("origin stream");
    publish_orders(&origin, 1..=3).await;

    let server = SemaqServer::start();
    let client = server.client().await;
    let copy = json!({"name": "COPY", "sources": [{"name": "ORDERS"}], "metadata": {"semaq.url.ORDERS": url}});
    assert!(create(&client, &copy).await.get("error").is_none());
    wait_for_messages(&client, "COPY", 3).await;

    drop(origin);
    drop(nats);
    let nats = NatsServer::with_args(&args);
    assert_eq!(nats.url(), url, "the origin is back at the same address");
    let origin = jetstream::new(nats.client().await);
    publish_orders(&origin, 4..=5).await;
    wait_for_messages(&client, "COPY", 5).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let info = api(&client, "$JS.API.STREAM.INFO.COPY", "").await;
    assert_eq!(info["state"]["messages"], 5, "nothing twice: {info}");
    let copies = messages(&jetstream::new(client), "COPY", 5).await;
    let payloads: Vec<&str> = copies.iter().map(|(.., payload)| payload.as_str()).collect();
    assert_eq!(payloads, ["order 1", "order 2", "order 3", "order 4", "order 5"]);
}
