//! L4 lineage (`Semaq-Parent`, `$SEMAQ.API.LINEAGE`), schema auto-evolution
//! (`semaq.evolve: auto`, `$SEMAQ.EVENT.SCHEMA.EVOLVED`) and levels in stream info, through real
//! async-nats clients. Every L4 publish carries the context L4 requires (event time, trace
//! context, session), so these tests hold with every L4 check on.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use async_nats::jetstream::{self, stream};
use async_nats::HeaderMap;
use futures::StreamExt;
use semaq_testkit::SemaqServer;
use serde_json::{json, Value};

/// Increasing event times for every L4 publish of the process.
static EVENT_TIME_NS: AtomicI64 = AtomicI64::new(1_767_323_045_000_000_000);

async fn schema_api(client: &async_nats::Client, operation: &str, body: Value) -> Value {
    let reply = client.request(format!("$SEMAQ.API.SCHEMA.{operation}"), body.to_string().into()).await.unwrap();
    serde_json::from_slice(&reply.payload).unwrap()
}

async fn register(client: &async_nats::Client, subject: &str, schema: &str, schema_type: &str) {
    let body = json!({"subject": subject, "schema": schema, "schemaType": schema_type});
    let answer = schema_api(client, "REGISTER", body).await;
    assert!(answer["id"].is_u64(), "{answer}");
}

fn stream_config(name: &str, subject: &str, metadata: &[(&str, &str)]) -> stream::Config {
    let metadata: HashMap<String, String> = metadata.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    stream::Config { name: name.into(), subjects: vec![subject.into()], metadata, ..Default::default() }
}

fn l4(name: &str, subject: &str, schema: &str) -> stream::Config {
    stream_config(name, subject, &[("semaq.level", "4"), ("semaq.schema", schema)])
}

/// Headers of an L4 publish: event time, trace context, session, plus `extra`.
fn l4_headers(extra: &[(&str, &str)]) -> HeaderMap {
    let mut headers = HeaderMap::new();
    let time = EVENT_TIME_NS.fetch_add(1_000_000, Ordering::Relaxed);
    headers.insert("Semaq-Event-Time", time.to_string().as_str());
    headers.insert("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
    headers.insert("Semaq-Session", "session-1");
    for (name, value) in extra {
        headers.insert(*name, *value);
    }
    headers
}

/// Publishes and returns the PubAck JSON.
async fn publish(client: &async_nats::Client, subject: &str, headers: HeaderMap, body: Value) -> Value {
    let reply = client.request_with_headers(subject.to_string(), headers, body.to_string().into()).await.unwrap();
    serde_json::from_slice(&reply.payload).unwrap()
}

fn error_of(ack: &Value) -> &str {
    ack["error"]["description"].as_str().unwrap_or_else(|| panic!("expected a refusal, got {ack}"))
}

async fn lineage(client: &async_nats::Client, target: &str, body: Value) -> Value {
    let subject = format!("$SEMAQ.API.LINEAGE.{}", target.replacen(':', ".", 1));
    let reply = client.request(subject, body.to_string().into()).await.unwrap();
    serde_json::from_slice(&reply.payload).unwrap()
}

fn node<'a>(graph: &'a Value, id: &str) -> &'a Value {
    let nodes = graph["nodes"].as_array().unwrap();
    nodes.iter().find(|node| node["id"] == id).unwrap_or_else(|| panic!("no node {id} in {graph}"))
}

fn edges(graph: &Value) -> Vec<(String, String)> {
    let edges = graph["edges"].as_array().unwrap().iter();
    let mut pairs: Vec<(String, String)> =
        edges.map(|e| (e["from"].as_str().unwrap().into(), e["to"].as_str().unwrap().into())).collect();
    pairs.sort();
    pairs
}

fn pair(from: &str, to: &str) -> (String, String) {
    (from.to_string(), to.to_string())
}

/// A RAG flow: queries (an L1 stream) → retrievals → answers (L4 streams).
async fn rag_streams(client: &async_nats::Client) -> jetstream::Context {
    let schema = json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]});
    register(client, "rag", &schema.to_string(), "JSON").await;
    let js = jetstream::new(client.clone());
    js.create_stream(stream_config("QUERIES", "rag.query", &[])).await.unwrap();
    js.create_stream(l4("RETRIEVALS", "rag.retrieval", "rag")).await.unwrap();
    js.create_stream(l4("ANSWERS", "rag.answer", "rag")).await.unwrap();
    js
}

