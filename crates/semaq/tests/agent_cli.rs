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

#[test]
fn agent_intent_add_durable_makes_the_work_queue_and_its_dead_letter_stream() {
    let server = SemaqServer::start();
    let added =
        stdout_of(&ok(server.semaq(&["agent", "intent", "add", "eval.offline", "--durable", "--max-deliver", "3"])));
    assert!(added.contains("stream INTENT_eval_offline on intent.eval.offline"), "{added}");
    let info: Value =
        serde_json::from_str(&stdout_of(&ok(server.semaq(&["stream", "info", "INTENT_eval_offline"])))).unwrap();
    assert_eq!(info["config"]["retention"], "workqueue");
    assert_eq!(info["config"]["metadata"]["semaq.max_deliver"], "3");
    let dead: Value =
        serde_json::from_str(&stdout_of(&ok(server.semaq(&["stream", "info", "INTENT_eval_offline_DLQ"])))).unwrap();
    assert_eq!(dead["config"]["subjects"][0], "dlq.eval.offline");
    let refused = server.semaq(&["agent", "intent", "add", "eval.offline"]);
    assert!(!refused.status.success());
}
