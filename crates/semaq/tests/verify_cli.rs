//! `semaq verify` against a real `semaq-server` and its files: an untouched level 4 stream
//! verifies clean online and offline; an attacker who edits a payload byte, deletes a record or
//! swaps two records, and recomputes the segment checksums each time (the store then reads the
//! files without complaint), is caught at the first broken sequence, offline and online after a
//! restart on the tampered files.
//!
//! `semaq-server` is found next to `semaq` in the target directory (`cargo test --workspace`
//! builds it); when it is missing the tests fail, saying how to build it.

mod support;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Output;

use async_nats::jetstream::{self, stream};
use async_nats::HeaderMap;
use semaq_testkit::SemaqServer;
use serde_json::{json, Value};
use support::{run, semaq_command};

const STREAM: &str = "AUDIT";
const MESSAGES: u64 = 40;
/// Segment file layout (docs/design.md): a 24-byte header, then records whose first 4 bytes are
/// their length, the next 4 a CRC-32 of everything after those 8, then the sequence.
const SEGMENT_HEADER_BYTES: usize = 24;

/// Starts a semaq-server with JetStream on `store`, a directory the test owns.
fn start_on(store: &Path) -> SemaqServer {
    SemaqServer::builder().store(store).no_monitoring().arg("-js").start()
}

/// SIGTERM (the server signs its head on the way out) and wait.
fn terminate(mut server: SemaqServer) {
    assert_eq!(server.terminate(), Some(0), "clean exit");
}

fn semaq(args: &[&str]) -> Output {
    run(semaq_command(args))
}

