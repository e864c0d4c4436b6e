//! Key-Value buckets through async-nats' `kv` module, and the stream features under them
//! (direct get, rollups, purges, per-message TTL, delete markers, republish) pinned to
//! nats-server: side by side with nats-server 2.9 where it has the feature, else to nats-server
//! 2.11's documented answers.

use std::time::Duration;

use async_nats::jetstream::{self, kv};
use futures::StreamExt;
use semaq_testkit::{wait_until_async, NatsServer, SemaqServer};
use serde_json::{json, Value};

use crate::jetstream_api::{api, publish_raw, WAIT};

async fn bucket(js: &jetstream::Context, name: &str, history: i64) -> kv::Store {
    let config = kv::Config { bucket: name.to_string(), history, ..Default::default() };
    js.create_key_value(config).await.unwrap_or_else(|error| panic!("bucket {name}: {error}"))
}

async fn next_entry(watch: &mut kv::Watch) -> kv::Entry {
    tokio::time::timeout(WAIT, watch.next())
        .await
        .unwrap_or_else(|_| panic!("a watch entry within {WAIT:?}"))
        .expect("the watch goes on")
        .expect("a good entry")
}

#[tokio::test]
async fn kv_put_get_update_delete_purge_history_and_keys() {
    let server = SemaqServer::start();
    let js = jetstream::new(server.client().await);
    let kv = bucket(&js, "profiles", 5).await;

    let first = kv.put("alice", "v1".into()).await.expect("put");
    assert_eq!(kv.get("alice").await.expect("get").as_deref(), Some(&b"v1"[..]));
    let second = kv.update("alice", "v2".into(), first).await.expect("update at the right revision");
    assert!(second > first);
    assert!(kv.update("alice", "v3".into(), first).await.is_err(), "a stale revision is refused");
    assert!(kv.create("alice", "again".into()).await.is_err(), "create refuses an existing key");
    let entry = kv.entry("alice").await.expect("entry").expect("alice exists");
    assert_eq!((entry.revision, entry.operation, &entry.value[..]), (second, kv::Operation::Put, &b"v2"[..]));

    kv.put("bob", "b1".into()).await.expect("put bob");
    kv.delete("bob").await.expect("delete");
    assert_eq!(kv.get("bob").await.expect("get deleted"), None, "a deleted key reads as absent");
    assert!(kv.create("bob", "b2".into()).await.is_ok(), "create succeeds over a delete marker");

    let history: Vec<kv::Entry> =
        kv.history("alice").await.expect("history").map(|e| e.expect("entry")).collect().await;
    assert_eq!(history.iter().map(|e| &e.value[..]).collect::<Vec<_>>(), [&b"v1"[..], b"v2"]);

    kv.purge("alice").await.expect("purge");
    let history: Vec<kv::Entry> =
        kv.history("alice").await.expect("history").map(|e| e.expect("entry")).collect().await;
    assert_eq!(history.len(), 1, "a purge keeps only its marker: {history:?}");
    assert_eq!(history[0].operation, kv::Operation::Purge);
    assert_eq!(kv.get("alice").await.expect("get purged"), None);

    let mut keys: Vec<String> = kv.keys().await.expect("keys").map(|k| k.expect("key")).collect().await;
    keys.sort();
    assert_eq!(keys, ["bob"], "deleted and purged keys are not listed");

    // A fresh look: `Store::status` answers from the info cached when the bucket was opened.
    let status = js.get_key_value("profiles").await.expect("bucket").status().await.expect("status");
    assert_eq!(status.history(), 5);
    assert_eq!(status.values(), 4, "v1+v2 purged away: purge marker, bob's put, delete and put");
}

