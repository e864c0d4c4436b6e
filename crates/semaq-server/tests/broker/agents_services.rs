//! Agents that know nothing of SemaQ: NATS services (`$SRV`) routed by intent, and requests
//! waiting for capacity handed out by `Semaq-Priority`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::service::ServiceExt;
use async_nats::HeaderMap;
use bytes::Bytes;
use futures::StreamExt;
use semaq_testkit::{wait_until_async, SemaqServer};
use serde_json::{json, Value};

fn agent_ids(server: &SemaqServer) -> Vec<String> {
    let agents = server.http_json("/semaq/agents");
    agents["agents"].as_array().unwrap().iter().map(|a| a["agent_id"].as_str().unwrap().to_string()).collect()
}

#[tokio::test]
async fn a_nats_service_endpoint_that_names_an_intent_is_routed_without_semaq_code() {
    let config = r#"agents { heartbeat_interval: "200ms", service_subjects: ["billing.audit"] }"#;
    let server = SemaqServer::with_config(config, &[]);
    let client = server.client().await;
    let service = client.service_builder().description("payments").start("payments", "1.0.0").await.unwrap();
    let metadata = HashMap::from([("semaq.intent".to_string(), "resolve_payment".to_string())]);
    let mut resolve =
        service.endpoint_builder().name("resolve").metadata(metadata).add("payments.resolve").await.unwrap();
    let mut audit = service.endpoint_builder().name("audit").add("billing.audit").await.unwrap();
    let _plain = service.endpoint_builder().name("status").add("payments.status").await.unwrap();
    tokio::spawn(async move {
        while let Some(request) = resolve.next().await {
            let agent = request.message.headers.as_ref().and_then(|h| h.get("Semaq-Agent")).map(|v| v.to_string());
            let _ = request.respond(Ok(Bytes::from(agent.unwrap_or_default()))).await;
        }
    });
    tokio::spawn(async move {
        while let Some(request) = audit.next().await {
            let _ = request.respond(Ok(Bytes::from_static(b"audited"))).await;
        }
    });
    wait_until_async("the service is discovered through $SRV.INFO", Duration::from_secs(5), || {
        let found = agent_ids(&server).len() == 2;
        async move { found }
    })
    .await;
    let ids = agent_ids(&server);
    assert!(ids.iter().any(|id| id.starts_with("payments.") && id.ends_with(".resolve")), "{ids:?}");
    let requester = server.client().await;
    let reply = requester.request("intent.resolve_payment", "pay".into()).await.unwrap();
    let chosen = String::from_utf8_lossy(&reply.payload).to_string();
    assert!(ids.contains(&chosen), "the delivery named the service agent: {chosen}");
    let audited = requester.request("intent.billing.audit", "check".into()).await.unwrap();
    assert_eq!(&audited.payload[..], b"audited", "a configured subject is routed without metadata");
    let agents = server.http_json("/semaq/agents");
    assert!(agents["agents"].as_array().unwrap().iter().all(|a| a["source"] == "service"));
    let not_routed = requester.request("intent.payments.status", "x".into()).await;
    assert!(not_routed.is_err(), "an endpoint with neither is not an agent");
    drop(service);
}

#[tokio::test]
async fn waiting_requests_are_handed_out_by_priority_without_starving_priority_three() {
    let server = SemaqServer::with_config("agents { wait: \"10s\" }\n", &[]);
    let agent = server.client().await;
    let mut inbox = agent.subscribe("agents.solo").await.unwrap();
    let heartbeat = json!({"agent_id": "solo", "intents": ["train"], "inbox": "agents.solo", "capacity": 1});
    let ack: Value =
        serde_json::from_slice(&agent.request("$SEMAQ.AGENT.HB", heartbeat.to_string().into()).await.unwrap().payload)
            .unwrap();
    assert_eq!(ack["ok"], true);
    let served = Arc::new(Mutex::new(Vec::new()));
    {
        let (agent, served) = (agent.clone(), served.clone());
        tokio::spawn(async move {
            // One at a time, 50 ms each: everything sent meanwhile waits in the broker.
            while let Some(message) = inbox.next().await {
                let priority = message.headers.as_ref().and_then(|h| h.get("Semaq-Priority")).map(|v| v.to_string());
                served.lock().unwrap().push(priority.unwrap_or_default());
                tokio::time::sleep(Duration::from_millis(50)).await;
                if let Some(reply) = message.reply {
                    let _ = agent.publish(reply, "done".into()).await;
                }
            }
        });
    }
    let requester = server.client().await;
    let mut replies = requester.subscribe("replies.>").await.unwrap();
    // Published in order on one connection: the first takes the only slot, the rest wait.
    for (n, priority) in std::iter::once("1").chain(["3"; 8]).chain(["0"; 8]).enumerate() {
        let mut headers = HeaderMap::new();
        headers.insert("Semaq-Priority", priority);
        requester
            .publish_with_reply_and_headers("intent.train", format!("replies.{n}"), headers, "job".into())
            .await
            .unwrap();
    }
    requester.flush().await.unwrap();
    for _ in 0..17 {
        tokio::time::timeout(Duration::from_secs(10), replies.next()).await.unwrap().unwrap();
    }
    let order = served.lock().unwrap().clone();
    assert_eq!(order.len(), 17);
    let after_first = &order[1..10];
    assert_eq!(after_first.iter().filter(|p| *p == "0").count(), 8, "priority 0 goes first: {order:?}");
    assert!(after_first.contains(&"3".to_string()), "priority 3 still moves within the first round: {order:?}");
}