#[tokio::test]
async fn a_rag_flow_is_traced_from_answer_to_query_across_three_streams() {
    let server = SemaqServer::start();
    let client = async_nats::ConnectOptions::new().name("rag-app").connect(server.url()).await.unwrap();
    let js = rag_streams(&client).await;

    let mut query = HeaderMap::new();
    query.insert("Nats-Msg-Id", "q-1");
    assert_eq!(publish(&client, "rag.query", query, json!({"text": "what is L4?"})).await["seq"], 1);
    assert_eq!(publish(&client, "rag.query", HeaderMap::new(), json!({"text": "obsolete"})).await["seq"], 2);

    // A Msg-Id parent is resolved at publish and the resolution is stored with the message.
    let by_id = l4_headers(&[("Semaq-Parent", "q-1")]);
    assert_eq!(publish(&client, "rag.retrieval", by_id, json!({"text": "doc 7"})).await["seq"], 1);
    let stored = js.get_stream("RETRIEVALS").await.unwrap().get_raw_message(1).await.unwrap();
    assert_eq!(stored.headers.get("Semaq-Parent").map(|v| v.as_str()), Some("q-1"));
    assert_eq!(stored.headers.get("Semaq-Parent-Resolved").map(|v| v.as_str()), Some("QUERIES:1"));
    let by_seq = l4_headers(&[("Semaq-Parent", "QUERIES:2")]);
    assert_eq!(publish(&client, "rag.retrieval", by_seq, json!({"text": "doc 9"})).await["seq"], 2);

    let answer =
        l4_headers(&[("Semaq-Parent", "RETRIEVALS:1, RETRIEVALS:2, QUERIES:1"), ("Semaq-Producer", "answerer")]);
    assert_eq!(publish(&client, "rag.answer", answer, json!({"text": "L4 is traceable"})).await["seq"], 1);
    js.get_stream("QUERIES").await.unwrap().delete_message(2).await.unwrap();

    let graph = lineage(&client, "ANSWERS:1", json!({})).await;
    assert_eq!(graph["root"], "ANSWERS:1");
    assert_eq!(graph["truncated"], false);
    assert_eq!(graph["nodes"].as_array().unwrap().len(), 5, "QUERIES:1 is reached twice but listed once: {graph}");
    assert_eq!(
        edges(&graph),
        vec![
            pair("ANSWERS:1", "QUERIES:1"),
            pair("ANSWERS:1", "RETRIEVALS:1"),
            pair("ANSWERS:1", "RETRIEVALS:2"),
            pair("RETRIEVALS:1", "QUERIES:1"),
            pair("RETRIEVALS:2", "QUERIES:2"),
        ]
    );
    let root = node(&graph, "ANSWERS:1");
    assert_eq!((root["status"].as_str(), root["subject"].as_str()), (Some("stored"), Some("rag.answer")));
    assert_eq!(root["producer"], "answerer");
    assert!(root["time"].as_str().unwrap().starts_with("2026-01-02T"), "event time, not stored time: {root}");
    assert_eq!(node(&graph, "RETRIEVALS:1")["producer"], "rag-app", "L2+ streams record the connection");
    assert_eq!(node(&graph, "QUERIES:1")["msg_id"], "q-1");
    assert_eq!(node(&graph, "QUERIES:2")["status"], "deleted");

    let shallow = lineage(&client, "ANSWERS:1", json!({"depth": 1})).await;
    assert_eq!(shallow["truncated"], true);
    assert_eq!(node(&shallow, "RETRIEVALS:1")["more_parents"], true);
    let missing = lineage(&client, "ANSWERS:9", json!({})).await;
    assert_eq!(missing["error"]["code"], 404, "{missing}");
}

