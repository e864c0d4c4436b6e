//! `semaq stream add --level 4 ...`, `semaq stream info` and `semaq trace` against a real
//! `semaq-server`: a RAG flow (query → retrieval → answer) traced end to end as a tree and JSON.

mod support;

use semaq_testkit::SemaqServer;
use serde_json::Value;
use support::{ok, one_line_failure, stderr_of, stdout_of, Semaq};

const RAG_SCHEMA: &str = r#"{"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}"#;

/// `semaq pub --js` with the context every L4 publish carries, plus `extra` headers.
fn publish_l4(server: &SemaqServer, subject: &str, event_time: u64, extra: &[&str], body: &str) -> String {
    let time = format!("Semaq-Event-Time: {event_time}");
    let mut args = vec!["pub", "--js", subject, body, "-H", &time, "-H", "Semaq-Session: s-1"];
    args.extend(["-H", "traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"]);
    for header in extra {
        args.extend(["-H", header]);
    }
    stderr_of(&ok(server.semaq(&args)))
}

#[test]
fn levels_round_trip_through_stream_add_and_info() {
    let server = SemaqServer::start();
    std::fs::write(server.dir().join("rag.json"), RAG_SCHEMA).expect("write schema");
    let args = ["stream", "add", "ANSWERS", "--subjects", "rag.answer", "--level", "4", "--schema", "rag.json"];
    let added = ok(server.semaq(&[&args[..], &["--evolve", "auto", "--require", "traceparent,x-tenant"]].concat()));
    let summary = stdout_of(&added);
    assert!(summary.contains("level:     4"), "{summary}");
    assert!(summary.contains("enforces:  ordered durable storage; schema rag v1 (latest)"), "{summary}");
    assert!(summary.contains("required headers traceparent, x-tenant"), "{summary}");
    assert!(summary.contains("schema auto-evolution"), "{summary}");

    let info = ok(server.semaq(&["stream", "info", "ANSWERS"]));
    let json: Value = serde_json::from_str(&stdout_of(&info)).expect("stream info is JSON");
    assert_eq!(json["semaq"]["level"], 4);
    assert_eq!(json["config"]["metadata"]["semaq.evolve"], "auto");
    assert_eq!(json["config"]["metadata"]["semaq.require"], "traceparent,x-tenant");
    assert!(stderr_of(&info).contains("Level 4 enforces:\n  - ordered durable storage\n"), "{}", stderr_of(&info));
    assert!(stderr_of(&info).contains("  - event time order\n"), "{}", stderr_of(&info));

    let l2_evolve = ["stream", "add", "B", "--subjects", "b", "--level", "2", "--schema", "rag", "--evolve", "auto"];
    assert!(one_line_failure(server.semaq(&l2_evolve)).contains("--evolve auto needs --level 4"));
    let bad = ["stream", "add", "C", "--subjects", "c", "--level", "4", "--schema", "rag", "--evolve", "always"];
    assert!(one_line_failure(server.semaq(&bad)).contains("auto or off"));
    let too_high = server.semaq(&["stream", "add", "D", "--subjects", "d", "--level", "5"]);
    assert!(!too_high.status.success() && stderr_of(&too_high).contains("--level"), "{}", stderr_of(&too_high));
}

#[test]
fn a_rag_answer_is_traced_to_its_query_as_a_tree_and_as_json() {
    let server = SemaqServer::start();
    std::fs::write(server.dir().join("rag.json"), RAG_SCHEMA).expect("write schema");
    ok(server.semaq(&["stream", "add", "QUERIES", "--subjects", "rag.query"]));
    for (name, subject) in [("RETRIEVALS", "rag.retrieval"), ("ANSWERS", "rag.answer")] {
        ok(server.semaq(&["stream", "add", name, "--subjects", subject, "--level", "4", "--schema", "rag.json"]));
    }
    let stored =
        stderr_of(&ok(server.semaq(&["pub", "--js", "rag.query", r#"{"text":"q"}"#, "-H", "Nats-Msg-Id: q-1"])));
    assert!(stored.contains("QUERIES at sequence 1"), "{stored}");
    publish_l4(&server, "rag.retrieval", 1, &["Semaq-Parent: q-1", "Semaq-Producer: retriever"], r#"{"text":"doc"}"#);
    let stored = publish_l4(&server, "rag.answer", 2, &["Semaq-Parent: RETRIEVALS:1,QUERIES:1"], r#"{"text":"a"}"#);
    assert!(stored.contains("ANSWERS at sequence 1"), "{stored}");

    let tree = stdout_of(&ok(server.semaq(&["trace", "ANSWERS:1"])));
    let lines: Vec<&str> = tree.lines().collect();
    assert_eq!(lines.len(), 4, "{tree}");
    assert!(lines[0].starts_with("ANSWERS:1  rag.answer  1970-01-01T00:00:00"), "event time shown: {tree}");
    assert!(
        lines[1].starts_with("├── RETRIEVALS:1  rag.retrieval  ") && lines[1].contains("producer=retriever"),
        "{tree}"
    );
    assert!(lines[2].starts_with("│   └── QUERIES:1  rag.query  "), "the Msg-Id parent was resolved: {tree}");
    assert!(lines[3].starts_with("└── QUERIES:1  rag.query  ") && lines[3].ends_with(" (*)"), "{tree}");

    let json: Value = serde_json::from_str(&stdout_of(&ok(server.semaq(&["trace", "ANSWERS:1", "--json"])))).unwrap();
    assert_eq!(json["root"], "ANSWERS:1");
    assert_eq!(json["nodes"].as_array().map(Vec::len), Some(3));
    assert_eq!(json["edges"].as_array().map(Vec::len), Some(3));

    let refused = one_line_failure(server.semaq(&[
        "pub",
        "--js",
        "rag.answer",
        r#"{"text":"a"}"#,
        "-H",
        "Semaq-Parent: ANSWERS:5",
        "-H",
        "Semaq-Event-Time: 3",
        "-H",
        "Semaq-Session: s",
        "-H",
        "traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    ]));
    assert!(refused.contains("ANSWERS:5 is not stored yet"), "{refused}");
    assert!(one_line_failure(server.semaq(&["trace", "ANSWERS:9"])).contains("no message found"));
    assert!(one_line_failure(server.semaq(&["trace", "ANSWERS"])).contains("STREAM:SEQ"));
}
