//! The schema registry and L2 streams, through real clients: the Confluent REST API over HTTP,
//! `$SEMAQ.API.SCHEMA.*` and JetStream publishes with async-nats.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

use async_nats::jetstream::{self, consumer, stream};
use futures::StreamExt;
use semaq_testkit::SemaqServer;
use serde_json::{json, Value};

/// An HTTP/1.0 request to the monitoring port: (status, JSON body).
fn http(addr: SocketAddr, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    let mut stream = TcpStream::connect(addr).expect("connect http");
    let body = body.map(Value::to_string).unwrap_or_default();
    write!(
        stream,
        "{method} {path} HTTP/1.0\r\nHost: localhost\r\nContent-Type: application/vnd.schemaregistry.v1+json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .expect("write");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("read");
    let status = response.split(' ').nth(1).and_then(|s| s.parse().ok()).expect("status");
    assert!(
        response.to_ascii_lowercase().contains("content-type: application/vnd.schemaregistry.v1+json"),
        "{response}"
    );
    let body = response.split("\r\n\r\n").nth(1).unwrap_or_default();
    (status, serde_json::from_str(body).unwrap_or(Value::String(body.to_string())))
}

fn register(server: &SemaqServer, subject: &str, schema: &Value, schema_type: &str) -> u64 {
    let body = json!({"schema": schema.to_string(), "schemaType": schema_type});
    let (status, answer) = http(server.http_addr(), "POST", &format!("/subjects/{subject}/versions"), Some(&body));
    assert_eq!(status, 200, "{answer}");
    answer["id"].as_u64().unwrap()
}

const EVENT_JSON_SCHEMA: &str = r#"{"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
  "properties": {"model_id": {"type": "string"}, "confidence": {"type": "number"}, "input_tokens": {"type": "integer"}},
  "required": ["model_id", "confidence"]}"#;

fn event_avro() -> Value {
    json!({"type": "record", "name": "AiEvent", "fields": [
        {"name": "model_id", "type": "string"},
        {"name": "confidence", "type": "double"},
        {"name": "input_tokens", "type": "int"}]})
}

/// Avro binary for an `AiEvent`, in Confluent's wire format under schema `id`.
fn avro_wire(id: u32, model: &str, confidence: f64, tokens: i32) -> Vec<u8> {
    let mut bytes = vec![0];
    bytes.extend_from_slice(&id.to_be_bytes());
    let zigzag = |n: i64, out: &mut Vec<u8>| {
        let mut z = ((n << 1) ^ (n >> 63)) as u64;
        loop {
            let byte = (z & 0x7f) as u8;
            z >>= 7;
            if z == 0 {
                out.push(byte);
                break;
            }
            out.push(byte | 0x80);
        }
    };
    zigzag(model.len() as i64, &mut bytes);
    bytes.extend_from_slice(model.as_bytes());
    bytes.extend_from_slice(&confidence.to_le_bytes());
    zigzag(i64::from(tokens), &mut bytes);
    bytes
}

fn l2_stream(name: &str, subject: &str, schema: &str) -> stream::Config {
    let metadata =
        HashMap::from([("semaq.level".to_string(), "2".to_string()), ("semaq.schema".to_string(), schema.to_string())]);
    stream::Config { name: name.into(), subjects: vec![subject.into()], metadata, ..Default::default() }
}

/// Publishes through a plain request and returns the PubAck JSON.
async fn publish(client: &async_nats::Client, subject: &str, payload: Vec<u8>) -> Value {
    let reply = client.request(subject.to_string(), payload.into()).await.expect("pub ack");
    serde_json::from_slice(&reply.payload).expect("ack json")
}

/// Every payload a fresh consumer of `stream` receives.
async fn consumed(js: &jetstream::Context, stream: &str) -> Vec<Vec<u8>> {
    let stream = js.get_stream(stream).await.unwrap();
    let consumer = stream.create_consumer(consumer::pull::Config::default()).await.unwrap();
    let mut batch = consumer.fetch().max_messages(100).expires(Duration::from_millis(500)).messages().await.unwrap();
    let mut payloads = Vec::new();
    while let Some(Ok(message)) = batch.next().await {
        payloads.push(message.payload.to_vec());
    }
    payloads
}