#[tokio::test]
async fn a_msg_id_parent_resolves_however_many_messages_came_after_it() {
    let server = SemaqServer::start();
    let client = server.client().await;
    let js = rag_streams(&client).await;
    let first = l4_headers(&[("Nats-Msg-Id", "r-1")]);
    assert_eq!(publish(&client, "rag.retrieval", first, json!({"text": "doc 1"})).await["seq"], 1);
    let later = semaq_server::limits::LINEAGE_MSG_ID_SCAN_MESSAGES_MAX as u64 + 100;
    for n in 0..later {
        let id = format!("r-later-{n}");
        let headers = l4_headers(&[("Nats-Msg-Id", id.as_str())]);
        client.publish_with_headers("rag.retrieval", headers, json!({"text": "doc"}).to_string().into()).await.unwrap();
    }
    let last = publish(&client, "rag.retrieval", l4_headers(&[]), json!({"text": "last"})).await;
    assert_eq!(last["seq"], later + 2, "{last}");

    let child = l4_headers(&[("Semaq-Parent", "r-1, r-later-7")]);
    assert_eq!(publish(&client, "rag.answer", child, json!({"text": "a"})).await["seq"], 1);
    let stored = js.get_stream("ANSWERS").await.unwrap().get_raw_message(1).await.unwrap();
    let resolved = stored.headers.get("Semaq-Parent-Resolved").map(|v| v.as_str().to_string());
    assert_eq!(resolved.as_deref(), Some("RETRIEVALS:1,RETRIEVALS:9"));
}

#[tokio::test]
async fn bad_parent_references_are_refused_and_nothing_is_stored() {
    let server = SemaqServer::start();
    let client = server.client().await;
    let js = rag_streams(&client).await;
    assert_eq!(publish(&client, "rag.query", HeaderMap::new(), json!({"text": "q"})).await["seq"], 1);

    let forward =
        publish(&client, "rag.answer", l4_headers(&[("Semaq-Parent", "QUERIES:2")]), json!({"text": "a"})).await;
    assert!(error_of(&forward).contains("QUERIES:2 is not stored yet"), "{forward}");
    assert_eq!((forward["error"]["code"].as_u64(), forward["error"]["err_code"].as_u64()), (Some(400), Some(10450)));
    let own_future =
        publish(&client, "rag.answer", l4_headers(&[("Semaq-Parent", "ANSWERS:1")]), json!({"text": "a"})).await;
    assert!(error_of(&own_future).contains("stored up to sequence 0"), "{own_future}");
    let unknown = publish(&client, "rag.answer", l4_headers(&[("Semaq-Parent", "NOPE:1")]), json!({"text": "a"})).await;
    assert!(error_of(&unknown).contains("no stream \"NOPE\""), "{unknown}");
    let empty =
        publish(&client, "rag.answer", l4_headers(&[("Semaq-Parent", "QUERIES:1,,")]), json!({"text": "a"})).await;
    assert!(error_of(&empty).contains("empty reference"), "{empty}");
    let forged = l4_headers(&[("Semaq-Parent", "x"), ("Semaq-Parent-Resolved", "QUERIES:1")]);
    let forged = publish(&client, "rag.answer", forged, json!({"text": "a"})).await;
    assert!(error_of(&forged).contains("set by the server"), "{forged}");
    assert_eq!(js.get_stream("ANSWERS").await.unwrap().info().await.unwrap().state.messages, 0);

    // An id nobody stored is kept as an unresolved parent, shown as such.
    let unresolved = l4_headers(&[("Semaq-Parent", "QUERIES:1,never-seen")]);
    assert_eq!(publish(&client, "rag.answer", unresolved, json!({"text": "a"})).await["seq"], 1);
    let graph = lineage(&client, "ANSWERS:1", json!({})).await;
    assert_eq!(node(&graph, "msg-id:never-seen")["status"], "unresolved");
    assert_eq!(node(&graph, "QUERIES:1")["status"], "stored");
}

#[tokio::test]
async fn lower_levels_store_parent_headers_unchecked_and_the_walk_survives_cycles() {
    let server = SemaqServer::start();
    let client = server.client().await;
    let js = jetstream::new(client.clone());
    js.create_stream(stream_config("LOOSE", "loose", &[])).await.unwrap();
    let mut headers = HeaderMap::new();
    headers.insert("Semaq-Parent", "LOOSE:2");
    assert_eq!(publish(&client, "loose", headers, json!({})).await["seq"], 1, "L1 does not check references");
    let mut headers = HeaderMap::new();
    headers.insert("Semaq-Parent", "LOOSE:1,GONE:4");
    assert_eq!(publish(&client, "loose", headers, json!({})).await["seq"], 2);
    let graph = lineage(&client, "LOOSE:1", json!({})).await;
    assert_eq!(edges(&graph), vec![pair("LOOSE:1", "LOOSE:2"), pair("LOOSE:2", "GONE:4"), pair("LOOSE:2", "LOOSE:1")]);
    assert_eq!(graph["nodes"].as_array().unwrap().len(), 3);
    assert_eq!(node(&graph, "GONE:4")["status"], "unknown_stream");
}

