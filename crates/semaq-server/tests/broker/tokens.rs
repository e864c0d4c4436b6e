//! Token load at `/api/tokens`: tokens in and out per model, subject, intent and agent, in time
//! buckets, from the SPEC §2 headers, from an agent's reply, and from payload fields a stream
//! names. Bad queries get a 400 with a JSON error; bad counts are counted, nothing else.

use std::collections::HashMap;
use std::time::Duration;

use async_nats::jetstream::{self, stream};
use async_nats::{Client, HeaderMap};
use futures::StreamExt;
use semaq_testkit::{http_get_json_status as http_get, SemaqServer};
use serde_json::{json, Value};

async fn publish(client: &Client, subject: &str, tokens: &[(&str, &str)]) {
    let mut headers = HeaderMap::new();
    for (name, value) in tokens {
        headers.insert(*name, *value);
    }
    client.publish_with_headers(subject.to_string(), headers, "x".into()).await.unwrap();
}

fn report(server: &SemaqServer, query: &str) -> Value {
    let (status, body) = http_get(server.http_addr(), &format!("/api/tokens?{query}"));
    assert_eq!(status, 200, "{body}");
    body
}

/// A series' totals, after checking that its buckets add up to them.
fn totals(report: &Value, key: &str) -> (u64, u64) {
    let series = report["series"].as_array().unwrap().iter().find(|s| s["key"] == key);
    let series = series.unwrap_or_else(|| panic!("no series {key:?} in {report}"));
    let sum = |field: &str| series[field].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).sum::<u64>();
    let buckets = report["buckets"].as_u64().unwrap() as usize;
    assert_eq!(series["tokens_in"].as_array().unwrap().len(), buckets);
    assert_eq!(sum("tokens_in"), series["total_in"].as_u64().unwrap());
    assert_eq!(sum("tokens_out"), series["total_out"].as_u64().unwrap());
    (series["total_in"].as_u64().unwrap(), series["total_out"].as_u64().unwrap())
}

#[tokio::test]
async fn two_models_sum_per_bucket_by_model_and_by_subject() {
    let server = SemaqServer::start();
    let client = server.client().await;
    for _ in 0..10 {
        publish(
            &client,
            "ai.chat.user1",
            &[("Semaq-Model", "llama3-70b"), ("Semaq-Tokens-In", "3"), ("Semaq-Tokens-Out", "7")],
        )
        .await;
    }
    for _ in 0..5 {
        publish(&client, "ai.embed.doc", &[("Semaq-Model", "bge-small"), ("Semaq-Tokens-In", "11")]).await;
    }
    client.flush().await.unwrap();
    semaq_testkit::sync(&client).await;

    let by_model = report(&server, "by=model&window=1m");
    assert_eq!((by_model["bucket_seconds"].as_u64(), by_model["buckets"].as_u64()), (Some(10), Some(6)));
    assert_eq!(totals(&by_model, "llama3-70b"), (30, 70));
    assert_eq!(totals(&by_model, "bge-small"), (55, 0));
    assert_eq!(by_model["series"][0]["key"], "llama3-70b", "the largest load first");
    let newest: u64 =
        by_model["series"][0]["tokens_out"].as_array().unwrap()[4..].iter().map(|v| v.as_u64().unwrap()).sum();
    assert_eq!(newest, 70, "the load sits in the newest buckets");

    let by_subject = report(&server, "by=subject&window=1h");
    assert_eq!(by_subject["buckets"], 360);
    assert_eq!(totals(&by_subject, "ai.chat"), (30, 70));
    assert_eq!(totals(&by_subject, "ai.embed"), (55, 0));
    let (_, metrics) = semaq_testkit::http_get(server.http_addr(), "/metrics", &[]);
    let line = |series: &str| {
        metrics
            .lines()
            .find(|l| l.starts_with(series))
            .unwrap_or_else(|| panic!("no {series} in\n{metrics}"))
            .to_string()
    };
    let input = r#"gen_ai_client_token_usage_sum{gen_ai_token_type="input",gen_ai_request_model="llama3-70b"}"#;
    assert!(line(input).ends_with(" 30.0") || line(input).ends_with(" 30"), "{}", line(input));
    let count = r#"gen_ai_client_token_usage_count{gen_ai_token_type="output",gen_ai_request_model="bge-small"}"#;
    assert!(line(count).ends_with(" 5"), "one observation per message: {}", line(count));
    let day = report(&server, "by=model&window=1d");
    assert_eq!((day["bucket_seconds"].as_u64(), day["buckets"].as_u64()), (Some(60), Some(1440)));
    assert_eq!(totals(&day, "bge-small"), (55, 0));
}