#[tokio::test]
async fn l2_streams_store_only_what_matches_their_json_schema() {
    let server = SemaqServer::start();
    register(&server, "ai-event-json", &serde_json::from_str(EVENT_JSON_SCHEMA).unwrap(), "JSON");
    let client = server.client().await;
    let js = jetstream::new(client.clone());
    js.create_stream(l2_stream("EVENTS_JSON", "ai.json.>", "ai-event-json")).await.unwrap();

    let good = br#"{"model_id":"llama3-70b","confidence":0.92,"input_tokens":128}"#.to_vec();
    assert_eq!(publish(&client, "ai.json.inference", good.clone()).await["seq"], 1);
    let refused = publish(&client, "ai.json.inference", br#"{"model_id":"m","confidence":"high"}"#.to_vec()).await;
    let description = refused["error"]["description"].as_str().unwrap();
    assert!(description.contains("\"ai-event-json\" version 1"), "{description}");
    assert!(description.contains("$.confidence: \"high\" is not of type \"number\""), "{description}");
    assert_eq!(refused["error"]["err_code"], 10400);
    let missing = publish(&client, "ai.json.inference", br#"{"model_id":"m"}"#.to_vec()).await;
    assert!(missing["error"]["description"].as_str().unwrap().contains("confidence"), "{missing}");
    let not_json = publish(&client, "ai.json.inference", b"hello".to_vec()).await;
    assert!(not_json["error"]["description"].as_str().unwrap().contains("not JSON"), "{not_json}");

    let info = js.get_stream("EVENTS_JSON").await.unwrap().info().await.unwrap().clone();
    assert_eq!((info.state.messages, info.state.last_sequence), (1, 1));
    assert_eq!(server.http_json("/varz")["schema_refusals"], 3, "refusals are counted");
    assert_eq!(consumed(&js, "EVENTS_JSON").await, vec![good]);
}

#[tokio::test]
async fn l2_streams_validate_avro_json_and_confluent_wire_format() {
    let server = SemaqServer::start();
    let id = register(&server, "ai-event-avro", &event_avro(), "AVRO") as u32;
    let other = register(&server, "other", &json!("string"), "AVRO") as u32;
    let client = server.client().await;
    let js = jetstream::new(client.clone());
    js.create_stream(l2_stream("EVENTS_AVRO", "ai.avro.>", "ai-event-avro")).await.unwrap();

    let json_good = br#"{"model_id":"llama3-70b","confidence":0.92,"input_tokens":128}"#.to_vec();
    let binary_good = avro_wire(id, "llama3-70b", 0.92, 128);
    assert_eq!(publish(&client, "ai.avro.a", json_good.clone()).await["seq"], 1);
    assert_eq!(publish(&client, "ai.avro.a", binary_good.clone()).await["seq"], 2);

    let mistyped =
        publish(&client, "ai.avro.a", br#"{"model_id":"m","confidence":"high","input_tokens":1}"#.to_vec()).await;
    let description = mistyped["error"]["description"].as_str().unwrap();
    assert!(description.contains("\"ai-event-avro\" version 1"), "{description}");
    assert!(description.contains("$.confidence: \"high\" is not a number"), "{description}");
    let missing = publish(&client, "ai.avro.a", br#"{"model_id":"m","confidence":1.0}"#.to_vec()).await;
    assert!(missing["error"]["description"].as_str().unwrap().contains("$.input_tokens: required field is missing"));
    let mut truncated = binary_good.clone();
    truncated.truncate(binary_good.len() - 9);
    assert!(publish(&client, "ai.avro.a", truncated).await["error"]["description"]
        .as_str()
        .unwrap()
        .contains("does not decode"));
    let foreign = publish(&client, "ai.avro.a", avro_wire(other, "m", 1.0, 1)).await;
    assert!(foreign["error"]["description"].as_str().unwrap().contains("is not a version of subject"), "{foreign}");

    let info = js.get_stream("EVENTS_AVRO").await.unwrap().info().await.unwrap().clone();
    assert_eq!((info.state.messages, info.state.last_sequence), (2, 2));
    assert_eq!(consumed(&js, "EVENTS_AVRO").await, vec![json_good, binary_good]);
}

#[tokio::test]
async fn an_l2_stream_needs_an_existing_subject_and_version() {
    let server = SemaqServer::start();
    let js = jetstream::new(server.client().await);
    let error = js.create_stream(l2_stream("NOPE", "nope.>", "missing-subject")).await.unwrap_err().to_string();
    assert!(error.contains("missing-subject"), "{error}");
    register(&server, "present", &json!("string"), "AVRO");
    let mut pinned = l2_stream("PINNED", "pinned.>", "present");
    pinned.metadata.insert("semaq.schema.version".into(), "7".into());
    assert!(js.create_stream(pinned).await.is_err());
    let mut no_schema = l2_stream("NOSCHEMA", "ns.>", "present");
    no_schema.metadata.remove("semaq.schema");
    assert!(js.create_stream(no_schema).await.is_err());
    assert!(js.create_stream(l2_stream("OK", "ok.>", "present")).await.is_ok());
}

async fn schema_api(client: &async_nats::Client, operation: &str, body: Value) -> Value {
    let reply = client.request(format!("$SEMAQ.API.SCHEMA.{operation}"), body.to_string().into()).await.unwrap();
    serde_json::from_slice(&reply.payload).unwrap()
}

#[tokio::test]
async fn the_schema_api_over_nats_mirrors_the_rest_api() {
    let server = SemaqServer::start();
    let client = server.client().await;
    let v1 = event_avro();
    let answer = schema_api(&client, "REGISTER", json!({"subject": "ev", "schema": v1.to_string()})).await;
    let id = answer["id"].as_u64().unwrap();
    assert_eq!(schema_api(&client, "SUBJECTS", json!({})).await, json!(["ev"]));
    assert_eq!(schema_api(&client, "GET", json!({"subject": "ev"})).await["id"], id);
    assert_eq!(schema_api(&client, "ID", json!({"id": id})).await["schema"], v1.to_string());
    // A new required field without a default breaks BACKWARD: refused with the reason.
    let mut v2 = v1.clone();
    v2["fields"].as_array_mut().unwrap().push(json!({"name": "extra", "type": "string"}));
    let check =
        schema_api(&client, "CHECK", json!({"subject": "ev", "version": "latest", "schema": v2.to_string()})).await;
    assert_eq!(check["is_compatible"], false);
    let refused = schema_api(&client, "REGISTER", json!({"subject": "ev", "schema": v2.to_string()})).await;
    assert_eq!(refused["error_code"], 409);
    assert!(refused["message"].as_str().unwrap().contains("extra"), "{refused}");
    assert_eq!(
        schema_api(&client, "CONFIG", json!({"subject": "ev", "compatibility": "NONE"})).await["compatibilityLevel"],
        "NONE"
    );
    assert_eq!(schema_api(&client, "REGISTER", json!({"subject": "ev", "schema": v2.to_string()})).await["id"], id + 1);
    assert_eq!(schema_api(&client, "VERSIONS", json!({"subject": "ev"})).await, json!([1, 2]));
    assert_eq!(schema_api(&client, "GET", json!({"subject": "nope"})).await["error_code"], 40401);
    assert_eq!(schema_api(&client, "DELETE", json!({"subject": "ev"})).await, json!([1, 2]));
    assert_eq!(schema_api(&client, "SUBJECTS", json!({})).await, json!([]));
}

#[test]
fn the_rest_api_answers_with_confluent_shapes_and_errors() {
    let server = SemaqServer::start();
    let addr = server.http_addr();
    let id = register(&server, "orders-value", &event_avro(), "AVRO");
    assert_eq!(http(addr, "GET", "/subjects", None), (200, json!(["orders-value"])));
    let (_, latest) = http(addr, "GET", "/subjects/orders-value/versions/latest", None);
    assert_eq!(
        (latest["subject"].clone(), latest["version"].clone(), latest["id"].clone()),
        (json!("orders-value"), json!(1), json!(id))
    );
    assert_eq!(http(addr, "GET", "/subjects/orders-value/versions/1/schema", None).1, event_avro());
    assert_eq!(http(addr, "GET", "/subjects/nope/versions", None).1["error_code"], 40401);
    assert_eq!(
        http(addr, "GET", "/subjects/orders-value/versions/9", None),
        (404, json!({"error_code": 40402, "message": "Version 9 not found."}))
    );
    assert_eq!(http(addr, "GET", "/schemas/ids/999", None).1["error_code"], 40403);
    assert_eq!(http(addr, "GET", "/subjects/orders-value/versions/x", None).1["error_code"], 42202);
    let bad = json!({"schema": "{\"type\": \"nonsense\"}"});
    assert_eq!(http(addr, "POST", "/subjects/orders-value/versions", Some(&bad)).0, 422);
    assert_eq!(http(addr, "PUT", "/config", Some(&json!({"compatibility": "SIDEWAYS"}))).1["error_code"], 42203);
    assert_eq!(
        http(addr, "PUT", "/config", Some(&json!({"compatibility": "FULL"}))).1,
        json!({"compatibility": "FULL"})
    );
    assert_eq!(http(addr, "GET", "/config", None).1, json!({"compatibilityLevel": "FULL"}));
    assert_eq!(http(addr, "DELETE", "/subjects/orders-value?permanent=true", None).1["error_code"], 40405);
    assert_eq!(http(addr, "DELETE", "/subjects/orders-value", None).1, json!([1]));
    assert_eq!(http(addr, "DELETE", "/subjects/orders-value?permanent=true", None).1, json!([1]));
}

fn start_on(store: &Path) -> SemaqServer {
    SemaqServer::builder().store(store).start()
}

#[test]
fn the_registry_survives_a_restart_and_a_damaged_file_stops_startup() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let mut server = start_on(&store);
    let id = register(&server, "kept", &event_avro(), "AVRO");
    http(server.http_addr(), "PUT", "/config/kept", Some(&json!({"compatibility": "FULL_TRANSITIVE"})));
    assert_eq!(server.terminate(), Some(0));

    let mut server = start_on(&store);
    let (_, latest) = http(server.http_addr(), "GET", "/subjects/kept/versions/latest", None);
    assert_eq!(latest["id"], id);
    assert_eq!(http(server.http_addr(), "GET", "/config/kept", None).1["compatibilityLevel"], "FULL_TRANSITIVE");
    assert_eq!(server.terminate(), Some(0));

    let file = store.join("registry").join("registry.json");
    let bytes = std::fs::read(&file).unwrap();
    std::fs::write(&file, &bytes[..bytes.len() - 10]).unwrap();
    let output = SemaqServer::builder().store(&store).no_monitoring().output();
    assert!(!output.status.success(), "started on a truncated registry file");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("registry.json") && stderr.contains("truncated"), "{stderr}");
}

/// A registry write the disk refuses (here the temporary file's name is taken by a directory,
/// which stops root too) is answered with Confluent's 50001 and changes nothing: not the
/// answers, not the file; the registry takes writes again once the disk does.
#[test]
fn a_registry_write_that_fails_answers_50001_and_keeps_the_old_state() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let server = start_on(&store);
    let addr = server.http_addr();
    register(&server, "kept", &event_avro(), "AVRO");
    let file = store.join("registry").join("registry.json");
    let before = std::fs::read(&file).unwrap();
    let blocker = store.join("registry").join("registry.json.tmp");
    std::fs::create_dir(&blocker).unwrap();

    let body = json!({"schema": event_avro().to_string()});
    let (status, answer) = http(addr, "POST", "/subjects/refused/versions", Some(&body));
    assert_eq!((status, &answer["error_code"]), (500, &json!(50001)), "{answer}");
    assert!(answer["message"].as_str().is_some_and(|m| m.contains("registry.json")), "{answer}");
    let (status, answer) = http(addr, "PUT", "/config", Some(&json!({"compatibility": "NONE"})));
    assert_eq!((status, &answer["error_code"]), (500, &json!(50001)), "{answer}");
    assert_eq!(http(addr, "GET", "/subjects", None).1, json!(["kept"]));
    assert_eq!(http(addr, "GET", "/config", None).1, json!({"compatibilityLevel": "BACKWARD"}));
    assert_eq!(std::fs::read(&file).unwrap(), before, "the file is the old one");

    std::fs::remove_dir(&blocker).unwrap();
    register(&server, "accepted", &event_avro(), "AVRO");
    assert_eq!(http(addr, "GET", "/subjects", None).1, json!(["accepted", "kept"]));
}

const EVENT_PROTO: &str = "syntax = \"proto3\";\npackage ai;\nmessage AiEvent {\n  string model_id = 1;\n  double confidence = 2;\n  int32 input_tokens = 3;\n}\n";

#[tokio::test]
async fn l2_streams_validate_protobuf_json_and_confluent_wire_format() {
    let server = SemaqServer::start();
    let body = json!({"schema": EVENT_PROTO, "schemaType": "PROTOBUF"});
    let (status, answer) = http(server.http_addr(), "POST", "/subjects/ai-event-proto/versions", Some(&body));
    assert_eq!(status, 200, "{answer}");
    let id = answer["id"].as_u64().unwrap() as u32;
    let client = server.client().await;
    let js = jetstream::new(client.clone());
    js.create_stream(l2_stream("EVENTS_PROTO", "ai.proto.>", "ai-event-proto")).await.unwrap();

    let json_good = br#"{"modelId":"llama3-70b","confidence":0.92,"inputTokens":128}"#.to_vec();
    assert_eq!(publish(&client, "ai.proto.a", json_good.clone()).await["seq"], 1);
    // Wire format: magic 0, id, message indexes [] (one zero byte), then field 1 = "m".
    let mut binary_good = vec![0];
    binary_good.extend_from_slice(&id.to_be_bytes());
    binary_good.extend_from_slice(&[0, 0x0a, 1, b'm']);
    assert_eq!(publish(&client, "ai.proto.a", binary_good.clone()).await["seq"], 2);

    let refused = publish(&client, "ai.proto.a", br#"{"modelId":"m","confidence":"high"}"#.to_vec()).await;
    let description = refused["error"]["description"].as_str().unwrap();
    assert!(description.contains("\"ai-event-proto\" version 1"), "{description}");
    assert!(description.contains("$.confidence: \"high\" is not a number"), "{description}");
    let mut truncated = binary_good.clone();
    truncated.pop();
    assert!(publish(&client, "ai.proto.a", truncated).await["error"]["description"]
        .as_str()
        .unwrap()
        .contains("does not decode"));

    let info = js.get_stream("EVENTS_PROTO").await.unwrap().info().await.unwrap().clone();
    assert_eq!((info.state.messages, info.state.last_sequence), (2, 2));
    assert_eq!(consumed(&js, "EVENTS_PROTO").await, vec![json_good, binary_good]);
}

#[tokio::test]
async fn l2_messages_record_their_producer_and_message_id() {
    let server = SemaqServer::start();
    register(&server, "lineage", &serde_json::from_str(EVENT_JSON_SCHEMA).unwrap(), "JSON");
    let client = async_nats::ConnectOptions::new().name("trainer-7").connect(server.url()).await.unwrap();
    let js = jetstream::new(client.clone());
    js.create_stream(l2_stream("LINEAGE", "lineage.>", "lineage")).await.unwrap();
    let event = br#"{"model_id":"m","confidence":0.5}"#;
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Nats-Msg-Id", "evt-1");
    js.publish_with_headers("lineage.a", headers, event.as_slice().into()).await.unwrap().await.unwrap();
    let mut own = async_nats::HeaderMap::new();
    own.insert("Semaq-Producer", "pipeline-3");
    js.publish_with_headers("lineage.a", own, event.as_slice().into()).await.unwrap().await.unwrap();

    let stream = js.get_stream("LINEAGE").await.unwrap();
    let first = stream.get_raw_message(1).await.unwrap();
    assert_eq!(first.headers.get("Semaq-Producer").map(|v| v.as_str()), Some("trainer-7"));
    assert_eq!(first.headers.get("Nats-Msg-Id").map(|v| v.as_str()), Some("evt-1"));
    let second = stream.get_raw_message(2).await.unwrap();
    assert_eq!(second.headers.get("Semaq-Producer").map(|v| v.as_str()), Some("pipeline-3"));
    assert_eq!(second.payload.as_ref(), event.as_slice(), "the payload is stored as sent");
}

const ADDRESS_AVRO: &str =
    r#"{"type": "record", "name": "Address", "namespace": "geo", "fields": [{"name": "city", "type": "string"}]}"#;
const ORDER_AVRO: &str = r#"{"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"}, {"name": "ship_to", "type": "geo.Address"}]}"#;

fn post(server: &SemaqServer, path: &str, body: Value) -> (u16, Value) {
    http(server.http_addr(), "POST", path, Some(&body))
}

#[test]
fn schema_references_register_show_and_protect_what_they_refer_to() {
    let server = SemaqServer::start();
    let (_, address) = post(&server, "/subjects/geo-address/versions", json!({"schema": ADDRESS_AVRO}));
    let address_id = address["id"].as_u64().unwrap();
    let order = json!({"schema": ORDER_AVRO,
        "references": [{"name": "geo.Address", "subject": "geo-address", "version": -1}]});
    let (status, registered) = post(&server, "/subjects/orders-value/versions", order.clone());
    assert_eq!(status, 200, "{registered}");
    let order_id = registered["id"].as_u64().unwrap();
    assert_ne!(order_id, address_id);
    // The same text and references again: the same id, no new version.
    assert_eq!(post(&server, "/subjects/orders-value/versions", order.clone()).1["id"], order_id);
    let addr = server.http_addr();
    let (_, latest) = http(addr, "GET", "/subjects/orders-value/versions/latest", None);
    assert_eq!(latest["references"], json!([{"name": "geo.Address", "subject": "geo-address", "version": 1}]));
    assert_eq!(http(addr, "GET", &format!("/schemas/ids/{order_id}"), None).1["references"], latest["references"]);
    assert_eq!(post(&server, "/subjects/orders-value?normalize=false", order).1["version"], 1);
    assert_eq!(http(addr, "GET", "/subjects/geo-address/versions/1/referencedby", None), (200, json!([order_id])));

    let refused = http(addr, "DELETE", "/subjects/geo-address/versions/1", None);
    assert_eq!(refused.0, 422);
    assert_eq!(refused.1["error_code"], 42206);
    assert_eq!(http(addr, "DELETE", "/subjects/geo-address", None).1["error_code"], 42206);
    let missing =
        json!({"schema": ORDER_AVRO, "references": [{"name": "geo.Address", "subject": "nowhere", "version": 1}]});
    let (status, error) = post(&server, "/subjects/other/versions", missing);
    assert_eq!((status, error["error_code"].clone()), (422, json!(42201)), "{error}");
}

#[tokio::test]
async fn protobuf_imports_are_references_over_nats() {
    let server = SemaqServer::start();
    let client = server.client().await;
    let address = "syntax = \"proto3\";\npackage geo;\nmessage Address { string city = 1; }\n";
    let order = "syntax = \"proto3\";\npackage shop;\nimport \"geo/address.proto\";\nmessage Order { int64 id = 1; geo.Address ship_to = 2; }\n";
    let registered =
        schema_api(&client, "REGISTER", json!({"subject": "geo-address", "schema": address, "schemaType": "PROTOBUF"}))
            .await;
    assert!(registered["id"].is_u64(), "{registered}");
    let without =
        schema_api(&client, "REGISTER", json!({"subject": "orders", "schema": order, "schemaType": "PROTOBUF"})).await;
    assert_eq!(without["error_code"], 42201, "the import does not resolve without its reference");
    let body = json!({"subject": "orders", "schema": order, "schemaType": "PROTOBUF",
        "references": [{"name": "geo/address.proto", "subject": "geo-address", "version": 1}]});
    let id = schema_api(&client, "REGISTER", body).await["id"].as_u64().unwrap();
    assert_eq!(schema_api(&client, "REFERENCEDBY", json!({"subject": "geo-address"})).await, json!([id]));
    let refused = schema_api(&client, "DELETE", json!({"subject": "geo-address", "version": 1})).await;
    assert_eq!(refused["error_code"], 42206);
    assert_eq!(schema_api(&client, "ID", json!({"id": id})).await["references"][0]["name"], "geo/address.proto");
}

#[tokio::test]
async fn l2_streams_validate_against_schemas_with_references() {
    let server = SemaqServer::start();
    post(&server, "/subjects/geo-address/versions", json!({"schema": ADDRESS_AVRO}));
    let order = json!({"schema": ORDER_AVRO,
        "references": [{"name": "geo.Address", "subject": "geo-address", "version": 1}]});
    let id = post(&server, "/subjects/orders-value/versions", order).1["id"].as_u64().unwrap() as u32;
    let client = server.client().await;
    let js = jetstream::new(client.clone());
    js.create_stream(l2_stream("ORDERS", "orders.>", "orders-value")).await.unwrap();

    let json_good = br#"{"id": 7, "ship_to": {"city": "Oslo"}}"#.to_vec();
    assert_eq!(publish(&client, "orders.new", json_good.clone()).await["seq"], 1);
    // Wire format: magic 0, the id, then id 7 (zigzag 14) and the city "Oslo".
    let mut binary_good = vec![0];
    binary_good.extend_from_slice(&id.to_be_bytes());
    binary_good.extend_from_slice(&[14, 8, b'O', b's', b'l', b'o']);
    assert_eq!(publish(&client, "orders.new", binary_good.clone()).await["seq"], 2);
    let refused = publish(&client, "orders.new", br#"{"id": 8, "ship_to": {"city": 1}}"#.to_vec()).await;
    let description = refused["error"]["description"].as_str().unwrap();
    assert!(description.contains("$.ship_to.city: 1 is not a string"), "{description}");
    let mut truncated = binary_good.clone();
    truncated.pop();
    assert!(publish(&client, "orders.new", truncated).await["error"]["description"].is_string());
    assert_eq!(consumed(&js, "ORDERS").await, vec![json_good, binary_good]);
}

#[test]
fn modes_contexts_and_listings_answer_as_confluent() {
    let server = SemaqServer::start();
    let addr = server.http_addr();
    let v1 = event_avro();
    register(&server, "orders-value", &v1, "AVRO");
    register(&server, "users-value", &json!("string"), "AVRO");
    assert_eq!(http(addr, "GET", "/contexts", None), (200, json!(["."])));
    assert_eq!(http(addr, "GET", "/mode", None).1, json!({"mode": "READWRITE"}));
    assert_eq!(http(addr, "GET", "/mode/orders-value", None).1["error_code"], 40409);
    assert_eq!(http(addr, "GET", "/mode/orders-value?defaultToGlobal=true", None).1, json!({"mode": "READWRITE"}));
    assert_eq!(
        http(addr, "PUT", "/mode/orders-value", Some(&json!({"mode": "READONLY"}))).1,
        json!({"mode": "READONLY"})
    );
    let (status, refused) = post(&server, "/subjects/orders-value/versions", json!({"schema": "\"int\""}));
    assert_eq!((status, refused["error_code"].clone()), (422, json!(42205)), "{refused}");
    assert_eq!(http(addr, "PUT", "/mode", Some(&json!({"mode": "WRONG"}))).1["error_code"], 42204);
    assert_eq!(http(addr, "PUT", "/mode", Some(&json!({"mode": "IMPORT"}))).1["error_code"], 42205);
    assert_eq!(http(addr, "DELETE", "/mode/orders-value", None).1, json!({"mode": "READONLY"}));

    assert_eq!(http(addr, "GET", "/subjects?subjectPrefix=orders", None).1, json!(["orders-value"]));
    http(addr, "DELETE", "/subjects/users-value", None);
    assert_eq!(http(addr, "GET", "/subjects?deleted=true", None).1, json!(["orders-value", "users-value"]));
    assert_eq!(http(addr, "GET", "/subjects?deletedOnly=true", None).1, json!(["users-value"]));
    let (_, listed) = http(addr, "GET", "/schemas?subjectPrefix=orders&latestOnly=true", None);
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");
    assert_eq!((listed[0]["subject"].clone(), listed[0]["version"].clone()), (json!("orders-value"), json!(1)));
    let id = listed[0]["id"].as_u64().unwrap();
    assert_eq!(
        http(addr, "GET", &format!("/schemas/ids/{id}/versions"), None).1,
        json!([{"subject": "orders-value", "version": 1}])
    );
    assert_eq!(http(addr, "GET", &format!("/schemas/ids/{id}/subjects"), None).1, json!(["orders-value"]));

    // normalize=true: an equivalent spelling of a registered schema is that schema.
    let spelled = json!({"type": "record", "name": "AiEvent", "fields": [
        {"name": "model_id", "type": {"type": "string"}}, {"name": "confidence", "type": "double"},
        {"name": "input_tokens", "type": "int"}]});
    let normalized =
        post(&server, "/subjects/norm/versions?normalize=true", json!({"schema": v1.to_string()})).1["id"].clone();
    let again =
        post(&server, "/subjects/norm/versions?normalize=true", json!({"schema": spelled.to_string()})).1["id"].clone();
    assert_eq!(normalized, again);

    http(addr, "PUT", "/config/orders-value", Some(&json!({"compatibility": "NONE"})));
    assert_eq!(http(addr, "DELETE", "/config/orders-value", None).1, json!({"compatibilityLevel": "NONE"}));
    assert_eq!(http(addr, "GET", "/config/orders-value", None).1["error_code"], 40408);
    assert_eq!(
        http(addr, "GET", "/config/orders-value?defaultToGlobal=true", None).1,
        json!({"compatibilityLevel": "BACKWARD"})
    );
}

#[test]
fn import_mode_registers_schemas_under_their_own_ids() {
    let server = SemaqServer::start();
    let addr = server.http_addr();
    assert_eq!(http(addr, "PUT", "/mode", Some(&json!({"mode": "IMPORT"}))).1, json!({"mode": "IMPORT"}));
    let (status, answer) =
        post(&server, "/subjects/copied/versions", json!({"schema": "\"string\"", "id": 42, "version": 3}));
    assert_eq!((status, answer), (200, json!({"id": 42})));
    let (_, without_id) = post(&server, "/subjects/copied/versions", json!({"schema": "\"int\""}));
    assert_eq!(without_id["error_code"], 42205);
    assert_eq!(http(addr, "GET", "/subjects/copied/versions/3", None).1["id"], 42);
    assert_eq!(http(addr, "PUT", "/mode", Some(&json!({"mode": "READWRITE"}))).1, json!({"mode": "READWRITE"}));
    http(addr, "PUT", "/config/copied", Some(&json!({"compatibility": "NONE"})));
    assert_eq!(post(&server, "/subjects/copied/versions", json!({"schema": "\"int\""})).1, json!({"id": 43}));
    assert_eq!(http(addr, "GET", "/subjects/copied/versions", None).1, json!([3, 4]));
}