async fn evolved_events(client: &async_nats::Client) -> async_nats::Subscriber {
    let events = client.subscribe("$SEMAQ.EVENT.SCHEMA.EVOLVED").await.unwrap();
    client.flush().await.unwrap();
    events
}

#[tokio::test]
async fn an_avro_stream_evolves_with_a_new_optional_field_and_refuses_a_type_change() {
    let server = SemaqServer::start();
    let client = server.client().await;
    let v1 = json!({"type": "record", "name": "AiEvent", "fields": [{"name": "model", "type": "string"}]});
    register(&client, "ai-event", &v1.to_string(), "AVRO").await;
    let js = jetstream::new(client.clone());
    let mut config = l4("EVOLVING", "ev.>", "ai-event");
    config.metadata.insert("semaq.evolve".into(), "auto".into());
    js.create_stream(config).await.unwrap();
    let mut events = evolved_events(&client).await;

    let widened = json!({"model": "llama3-70b", "score": 0.92});
    assert_eq!(publish(&client, "ev.a", l4_headers(&[]), widened.clone()).await["seq"], 1);
    let event = tokio::time::timeout(Duration::from_secs(5), events.next()).await.unwrap().unwrap();
    let event: Value = serde_json::from_slice(&event.payload).unwrap();
    assert_eq!((event["stream"].as_str(), event["subject"].as_str()), (Some("EVOLVING"), Some("ai-event")));
    assert_eq!((event["old_version"].as_u64(), event["new_version"].as_u64()), (Some(1), Some(2)));
    assert_eq!(event["added"], json!(["score"]));
    assert_eq!(schema_api(&client, "VERSIONS", json!({"subject": "ai-event"})).await, json!([1, 2]));
    let v2: Value = serde_json::from_str(
        schema_api(&client, "GET", json!({"subject": "ai-event", "version": 2})).await["schema"].as_str().unwrap(),
    )
    .unwrap();
    assert_eq!(v2["fields"][1], json!({"name": "score", "type": ["null", "double"], "default": null}));
    // The same shape again needs no new version.
    assert_eq!(publish(&client, "ev.a", l4_headers(&[]), json!({"model": "m", "score": 0.5})).await["seq"], 2);
    assert_eq!(publish(&client, "ev.a", l4_headers(&[]), json!({"model": "m"})).await["seq"], 3);

    let retyped = publish(&client, "ev.a", l4_headers(&[]), json!({"model": "m", "score": "high"})).await;
    let report = error_of(&retyped);
    assert!(report.contains("\"ai-event\" version 2"), "{report}");
    assert!(report.contains("change the type of field 'score'"), "{report}");
    assert!(report.contains("BACKWARD compatibility report: version 2: field 'score'"), "{report}");
    let lacking = publish(&client, "ev.a", l4_headers(&[]), json!({"score": 1.0, "extra": true})).await;
    assert!(error_of(&lacking).contains("remove required field 'model'"), "{lacking}");
    assert_eq!(schema_api(&client, "VERSIONS", json!({"subject": "ai-event"})).await, json!([1, 2]));
    let stream = js.get_stream("EVOLVING").await.unwrap().info().await.unwrap().clone();
    assert_eq!(stream.state.messages, 3, "refused messages are not stored");
    assert!(tokio::time::timeout(Duration::from_millis(200), events.next()).await.is_err(), "no second evolution");
}

