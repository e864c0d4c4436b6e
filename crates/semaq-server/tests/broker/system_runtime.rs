//! The `$SYS.REQ.SERVER` services about the server's insides, which nats-server 2.10+ has (2.9
//! does not, so they are checked against its source): `PROFILEZ` names the profile it lacks,
//! `EXPVARZ` gives the command line and the resident memory, `IPQUEUESZ` the `$SYS` request
//! queue, `RAFTZ` no Raft groups; each in nats-server's `{server, data}` envelope, by ping and by
//! server id; and the compressed answers nats-server 2.10+ gives to an `Accept-Encoding`.

use serde_json::{json, Value};

use crate::system_config::{ask, login, SYS_CONFIG};

fn semaq() -> semaq_testkit::SemaqServer {
    semaq_testkit::SemaqServer::with_config(&format!("{SYS_CONFIG}jetstream: false\n"), &[])
}

/// The `data` of the answer to `$SYS.REQ.SERVER.PING.<endpoint>`, after checking that the same
/// request by server id gets the same kind of answer from the same server.
async fn data(client: &async_nats::Client, endpoint: &str, body: &str) -> Value {
    let pinged = ask(client, &format!("$SYS.REQ.SERVER.PING.{endpoint}"), body).await;
    let id = pinged["server"]["id"].as_str().expect("the envelope names the server").to_string();
    let direct = ask(client, &format!("$SYS.REQ.SERVER.{id}.{endpoint}"), body).await;
    assert_eq!(direct["server"]["id"], json!(id), "{endpoint} by server id");
    assert!(direct.get("data").is_some() && direct.get("error").is_none(), "{endpoint}: {direct}");
    pinged["data"].clone()
}

#[tokio::test]
async fn profilez_answers_as_nats_server_does_for_a_profile_it_does_not_have() {
    let server = semaq();
    let sys = login(&server.url(), "sys").await;
    let unnamed = data(&sys, "PROFILEZ", "").await;
    assert_eq!(unnamed, json!({ "profile": null, "error": "Profile name not specified" }));
    let heap = data(&sys, "PROFILEZ", r#"{"name":"heap","debug":1}"#).await;
    assert_eq!(heap, json!({ "profile": null, "error": "Profile \"heap\" not found" }));
    let too_long = data(&sys, "PROFILEZ", r#"{"name":"cpu","duration":20000000000}"#).await;
    assert_eq!(too_long["error"], "Duration 20s should be between 0s and 15s");
}

#[tokio::test]
async fn expvarz_gives_the_command_line_and_the_resident_memory() {
    let server = semaq();
    let sys = login(&server.url(), "sys").await;
    let expvarz = data(&sys, "EXPVARZ", "").await;
    let cmdline: Vec<&str> = expvarz["cmdline"].as_array().expect("cmdline").iter().filter_map(Value::as_str).collect();
    assert!(cmdline.first().is_some_and(|program| program.ends_with("semaq-server")), "{cmdline:?}");
    assert!(cmdline.contains(&"--config") || cmdline.contains(&"-c"), "the config it was started with: {cmdline:?}");
    assert!(expvarz["memstats"]["rss_bytes"].as_u64().is_some_and(|bytes| bytes > 0), "{expvarz}");
}

#[tokio::test]
async fn ipqueuesz_shows_the_request_queue_busy_with_the_request_itself_unless_filtered_out() {
    let server = semaq();
    let sys = login(&server.url(), "sys").await;
    let queues = data(&sys, "IPQUEUESZ", "").await;
    let queue = queues["$SYS requests"].clone();
    assert_eq!(queue["in_progress"], json!(1), "{queues}");
    assert!(queue["pending"].is_u64(), "{queues}");
    assert_eq!(
        data(&sys, "IPQUEUESZ", r#"{"all":true,"filter":"requests"}"#).await.as_object().map(|q| q.len()),
        Some(1)
    );
    assert_eq!(data(&sys, "IPQUEUESZ", r#"{"all":true,"filter":"recvQ"}"#).await, json!({}));
}

#[tokio::test]
async fn raftz_lists_no_raft_groups_on_a_server_without_a_cluster() {
    let server = semaq();
    let sys = login(&server.url(), "sys").await;
    assert_eq!(data(&sys, "RAFTZ", "").await, json!({}));
    assert_eq!(data(&sys, "RAFTZ", r#"{"account":"A"}"#).await, json!({}));
}

/// The answer to `subject` asked with `Accept-Encoding: accept`: its `Content-Encoding` and
/// its payload decoded as that header says.
async fn ask_encoded(client: &async_nats::Client, subject: &str, accept: &str, body: &str) -> (Option<String>, Value) {
    use std::io::Read;
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Accept-Encoding", accept);
    let request = client.request_with_headers(subject.to_string(), headers, body.to_string().into());
    let reply = tokio::time::timeout(std::time::Duration::from_secs(5), request)
        .await
        .expect("an answer in time")
        .expect("an answer");
    let encoding = reply.headers.as_ref().and_then(|h| h.get("Content-Encoding")).map(|v| v.to_string());
    let mut plain = Vec::new();
    let decoded = match encoding.as_deref() {
        Some("gzip") => flate2::read::GzDecoder::new(&reply.payload[..]).read_to_end(&mut plain),
        Some("snappy") => snap::read::FrameDecoder::new(&reply.payload[..]).read_to_end(&mut plain),
        _ => std::io::Read::read_to_end(&mut &reply.payload[..], &mut plain),
    };
    decoded.expect("a payload that decodes as its Content-Encoding says");
    (encoding, serde_json::from_slice(&plain).expect("a JSON answer"))
}

#[tokio::test]
async fn endpoint_answers_are_compressed_as_the_request_accepts_and_errors_never_are() {
    let server = semaq();
    let sys = login(&server.url(), "sys").await;
    for (accept, expected) in [("gzip", "gzip"), ("snappy", "snappy"), ("deflate, S2", "snappy"), ("br", "identity")] {
        for subject in ["$SYS.REQ.SERVER.PING.VARZ", "$SYS.REQ.ACCOUNT.$SYS.CONNZ"] {
            let (encoding, answer) = ask_encoded(&sys, subject, accept, "").await;
            assert_eq!(encoding.as_deref(), Some(expected), "{subject} accepting {accept}");
            assert!(answer["data"].is_object() && answer["server"]["id"].is_string(), "{subject}: {answer}");
        }
    }
    let (encoding, answer) = ask_encoded(&sys, "$SYS.REQ.SERVER.PING.VARZ", "gzip", "not json").await;
    assert_eq!(encoding, None, "an error is sent as it is");
    assert_eq!(answer["error"]["code"], json!(400));
    let (encoding, answer) = ask_encoded(&sys, "$SYS.REQ.SERVER.PING", "gzip", "").await;
    assert_eq!(encoding, None, "statsz is not one of nats-server's zReq answers");
    assert!(answer["statsz"].is_object());
}