fn text(output: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

/// Registers a schema, creates the L4 stream and publishes `MESSAGES` messages on two subjects.
async fn fill(url: &str) {
    let client = async_nats::connect(url).await.expect("connect");
    let schema = json!({"type": "object", "required": ["model_id"]});
    let body = json!({"subject": "audit-events", "schema": schema.to_string(), "schemaType": "JSON"});
    let reply = client.request("$SEMAQ.API.SCHEMA.REGISTER", body.to_string().into()).await.unwrap();
    assert!(serde_json::from_slice::<Value>(&reply.payload).unwrap()["id"].is_u64());
    let metadata = HashMap::from([
        ("semaq.level".to_string(), "4".to_string()),
        ("semaq.schema".to_string(), "audit-events".to_string()),
    ]);
    let config =
        stream::Config { name: STREAM.into(), subjects: vec!["audit.>".into()], metadata, ..Default::default() };
    let js = jetstream::new(client);
    js.create_stream(config).await.expect("stream created");
    for n in 1..=MESSAGES {
        let mut headers = HeaderMap::new();
        headers.insert("Semaq-Event-Time", format!("2024-05-01T12:00:{:02}Z", n).as_str());
        headers.insert("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
        headers.insert("Semaq-Session", "s-1");
        let payload = json!({"model_id": "llama3-70b", "n": n}).to_string();
        let subject = if n % 2 == 0 { "audit.even" } else { "audit.odd" };
        js.publish_with_headers(subject, headers, payload.into()).await.unwrap().await.expect("acked");
    }
}

fn segment(store: &Path) -> PathBuf {
    store.join("jetstream/streams").join(STREAM).join("msgs").join(format!("{:020}.log", 1))
}

/// The records of a segment file, each as its bytes.
fn records(log: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut at = SEGMENT_HEADER_BYTES;
    while at < log.len() {
        let length = u32::from_le_bytes(log[at..at + 4].try_into().unwrap()) as usize;
        out.push(log[at..at + length].to_vec());
        at += length;
    }
    out
}

/// What an attacker writes back: records renumbered from 1 in their new order, every checksum
/// recomputed, so the store finds nothing wrong.
fn write_records(path: &Path, header: &[u8], records: &[Vec<u8>]) {
    let mut out = header[..SEGMENT_HEADER_BYTES].to_vec();
    for (position, record) in records.iter().enumerate() {
        let mut record = record.clone();
        record[8..16].copy_from_slice(&(position as u64 + 1).to_le_bytes());
        let crc = crc32fast::hash(&record[8..]);
        record[4..8].copy_from_slice(&crc.to_le_bytes());
        out.extend_from_slice(&record);
    }
    std::fs::write(path, out).unwrap();
}

fn tamper(store: &Path, how: &str) {
    let path = segment(store);
    let log = std::fs::read(&path).unwrap();
    let mut records = records(&log);
    assert_eq!(records.len() as u64, MESSAGES, "one segment holds the whole stream");
    match how {
        "edit" => {
            let last = records[16].len() - 3;
            records[16][last] ^= 0x01; // a digit of seq 17's payload
        }
        "delete" => {
            records.remove(9); // seq 10
        }
        "swap" => records.swap(24, 25), // seqs 25 and 26
        other => panic!("unknown tampering {other}"),
    }
    write_records(&path, &log, &records);
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

fn verify_offline(store: &Path, extra: &[&str]) -> Output {
    let store = store.to_string_lossy().into_owned();
    let mut args = vec!["verify", STREAM, "--dir", store.as_str()];
    args.extend_from_slice(extra);
    semaq(&args)
}

fn verify_online(server: &SemaqServer, extra: &[&str]) -> Output {
    let url = server.url();
    let mut args = vec!["verify", STREAM, "--server", url.as_str()];
    args.extend_from_slice(extra);
    semaq(&args)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_names_the_first_broken_sequence_online_and_offline() {
    let dir = tempfile::tempdir().unwrap();
    let pristine = dir.path().join("pristine");
    let server = start_on(&pristine);
    fill(&server.url()).await;
    let busy = verify_offline(&pristine, &[]);
    assert!(!busy.status.success() && text(&busy).contains("open in a running server"), "{}", text(&busy));
    let online = verify_online(&server, &["--json"]);
    assert!(online.status.success(), "{}", text(&online));
    let report: Value = serde_json::from_slice(&online.stdout).unwrap();
    assert_eq!((report["ok"].as_bool(), report["verified"].as_u64()), (Some(true), Some(MESSAGES)), "{report}");
    let key = report["public_key"].as_str().unwrap().to_string();
    terminate(server);

    let clean = verify_offline(&pristine, &["--key", &key]);
    let clean_text = text(&clean);
    assert!(clean.status.success(), "{clean_text}");
    assert!(clean_text.contains(&format!("{MESSAGES} messages")) && clean_text.contains("msgs/s"), "{clean_text}");
    assert!(
        clean_text.contains(&format!("signed through seq {MESSAGES}")) && clean_text.contains("result       OK"),
        "{clean_text}"
    );
    let other_key = "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c";
    let rekeyed = verify_offline(&pristine, &["--key", other_key]);
    assert!(!rekeyed.status.success() && text(&rekeyed).contains("not the"), "{}", text(&rekeyed));

    for (how, seq, kind) in
        [("edit", 17, "hash mismatch"), ("delete", 10, "missing sequence"), ("swap", 25, "reordered")]
    {
        let store = dir.path().join(how);
        copy_dir(&pristine, &store);
        tamper(&store, how);
        let expected = format!("BROKEN at seq {seq}: {kind}");
        let offline = verify_offline(&store, &[]);
        assert!(!offline.status.success(), "{how}: {}", text(&offline));
        assert!(text(&offline).contains(&expected), "{how} offline: {}", text(&offline));

        let server = start_on(&store);
        let online = verify_online(&server, &[]);
        assert!(!online.status.success(), "{how}: {}", text(&online));
        assert!(text(&online).contains(&expected), "{how} online: {}", text(&online));
        assert!(text(&online).contains(&format!("breaks at seq {seq}")), "{}", text(&online));
        terminate(server);
    }

    // Starting after an edited message: the walk anchors on the next one and the rest is intact.
    let edited = dir.path().join("edit");
    let after = verify_offline(&edited, &["--from", "18"]);
    assert!(after.status.success(), "{}", text(&after));
    assert!(text(&after).contains("seq 18..=40"), "{}", text(&after));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_refuses_streams_without_a_chain() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_on(&dir.path().join("store"));
    let js = jetstream::new(async_nats::connect(server.url()).await.unwrap());
    js.create_stream(stream::Config { name: "PLAIN".into(), subjects: vec!["plain".into()], ..Default::default() })
        .await
        .unwrap();
    let output = semaq(&["verify", "PLAIN", "--server", &server.url()]);
    assert!(!output.status.success());
    assert!(
        text(&output).contains("stream PLAIN is level 1: only level 4 streams have a provenance chain"),
        "{}",
        text(&output)
    );
    let missing = semaq(&["verify", "NOPE", "--server", &server.url()]);
    assert!(text(&missing).contains("stream not found"), "{}", text(&missing));
}