#[tokio::test]
async fn nested_objects_and_records_evolve_and_a_nested_type_change_is_refused_by_path() {
    let server = SemaqServer::start();
    let client = server.client().await;
    let json_v1 = json!({"type": "object", "additionalProperties": false, "required": ["user"], "properties": {
        "user": {"type": "object", "additionalProperties": false,
                 "properties": {"id": {"type": "integer"}}, "required": ["id"]}}});
    register(&client, "nested-json", &json_v1.to_string(), "JSON").await;
    let user = json!({"type": "record", "name": "User", "fields": [{"name": "id", "type": "long"}]});
    let avro_v1 = json!({"type": "record", "name": "Ev", "fields": [{"name": "user", "type": user}]});
    register(&client, "nested-avro", &avro_v1.to_string(), "AVRO").await;
    let js = jetstream::new(client.clone());
    for (name, subject, schema) in [("NJSON", "nj.>", "nested-json"), ("NAVRO", "na.>", "nested-avro")] {
        let mut config = l4(name, subject, schema);
        config.metadata.insert("semaq.evolve".into(), "auto".into());
        js.create_stream(config).await.unwrap();
    }
    let mut events = evolved_events(&client).await;

    for (subject, schema) in [("nj.a", "nested-json"), ("na.a", "nested-avro")] {
        let ack = publish(&client, subject, l4_headers(&[]), json!({"user": {"id": 1, "locale": "fr"}})).await;
        assert_eq!(ack["seq"], 1, "{ack}");
        let event = tokio::time::timeout(Duration::from_secs(5), events.next()).await.unwrap().unwrap();
        let event: Value = serde_json::from_slice(&event.payload).unwrap();
        assert_eq!((event["subject"].as_str(), &event["added"]), (Some(schema), &json!(["user.locale"])));
        let v2 = schema_api(&client, "GET", json!({"subject": schema, "version": 2})).await;
        let v2: Value = serde_json::from_str(v2["schema"].as_str().unwrap()).unwrap();
        if schema == "nested-json" {
            assert_eq!(v2["properties"]["user"]["properties"]["locale"], json!({"type": "string"}));
            assert_eq!(v2["properties"]["user"]["required"], json!(["id"]), "the new field is optional");
        } else {
            let locale = &v2["fields"][0]["type"]["fields"][1];
            assert_eq!(*locale, json!({"name": "locale", "type": ["null", "string"], "default": null}));
        }
        let retyped = publish(&client, subject, l4_headers(&[]), json!({"user": {"id": "u-1"}})).await;
        let report = error_of(&retyped);
        assert!(report.contains("change the type of field 'user.id'"), "{report}");
        assert_eq!(schema_api(&client, "VERSIONS", json!({"subject": schema})).await, json!([1, 2]));
    }
}

