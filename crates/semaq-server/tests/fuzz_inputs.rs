//! Fuzz properties for the broker's text and JSON inputs read as a library: the config file
//! (random and damaged nats-server config text) and the JetStream request bodies whose
//! validation stands alone (stream and consumer configs, consumer create requests).
//!
//! Bad input gets an error that says where or what (a config error naming its line; an API
//! error with nats-server's `code`, `err_code` and a description), never a panic, and a config
//! that fails to load leaves the options untouched. The request kinds that need a running
//! stream are fuzzed over the wire in `tests/broker/fuzz_api.rs`.

use proptest::prelude::*;
use semaq_server::config_file::{self, ConfigError};
use semaq_server::jetstream::config::{ConsumerConfig, StreamConfig};
use semaq_server::jetstream::consumer::validate;
use semaq_server::jetstream::consumers::CreateRequest;
use semaq_server::jetstream::errors::ApiError;
use semaq_server::mappings::{MapDest, SubjectMappings};
use semaq_server::options::Options;
use semaq_server::transform::Transform;
use serde_json::{json, Value};

const CONFIG: &str = r#"
server_name: "hub-1"
listen: 127.0.0.1:4222
http: 127.0.0.1:8222
max_payload: 2MB
max_pending = 128MB
max_connections 10000
ping_interval: "30s"
write_deadline = "5s"
debug: false
PASS: "s3cret"
authorization {
  timeout: 3
  users = [
    {user: admin, password: $PASS}
    {user: client, password: "c-pass", permissions: {
      publish: ["orders.>", "_INBOX.>"]
      subscribe: {allow: ["orders.*"], deny: "orders.secret"}
    }}
  ]
}
jetstream {
  max_mem_store: 1GB
  max_file_store: "10G"
  domain: hub
}
accounts {
  TEAM_A { users: [ {user: alice, password: a} ], jetstream: enabled }
  TEAM_B { jetstream { max_mem: 512MB, max_streams: 10, max_consumers: -1 } }
}
websocket { port: 8080, no_tls: true }
# a comment
// another
lame_duck_duration: "30s"
"#;

fn config() -> ProptestConfig {
    ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() }
}

/// The config text with a stretch replaced by random config-ish characters.
fn damaged_config() -> impl Strategy<Value = String> {
    let pieces = "[ \n\t{}\\[\\]:=,;\"'$#/a-z0-9.\\-]{0,8}";
    prop::collection::vec((0..CONFIG.len(), 0usize..16, pieces), 1..4).prop_map(|edits| {
        let mut text = CONFIG.to_string();
        for (start, cut, insert) in edits {
            let start = text.floor_char_boundary(start.min(text.len()));
            let end = text.floor_char_boundary((start + cut).min(text.len()));
            text.replace_range(start..end, &insert);
        }
        text
    })
}

fn config_text() -> impl Strategy<Value = String> {
    prop_oneof![any::<String>(), "[ \n\t{}\\[\\]():=,;\"'`$#/a-zA-Z0-9.\\-]{0,80}", damaged_config(), damaged_config(),]
}

/// The line an error names, when it names one.
fn error_line(error: &ConfigError) -> Option<u32> {
    match error {
        ConfigError::Syntax { at, .. }
        | ConfigError::Invalid { at, .. }
        | ConfigError::UndefinedVariable { at, .. }
        | ConfigError::Include { at, .. } => Some(at.line),
        ConfigError::Read { .. } => None,
    }
}

/// Any JSON value, a few levels deep, with the keys and strings API bodies use.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        prop_oneof![any::<i64>(), Just(-1i64), Just(0), Just(1), Just(i64::MAX), Just(i64::MIN)].prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from),
        prop_oneof![
            "[a-z.*>]{0,8}",
            Just("all".to_string()),
            Just("explicit".to_string()),
            Just("by_start_sequence".to_string()),
            Just("file".to_string()),
            Just("workqueue".to_string()),
            Just("1970-01-01T00:00:00Z".to_string()),
            any::<String>(),
        ]
        .prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::from),
            prop::collection::btree_map(api_key(), inner, 0..6)
                .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

