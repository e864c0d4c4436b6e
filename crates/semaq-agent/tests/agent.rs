//! The SDK against a real semaq-server: announce, serve, error replies and weights, refused
//! heartbeats, capacity, heartbeats keeping an agent alive, and a draining shutdown.
//! Build the server first: `cargo build -p semaq-server`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_nats::{Client, HeaderMap, RequestErrorKind};
use bytes::Bytes;
use semaq_agent::{headers, Agent, AgentError, HandlerError, Reply, Request};
use semaq_testkit::{wait_until_async, SemaqServer};
use serde_json::{json, Value};

/// Liveness fast enough that a missing beat would show within a second.
const FAST_BEATS: &str = "agents { heartbeat_interval: \"100ms\", heartbeats_missed_max: 3 }\n";

fn member(server: &SemaqServer, intent: &str, agent: &str) -> Value {
    let agents = server.http_json("/semaq/agents");
    let intents = agents["intents"].as_array().cloned().unwrap_or_default();
    let members = intents.iter().find(|i| i["name"] == intent).map(|i| i["agents"].clone());
    let members = members.and_then(|m| m.as_array().cloned()).unwrap_or_default();
    members.into_iter().find(|m| m["agent_id"] == agent).unwrap_or(Value::Null)
}

fn live_agents(server: &SemaqServer) -> Vec<Value> {
    server.http_json("/semaq/agents")["agents"].as_array().cloned().unwrap_or_default()
}

async fn ask(client: &Client, intent: &str, payload: &'static str) -> Result<async_nats::Message, RequestErrorKind> {
    client.request(format!("intent.{intent}"), Bytes::from_static(payload.as_bytes())).await.map_err(|e| e.kind())
}

fn header(message: &async_nats::Message, name: &str) -> Option<String> {
    message.headers.as_ref()?.get(name).map(|value| value.as_str().to_string())
}

/// Serves `agent` with `handler` in a task; the task's result is serve's.
fn serve_in_task<H, F>(agent: &Agent, handler: H) -> tokio::task::JoinHandle<Result<(), AgentError>>
where
    H: Fn(Request) -> F + Send + Sync + 'static,
    F: std::future::Future<Output = Result<Reply, HandlerError>> + Send + 'static,
{
    let agent = agent.clone();
    tokio::spawn(async move { agent.serve(handler).await })
}

/// A handler that counts how many run at once and keeps the peak.
fn counting_handler(
    hold: Duration,
) -> (impl Fn(Request) -> futures::future::BoxFuture<'static, Result<Reply, HandlerError>>, Arc<AtomicUsize>) {
    let running = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let handler = {
        let peak = peak.clone();
        move |_request: Request| {
            let (running, peak) = (running.clone(), peak.clone());
            let work = async move {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(hold).await;
                running.fetch_sub(1, Ordering::SeqCst);
                Ok(Reply::new("held"))
            };
            Box::pin(work) as futures::future::BoxFuture<'static, _>
        }
    };
    (handler, peak)
}

#[tokio::test]
async fn an_announced_agent_serves_and_its_reply_reaches_the_requester() {
    let server = SemaqServer::start();
    let client = server.client().await;
    let agent = Agent::builder("pay-1")
        .intent("resolve_payment", "settle a failed card payment")
        .capacity(8)
        .metadata(json!({ "model": "llama3-70b" }))
        .connect(&client)
        .await
        .unwrap();
    assert_eq!(agent.inbox(), "agents.pay-1");
    let serving = serve_in_task(&agent, |request: Request| async move {
        let intent = request.intent().unwrap_or("?").to_string();
        let session = request.session().unwrap_or("-").to_string();
        let body = format!("{intent}/{session}/{}", String::from_utf8_lossy(request.payload()));
        Ok(Reply::new(body).tokens_out(42))
    });
    let requester = server.client().await;
    let mut session = HeaderMap::new();
    session.insert(headers::SESSION, "conversation-7");
    let request = async_nats::Request::new().headers(session).payload(Bytes::from_static(b"order-1"));
    let reply = requester.send_request("intent.resolve_payment", request).await.unwrap();
    assert_eq!(reply.payload, Bytes::from_static(b"resolve_payment/conversation-7/order-1"));
    assert_eq!(header(&reply, headers::AGENT).as_deref(), Some("pay-1"), "the reply names who served it");
    assert_eq!(header(&reply, headers::STATUS), None, "ok is the default and not sent");
    let listed = live_agents(&server);
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["agent_id"], "pay-1");
    assert_eq!(listed[0]["capacity"], 8);
    assert_eq!(listed[0]["inbox"], "agents.pay-1");
    wait_until_async("the broker saw the reply", Duration::from_secs(3), || {
        let ok = member(&server, "resolve_payment", "pay-1")["ok"].as_u64() == Some(1);
        async move { ok }
    })
    .await;
    agent.shutdown().await.unwrap();
    serving.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_handler_error_replies_with_status_error_and_the_agents_weight_falls() {
    let server = SemaqServer::start();
    let client = server.client().await;
    let agent = Agent::builder("flaky").intent("classify", "").connect(&client).await.unwrap();
    let _serving =
        serve_in_task(&agent, |_request: Request| async move { Err::<Reply, _>(HandlerError::new("card declined")) });
    let requester = server.client().await;
    let reply = ask(&requester, "classify", "x").await.unwrap();
    assert_eq!(header(&reply, headers::STATUS).as_deref(), Some("error"));
    assert_eq!(reply.payload, Bytes::from_static(b"card declined"));
    for _ in 0..3 {
        ask(&requester, "classify", "x").await.unwrap();
    }
    wait_until_async("the broker weakened the synapse", Duration::from_secs(3), || {
        let member = member(&server, "classify", "flaky");
        let weak = member["weight"].as_f64().is_some_and(|w| w <= 0.2) && member["errors"] == 4;
        async move { weak }
    })
    .await;
}

