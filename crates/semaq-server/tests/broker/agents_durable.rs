//! Durable intents: an intent backed by a work-queue stream (metadata `semaq.intent`). Work
//! waits for an agent, survives a restart, is settled by the agent's reply, is released to
//! another agent by `Semaq-Status: retry`, and is dead-lettered after `semaq.max_deliver`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::{self, stream};
use async_nats::{Client, HeaderMap};
use futures::StreamExt;
use semaq_testkit::{wait_until_async, SemaqServer};
use serde_json::{json, Value};

const CONFIG: &str = "agents { request_timeout: \"2s\" }\n";

async fn jobs_stream(client: &Client) -> stream::Stream {
    let js = jetstream::new(client.clone());
    js.create_stream(stream::Config {
        name: "JOBS".into(),
        subjects: vec!["intent.finetune".into()],
        retention: stream::RetentionPolicy::WorkQueue,
        metadata: HashMap::from([("semaq.intent".into(), "finetune".into()), ("semaq.max_deliver".into(), "2".into())]),
        ..Default::default()
    })
    .await
    .unwrap()
}

/// An agent for `finetune` that records what it got and answers each job with what `answer`
/// says for its body: `Semaq-Status` `ok`, `retry` or `error`.
async fn agent(server: &SemaqServer, id: &str, answer: fn(&[u8]) -> &'static str) -> (Client, Arc<Mutex<Vec<String>>>) {
    agent_with(server, id, (4, Duration::ZERO), answer).await
}

/// As `agent`, announcing `capacity` and taking `work` over each job, one at a time.
async fn agent_with(
    server: &SemaqServer,
    id: &str,
    (capacity, work): (u32, Duration),
    answer: fn(&[u8]) -> &'static str,
) -> (Client, Arc<Mutex<Vec<String>>>) {
    let client = server.client().await;
    let mut inbox = client.subscribe(format!("agents.{id}")).await.unwrap();
    let beat = json!({"agent_id": id, "intents": ["finetune"], "inbox": format!("agents.{id}"), "capacity": capacity});
    let ack: Value =
        serde_json::from_slice(&client.request("$SEMAQ.AGENT.HB", beat.to_string().into()).await.unwrap().payload)
            .unwrap();
    assert_eq!(ack["ok"], true, "{ack}");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (replier, log) = (client.clone(), seen.clone());
    tokio::spawn(async move {
        while let Some(job) = inbox.next().await {
            log.lock().unwrap().push(String::from_utf8_lossy(&job.payload).to_string());
            tokio::time::sleep(work).await;
            let mut headers = HeaderMap::new();
            headers.insert("Semaq-Status", answer(&job.payload));
            if let Some(reply) = job.reply {
                let _ = replier.publish_with_headers(reply, headers, "done".into()).await;
            }
        }
    });
    (client, seen)
}

/// Publishes `jobs` to the durable intent and waits until its stream is empty.
async fn publish_and_settle(client: &Client, jobs: usize, within: Duration) {
    let js = jetstream::new(client.clone());
    for n in 0..jobs {
        js.publish("intent.finetune", format!("job-{n}").into()).await.unwrap().await.unwrap();
    }
    wait_until_async("every job is done", within, || {
        let client = client.clone();
        async move { messages_in(&client, "JOBS").await == 0 }
    })
    .await;
}

/// Steady did every job; no job went back to picky, which declined it; nothing was dead-lettered.
async fn assert_every_job_done_by_steady_none_twice_by_picky(
    client: &Client,
    jobs: usize,
    steady_seen: &Mutex<Vec<String>>,
    picky_seen: &Mutex<Vec<String>>,
) {
    let mut done = steady_seen.lock().unwrap().clone();
    done.sort();
    done.dedup();
    assert_eq!(done.len(), jobs, "steady did every job, waiting ones too: {done:?}");
    let picky = picky_seen.lock().unwrap().clone();
    let mut unique = picky.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), picky.len(), "no job went back to the agent that declined it: {picky:?}");
    assert_eq!(messages_in(client, "JOBS_DLQ").await, 0, "with max_deliver 2, nothing was dead-lettered");
}

async fn messages_in(client: &Client, name: &str) -> u64 {
    let js = jetstream::new(client.clone());
    js.get_stream(name).await.unwrap().info().await.unwrap().state.messages
}

#[tokio::test]
async fn durable_work_waits_for_an_agent_survives_a_restart_and_is_acked_by_the_reply() {
    let mut server = SemaqServer::with_config(CONFIG, &[]);
    let client = server.client().await;
    jobs_stream(&client).await;
    let js = jetstream::new(client.clone());
    for n in 0..3 {
        js.publish("intent.finetune", format!("job-{n}").into()).await.unwrap().await.unwrap();
    }
    assert_eq!(messages_in(&client, "JOBS").await, 3, "no agent yet: the work is stored");
    drop((js, client));
    server.terminate();
    server.restart();
    let (client, seen) = agent(&server, "trainer", |_| "ok").await;
    wait_until_async("the stored jobs reach the agent after the restart", Duration::from_secs(10), || {
        let done = seen.lock().unwrap().len() == 3;
        async move { done }
    })
    .await;
    let mut got = seen.lock().unwrap().clone();
    got.sort();
    assert_eq!(got, vec!["job-0", "job-1", "job-2"]);
    wait_until_async("acked work leaves the work queue", Duration::from_secs(5), || {
        let client = client.clone();
        async move { messages_in(&client, "JOBS").await == 0 }
    })
    .await;
}