#[tokio::test]
async fn watches_deliver_initial_values_with_exact_deltas_then_updates() {
    let server = SemaqServer::start();
    let js = jetstream::new(server.client().await);
    let kv = bucket(&js, "watched", 3).await;
    kv.put("a", "a1".into()).await.expect("put");
    kv.put("b", "b1".into()).await.expect("put");
    kv.put("a", "a2".into()).await.expect("put");
    kv.put("c", "c1".into()).await.expect("put");

    // async-nats: `watch_with_history` starts at each key's last value, `watch_all` at new ones.
    let mut all = kv.watch_with_history(">").await.expect("watch every key");
    let initial = [next_entry(&mut all).await, next_entry(&mut all).await, next_entry(&mut all).await];
    let seen: Vec<(&str, &[u8], u64, bool)> =
        initial.iter().map(|e| (e.key.as_str(), &e.value[..], e.delta, e.seen_current)).collect();
    let expected = [("b", &b"b1"[..], 2, false), ("a", b"a2", 1, false), ("c", b"c1", 0, true)];
    assert_eq!(seen, expected, "last per key, oldest first, then current");

    // A watch of one key whose last value is not the stream's last message still ends at 0.
    let mut one = kv.watch_with_history("a").await.expect("watch a");
    let only = next_entry(&mut one).await;
    assert_eq!((&only.value[..], only.delta, only.seen_current), (&b"a2"[..], 0, true));
    let mut updates = kv.watch_all().await.expect("watch_all");

    kv.put("b", "b2".into()).await.expect("put");
    kv.put("a", "a3".into()).await.expect("put");
    for watch in [&mut all, &mut updates] {
        let update = next_entry(watch).await;
        assert_eq!((update.key.as_str(), &update.value[..]), ("b", &b"b2"[..]));
        let update = next_entry(watch).await;
        assert_eq!((update.key.as_str(), &update.value[..], update.delta), ("a", &b"a3"[..], 0));
    }
    let update = next_entry(&mut one).await;
    assert_eq!((&update.value[..], update.delta), (&b"a3"[..], 0), "the key watch sees only its key");

    let history: Vec<kv::Entry> = kv.history("a").await.expect("history").map(|e| e.expect("entry")).collect().await;
    let deltas: Vec<(&[u8], u64)> = history.iter().map(|e| (&e.value[..], e.delta)).collect();
    assert_eq!(deltas, [(&b"a1"[..], 2), (b"a2", 1), (b"a3", 0)]);
}

#[tokio::test]
async fn an_entry_is_gone_after_the_bucket_ttl() {
    let server = SemaqServer::start();
    let js = jetstream::new(server.client().await);
    let config = kv::Config { bucket: "short".into(), max_age: Duration::from_secs(1), ..Default::default() };
    let kv = js.create_key_value(config).await.expect("bucket");
    kv.put("k", "v".into()).await.expect("put");
    assert!(kv.get("k").await.expect("get").is_some());
    wait_until_async("the entry to age out", Duration::from_secs(5), || async {
        kv.get("k").await.expect("get").is_none()
    })
    .await;
}

#[tokio::test]
async fn invalid_keys_are_refused_and_nothing_is_stored() {
    let server = SemaqServer::start();
    let js = jetstream::new(server.client().await);
    let kv = bucket(&js, "strict", 1).await;
    for key in ["a b", "", ".a", "a.", "a*", "a>"] {
        assert!(kv.put(key, "x".into()).await.is_err(), "key {key:?} must be refused");
    }
    let status = js.get_key_value("strict").await.expect("bucket").status().await.expect("status");
    assert_eq!(status.values(), 0);
}

// ---------------------------------------------------------------------------------------------
// Direct get, raw.

/// A direct get's answers up to the end of a batch (204) or the first message or status.
async fn direct(client: &async_nats::Client, subject: &str, body: &str, batch: bool) -> Vec<async_nats::Message> {
    let inbox = client.new_inbox();
    let mut replies = client.subscribe(inbox.clone()).await.expect("subscribe");
    client.publish_with_reply(subject.to_string(), inbox, body.to_string().into()).await.expect("request");
    let mut out = Vec::new();
    loop {
        let message = tokio::time::timeout(WAIT, replies.next()).await.expect("a reply").expect("open");
        let status = message.status.map(|s| s.as_u16());
        out.push(message);
        if !batch || status.is_some_and(|code| code != 100) {
            return out;
        }
    }
}

/// The status line and the headers of a reply that do not vary between servers.
fn shape(message: &async_nats::Message) -> Value {
    let headers = message.headers.clone().unwrap_or_default();
    let mut fields = serde_json::Map::new();
    for (name, values) in headers.iter() {
        let name = name.to_string();
        let value = values.iter().map(|v| v.as_str().to_string()).collect::<Vec<_>>().join(",");
        let value = if name == "Nats-Time-Stamp" { json!(looks_like_go_rfc3339_nano(&value)) } else { json!(value) };
        fields.insert(name, value);
    }
    json!({
        "status": message.status.map(|s| s.as_u16()),
        "description": message.description,
        "headers": fields,
        "payload": String::from_utf8_lossy(&message.payload),
    })
}