#[tokio::test]
async fn arrays_of_objects_and_avro_records_named_twice_evolve_and_an_item_type_change_is_refused_by_path() {
    let server = SemaqServer::start();
    let client = server.client().await;
    let line = json!({"type": "object", "additionalProperties": false, "required": ["sku"],
        "properties": {"sku": {"type": "string"}, "price": {"type": "number"}}});
    let json_v1 = json!({"type": "object", "properties": {"items": {"type": "array", "items": line}}});
    register(&client, "order-json", &json_v1.to_string(), "JSON").await;
    let line = json!({"type": "record", "name": "Line", "fields": [
        {"name": "sku", "type": "string"}, {"name": "price", "type": ["null", "double"], "default": null}]});
    let address = json!({"type": "record", "name": "Address", "fields": [{"name": "city", "type": "string"}]});
    let avro_v1 = json!({"type": "record", "name": "Order", "namespace": "semaq", "fields": [
        {"name": "items", "type": {"type": "array", "items": line}},
        {"name": "ship", "type": address},
        {"name": "bill", "type": ["null", "semaq.Address"], "default": null}]});
    register(&client, "order-avro", &avro_v1.to_string(), "AVRO").await;
    let js = jetstream::new(client.clone());
    for (name, subject, schema) in [("OJSON", "oj.>", "order-json"), ("OAVRO", "oa.>", "order-avro")] {
        let mut config = l4(name, subject, schema);
        config.metadata.insert("semaq.evolve".into(), "auto".into());
        js.create_stream(config).await.unwrap();
    }
    let mut events = evolved_events(&client).await;
    let ship = json!({"city": "Lyon"});

    // The new field is in the second element only; for Avro also in `bill`, which names `ship`'s record.
    let items = json!([{"sku": "a"}, {"sku": "b", "qty": 2}]);
    let cases = [
        ("oj.a", "order-json", json!({"items": items}), json!(["items[].qty"])),
        (
            "oa.a",
            "order-avro",
            json!({"items": items, "ship": ship, "bill": {"city": "Paris", "zip": "75001"}}),
            json!(["bill.zip", "items[].qty"]),
        ),
    ];
    for (subject, schema, payload, added) in cases {
        assert_eq!(publish(&client, subject, l4_headers(&[]), payload).await["seq"], 1);
        let event = tokio::time::timeout(Duration::from_secs(5), events.next()).await.unwrap().unwrap();
        let event: Value = serde_json::from_slice(&event.payload).unwrap();
        let mut got: Vec<String> = serde_json::from_value(event["added"].clone()).unwrap();
        got.sort();
        assert_eq!((event["subject"].as_str(), json!(got)), (Some(schema), added));
        let v2 = schema_api(&client, "GET", json!({"subject": schema, "version": 2})).await;
        let v2: Value = serde_json::from_str(v2["schema"].as_str().unwrap()).unwrap();
        if schema == "order-json" {
            let line = &v2["properties"]["items"]["items"];
            assert_eq!(line["properties"]["qty"], json!({"type": "integer"}));
            assert_eq!(line["required"], json!(["sku"]), "the new item field is optional");
        } else {
            let qty = json!({"name": "qty", "type": ["null", "long"], "default": null});
            assert_eq!(v2["fields"][0]["type"]["items"]["fields"][2], qty);
            let zip = json!({"name": "zip", "type": ["null", "string"], "default": null});
            assert_eq!(v2["fields"][1]["type"]["fields"][1], zip, "added to the one definition of semaq.Address");
            assert_eq!(v2["fields"][2]["type"], json!(["null", "semaq.Address"]), "the reference stays a name");
        }
        let retyped = json!({"items": [{"sku": "a"}, {"sku": "b", "price": "cheap"}], "ship": ship});
        let report = error_of(&publish(&client, subject, l4_headers(&[]), retyped).await).to_string();
        assert!(report.contains("change the type of field 'items[].price'"), "{report}");
        assert_eq!(schema_api(&client, "VERSIONS", json!({"subject": schema})).await, json!([1, 2]));
    }
    // `ship` of a later message has the field `bill` brought: no new version.
    let later = json!({"items": [], "ship": {"city": "Nice", "zip": "06000"}});
    assert_eq!(publish(&client, "oa.b", l4_headers(&[]), later).await["seq"], 2);
    assert_eq!(schema_api(&client, "VERSIONS", json!({"subject": "order-avro"})).await, json!([1, 2]));
}

#[tokio::test]
async fn a_closed_json_schema_evolves_and_the_compatibility_mode_is_respected() {
    let server = SemaqServer::start();
    let client = server.client().await;
    let closed = json!({"type": "object", "additionalProperties": false,
        "properties": {"model": {"type": "string"}}, "required": ["model"]});
    register(&client, "closed", &closed.to_string(), "JSON").await;
    let forward = json!({"type": "object", "additionalProperties": false, "properties": {"model": {"type": "string"}}});
    register(&client, "forward", &forward.to_string(), "JSON").await;
    schema_api(&client, "CONFIG", json!({"subject": "forward", "compatibility": "FORWARD"})).await;
    let js = jetstream::new(client.clone());
    for (name, subject, schema) in [("CLOSED", "closed.>", "closed"), ("FWD", "fwd.>", "forward")] {
        let mut config = l4(name, subject, schema);
        config.metadata.insert("semaq.evolve".into(), "auto".into());
        js.create_stream(config).await.unwrap();
    }
    let mut events = evolved_events(&client).await;

    let id = "5f0c9a3e-8b7d-4c1e-9f2a-1b3c5d7e9f01";
    assert_eq!(publish(&client, "closed.a", l4_headers(&[]), json!({"model": "m", "request_id": id})).await["seq"], 1);
    let event = tokio::time::timeout(Duration::from_secs(5), events.next()).await.unwrap().unwrap();
    assert_eq!(serde_json::from_slice::<Value>(&event.payload).unwrap()["added"], json!(["request_id"]));
    let v2 = schema_api(&client, "GET", json!({"subject": "closed"})).await;
    let v2: Value = serde_json::from_str(v2["schema"].as_str().unwrap()).unwrap();
    assert_eq!(
        v2["properties"]["request_id"],
        json!({"type": "string", "format": "uuid"}),
        "inferred as `schema infer` would"
    );
    assert_eq!(v2["required"], json!(["model"]), "the new field is optional");

    // FORWARD: old readers of a closed model cannot read the new field, so no evolution.
    let refused = publish(&client, "fwd.a", l4_headers(&[]), json!({"model": "m", "extra": 1})).await;
    let report = error_of(&refused);
    assert!(report.contains("refused by the subject's FORWARD compatibility"), "{report}");
    assert!(report.contains("PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL"), "{report}");
    assert_eq!(schema_api(&client, "VERSIONS", json!({"subject": "forward"})).await, json!([1]));
}

