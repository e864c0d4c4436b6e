//! Scheduled and delayed messages, as nats-server 2.12 has them (`allow_msg_schedules`): a
//! message with `Nats-Schedule` waits on its own subject; when due, the stream stores its
//! body on `Nats-Schedule-Target` (or the last message of `Nats-Schedule-Source`) with
//! `Nats-Scheduler` and `Nats-Schedule-Next`; a one-shot (`@at`) is then removed, a repeating
//! one (`@every`, cron) fires again. Bad schedules get nats-server's error codes and store nothing.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_nats::jetstream;
use semaq_testkit::SemaqServer;
use serde_json::{json, Value};

use crate::jetstream_api::{api, assert_api_error, context, publish_raw};

/// Schedules fire at the stream's limits checks (every 250 ms): well within this.
const FIRE: Duration = Duration::from_secs(10);

async fn create(client: &async_nats::Client, config: Value) -> Value {
    let name = config["name"].as_str().expect("name").to_string();
    api(client, &format!("$JS.API.STREAM.CREATE.{name}"), &config.to_string()).await
}

fn schedules_stream(storage: &str) -> Value {
    json!({"name": "S", "subjects": ["sched.>", "orders.>"], "allow_msg_schedules": true, "storage": storage})
}

/// RFC 3339 for `from_now` ahead.
fn at(from_now: Duration) -> String {
    let ns = (SystemTime::now() + from_now).duration_since(UNIX_EPOCH).expect("after 1970").as_nanos();
    semaq_wire::clock::rfc3339_nanos(i64::try_from(ns).expect("fits"))
}

/// The last message on `subject`, with its headers as (name, value) pairs, or `None`.
async fn last(js: &jetstream::Context, subject: &str) -> Option<(Vec<(String, String)>, String)> {
    let stream = js.get_stream("S").await.expect("stream");
    let message = stream.get_last_raw_message_by_subject(subject).await.ok()?;
    let headers = (message.headers.iter())
        .flat_map(|(name, values)| values.iter().map(move |v| (name.to_string(), v.to_string())))
        .collect();
    Some((headers, String::from_utf8_lossy(&message.payload).into_owned()))
}