#[tokio::test]
async fn a_refused_heartbeat_fails_connect_with_the_brokers_reason() {
    let server = SemaqServer::start();
    let client = server.client().await;
    let refused = Agent::builder("bad").intent("a.*", "").connect(&client).await;
    match refused {
        Err(AgentError::Refused { code, description }) => {
            assert_eq!(code, 400);
            assert!(description.contains("wildcards"), "{description}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    let no_intents = Agent::builder("none").connect(&client).await;
    assert!(matches!(no_intents, Err(AgentError::Refused { .. })), "{no_intents:?}");
    assert!(live_agents(&server).is_empty());
    assert_eq!(server.http_json("/semaq/agents")["heartbeats"]["refused"], 2);
}

#[tokio::test]
async fn no_more_than_capacity_handlers_run_at_once_even_for_unrouted_messages() {
    let server = SemaqServer::start();
    let client = server.client().await;
    let agent = Agent::builder("busy").intent("translate", "").capacity(3).connect(&client).await.unwrap();
    let (handler, peak) = counting_handler(Duration::from_millis(100));
    let _serving = serve_in_task(&agent, handler);
    let requester = server.client().await;
    let asks = (0..12).map(|_| {
        let requester = requester.clone();
        tokio::spawn(async move { ask(&requester, "translate", "x").await })
    });
    let outcomes = futures::future::join_all(asks).await;
    assert!(outcomes.iter().all(|o| matches!(o, Ok(Ok(_)))), "every routed request is answered");
    assert_eq!(peak.load(Ordering::SeqCst), 3, "routed: the broker and the SDK both hold to 3");
    // Straight to the inbox, past the broker's routing: the SDK alone holds the line.
    peak.store(0, Ordering::SeqCst);
    let direct = (0..10).map(|_| {
        let requester = requester.clone();
        tokio::spawn(async move { requester.request("agents.busy", Bytes::from_static(b"x")).await.is_ok() })
    });
    let answered = futures::future::join_all(direct).await;
    assert!(answered.iter().all(|a| matches!(a, Ok(true))));
    assert_eq!(peak.load(Ordering::SeqCst), 3, "unrouted: the SDK's own bound");
}

#[tokio::test]
async fn heartbeats_keep_the_agent_alive_past_the_expiry() {
    let server = SemaqServer::with_config(FAST_BEATS, &[]);
    let client = server.client().await;
    let agent = Agent::builder("steady")
        .intent("summarize", "")
        .heartbeat_interval(Duration::from_millis(50))
        .connect(&client)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert_eq!(live_agents(&server).len(), 1, "three times the 300 ms expiry later, still there");
    agent.shutdown().await.unwrap();
    assert!(live_agents(&server).is_empty(), "shutdown without serve leaves at once too");
}

#[tokio::test]
async fn shutdown_leaves_at_once_and_returns_after_in_flight_handlers_answer() {
    let server = SemaqServer::start();
    let client = server.client().await;
    let agent = Agent::builder("draining").intent("refund", "").capacity(8).connect(&client).await.unwrap();
    let (handler, _peak) = counting_handler(Duration::from_millis(600));
    let serving = serve_in_task(&agent, handler);
    let requester = server.client().await;
    let asks: Vec<_> = (0..4)
        .map(|_| {
            let requester = requester.clone();
            tokio::spawn(async move { ask(&requester, "refund", "x").await })
        })
        .collect();
    wait_until_async("four handlers running", Duration::from_secs(3), || {
        let running = agent.in_flight() == 4;
        async move { running }
    })
    .await;
    let shutdown = tokio::spawn({
        let agent = agent.clone();
        async move { agent.shutdown().await }
    });
    wait_until_async("the goodbye took the agent out at once", Duration::from_millis(400), || {
        let gone = live_agents(&server).is_empty();
        async move { gone }
    })
    .await;
    assert_eq!(agent.in_flight(), 4, "gone from routing while its work is still in flight");
    assert_eq!(ask(&requester, "refund", "late").await.err(), Some(RequestErrorKind::NoResponders));
    assert!(!shutdown.is_finished(), "shutdown waits for the handlers");
    shutdown.await.unwrap().unwrap();
    assert_eq!(agent.in_flight(), 0);
    for outcome in futures::future::join_all(asks).await {
        assert_eq!(outcome.unwrap().unwrap().payload, Bytes::from_static(b"held"), "in-flight work was answered");
    }
    serving.await.unwrap().unwrap();
    assert!(matches!(agent.serve(|_| async { Ok(Reply::new("")) }).await, Err(AgentError::AlreadyServing)));
}