/// Keys of stream and consumer configs, so random values land on real fields.
fn api_key() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "name",
        "subjects",
        "retention",
        "max_consumers",
        "max_msgs",
        "max_bytes",
        "max_age",
        "max_msg_size",
        "storage",
        "num_replicas",
        "discard",
        "duplicate_window",
        "max_msgs_per_subject",
        "sealed",
        "deny_delete",
        "allow_rollup_hdrs",
        "allow_direct",
        "mirror",
        "sources",
        "subject_transform",
        "republish",
        "metadata",
        "durable_name",
        "deliver_policy",
        "opt_start_seq",
        "opt_start_time",
        "ack_policy",
        "ack_wait",
        "max_deliver",
        "filter_subject",
        "filter_subjects",
        "replay_policy",
        "max_ack_pending",
        "max_waiting",
        "deliver_subject",
        "deliver_group",
        "idle_heartbeat",
        "flow_control",
        "headers_only",
        "backoff",
        "inactive_threshold",
        "priority_groups",
        "priority_policy",
        "pause_until",
        "config",
        "stream_name",
        "action",
        "batch",
        "expires",
        "no_wait",
        "seq",
        "last_by_subj",
        "next_by_subj",
        "filter",
        "keep",
        "x",
    ])
    .prop_map(str::to_string)
}

/// A valid consumer config with one field set to a random value.
fn mutated_consumer() -> impl Strategy<Value = Value> {
    (api_key(), json_value()).prop_map(|(key, value)| {
        let mut config = json!({
            "durable_name": "C", "ack_policy": "explicit", "deliver_policy": "all",
            "filter_subject": "orders.>", "max_deliver": 5, "ack_wait": 30_000_000_000u64,
        });
        config[key] = value;
        config
    })
}

#[track_caller]
fn assert_api_error(error: &ApiError) {
    let body = error.to_json("io.nats.jetstream.api.v1.consumer_create_response");
    assert!((400..600).contains(&body["error"]["code"].as_u64().unwrap_or(0)), "{body}");
    assert!(body["error"]["err_code"].as_u64().is_some_and(|code| code >= 10000), "{body}");
    assert!(body["error"]["description"].as_str().is_some_and(|text| !text.is_empty()), "{body}");
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn any_config_text_loads_or_names_the_line_and_changes_nothing(text in config_text()) {
        let mut options = Options::default();
        let before = format!("{options:?}");
        if let Err(error) = config_file::parse_str(&text, &mut options) {
            let lines = u32::try_from(text.split('\n').count()).unwrap_or(u32::MAX);
            let line = error_line(&error).expect("text is never unreadable");
            prop_assert!((1..=lines).contains(&line), "line {} of {}: {}", line, lines, error);
            prop_assert!(error.to_string().contains(&format!("line {line}")), "{}", error);
            prop_assert_eq!(format!("{options:?}"), before, "a failed load changed the options");
        }
    }

    #[test]
    fn any_consumer_body_is_refused_with_a_code_or_normalized(body in prop_oneof![json_value(), mutated_consumer()]) {
        let stream: StreamConfig = serde_json::from_value(json!({"name": "S", "subjects": ["orders.>"]})).unwrap();
        if let Ok(config) = serde_json::from_value::<ConsumerConfig>(body.clone()) {
            match validate::normalize(config.clone(), &stream) {
                Ok(normalized) => {
                    let _ = validate::check_update(&normalized, &config);
                }
                Err(error) => assert_api_error(&error),
            }
        }
        if let Ok(request) = serde_json::from_value::<CreateRequest>(json!({ "config": body, "stream_name": "S" })) {
            if let Some(config) = request.config {
                if let Err(error) = validate::normalize(config, &stream) {
                    assert_api_error(&error);
                }
            }
        }
    }

    #[test]
    fn any_stream_body_parses_or_is_refused(body in prop_oneof![json_value(), any::<String>().prop_map(Value::from)], bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        let _ = serde_json::from_value::<StreamConfig>(body.clone());
        let _ = serde_json::from_slice::<StreamConfig>(&bytes);
        let _ = serde_json::from_slice::<CreateRequest>(&bytes);
        if let Ok(mut config) = serde_json::from_value::<StreamConfig>(body) {
            let _ = config.apply_exactly_once();
            let _ = (config.level(), config.batch_timeout());
        }
    }
}

