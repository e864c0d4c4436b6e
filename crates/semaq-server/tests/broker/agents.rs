//! The agent network (SPEC §6): heartbeats, intent routing to exactly one agent, capacity and
//! its 503, session affinity, adaptive weights, and abuse. Agents here are plain async-nats
//! clients speaking the heartbeat protocol, as any language's client would.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_nats::{Client, HeaderMap};
use bytes::Bytes;
use futures::StreamExt;
use semaq_testkit::{sync, wait_until_async, SemaqServer};
use serde_json::{json, Value};

/// Fast liveness so expiry tests take under a second.
const FAST_BEATS: &str = "agents { heartbeat_interval: \"100ms\", heartbeats_missed_max: 3, wait: \"300ms\" }\n";

/// How a test agent answers.
#[derive(Clone, Copy, PartialEq)]
enum Behaviour {
    Ok,
    /// `Semaq-Status: error` on every other request.
    FailHalf,
    /// `Semaq-Status: error` always.
    FailAll,
    /// Holds each request this long before answering.
    Slow(Duration),
}

struct TestAgent {
    id: String,
    client: Client,
    served: Arc<AtomicUsize>,
    peak_in_flight: Arc<AtomicU32>,
    behaviour: Arc<std::sync::Mutex<Behaviour>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for TestAgent {
    fn drop(&mut self) {
        self.tasks.iter().for_each(tokio::task::JoinHandle::abort);
    }
}

fn heartbeat(id: &str, intents: &[&str], capacity: u32) -> Bytes {
    json!({ "agent_id": id, "intents": intents, "inbox": format!("agents.{id}"), "capacity": capacity })
        .to_string()
        .into()
}

async fn beat(client: &Client, body: Bytes) -> Value {
    let reply = client.request("$SEMAQ.AGENT.HB", body).await.unwrap();
    serde_json::from_slice(&reply.payload).unwrap()
}

impl TestAgent {
    async fn start(server: &SemaqServer, id: &str, intents: &[&str], capacity: u32, behaviour: Behaviour) -> Self {
        let client = server.client().await;
        let mut inbox = client.subscribe(format!("agents.{id}")).await.unwrap();
        let served = Arc::new(AtomicUsize::new(0));
        let peak_in_flight = Arc::new(AtomicU32::new(0));
        let in_flight = Arc::new(AtomicU32::new(0));
        let behaviour = Arc::new(std::sync::Mutex::new(behaviour));
        let body = heartbeat(id, intents, capacity);
        assert_eq!(beat(&client, body.clone()).await["ok"], true);
        let beats = {
            let client = client.clone();
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    let _ = client.publish("$SEMAQ.AGENT.HB", body.clone()).await;
                }
            })
        };
        let handler = {
            let (client, served, peak, behaviour) =
                (client.clone(), served.clone(), peak_in_flight.clone(), behaviour.clone());
            tokio::spawn(async move {
                while let Some(message) = inbox.next().await {
                    let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(now, Ordering::SeqCst);
                    let n = served.fetch_add(1, Ordering::SeqCst);
                    let mode = *behaviour.lock().unwrap();
                    let (client, in_flight) = (client.clone(), in_flight.clone());
                    tokio::spawn(async move {
                        let failing =
                            mode == Behaviour::FailAll || (mode == Behaviour::FailHalf && n.is_multiple_of(2));
                        if let Behaviour::Slow(delay) = mode {
                            tokio::time::sleep(delay).await;
                        }
                        let agent = message.headers.as_ref().and_then(|h| h.get("Semaq-Agent")).map(|v| v.to_string());
                        let mut headers = HeaderMap::new();
                        headers.insert("Semaq-Status", if failing { "error" } else { "ok" });
                        if let (Some(reply), Some(agent)) = (message.reply, agent) {
                            in_flight.fetch_sub(1, Ordering::SeqCst);
                            let _ = client.publish_with_headers(reply, headers, agent.into()).await;
                        }
                    });
                }
            })
        };
        Self { id: id.to_string(), client, served, peak_in_flight, behaviour, tasks: vec![beats, handler] }
    }

    fn set(&self, behaviour: Behaviour) {
        *self.behaviour.lock().unwrap() = behaviour;
    }

    /// Stops beating but keeps the connection, as a hung process would.
    fn go_silent(&mut self) {
        self.tasks.iter().for_each(tokio::task::JoinHandle::abort);
    }
}