#[tokio::test]
async fn retry_releases_work_to_another_agent_and_poison_is_dead_lettered_with_the_reason() {
    let server = SemaqServer::with_config(CONFIG, &[]);
    let client = server.client().await;
    jobs_stream(&client).await;
    let js = jetstream::new(client.clone());
    let dlq = js.get_stream("JOBS_DLQ").await.expect("the dead-letter stream is made with the intent's stream");
    assert_eq!(dlq.cached_info().config.subjects, vec!["dlq.finetune"]);
    // picky passes on everything; steady takes all but poison, which nobody can do.
    let (_picky, picky_seen) = agent(&server, "picky", |_| "retry").await;
    let (_steady, steady_seen) = agent(&server, "steady", |job| if job == b"poison" { "error" } else { "ok" }).await;
    js.publish("intent.finetune", "hot-potato".into()).await.unwrap().await.unwrap();
    js.publish("intent.finetune", "poison".into()).await.unwrap().await.unwrap();
    wait_until_async("the poison job reaches the dead-letter stream", Duration::from_secs(10), || {
        let client = client.clone();
        async move { messages_in(&client, "JOBS_DLQ").await == 1 }
    })
    .await;
    assert!(steady_seen.lock().unwrap().contains(&"hot-potato".to_string()), "a retry went to the other agent");
    let deliveries = |seen: &Arc<Mutex<Vec<String>>>| seen.lock().unwrap().iter().filter(|j| *j == "poison").count();
    assert_eq!(deliveries(&picky_seen) + deliveries(&steady_seen), 2, "poison was delivered max_deliver times");
    let letter = dlq.get_raw_message(1).await.unwrap();
    assert_eq!(&letter.payload[..], b"poison");
    let reason = letter.headers.get("Semaq-Dead-Letter-Reason").map(|v| v.to_string()).unwrap_or_default();
    assert!(reason.ends_with("after 2 deliveries"), "{reason}");
    wait_until_async("nothing is left in the work queue", Duration::from_secs(5), || {
        let client = client.clone();
        async move { messages_in(&client, "JOBS").await == 0 }
    })
    .await;
}

#[tokio::test]
async fn work_an_agent_declined_is_redelivered_to_another_agent() {
    let server = SemaqServer::with_config(CONFIG, &[]);
    let client = server.client().await;
    jobs_stream(&client).await;
    let (_picky, picky_seen) = agent(&server, "picky", |_| "retry").await;
    let (_steady, steady_seen) = agent(&server, "steady", |_| "ok").await;
    publish_and_settle(&client, 10, Duration::from_secs(10)).await;
    assert_every_job_done_by_steady_none_twice_by_picky(&client, 10, &steady_seen, &picky_seen).await;
}

#[tokio::test]
async fn declined_work_that_waits_for_a_busy_agent_still_avoids_the_agent_that_declined_it() {
    let server = SemaqServer::with_config(CONFIG, &[]);
    let client = server.client().await;
    jobs_stream(&client).await;
    let (_picky, picky_seen) = agent(&server, "picky", |_| "retry").await;
    // One job at a time, slowly: the redeliveries picky declined wait for its capacity.
    let (_steady, steady_seen) = agent_with(&server, "steady", (1, Duration::from_millis(150)), |_| "ok").await;
    publish_and_settle(&client, 6, Duration::from_secs(15)).await;
    assert_every_job_done_by_steady_none_twice_by_picky(&client, 6, &steady_seen, &picky_seen).await;
}

#[tokio::test]
async fn a_durable_intent_stream_must_be_a_work_queue_on_its_intent_subject() {
    let server = SemaqServer::start();
    let js = jetstream::new(server.client().await);
    let metadata = HashMap::from([("semaq.intent".to_string(), "finetune".to_string())]);
    let limits = js
        .create_stream(stream::Config {
            name: "WRONG".into(),
            subjects: vec!["intent.finetune".into()],
            metadata: metadata.clone(),
            ..Default::default()
        })
        .await;
    assert!(limits.unwrap_err().to_string().contains("workqueue"));
    let elsewhere = js
        .create_stream(stream::Config {
            name: "WRONG".into(),
            subjects: vec!["jobs.finetune".into()],
            retention: stream::RetentionPolicy::WorkQueue,
            metadata,
            ..Default::default()
        })
        .await;
    assert!(elsewhere.unwrap_err().to_string().contains("intent.finetune"));
    assert!(js.get_stream("WRONG").await.is_err(), "nothing was created");
}