/// `2026-12-02T04:30:15.123456789Z` with trailing zeros dropped, as Go's RFC3339Nano.
fn looks_like_go_rfc3339_nano(text: &str) -> bool {
    let Some(rest) = text.strip_suffix('Z') else { return false };
    let (seconds, fraction) = rest.split_once('.').unwrap_or((rest, ""));
    seconds.len() == 19
        && !fraction.ends_with('0')
        && fraction.len() <= 9
        && fraction.bytes().all(|b| b.is_ascii_digit())
}

/// Makes the same stream and messages on a server: `$KV.dg.*` keys with a header on one.
async fn direct_get_fixture(client: &async_nats::Client) {
    let config = json!({
        "name": "KV_dg", "subjects": ["$KV.dg.>"], "allow_direct": true, "allow_rollup_hdrs": true,
        "max_msgs_per_subject": 5, "storage": "memory",
    });
    let created = api(client, "$JS.API.STREAM.CREATE.KV_dg", &config.to_string()).await;
    assert!(created.get("error").is_none(), "{created}");
    publish_raw(client, "$KV.dg.a", &[], b"a1").await;
    publish_raw(client, "$KV.dg.b", &[("KV-Operation", "DEL")], b"").await;
    publish_raw(client, "$KV.dg.a", &[], b"a2").await;
}