/// A valid stream config with one field set to a random value.
fn mutated_stream() -> impl Strategy<Value = Value> {
    (api_key(), json_value()).prop_map(|(key, value)| {
        let mut config = json!({
            "name": "S", "subjects": ["orders.>"], "storage": "file", "retention": "limits",
            "max_msgs": 1000, "duplicate_window": 120_000_000_000u64,
        });
        config[key] = value;
        config
    })
}

/// A subject-transform token: literals, wildcards and mapping functions with any arguments.
fn transform_token() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z]{1,4}",
        Just("*".to_string()),
        Just(">".to_string()),
        (1u8..4).prop_map(|n| format!("$${n}")),
        (
            prop::sample::select(vec![
                "wildcard",
                "partition",
                "splitfromleft",
                "splitfromright",
                "slicefromleft",
                "slicefromright",
                "split",
                "left",
                "right",
                "random",
                "nope"
            ]),
            prop::collection::vec(
                prop_oneof![
                    "-?[0-9]{1,3}".boxed(),
                    "[a-z.,]{0,3}".boxed(),
                    Just("0".to_string()).boxed(),
                    Just("4294967296".to_string()).boxed()
                ],
                0..4
            ),
        )
            .prop_map(|(name, args)| format!("{{{{{name}({})}}}}", args.join(","))),
    ]
}

fn transform_subject() -> impl Strategy<Value = String> {
    prop::collection::vec(transform_token(), 1..5).prop_map(|tokens| tokens.join("."))
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn any_stream_config_normalizes_or_is_refused_with_a_code(body in prop_oneof![mutated_stream(), json_value()]) {
        if let Ok(config) = serde_json::from_value::<StreamConfig>(body) {
            if let Err(error) = semaq_server::jetstream::normalize(config) {
                assert_api_error(&error);
            }
        }
    }

    #[test]
    fn any_subject_transform_compiles_or_is_refused_and_applies_to_any_subject(
        source in prop_oneof![transform_subject(), "[a-z.*>]{0,12}"],
        destination in prop_oneof![transform_subject(), "[ -~]{0,16}"],
        subjects in prop::collection::vec("[a-z0-9]{1,6}(\\.[a-z0-9]{0,6}){0,5}", 1..4),
    ) {
        let _ = semaq_server::transform::validate_mapping(&source, &destination);
        if let Ok(Some(transform)) = Transform::new(&source, &destination) {
            for subject in &subjects {
                let _ = transform.apply(subject);
            }
        }
    }

    #[test]
    fn any_subject_mapping_is_added_or_refused_and_maps_any_subject(
        source in prop_oneof![transform_subject(), "[a-z.*>]{0,12}"],
        destinations in prop::collection::vec(
            (prop_oneof![transform_subject(), "[ -~]{0,16}"], 0u8..=120, prop_oneof![Just(""), Just("east")]),
            0..5,
        ),
        subjects in prop::collection::vec("[a-z0-9*>]{1,6}(\\.[a-z0-9*>]{0,6}){0,5}", 1..4),
    ) {
        let destinations: Vec<MapDest> = destinations
            .into_iter()
            .map(|(subject, weight, cluster)| MapDest { subject, weight, cluster: cluster.to_string() })
            .collect();
        let mut table = SubjectMappings::default();
        if table.add(&source, &destinations).is_ok() {
            let _ = table.describe();
            for subject in &subjects {
                let _ = table.select(subject);
            }
        }
    }
}

/// Nesting deeper than anyone writes is an error, not a stack overflow.
#[test]
fn deeply_nested_config_is_an_error_naming_its_line() {
    for (open, close) in [("a {\n", "}\n"), ("a: [", "]"), ("a: {b: ", "}")] {
        let text = format!("{}{}", open.repeat(20_000), close.repeat(20_000));
        let mut options = Options::default();
        let error = config_file::parse_str(&text, &mut options).expect_err("20 000 levels are refused");
        assert!(error_line(&error).is_some(), "{error}");
    }
}