fn start_on(store: &std::path::Path) -> SemaqServer {
    SemaqServer::builder().store(store).start()
}

#[tokio::test]
async fn random_keys_cannot_grow_the_registry_without_bound_even_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = start_on(dir.path());
    let client = server.client().await;
    let v1 = json!({"type": "record", "name": "Ev", "fields": [{"name": "model", "type": "string"}]});
    register(&client, "keys", &v1.to_string(), "AVRO").await;
    let js = jetstream::new(client.clone());
    let mut config = l4("KEYS", "keys.>", "keys");
    config.metadata.insert("semaq.evolve".into(), "auto".into());
    js.create_stream(config).await.unwrap();

    // Every registration of the subject within the minute counts, version 1 included.
    let bound = semaq_server::limits::SCHEMA_EVOLUTIONS_PER_STREAM_PER_MINUTE_MAX as u64;
    for n in 1..bound {
        let ack = publish(&client, "keys.a", l4_headers(&[]), json!({"model": "m", format!("k{n}"): n})).await;
        assert_eq!(ack["seq"], n, "{ack}");
    }
    let refused = publish(&client, "keys.a", l4_headers(&[]), json!({"model": "m", "one_more": 1})).await;
    assert!(error_of(&refused).contains("auto-evolution limit reached"), "{refused}");
    let versions = schema_api(&client, "VERSIONS", json!({"subject": "keys"})).await;
    assert_eq!(versions.as_array().map(Vec::len), Some(bound as usize));
    // Known fields still flow.
    assert_eq!(publish(&client, "keys.a", l4_headers(&[]), json!({"model": "m", "k3": 3})).await["seq"], bound);

    // The registry remembers when each version came: a restart does not reopen the window.
    drop(client);
    assert_eq!(server.terminate(), Some(0));
    let server = start_on(dir.path());
    let client = server.client().await;
    let refused = publish(&client, "keys.a", l4_headers(&[]), json!({"model": "m", "one_more": 1})).await;
    assert!(error_of(&refused).contains("auto-evolution limit reached"), "after a restart: {refused}");
    let versions = schema_api(&client, "VERSIONS", json!({"subject": "keys"})).await;
    assert_eq!(versions.as_array().map(Vec::len), Some(bound as usize));
}

#[tokio::test]
async fn msg_id_parents_stored_before_a_restart_resolve_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = start_on(dir.path());
    let client = server.client().await;
    rag_streams(&client).await;
    // More than the newest-messages search of lower-level streams reaches.
    let count = 2_000;
    for n in 0..count {
        let headers = l4_headers(&[("Nats-Msg-Id", format!("r-{n}").as_str())]);
        client.publish_with_headers("rag.retrieval", headers, json!({"text": "doc"}).to_string().into()).await.unwrap();
    }
    let last = publish(&client, "rag.retrieval", l4_headers(&[]), json!({"text": "last"})).await;
    assert_eq!(last["seq"], count + 1, "{last}");
    drop(client);
    assert_eq!(server.terminate(), Some(0));

    let server = start_on(dir.path());
    let client = server.client().await;
    let js = jetstream::new(client.clone());
    let resolved = |seq| {
        let js = js.clone();
        async move {
            let stored = js.get_stream("ANSWERS").await.unwrap().get_raw_message(seq).await.unwrap();
            stored.headers.get("Semaq-Parent-Resolved").map(|v| v.as_str().to_string())
        }
    };
    let child = l4_headers(&[("Semaq-Parent", "r-0")]);
    assert_eq!(publish(&client, "rag.answer", child, json!({"text": "a"})).await["seq"], 1);
    assert_eq!(resolved(1).await.as_deref(), Some("RETRIEVALS:1"), "the oldest of {count}, stored before the restart");
    let mixed = l4_headers(&[("Semaq-Parent", "r-1999, never-seen, r-1000")]);
    assert_eq!(publish(&client, "rag.answer", mixed, json!({"text": "b"})).await["seq"], 2);
    assert_eq!(resolved(2).await.as_deref(), Some("RETRIEVALS:2000,never-seen,RETRIEVALS:1001"));
    let unknown = l4_headers(&[("Semaq-Parent", "never-seen")]);
    assert_eq!(publish(&client, "rag.answer", unknown, json!({"text": "c"})).await["seq"], 3);
    assert_eq!(resolved(3).await, None, "an id nobody stored stays an unresolved parent");
    let graph = lineage(&client, "ANSWERS:3", json!({})).await;
    assert_eq!(node(&graph, "msg-id:never-seen")["status"], "unresolved");
}