#[tokio::test]
async fn direct_gets_answer_as_nats_server_does() {
    let (nats, _dir) = nats_with_jetstream();
    let semaq = SemaqServer::start();
    let (theirs, ours) = (nats.client().await, semaq.client().await);
    direct_get_fixture(&theirs).await;
    direct_get_fixture(&ours).await;
    let cases = [
        ("$JS.API.DIRECT.GET.KV_dg.$KV.dg.a", ""),
        ("$JS.API.DIRECT.GET.KV_dg.$KV.dg.b", ""),
        ("$JS.API.DIRECT.GET.KV_dg.$KV.dg.missing", ""),
        ("$JS.API.DIRECT.GET.KV_dg", r#"{"seq":1}"#),
        ("$JS.API.DIRECT.GET.KV_dg", r#"{"seq":99}"#),
        ("$JS.API.DIRECT.GET.KV_dg", r#"{"last_by_subj":"$KV.dg.a"}"#),
        ("$JS.API.DIRECT.GET.KV_dg", r#"{"next_by_subj":"$KV.dg.a","seq":2}"#),
        ("$JS.API.DIRECT.GET.KV_dg", ""),
        ("$JS.API.DIRECT.GET.KV_dg", "{not json"),
        ("$JS.API.DIRECT.GET.KV_dg", r#"{"seq":1,"last_by_subj":"$KV.dg.a"}"#),
    ];
    for (subject, body) in cases {
        let expected = shape(&direct(&theirs, subject, body, false).await[0]);
        let got = shape(&direct(&ours, subject, body, false).await[0]);
        assert_eq!(got, expected, "{subject} {body:?}");
    }
}

#[tokio::test]
async fn direct_get_batches_and_multi_last_end_with_eob() {
    let server = SemaqServer::start();
    let client = server.client().await;
    direct_get_fixture(&client).await;
    publish_raw(&client, "$KV.dg.c", &[], b"c1").await;

    let replies = direct(&client, "$JS.API.DIRECT.GET.KV_dg", r#"{"seq":1,"batch":3}"#, true).await;
    let seen: Vec<(Option<u16>, String, String)> = replies
        .iter()
        .map(|m| {
            let header =
                |name: &str| m.headers.as_ref().and_then(|h| h.get(name)).map(|v| v.to_string()).unwrap_or_default();
            (m.status.map(|s| s.as_u16()), header("Nats-Num-Pending"), header("Nats-Last-Sequence"))
        })
        .collect();
    let expected = [(None, "3", "0"), (None, "2", "1"), (None, "1", "2"), (Some(204), "1", "3")];
    let expected: Vec<(Option<u16>, String, String)> =
        expected.iter().map(|(s, p, l)| (*s, p.to_string(), l.to_string())).collect();
    assert_eq!(seen, expected, "three messages with pending and the previous sequence, then EOB");

    let replies =
        direct(&client, "$JS.API.DIRECT.GET.KV_dg", r#"{"next_by_subj":"$KV.dg.a","batch":10,"max_bytes":1}"#, true)
            .await;
    assert_eq!(replies.len(), 2, "max_bytes stops after the first message");
    assert_eq!(&replies[0].payload[..], b"a1");

    let body = r#"{"multi_last":["$KV.dg.a","$KV.dg.c"]}"#;
    let replies = direct(&client, "$JS.API.DIRECT.GET.KV_dg", body, true).await;
    let payloads: Vec<&[u8]> = replies.iter().map(|m| &m.payload[..]).collect();
    assert_eq!(payloads, [&b"a2"[..], b"c1", b""]);
    let eob = replies.last().expect("EOB").headers.clone().expect("EOB headers");
    assert_eq!(eob.get("Nats-UpTo-Sequence").map(|v| v.as_str()), Some("4"));

    let body = r#"{"multi_last":["$KV.dg.>"],"up_to_seq":2}"#;
    let replies = direct(&client, "$JS.API.DIRECT.GET.KV_dg", body, true).await;
    let payloads: Vec<&[u8]> = replies.iter().map(|m| &m.payload[..]).collect();
    assert_eq!(payloads, [&b"a1"[..], b"", b""], "as of sequence 2: a1 and b's delete marker");

    let bad = direct(&client, "$JS.API.DIRECT.GET.KV_dg", r#"{"last_by_subj":"$KV.dg.a","batch":2}"#, false).await;
    assert_eq!((bad[0].status.map(|s| s.as_u16()), bad[0].description.as_deref()), (Some(408), Some("Bad Request")));
    let none = direct(&client, "$JS.API.DIRECT.GET.KV_dg", r#"{"multi_last":["$KV.dg.zzz"]}"#, false).await;
    assert_eq!(none[0].status.map(|s| s.as_u16()), Some(404));
}

// ---------------------------------------------------------------------------------------------
// Purges and rollups, side by side.

async fn purge_fixture(client: &async_nats::Client, name: &str, extra: Value) {
    let mut config = json!({ "name": name, "subjects": [format!("{name}.>")], "storage": "memory" });
    config.as_object_mut().expect("object").extend(extra.as_object().expect("object").clone());
    let created = api(client, &format!("$JS.API.STREAM.CREATE.{name}"), &config.to_string()).await;
    assert!(created.get("error").is_none(), "{created}");
    for (i, key) in ["a", "b", "a", "c", "a", "b"].iter().enumerate() {
        publish_raw(client, &format!("{name}.{key}"), &[], format!("{i}").as_bytes()).await;
    }
}

/// The purge's answer and the state after it, without what varies between servers.
async fn purge_and_state(client: &async_nats::Client, name: &str, body: &str) -> Value {
    let mut answer = api(client, &format!("$JS.API.STREAM.PURGE.{name}"), body).await;
    answer.as_object_mut().map(|o| o.remove("type"));
    let info = api(client, &format!("$JS.API.STREAM.INFO.{name}"), "").await;
    let state = &info["state"];
    json!({ "answer": answer, "messages": state["messages"], "first_seq": state["first_seq"] })
}

#[tokio::test]
async fn purges_with_filter_keep_and_seq_match_nats_server() {
    let (nats, _dir) = nats_with_jetstream();
    let semaq = SemaqServer::start();
    let (theirs, ours) = (nats.client().await, semaq.client().await);
    let cases = [
        r#"{"filter":"P.a","keep":1}"#,
        r#"{"filter":"P.*","keep":2}"#,
        r#"{"seq":4}"#,
        r#"{"filter":"P.a","seq":5}"#,
        r#"{"keep":2}"#,
        r#"{"seq":3,"keep":1}"#,
        r#"{"filter":"P.zzz"}"#,
        "",
    ];
    for body in cases {
        for client in [&theirs, &ours] {
            let _ = api(client, "$JS.API.STREAM.DELETE.P", "").await;
            purge_fixture(client, "P", json!({})).await;
        }
        assert_eq!(purge_and_state(&ours, "P", body).await, purge_and_state(&theirs, "P", body).await, "purge {body}");
    }
    for client in [&theirs, &ours] {
        purge_fixture(client, "D", json!({ "deny_purge": true })).await;
    }
    assert_eq!(purge_and_state(&ours, "D", "").await, purge_and_state(&theirs, "D", "").await, "deny_purge");
}

#[tokio::test]
async fn rollups_and_their_refusals_match_nats_server() {
    let (nats, _dir) = nats_with_jetstream();
    let semaq = SemaqServer::start();
    let (theirs, ours) = (nats.client().await, semaq.client().await);
    for client in [&theirs, &ours] {
        purge_fixture(client, "R", json!({ "allow_rollup_hdrs": true })).await;
        purge_fixture(client, "N", json!({})).await;
    }
    // (2.9 does not answer an unknown rollup value; 2.11 refuses it with 10111, checked below.)
    let cases = [("N", "N.a", "sub"), ("R", "R.a", "sub"), ("R", "R.x", "all")];
    for (stream, subject, rollup) in cases {
        let mut results = Vec::new();
        for client in [&theirs, &ours] {
            let ack = publish_raw(client, subject, &[("Nats-Rollup", rollup)], b"rolled").await;
            let info = api(client, &format!("$JS.API.STREAM.INFO.{stream}"), "").await;
            let seq = ack["seq"].as_u64().filter(|seq| *seq > 0);
            results.push(json!({ "error": ack["error"], "seq": seq, "messages": info["state"]["messages"] }));
        }
        assert_eq!(results[1], results[0], "rollup {rollup} on {subject}");
    }
    let bogus = publish_raw(&ours, "R.a", &[("Nats-Rollup", "bogus")], b"x").await;
    let expected = json!({ "code": 500, "err_code": 10111, "description": "rollup value invalid: \"bogus\"" });
    assert_eq!(bogus["error"], expected);
    let refused =
        api(&ours, "$JS.API.STREAM.CREATE.X", r#"{"name":"X","allow_rollup_hdrs":true,"deny_purge":true}"#).await;
    let expected =
        api(&theirs, "$JS.API.STREAM.CREATE.X", r#"{"name":"X","allow_rollup_hdrs":true,"deny_purge":true}"#).await;
    assert_eq!(refused["error"], expected["error"]);
}

// ---------------------------------------------------------------------------------------------
// Per-message TTL (2.11), delete markers and republish.

#[tokio::test]
async fn message_ttls_are_checked_and_survive_a_restart() {
    let mut server = SemaqServer::start();
    let client = server.client().await;
    let plain = api(&client, "$JS.API.STREAM.CREATE.PLAIN", r#"{"name":"PLAIN","subjects":["plain"]}"#).await;
    assert!(plain.get("error").is_none());
    let ack = publish_raw(&client, "plain", &[("Nats-TTL", "5s")], b"x").await;
    assert_eq!((ack["error"]["code"].clone(), ack["error"]["err_code"].clone()), (json!(400), json!(10166)));
    let created =
        api(&client, "$JS.API.STREAM.CREATE.T", r#"{"name":"T","subjects":["t.>"],"allow_msg_ttl":true}"#).await;
    assert_eq!(created["config"]["allow_msg_ttl"], true, "{created}");
    for garbage in ["soon", "-5", "500ms"] {
        let ack = publish_raw(&client, "t.bad", &[("Nats-TTL", garbage)], b"x").await;
        assert_eq!(ack["error"]["err_code"], 10165, "Nats-TTL {garbage}: {ack}");
    }
    publish_raw(&client, "t.short", &[("Nats-TTL", "2s")], b"short").await;
    publish_raw(&client, "t.keep", &[("Nats-TTL", "never")], b"keep").await;
    publish_raw(&client, "t.plain", &[], b"plain").await;
    let info = api(&client, "$JS.API.STREAM.INFO.T", "").await;
    assert_eq!(info["state"]["messages"], 3, "nothing refused was stored: {info}");
    drop(client);

    server.terminate();
    server.restart();
    let client = server.client().await;
    wait_until_async("the 2s message to expire after the restart", Duration::from_secs(6), || async {
        api(&client, "$JS.API.STREAM.INFO.T", "").await["state"]["messages"] == 2
    })
    .await;
    let gone = api(&client, "$JS.API.STREAM.MSG.GET.T", r#"{"last_by_subj":"t.short"}"#).await;
    assert_eq!(gone["error"]["err_code"], 10037);
    let kept = api(&client, "$JS.API.STREAM.MSG.GET.T", r#"{"last_by_subj":"t.keep"}"#).await;
    assert_eq!(kept["message"]["seq"], 2);
}

#[tokio::test]
async fn a_subject_whose_last_message_ages_out_gets_a_delete_marker() {
    let server = SemaqServer::start();
    let client = server.client().await;
    let config = json!({
        "name": "M", "subjects": ["m.>"], "max_age": 1_000_000_000u64, "subject_delete_marker_ttl": 1_000_000_000u64,
        "allow_direct": true,
    });
    let created = api(&client, "$JS.API.STREAM.CREATE.M", &config.to_string()).await;
    assert_eq!(
        (created["config"]["allow_msg_ttl"].clone(), created["config"]["allow_rollup_hdrs"].clone()),
        (json!(true), json!(true))
    );
    publish_raw(&client, "m.key", &[], b"value").await;
    wait_until_async("a delete marker", Duration::from_secs(5), || async {
        let reply = direct(&client, "$JS.API.DIRECT.GET.M.m.key", "", false).await;
        reply[0].headers.as_ref().and_then(|h| h.get("Nats-Marker-Reason")).map(|v| v.to_string())
            == Some("MaxAge".into())
    })
    .await;
    let reply = direct(&client, "$JS.API.DIRECT.GET.M.m.key", "", false).await;
    let headers = reply[0].headers.clone().expect("headers");
    assert_eq!(headers.get("Nats-TTL").map(|v| v.as_str()), Some("1s"));
    assert!(reply[0].payload.is_empty());
}

#[tokio::test]
async fn republish_copies_stored_messages_with_their_position() {
    let server = SemaqServer::start();
    let client = server.client().await;
    let js = jetstream::new(client.clone());
    let config = kv::Config {
        bucket: "rp".into(),
        history: 2,
        republish: Some(jetstream::stream::Republish {
            source: "$KV.rp.>".into(),
            destination: "seen.>".into(),
            headers_only: false,
        }),
        ..Default::default()
    };
    let kv = js.create_key_value(config).await.expect("bucket with republish");
    let mut copies = client.subscribe("seen.>").await.expect("subscribe");
    async_nats_flush(&client).await;
    kv.put("k", "one".into()).await.expect("put");
    kv.put("k", "two".into()).await.expect("put");
    let mut got = Vec::new();
    for _ in 0..2 {
        let copy = tokio::time::timeout(WAIT, copies.next()).await.expect("a copy").expect("open");
        let headers = copy.headers.clone().expect("headers");
        let header = |name: &str| headers.get(name).map(|v| v.to_string()).unwrap_or_default();
        got.push((
            copy.subject.to_string(),
            header("Nats-Subject"),
            header("Nats-Sequence"),
            header("Nats-Last-Sequence"),
        ));
        assert!(looks_like_go_rfc3339_nano(&header("Nats-Time-Stamp")));
        assert_eq!(header("Nats-Stream"), "KV_rp");
    }
    let expected = [("seen.k", "$KV.rp.k", "1", "0"), ("seen.k", "$KV.rp.k", "2", "1")];
    let expected: Vec<(String, String, String, String)> =
        expected.iter().map(|(a, b, c, d)| (a.to_string(), b.to_string(), c.to_string(), d.to_string())).collect();
    assert_eq!(got, expected);
    let cycle = api(
        &client,
        "$JS.API.STREAM.CREATE.CY",
        r#"{"name":"CY","subjects":["cy.>"],"republish":{"src":">","dest":"cy.x"}}"#,
    )
    .await;
    assert_eq!(cycle["error"]["err_code"], 10052, "{cycle}");
}

async fn async_nats_flush(client: &async_nats::Client) {
    client.flush().await.expect("flush");
}

/// A nats-server with JetStream in a fresh directory (kept until the returned guard drops).
fn nats_with_jetstream() -> (NatsServer, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().display().to_string();
    (NatsServer::with_args(&["-js", "-sd", &store]), dir)
}