#[tokio::test]
async fn payload_fields_named_by_a_stream_count_once() {
    let server = SemaqServer::start();
    let client = server.client().await;
    let js = jetstream::new(client.clone());
    let fields = [
        ("semaq.tokens_in_field", "input_tokens"),
        ("semaq.tokens_out_field", "output_tokens"),
        ("semaq.model_field", "model"),
    ];
    js.create_stream(stream::Config {
        name: "COMPLETIONS".into(),
        subjects: vec!["llm.>".into()],
        metadata: fields.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<HashMap<_, _>>(),
        ..Default::default()
    })
    .await
    .unwrap();
    for _ in 0..3 {
        let body = json!({"model": "mistral-7b", "input_tokens": 4, "output_tokens": 6}).to_string();
        js.publish("llm.done", body.into()).await.unwrap().await.unwrap();
    }
    // Headers and fields both: the headers were counted at the publish, the fields are not added.
    let mut headers = HeaderMap::new();
    headers.insert("Semaq-Tokens-In", "100");
    headers.insert("Semaq-Model", "mistral-7b");
    let body = json!({"model": "mistral-7b", "input_tokens": 4, "output_tokens": 6}).to_string();
    js.publish_with_headers("llm.done", headers, body.into()).await.unwrap().await.unwrap();

    let by_model = report(&server, "by=model&window=10m");
    assert_eq!(totals(&by_model, "mistral-7b"), (112, 18));
}

#[tokio::test]
async fn an_agents_reply_counts_for_its_agent_and_intent() {
    let server = SemaqServer::start();
    let agent = server.client().await;
    let mut inbox = agent.subscribe("agents.summarizer").await.unwrap();
    let beat = json!({"agent_id": "summarizer", "intents": ["summarize"], "inbox": "agents.summarizer", "capacity": 4});
    agent.request("$SEMAQ.AGENT.HB", beat.to_string().into()).await.unwrap();
    let replier = agent.clone();
    tokio::spawn(async move {
        while let Some(request) = inbox.next().await {
            let mut headers = HeaderMap::new();
            headers.insert("Semaq-Tokens-Out", "42");
            headers.insert("Semaq-Model", "llama3-8b");
            replier.publish_with_headers(request.reply.unwrap(), headers, "summary".into()).await.unwrap();
        }
    });
    let requester = server.client().await;
    for _ in 0..2 {
        let mut headers = HeaderMap::new();
        headers.insert("Semaq-Tokens-In", "500");
        let reply = requester.request_with_headers("intent.summarize", headers, "long text".into());
        tokio::time::timeout(Duration::from_secs(5), reply).await.unwrap().unwrap();
    }
    assert_eq!(totals(&report(&server, "by=agent&window=1m"), "summarizer"), (0, 84));
    assert_eq!(totals(&report(&server, "by=intent&window=1m"), "summarize"), (1000, 84));
    assert_eq!(totals(&report(&server, "by=model&window=1m"), "llama3-8b"), (0, 84));
}

#[tokio::test]
async fn bad_queries_get_a_json_error_and_bad_counts_are_counted() {
    let server = SemaqServer::start();
    for query in
        ["by=colour", "window=5y", "window=0s", "window=2d", "window=99999999999999999999999h", "by=model&window=-1h"]
    {
        let (status, body) = http_get(server.http_addr(), &format!("/api/tokens?{query}"));
        assert_eq!(status, 400, "{query}: {body}");
        assert_eq!(body["error"]["code"], 400, "{query}: {body}");
        assert!(body["error"]["description"].as_str().is_some_and(|d| !d.is_empty()), "{query}: {body}");
    }
    let client = server.client().await;
    publish(&client, "ai.chat", &[("Semaq-Model", "m"), ("Semaq-Tokens-In", "many")]).await;
    publish(&client, "ai.chat", &[("Semaq-Model", "m"), ("Semaq-Tokens-Out", "-5")]).await;
    publish(&client, "ai.chat", &[("Semaq-Model", "m"), ("Semaq-Tokens-In", "2")]).await;
    semaq_testkit::sync(&client).await;
    let by_model = report(&server, "");
    assert_eq!(by_model["invalid"], 2, "{by_model}");
    assert_eq!(by_model["window_seconds"], 3600, "the default window is an hour");
    assert_eq!(totals(&by_model, "m"), (2, 0), "only the well-formed count");
}