#[tokio::test]
async fn level_keys_are_checked_at_create_and_shown_in_stream_info() {
    let server = SemaqServer::start();
    let client = server.client().await;
    register(&client, "ev", r#"{"type": "object", "properties": {}}"#, "JSON").await;
    register(&client, "proto", "syntax = \"proto3\"; message M { string a = 1; }", "PROTOBUF").await;
    let js = jetstream::new(client.clone());
    let refused = |config: stream::Config| {
        let js = js.clone();
        async move { js.create_stream(config).await.unwrap_err().to_string() }
    };
    let l2_evolve = stream_config("A", "a", &[("semaq.level", "2"), ("semaq.schema", "ev"), ("semaq.evolve", "auto")]);
    assert!(refused(l2_evolve).await.contains("semaq.evolve auto needs semaq.level 4"));
    let pinned =
        [("semaq.level", "4"), ("semaq.schema", "ev"), ("semaq.schema.version", "1"), ("semaq.evolve", "auto")];
    assert!(refused(stream_config("B", "b", &pinned)).await.contains("remove semaq.schema.version"));
    let proto = [("semaq.level", "4"), ("semaq.schema", "proto"), ("semaq.evolve", "auto")];
    assert!(refused(stream_config("C", "c", &proto)).await.contains("Protobuf"));
    let bad_evolve = [("semaq.level", "4"), ("semaq.schema", "ev"), ("semaq.evolve", "yes")];
    assert!(refused(stream_config("D", "d", &bad_evolve)).await.contains("auto or off"));
    let l3_require = [("semaq.level", "3"), ("semaq.schema", "ev"), ("semaq.require", "traceparent")];
    assert!(refused(stream_config("E", "e", &l3_require)).await.contains("semaq.require needs semaq.level 4"));
    assert!(refused(stream_config("F", "f", &[("semaq.level", "7")])).await.contains("must be 0 to 4"));

    let declared = [
        ("semaq.level", "4"),
        ("semaq.schema", "ev"),
        ("semaq.evolve", "auto"),
        ("semaq.require", "traceparent, Semaq-Session, x-tenant"),
    ];
    js.create_stream(stream_config("L4", "l4.>", &declared)).await.unwrap();
    js.create_stream(stream_config("L1", "l1.>", &[])).await.unwrap();
    let info = |name: &str| {
        let client = client.clone();
        let subject = format!("$JS.API.STREAM.INFO.{name}");
        async move { serde_json::from_slice::<Value>(&client.request(subject, "".into()).await.unwrap().payload).unwrap() }
    };
    let l4_info = info("L4").await;
    assert_eq!(l4_info["semaq"]["level"], 4);
    let enforces: Vec<&str> =
        l4_info["semaq"]["enforces"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    for expected in [
        "schema ev v1 (latest)",
        "producer sequences",
        "event time order",
        "required headers traceparent, Semaq-Session, x-tenant",
        "hash chain",
        "parent references",
        "schema auto-evolution",
    ] {
        assert!(enforces.contains(&expected), "{expected:?} missing from {enforces:?}");
    }
    assert_eq!(info("L1").await["semaq"], json!({"level": 1, "enforces": ["ordered durable storage"]}));
}