async fn wait_for_last(js: &jetstream::Context, subject: &str) -> (Vec<(String, String)>, String) {
    let deadline = tokio::time::Instant::now() + FIRE;
    loop {
        if let Some(found) = last(js, subject).await {
            return found;
        }
        assert!(tokio::time::Instant::now() < deadline, "nothing on {subject} within {FIRE:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
}

#[tokio::test]
async fn a_delayed_message_is_stored_on_its_target_when_due_and_its_schedule_removed() {
    let server = SemaqServer::start();
    let client = server.client().await;
    let js = context(&server).await;
    let created = create(&client, schedules_stream("memory")).await;
    assert_eq!(created["config"]["allow_msg_schedules"], true, "{created}");
    assert_eq!(created["config"]["allow_rollup_hdrs"], true, "schedules turn roll-ups on: {created}");

    let when = at(Duration::from_millis(1500));
    let schedule = [("Nats-Schedule", format!("@at {when}")), ("Nats-Schedule-Target", "orders.a".into())];
    let schedule: Vec<(&str, &str)> = schedule.iter().map(|(n, v)| (*n, v.as_str())).collect();
    let published = tokio::time::Instant::now();
    let ack = publish_raw(&client, "sched.a", &schedule, b"hello later").await;
    assert_eq!(ack, json!({"stream": "S", "seq": 1}));
    let (headers, _) = last(&js, "sched.a").await.expect("the schedule waits on its subject");
    assert_eq!(header(&headers, "Nats-Rollup"), Some("sub"), "{headers:?}");
    assert!(last(&js, "orders.a").await.is_none(), "not before its time");

    let (headers, body) = wait_for_last(&js, "orders.a").await;
    assert!(published.elapsed() >= Duration::from_millis(1000), "fired early: {:?}", published.elapsed());
    assert_eq!(body, "hello later");
    assert_eq!(header(&headers, "Nats-Scheduler"), Some("sched.a"), "{headers:?}");
    assert_eq!(header(&headers, "Nats-Schedule-Next"), Some("purge"), "{headers:?}");
    assert!(header(&headers, "Nats-Schedule").is_none() && header(&headers, "Nats-Rollup").is_none(), "{headers:?}");
    let deadline = tokio::time::Instant::now() + FIRE;
    while last(&js, "sched.a").await.is_some() {
        assert!(tokio::time::Instant::now() < deadline, "the one-shot schedule is not purged");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(600)).await;
    let info = api(&client, "$JS.API.STREAM.INFO.S", "").await;
    assert_eq!(info["state"]["messages"], 1, "fired once: {info}");
}

#[tokio::test]
async fn a_repeating_schedule_copies_its_sources_last_message_each_time() {
    let server = SemaqServer::start();
    let client = server.client().await;
    let js = context(&server).await;
    let mut config = schedules_stream("file");
    config["allow_msg_ttl"] = json!(true);
    create(&client, config).await;
    publish_raw(&client, "orders.price", &[], b"41").await;
    let schedule = [
        ("Nats-Schedule", "@every 1s"),
        ("Nats-Schedule-Target", "orders.snapshot"),
        ("Nats-Schedule-Source", "orders.price"),
        ("Nats-Schedule-TTL", "1m"),
        ("Nats-Schedule-Rollup", "sub"),
    ];
    assert!(publish_raw(&client, "sched.snapshot", &schedule, b"").await.get("error").is_none());
    let (headers, body) = wait_for_last(&js, "orders.snapshot").await;
    assert_eq!(body, "41");
    let next = header(&headers, "Nats-Schedule-Next").expect("a repeating copy says when next");
    assert!(next.ends_with('Z') && next.len() >= 20, "RFC 3339: {next}");
    assert_eq!(header(&headers, "Nats-TTL"), Some("1m"), "{headers:?}");
    assert_eq!(header(&headers, "Nats-Rollup"), Some("sub"), "{headers:?}");

    publish_raw(&client, "orders.price", &[], b"42").await;
    let deadline = tokio::time::Instant::now() + FIRE;
    while last(&js, "orders.snapshot").await.map(|(_, body)| body).as_deref() != Some("42") {
        assert!(tokio::time::Instant::now() < deadline, "the schedule did not fire again");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(last(&js, "sched.snapshot").await.is_some(), "a repeating schedule stays");
    // The rollup keeps one snapshot; the schedule and both prices stay.
    let info = api(&client, "$JS.API.STREAM.INFO.S", "").await;
    assert_eq!(info["state"]["messages"], 4, "{info}");
}

#[tokio::test]
async fn a_schedule_survives_a_restart() {
    let mut server = SemaqServer::start();
    let client = server.client().await;
    create(&client, schedules_stream("file")).await;
    let when = format!("@at {}", at(Duration::from_secs(2)));
    let schedule = [("Nats-Schedule", when.as_str()), ("Nats-Schedule-Target", "orders.late")];
    assert!(publish_raw(&client, "sched.late", &schedule, b"after restart").await.get("error").is_none());
    drop(client);
    server.terminate();
    server.restart();
    let js = context(&server).await;
    let (_, body) = wait_for_last(&js, "orders.late").await;
    assert_eq!(body, "after restart");
}

/// A publish: subject, headers, and the `err_code` it is refused with.
type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, u64);

#[tokio::test]
async fn bad_schedules_are_refused_with_nats_servers_codes_and_store_nothing() {
    let server = SemaqServer::start();
    let client = server.client().await;
    create(&client, schedules_stream("memory")).await;
    create(&client, json!({"name": "PLAIN", "subjects": ["plain.>"]})).await;
    let later = format!("@at {}", at(Duration::from_secs(3600)));
    let target = ("Nats-Schedule-Target", "orders.x");
    let cases: Vec<Case> = vec![
        ("plain.a", vec![("Nats-Schedule", later.as_str()), ("Nats-Schedule-Target", "plain.b")], 10188),
        ("sched.a", vec![("Nats-Schedule", "@at soon"), target], 10189),
        ("sched.a", vec![("Nats-Schedule", "@every 100ms"), target], 10189),
        ("sched.a", vec![("Nats-Schedule", "61 * * * * *"), target], 10189),
        ("sched.a", vec![("Nats-Schedule", later.as_str()), ("Nats-Schedule-Time-Zone", "UTC"), target], 10189),
        ("sched.a", vec![("Nats-Schedule", later.as_str()), ("Nats-Schedule-Time-Zone", ""), target], 10223),
        ("sched.a", vec![("Nats-Schedule", "0 * * * * *"), ("Nats-Schedule-Time-Zone", "Not/A/Zone"), target], 10223),
        ("sched.a", vec![("Nats-Schedule", "0 * * * * *"), ("Nats-Schedule-Time-Zone", "europe/paris"), target], 10223),
        ("sched.a", vec![("Nats-Schedule", "invalid"), ("Nats-Schedule-Time-Zone", "Europe/Paris"), target], 10189),
        ("sched.a", vec![("Nats-Schedule", "@every 1m"), ("Nats-Schedule-Time-Zone", "Europe/Paris"), target], 10189),
        // The zone is checked even without a pattern, and a stream without schedules says so.
        ("sched.a", vec![("Nats-Schedule-Time-Zone", "Not/A/Zone")], 10223),
        ("plain.a", vec![("Nats-Schedule-Time-Zone", "Not/A/Zone")], 10188),
        ("sched.a", vec![("Nats-Schedule", later.as_str())], 10190),
        ("sched.a", vec![("Nats-Schedule", later.as_str()), ("Nats-Schedule-Target", "sched.a")], 10190),
        ("sched.a", vec![("Nats-Schedule", later.as_str()), ("Nats-Schedule-Target", "elsewhere")], 10190),
        ("sched.a", vec![("Nats-Schedule", later.as_str()), target, ("Nats-Schedule-Source", "orders.x")], 10203),
        ("sched.a", vec![("Nats-Schedule", later.as_str()), target, ("Nats-Schedule-TTL", "soon")], 10191),
        ("sched.a", vec![("Nats-Schedule", later.as_str()), target, ("Nats-Schedule-TTL", "1m")], 10166),
        ("sched.a", vec![("Nats-Schedule", later.as_str()), target, ("Nats-Schedule-Rollup", "all")], 10192),
        ("sched.a", vec![("Nats-Schedule", later.as_str()), target, ("Nats-Rollup", "all")], 10192),
        ("orders.a", vec![("Nats-Schedule-Next", "2030-01-01T00:00:00Z"), ("Nats-Scheduler", "sched.a")], 10212),
        ("orders.a", vec![("Nats-Schedule-Next", "purge")], 10212),
        ("orders.a", vec![("Nats-Scheduler", "sched.a")], 10212),
    ];
    for (subject, headers, code) in cases {
        let ack = publish_raw(&client, subject, &headers, b"x").await;
        assert_eq!(ack["error"]["err_code"], code, "{subject} {headers:?}: {ack}");
    }
    for stream in ["S", "PLAIN"] {
        let info = api(&client, &format!("$JS.API.STREAM.INFO.{stream}"), "").await;
        assert_eq!(info["state"]["messages"], 0, "{info}");
    }
}

#[tokio::test]
async fn schedule_settings_combine_as_nats_servers_do() {
    let server = SemaqServer::start();
    let client = server.client().await;
    let counter = json!({"name": "C", "subjects": ["c"], "allow_msg_schedules": true, "allow_msg_counter": true});
    assert_api_error(&create(&client, counter).await, 500, 10052);
    let discard_new = json!({"name": "D", "subjects": ["d"], "allow_msg_schedules": true, "discard": "new"});
    assert_api_error(&create(&client, discard_new).await, 500, 10052);
    create(&client, json!({"name": "O", "subjects": ["o"]})).await;
    let sourcing = json!({"name": "X", "allow_msg_schedules": true, "sources": [{"name": "O"}]});
    assert_api_error(&create(&client, sourcing).await, 400, 10187);
    let mirroring = json!({"name": "M", "allow_msg_schedules": true, "mirror": {"name": "O"}});
    assert_api_error(&create(&client, mirroring).await, 400, 10186);
    create(&client, schedules_stream("memory")).await;
    let mut off = schedules_stream("memory");
    off["allow_msg_schedules"] = json!(false);
    assert_api_error(&api(&client, "$JS.API.STREAM.UPDATE.S", &off.to_string()).await, 500, 10052);
}

#[tokio::test]
async fn a_cron_schedule_fires_on_its_seconds() {
    let server = SemaqServer::start();
    let client = server.client().await;
    let js = context(&server).await;
    create(&client, schedules_stream("memory")).await;
    let schedule =
        [("Nats-Schedule", "* * * * * *"), ("Nats-Schedule-Time-Zone", "UTC"), ("Nats-Schedule-Target", "orders.tick")];
    assert!(publish_raw(&client, "sched.tick", &schedule, b"tick").await.get("error").is_none());
    let (headers, body) = wait_for_last(&js, "orders.tick").await;
    assert_eq!(body, "tick");
    let next = header(&headers, "Nats-Schedule-Next").expect("when next");
    let next_ns = semaq_wire::clock::parse_rfc3339(next).expect("RFC 3339");
    assert_eq!(next_ns % 1_000_000_000, 0, "cron fires on whole seconds: {next}");
    let deadline = tokio::time::Instant::now() + FIRE;
    loop {
        let info = api(&client, "$JS.API.STREAM.INFO.S", "").await;
        if info["state"]["messages"].as_u64().is_some_and(|n| n >= 3) {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the cron schedule does not repeat: {info}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A cron pattern read in `Nats-Schedule-Time-Zone` (nats-server 2.12): its copies say when they
/// fire next in that zone's offset. Kolkata keeps +05:30 all year, so the test holds any day.
#[tokio::test]
async fn a_cron_schedule_in_a_time_zone_fires_and_says_when_next_in_its_offset() {
    let server = SemaqServer::start();
    let client = server.client().await;
    let js = context(&server).await;
    create(&client, schedules_stream("file")).await;
    let tick = [
        ("Nats-Schedule", "* * * * * *"),
        ("Nats-Schedule-Time-Zone", "Asia/Kolkata"),
        ("Nats-Schedule-Target", "orders.tick"),
    ];
    assert_eq!(publish_raw(&client, "sched.tick", &tick, b"namaste").await, json!({"stream": "S", "seq": 1}));
    // 09:00 in Kolkata on the first of January: accepted, and waits.
    let yearly = [
        ("Nats-Schedule", "0 0 9 1 1 *"),
        ("Nats-Schedule-Time-Zone", "Asia/Kolkata"),
        ("Nats-Schedule-Target", "orders.new_year"),
    ];
    assert_eq!(publish_raw(&client, "sched.new_year", &yearly, b"").await, json!({"stream": "S", "seq": 2}));

    let (headers, body) = wait_for_last(&js, "orders.tick").await;
    assert_eq!(body, "namaste");
    assert_eq!(header(&headers, "Nats-Scheduler"), Some("sched.tick"), "{headers:?}");
    assert!(header(&headers, "Nats-Schedule-Time-Zone").is_none(), "schedule headers are stripped: {headers:?}");
    let next = header(&headers, "Nats-Schedule-Next").expect("when next");
    assert!(next.ends_with("+05:30") && !next.contains('.'), "Kolkata's offset, whole seconds: {next}");
    let next_ns = semaq_wire::clock::parse_rfc3339(next).expect("RFC 3339");
    let now_ns =
        i64::try_from(SystemTime::now().duration_since(UNIX_EPOCH).expect("after 1970").as_nanos()).expect("ns");
    assert!((next_ns - now_ns).abs() < 5_000_000_000, "the next second, not 5.5 hours off: {next}");
    assert!(last(&js, "orders.new_year").await.is_none(), "a yearly schedule waits for its day");
}
