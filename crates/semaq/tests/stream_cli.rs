//! `semaq stream` and `semaq consumer` against a real `semaq-server` (the seed walkthrough:
//! an L2 stream bound to an Avro schema, a refused payload, a CEL-filtered consumer).
//! The server is started by [`semaq_testkit::SemaqServer`].

mod support;

use std::time::Duration;

use semaq_testkit::{wait_until, SemaqServer};
use support::{ok, one_line_failure, stderr_of, stdout_of, Semaq};

fn stored_messages(server: &SemaqServer, stream: &str) -> u64 {
    let info: serde_json::Value =
        serde_json::from_str(&stdout_of(&ok(server.semaq(&["stream", "info", stream])))).expect("stream info is JSON");
    info["state"]["messages"].as_u64().expect("state.messages")
}

const AI_EVENT_V1: &str = r#"{"type": "record", "name": "AiEvent", "fields": [
  {"name": "model_id", "type": "string"},
  {"name": "confidence", "type": "double"},
  {"name": "input_tokens", "type": "int"}
]}"#;

const VALID: &str = r#"{"model_id":"llama3-70b","confidence":0.92,"input_tokens":128}"#;
const MISTYPED: &str = r#"{"model_id":"llama3-70b","confidence":"high","input_tokens":128}"#;

#[test]
fn seed_walkthrough_l2_stream_refuses_a_mistyped_payload() {
    let server = SemaqServer::start();
    std::fs::write(server.dir().join("ai-event-v1.avsc"), AI_EVENT_V1).expect("write schema");

    let added = ok(server.semaq(&["stream", "add", "AI_EVENTS", "--subjects", "ai.>", "--schema", "ai-event-v1.avsc"]));
    let summary = stdout_of(&added);
    assert!(summary.contains("Created stream AI_EVENTS"), "{summary}");
    assert!(summary.contains("ai.>"), "{summary}");
    assert!(summary.contains("level:     2"), "{summary}");
    assert!(summary.contains("schema:    ai-event-v1"), "{summary}");
    // The file was registered under its stem, as `semaq schema register` would.
    let shown = stdout_of(&ok(server.semaq(&["schema", "show", "ai-event-v1"])));
    assert!(shown.contains("AiEvent"), "{shown}");

    // Plain `semaq pub` is fire-and-forget: both exit 0, only the valid one is stored.
    ok(server.semaq(&["pub", "ai.inference", VALID]));
    ok(server.semaq(&["pub", "ai.inference", MISTYPED]));
    // Another connection's publishes may still be in flight: wait for the first one to land.
    wait_until("the valid message stored", Duration::from_secs(5), || stored_messages(&server, "AI_EVENTS") > 0);
    assert_eq!(stored_messages(&server, "AI_EVENTS"), 1);

    // `--js` waits for the PubAck, so the refusal is a one-line error naming the violation.
    let refused = one_line_failure(server.semaq(&["pub", "--js", "ai.inference", MISTYPED]));
    assert!(refused.contains("$.confidence"), "{refused}");
    assert!(refused.contains("ai-event-v1"), "{refused}");
    let stored = ok(server.semaq(&["pub", "--js", "ai.inference", VALID]));
    assert!(stderr_of(&stored).contains("Stored in stream AI_EVENTS at sequence 2"), "{}", stderr_of(&stored));
    // Sequence 2 (not 3) and two messages: the mistyped core publish was never stored.
    assert_eq!(stored_messages(&server, "AI_EVENTS"), 2);

    let listed = stdout_of(&ok(server.semaq(&["stream", "ls"])));
    assert_eq!(listed.trim(), "AI_EVENTS");
}

#[test]
fn consumer_filters_are_checked_by_the_server() {
    let server = SemaqServer::start();
    ok(server.semaq(&["stream", "add", "AI_EVENTS", "--subjects", "ai.>", "--storage", "memory"]));

    let added = ok(server.semaq(&["consumer", "add", "AI_EVENTS", "hi", "--filter", "confidence > 0.85"]));
    assert!(stdout_of(&added).contains("Created pull consumer hi on AI_EVENTS"), "{}", stdout_of(&added));
    let bad = one_line_failure(server.semaq(&["consumer", "add", "AI_EVENTS", "bad", "--filter", "confidence >"]));
    assert!(bad.contains("semaq.filter") && bad.contains("column"), "{bad}");

    assert_eq!(stdout_of(&ok(server.semaq(&["consumer", "ls", "AI_EVENTS"]))).trim(), "hi");
    ok(server.semaq(&["consumer", "rm", "AI_EVENTS", "hi"]));
    assert_eq!(stdout_of(&ok(server.semaq(&["consumer", "ls", "AI_EVENTS"]))).trim(), "");
}

#[test]
fn stream_errors_are_one_line() {
    let server = SemaqServer::start();
    ok(server.semaq(&["stream", "add", "A", "--subjects", "a.>", "--max-msgs", "10", "--max-age", "1h"]));
    let overlap = one_line_failure(server.semaq(&["stream", "add", "B", "--subjects", "a.x"]));
    assert!(overlap.contains("overlap"), "{overlap}");
    let unknown = one_line_failure(server.semaq(&["stream", "add", "C", "--subjects", "c", "--schema", "no-such"]));
    assert!(unknown.contains("no-such"), "{unknown}");
    let bad_sync = one_line_failure(server.semaq(&["stream", "add", "D", "--subjects", "d", "--sync", "sometimes"]));
    assert!(bad_sync.contains("--sync"), "{bad_sync}");

    ok(server.semaq(&["stream", "rm", "A"]));
    let gone = one_line_failure(server.semaq(&["stream", "info", "A"]));
    assert!(gone.contains("not found"), "{gone}");
}
