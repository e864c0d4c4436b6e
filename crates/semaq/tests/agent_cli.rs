//! `semaq agent ls` and `semaq agent watch` against a real `semaq-server` with a live agent.

mod support;

use semaq_testkit::SemaqServer;
use serde_json::{json, Value};
use support::{ok, stdout_of, Semaq};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_ls_shows_the_agent_its_synapse_and_in_flight_work() {
    let server = SemaqServer::start();
    let agent = server.client().await;
    let _inbox = agent.subscribe("agents.pay-1").await.unwrap();
    let beat = json!({"agent_id": "pay-1", "intents": ["resolve_payment"], "inbox": "agents.pay-1", "capacity": 8});
    let ack = agent.request("$SEMAQ.AGENT.HB", beat.to_string().into()).await.unwrap();
    assert_eq!(serde_json::from_slice::<Value>(&ack.payload).unwrap()["ok"], true);
    let server = std::sync::Arc::new(server);
    let cli = server.clone();
    let (text, json, watched) = tokio::task::spawn_blocking(move || {
        let text = stdout_of(&ok(cli.semaq(&["agent", "ls"])));
        let json = stdout_of(&ok(cli.semaq(&["agent", "ls", "--json"])));
        let watched = stdout_of(&ok(cli.semaq(&["agent", "watch", "--count", "2", "--interval", "10ms"])));
        (text, json, watched)
    })
    .await
    .unwrap();
    assert!(text.contains("1 agents"), "{text}");
    assert!(text.contains("pay-1") && text.contains("0/8"), "{text}");
    assert!(text.contains("intent resolve_payment"), "{text}");
    let table: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(table["agents"][0]["agent_id"], "pay-1");
    assert_eq!(table["intents"][0]["agents"][0]["weight"], 1.0);
    assert_eq!(watched.matches("1 agents").count(), 2, "watch redrew twice: {watched}");
}