fn agents_json(server: &SemaqServer) -> Value {
    server.http_json("/semaq/agents")
}

fn intent_member(server: &SemaqServer, intent: &str, agent: &str) -> Value {
    let agents = agents_json(server);
    let intent = agents["intents"].as_array().unwrap().iter().find(|i| i["name"] == intent).cloned();
    let members = intent.map(|i| i["agents"].clone()).unwrap_or(Value::Null);
    members.as_array().and_then(|m| m.iter().find(|m| m["agent_id"] == agent).cloned()).unwrap_or(Value::Null)
}

fn live_agents(server: &SemaqServer) -> Vec<String> {
    agents_json(server)["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["agent_id"].as_str().unwrap().to_string())
        .collect()
}

/// Sends a request on `intent.<name>`; the answer names the agent that served it.
async fn ask(client: &Client, intent: &str, headers: HeaderMap) -> Result<String, async_nats::RequestErrorKind> {
    let request = async_nats::Request::new().headers(headers).payload(Bytes::from_static(b"work"));
    match client.send_request(format!("intent.{intent}"), request).await {
        Ok(reply) => Ok(String::from_utf8_lossy(&reply.payload).to_string()),
        Err(error) => Err(error.kind()),
    }
}

#[tokio::test]
async fn each_request_goes_to_exactly_one_live_agent_which_the_delivery_names() {
    let server = SemaqServer::start();
    let agents = [
        TestAgent::start(&server, "pay-1", &["resolve_payment"], 8, Behaviour::Ok).await,
        TestAgent::start(&server, "pay-2", &["resolve_payment"], 8, Behaviour::Ok).await,
        TestAgent::start(&server, "pay-3", &["resolve_payment", "refund"], 8, Behaviour::Ok).await,
    ];
    let requester = server.client().await;
    let mut answered_by = HashMap::<String, usize>::new();
    for _ in 0..90 {
        let agent = ask(&requester, "resolve_payment", HeaderMap::new()).await.unwrap();
        *answered_by.entry(agent).or_default() += 1;
    }
    let served: usize = agents.iter().map(|a| a.served.load(Ordering::SeqCst)).sum();
    assert_eq!(served, 90, "every request reached exactly one agent");
    for agent in &agents {
        assert_eq!(
            answered_by.get(&agent.id).copied().unwrap_or(0),
            agent.served.load(Ordering::SeqCst),
            "Semaq-Agent names who got it"
        );
    }
    assert_eq!(ask(&requester, "refund", HeaderMap::new()).await.unwrap(), "pay-3", "only pay-3 serves refunds");
    let member = intent_member(&server, "resolve_payment", "pay-1");
    assert!(member["ok"].as_u64().unwrap() > 0, "replies observed: {member}");
}

#[tokio::test]
async fn a_request_for_an_intent_nobody_serves_gets_no_responders_at_once() {
    let server = SemaqServer::start();
    let requester = server.client().await;
    let started = std::time::Instant::now();
    let outcome = ask(&requester, "nobody_home", HeaderMap::new()).await;
    assert_eq!(outcome, Err(async_nats::RequestErrorKind::NoResponders));
    assert!(started.elapsed() < Duration::from_secs(2));
    requester.publish("intent.nobody_home", "fire and forget".into()).await.unwrap();
    sync(&requester).await;
    let agents = agents_json(&server);
    assert_eq!(agents["unknown_intents"], 2, "both the request and the publish are counted: {agents}");
    assert_eq!(agents["no_responders"], 1);
}

#[tokio::test]
async fn an_agent_that_misses_its_heartbeats_expires_and_a_bye_leaves_at_once() {
    let server = SemaqServer::with_config(FAST_BEATS, &[]);
    let mut silent = TestAgent::start(&server, "silent", &["summarize"], 4, Behaviour::Ok).await;
    let mut leaving = TestAgent::start(&server, "leaving", &["summarize"], 4, Behaviour::Ok).await;
    assert_eq!(live_agents(&server), vec!["leaving", "silent"]);
    leaving.go_silent();
    let bye = leaving.client.request("$SEMAQ.AGENT.BYE", r#"{"agent_id":"leaving"}"#.into()).await.unwrap();
    assert_eq!(serde_json::from_slice::<Value>(&bye.payload).unwrap()["ok"], true);
    assert_eq!(live_agents(&server), vec!["silent"], "a goodbye removes the agent at once");
    silent.go_silent();
    wait_until_async("silent agent expires after three missed beats", Duration::from_secs(3), || {
        let gone = live_agents(&server).is_empty();
        async move { gone }
    })
    .await;
    let requester = server.client().await;
    assert_eq!(ask(&requester, "summarize", HeaderMap::new()).await, Err(async_nats::RequestErrorKind::NoResponders));
}

#[tokio::test]
async fn a_new_heartbeat_replaces_the_intent_list_and_a_closed_connection_leaves() {
    let server = SemaqServer::start();
    let agent = TestAgent::start(&server, "multi", &["a", "b"], 4, Behaviour::Ok).await;
    let reply = beat(&agent.client, heartbeat("multi", &["b", "c"], 4)).await;
    assert_eq!(reply["ok"], true);
    // The agent's own beat loop still announces a and b; announce from a second connection instead.
    drop(agent);
    let client = server.client().await;
    let _inbox = client.subscribe("agents.other").await.unwrap();
    assert_eq!(beat(&client, heartbeat("other", &["x", "y"], 4)).await["ok"], true);
    assert_eq!(beat(&client, heartbeat("other", &["y", "z"], 4)).await["ok"], true);
    let intents: Vec<String> = agents_json(&server)["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["agent_id"] == "other")
        .map(|a| serde_json::from_value(a["intents"].clone()).unwrap())
        .unwrap();
    assert_eq!(intents, vec!["y", "z"]);
    let requester = server.client().await;
    assert_eq!(ask(&requester, "x", HeaderMap::new()).await, Err(async_nats::RequestErrorKind::NoResponders));
    drop(_inbox);
    drop(client);
    wait_until_async("a closed connection's agents leave", Duration::from_secs(3), || {
        let gone = !live_agents(&server).contains(&"other".to_string());
        async move { gone }
    })
    .await;
}

#[tokio::test]
async fn an_agent_never_has_more_than_its_capacity_in_flight_and_a_full_house_gets_503_after_the_wait() {
    let server = SemaqServer::with_config(FAST_BEATS, &[]);
    let agent = TestAgent::start(&server, "slow", &["translate"], 2, Behaviour::Slow(Duration::from_millis(200))).await;
    let requester = server.client().await;
    let asks = (0..8).map(|_| {
        let requester = requester.clone();
        tokio::spawn(async move { ask(&requester, "translate", HeaderMap::new()).await })
    });
    let outcomes = futures::future::join_all(asks).await;
    let answered = outcomes.iter().filter(|o| matches!(o, Ok(Ok(_)))).count();
    let refused = outcomes.iter().filter(|o| matches!(o, Ok(Err(async_nats::RequestErrorKind::NoResponders)))).count();
    assert_eq!(agent.peak_in_flight.load(Ordering::SeqCst), 2, "never more than capacity at once");
    assert_eq!(answered + refused, 8);
    // Two slots of 200 ms answers: the 3rd to 6th wait 200 ms and are served, the 7th and 8th
    // would wait 400 ms, past the 300 ms bound, and get the 503.
    assert!(answered >= 2 && refused >= 1, "answered {answered}, refused {refused}");
    let intent = &agents_json(&server)["intents"][0];
    assert_eq!(intent["waited"].as_u64().unwrap(), 6, "{intent}");
    assert_eq!(intent["wait_timeouts"].as_u64().unwrap() as usize, refused);
}

#[tokio::test]
async fn a_session_stays_with_its_agent_and_moves_when_the_agent_dies() {
    let server = SemaqServer::with_config(FAST_BEATS, &[]);
    let mut agents = vec![];
    for id in ["chat-1", "chat-2", "chat-3"] {
        agents.push(TestAgent::start(&server, id, &["chat"], 8, Behaviour::Ok).await);
    }
    let requester = server.client().await;
    let session = |s: &str| {
        let mut headers = HeaderMap::new();
        headers.insert("Semaq-Session", s);
        headers
    };
    let mut home = HashMap::new();
    for s in 0..12 {
        let name = format!("conversation-{s}");
        let first = ask(&requester, "chat", session(&name)).await.unwrap();
        for _ in 0..5 {
            assert_eq!(ask(&requester, "chat", session(&name)).await.unwrap(), first, "{name} keeps its agent");
        }
        home.insert(name, first);
    }
    let victim_id = home["conversation-0"].clone();
    let victim = agents.iter().position(|a| a.id == victim_id).unwrap();
    let dead = agents.remove(victim);
    drop(dead);
    wait_until_async("the dead agent leaves", Duration::from_secs(3), || {
        let gone = !live_agents(&server).contains(&victim_id);
        async move { gone }
    })
    .await;
    for (name, before) in &home {
        let now = ask(&requester, "chat", session(name)).await.unwrap();
        if *before == victim_id {
            assert_ne!(now, victim_id, "{name} moved off the dead agent");
        } else {
            assert_eq!(&now, before, "{name} did not move: its agent lives");
        }
    }
    let moves = agents_json(&server)["intents"][0]["session_moves"].as_u64().unwrap();
    let orphaned = home.values().filter(|agent| **agent == victim_id).count() as u64;
    assert_eq!(moves, orphaned, "only the dead agent's sessions moved, and the moves are counted");

    // A new agent takes only the sessions it now wins; the rest stay where they are.
    let mut now_home = HashMap::new();
    for name in home.keys() {
        now_home.insert(name.clone(), ask(&requester, "chat", session(name)).await.unwrap());
    }
    let _joined = TestAgent::start(&server, "chat-4", &["chat"], 8, Behaviour::Ok).await;
    let mut moved = 0;
    for (name, before) in &now_home {
        let after = ask(&requester, "chat", session(name)).await.unwrap();
        if &after != before {
            assert_eq!(after, "chat-4", "{name} moved only to the new agent");
            moved += 1;
        }
    }
    assert!(moved < now_home.len() / 2, "few sessions moved to the new agent: {moved} of {}", now_home.len());
}

#[tokio::test]
async fn a_fast_failing_agent_loses_its_share_and_wins_it_back_when_healed() {
    let server = SemaqServer::start();
    let flaky = TestAgent::start(&server, "flaky", &["classify"], 16, Behaviour::FailHalf).await;
    let _steady = [
        TestAgent::start(&server, "steady-1", &["classify"], 16, Behaviour::Ok).await,
        TestAgent::start(&server, "steady-2", &["classify"], 16, Behaviour::Ok).await,
    ];
    let requester = server.client().await;
    for _ in 0..300 {
        let _ = ask(&requester, "classify", HeaderMap::new()).await;
    }
    let served = flaky.served.load(Ordering::SeqCst);
    assert!(served < 30, "the flaky agent got {served} of 300");
    let weak = intent_member(&server, "classify", "flaky");
    assert!(weak["weight"].as_f64().unwrap() <= 0.5, "its synapse weakened: {weak}");
    flaky.set(Behaviour::Ok);
    wait_until_async("the healed agent's weight recovers", Duration::from_secs(30), || {
        let requester = requester.clone();
        let recovered = intent_member(&server, "classify", "flaky")["weight"].as_f64().unwrap() > 0.8;
        async move {
            for _ in 0..20 {
                let _ = ask(&requester, "classify", HeaderMap::new()).await;
            }
            recovered
        }
    })
    .await;
}

#[tokio::test]
async fn malformed_heartbeats_are_refused_with_a_reason_and_counted() {
    let server = SemaqServer::start();
    let client = server.client().await;
    for (body, reason) in [
        ("not json", "malformed heartbeat"),
        (r#"{"agent_id":"a","intents":[],"inbox":"agents.a"}"#, "at least one intent"),
        (r#"{"agent_id":"a","intents":["x.*"],"inbox":"agents.a"}"#, "without wildcards"),
        (r#"{"agent_id":"a","intents":["x"],"inbox":"agents.>"}"#, "inbox"),
        (r#"{"agent_id":"a","intents":["x"],"inbox":"agents.a","capacity":0}"#, "capacity"),
    ] {
        let reply = client.request("$SEMAQ.AGENT.HB", body.into()).await.unwrap();
        let reply: Value = serde_json::from_slice(&reply.payload).unwrap();
        assert_eq!(reply["error"]["code"], 400, "{body}");
        let description = reply["error"]["description"].as_str().unwrap();
        assert!(description.contains(reason), "{body}: {description}");
    }
    let agents = agents_json(&server);
    assert_eq!(agents["heartbeats"]["refused"], 5);
    assert!(agents["agents"].as_array().unwrap().is_empty(), "nothing was registered");
}

#[tokio::test]
async fn one_client_cannot_take_anothers_agent_id_or_traffic() {
    let server = SemaqServer::start();
    let owner = TestAgent::start(&server, "owner", &["pay"], 8, Behaviour::Ok).await;
    let intruder = server.client().await;
    let reply = beat(&intruder, heartbeat("owner", &["pay"], 8)).await;
    assert!(reply["error"]["description"].as_str().unwrap().contains("held by another connection"), "{reply}");
    // Naming the owner's inbox under another id: deliveries go only to the announcing
    // connection's own subscriptions, so the intruder, which does not hold one, gets nothing
    // and the owner keeps serving.
    let lure = json!({"agent_id": "lure", "intents": ["pay"], "inbox": "agents.owner", "capacity": 8});
    assert_eq!(beat(&intruder, lure.to_string().into()).await["ok"], true);
    let requester = server.client().await;
    for _ in 0..20 {
        assert_eq!(ask(&requester, "pay", HeaderMap::new()).await.unwrap(), "owner");
    }
    assert_eq!(owner.served.load(Ordering::SeqCst), 20, "the owner got each request once");
}

#[tokio::test]
async fn permissions_decide_who_may_announce_and_which_inbox() {
    let config = r#"
        authorization {
          users = [
            { user: "agent", password: "pw", permissions: { subscribe: { allow: ["agents.mine.>", "_INBOX.>"] } } }
            { user: "mute", password: "pw", permissions: { publish: { deny: ["$SEMAQ.AGENT.>"] } } }
          ]
        }
    "#;
    let server = SemaqServer::with_config(config, &[]);
    let connect = |user: &'static str| {
        let url = server.url();
        async move {
            async_nats::ConnectOptions::with_user_and_password(user.into(), "pw".into()).connect(url).await.unwrap()
        }
    };
    let agent = connect("agent").await;
    let foreign = json!({"agent_id": "a1", "intents": ["x"], "inbox": "agents.yours"});
    let reply = beat(&agent, foreign.to_string().into()).await;
    assert!(reply["error"]["description"].as_str().unwrap().contains("may subscribe"), "{reply}");
    let own = json!({"agent_id": "a1", "intents": ["x"], "inbox": "agents.mine.a1"});
    assert_eq!(beat(&agent, own.to_string().into()).await["ok"], true);
    let (errors_tx, mut errors) = tokio::sync::mpsc::unbounded_channel();
    let mute = async_nats::ConnectOptions::with_user_and_password("mute".into(), "pw".into())
        .event_callback(move |event| {
            let errors_tx = errors_tx.clone();
            async move {
                let _ = errors_tx.send(event.to_string());
            }
        })
        .connect(server.url())
        .await
        .unwrap();
    mute.publish("$SEMAQ.AGENT.HB", heartbeat("m", &["x"], 1)).await.unwrap();
    sync(&mute).await;
    let violation = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(event) = errors.recv().await {
            if event.to_lowercase().contains("permissions violation") {
                return event;
            }
        }
        String::new()
    })
    .await
    .unwrap();
    assert!(violation.contains("$SEMAQ.AGENT.HB"), "{violation}");
    assert_eq!(live_agents(&server), vec!["a1"], "the refused heartbeat changed nothing");
}
