//! CEL filter semantics: every binding, the SPEC §3 examples, compile errors with positions,
//! run-time errors as non-matches, and the native plan agreeing with the `cel` interpreter.

use proptest::prelude::*;

use super::{Context, Filter, Prepared, Verdict};

const EVENT: &str = r#"{"model_id":"llama3-70b","confidence":0.92,"input_tokens":1200,"output_tokens":80,
 "tags":["prod","eu"],"user":{"tier":"gold","id":7},"latency_ms":35,"ok":true,"note":null}"#;
const HEADERS: &str = "NATS/1.0\r\nSemaq-Priority: 0\r\nsemaq-model: llama3-70b\r\nX-Trace: abc\r\n\r\n";

fn verdict(expression: &str, subject: &str, headers: Option<&str>, payload: &str) -> Verdict {
    let filter = Filter::compile(expression).unwrap_or_else(|e| panic!("{expression}: {e}"));
    let message = Prepared::new(subject, headers.map(str::as_bytes), payload.as_bytes());
    filter.evaluate(&message)
}

fn event(expression: &str) -> Verdict {
    verdict(expression, "ai.inference.eu", Some(HEADERS), EVENT)
}

#[test]
fn spec_examples_match_the_event() {
    assert_eq!(event("confidence > 0.85"), Verdict::Match);
    assert_eq!(event(r#"model_id == "llama3-70b" && confidence >= 0.9"#), Verdict::Match);
    assert_eq!(event(r#"headers["Semaq-Priority"] == "0""#), Verdict::Match);
    assert_eq!(event(r#"subject.startsWith("ai.inference.") && input_tokens < 4096"#), Verdict::Match);
    assert_eq!(event("confidence > 0.95"), Verdict::NoMatch);
}

#[test]
fn every_binding_is_bound() {
    assert_eq!(event(r#"subject == "ai.inference.eu""#), Verdict::Match);
    assert_eq!(event(r#"payload.user.tier == "gold""#), Verdict::Match);
    assert_eq!(event(r#"user.tier == "gold" && user.id == 7"#), Verdict::Match);
    assert_eq!(event(r#"headers["X-Trace"] == "abc""#), Verdict::Match);
    assert_eq!(event("ok"), Verdict::Match);
    assert_eq!(event("note == null"), Verdict::Match);
}

#[test]
fn header_names_are_found_in_the_spec_spelling() {
    assert_eq!(event(r#"headers["Semaq-Model"] == "llama3-70b""#), Verdict::Match);
    assert_eq!(event(r#"headers["semaq-model"] == "llama3-70b""#), Verdict::Match);
    assert_eq!(event(r#"has(headers.Missing)"#), Verdict::NoMatch);
}

#[test]
fn ints_and_doubles_compare() {
    assert_eq!(event("input_tokens == 1200.0"), Verdict::Match);
    assert_eq!(event("confidence < 1"), Verdict::Match);
    assert_eq!(event("latency_ms > 34.5 && latency_ms <= 35u"), Verdict::Match);
}

#[test]
fn lists_has_strings_and_arithmetic() {
    assert_eq!(event(r#"model_id in ["gpt-4", "llama3-70b"]"#), Verdict::Match);
    assert_eq!(event(r#""eu" in tags && !("us" in tags)"#), Verdict::Match);
    assert_eq!(event(r#""tier" in user"#), Verdict::Match);
    assert_eq!(event("has(payload.user) && !has(payload.missing) && has(user.tier)"), Verdict::Match);
    assert_eq!(
        event(r#"model_id.endsWith("70b") && model_id.contains("ama") && size(model_id) == 10"#),
        Verdict::Match
    );
    assert_eq!(event("size(tags) == 2 && tags.size() == 2 && tags[1] == 'eu'"), Verdict::Match);
    assert_eq!(
        event("input_tokens + output_tokens > 1000 && input_tokens % 7 == 3 && -latency_ms < 0"),
        Verdict::Match
    );
    assert_eq!(event("input_tokens / output_tokens == 15 && confidence * 2.0 > 1.8"), Verdict::Match);
    assert_eq!(event(r#"model_id + "!" == "llama3-70b!""#), Verdict::Match);
    assert_eq!(event("confidence > 0.9 ? input_tokens > 1000 : false"), Verdict::Match);
}

#[test]
fn the_interpreter_takes_what_is_not_native() {
    let filter = Filter::compile(r#"tags.exists(t, t == "eu") && model_id.matches("^llama")"#).expect("compiles");
    assert!(!filter.is_native());
    assert_eq!(event(r#"tags.exists(t, t == "eu") && model_id.matches("^llama")"#), Verdict::Match);
    assert_eq!(event("int(confidence * 100.0) == 92"), Verdict::Match);
    assert!(Filter::compile("confidence > 0.5").expect("compiles").is_native());
}

#[test]
fn missing_fields_and_non_json_payloads_do_not_match() {
    assert_eq!(event("temperature > 0.5"), Verdict::MissingField);
    assert_eq!(event("user.region == 'eu'"), Verdict::MissingField);
    assert_eq!(verdict("confidence > 0.5", "ai.x", None, "not json"), Verdict::NotJson);
    assert_eq!(verdict("confidence > 0.5", "ai.x", None, "[1, 2]"), Verdict::MissingField);
    assert_eq!(verdict("tags.exists(t, t == 1)", "ai.x", None, "{oops"), Verdict::NotJson);
}

#[test]
fn run_time_errors_do_not_match() {
    assert_eq!(event("input_tokens / 0 > 1"), Verdict::Error);
    assert_eq!(event("confidence + input_tokens > 1.0"), Verdict::Error, "no mixed arithmetic in CEL");
    assert_eq!(event("model_id > 3"), Verdict::Error);
    assert_eq!(event("confidence"), Verdict::Error, "a non-bool result");
    assert_eq!(event("9223372036854775807 + input_tokens > 0"), Verdict::Error, "overflow");
    assert_eq!(event("tags[5] == 'x'"), Verdict::Error);
}

#[test]
fn an_error_absorbed_by_the_other_side_of_a_logical_operator() {
    assert_eq!(event("missing > 1 || confidence > 0.5"), Verdict::Match);
    assert_eq!(event("confidence > 0.5 || missing > 1"), Verdict::Match);
    assert_eq!(event("missing > 1 && false"), Verdict::NoMatch);
    assert_eq!(event("!(missing > 1)"), Verdict::MissingField);
}

#[test]
fn filters_on_subject_and_headers_never_parse_the_payload() {
    let filter = Filter::compile(r#"subject.endsWith(".eu") && headers["Semaq-Priority"] == "0""#).expect("compiles");
    assert!(!filter.reads_payload());
    let message = Prepared::new("ai.inference.eu", Some(HEADERS.as_bytes()), b"not json at all");
    assert_eq!(filter.evaluate(&message), Verdict::Match);
    assert!(!message.payload_parsed());
}

#[test]
fn a_short_circuit_avoids_parsing_the_payload() {
    let filter = Filter::compile(r#"subject == "other" && confidence > 0.5"#).expect("compiles");
    let message = Prepared::new("ai.inference.eu", None, b"not json");
    assert_eq!(filter.evaluate(&message), Verdict::NoMatch);
    assert!(!message.payload_parsed());
}

/// `EVENT` as an Avro schema, registered in a fresh registry, and the event in the wire format.
fn avro_event_in_registry() -> (crate::registry::Registry, Vec<u8>) {
    use apache_avro::types::Value as Avro;
    let schema = r#"{"type": "record", "name": "Event", "fields": [
        {"name": "model_id", "type": "string"}, {"name": "confidence", "type": "double"},
        {"name": "input_tokens", "type": "long"}, {"name": "output_tokens", "type": "int"},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "user", "type": {"type": "record", "name": "User",
            "fields": [{"name": "tier", "type": "string"}, {"name": "id", "type": "int"}]}},
        {"name": "latency_ms", "type": "long"}, {"name": "ok", "type": "boolean"},
        {"name": "note", "type": ["null", "string"]}]}"#;
    let registry = crate::registry::Registry::in_memory();
    let request =
        crate::registry::types::SchemaRequest { schema: schema.into(), schema_type: None, references: vec![] };
    let id = registry.register("events", &request).expect("register");
    let string = |s: &str| Avro::String(s.into());
    let record = Avro::Record(vec![
        ("model_id".into(), string("llama3-70b")),
        ("confidence".into(), Avro::Double(0.92)),
        ("input_tokens".into(), Avro::Long(1200)),
        ("output_tokens".into(), Avro::Int(80)),
        ("tags".into(), Avro::Array(vec![string("prod"), string("eu")])),
        ("user".into(), Avro::Record(vec![("tier".into(), string("gold")), ("id".into(), Avro::Int(7))])),
        ("latency_ms".into(), Avro::Long(35)),
        ("ok".into(), Avro::Boolean(true)),
        ("note".into(), Avro::Union(0, Box::new(Avro::Null))),
    ]);
    let parsed = apache_avro::Schema::parse_str(schema).expect("schema");
    let body = apache_avro::to_avro_datum(&parsed, record).expect("encode");
    (registry, [&[0u8][..], &id.to_be_bytes(), &body].concat())
}

#[test]
fn filters_read_a_decoded_avro_record_as_they_read_the_same_record_in_json() {
    let (registry, binary) = avro_event_in_registry();
    let context = Context { registry: Some(&registry), ..Context::default() };
    let expressions = [
        "confidence > 0.85",
        r#"model_id == "llama3-70b" && confidence >= 0.9"#,
        r#"payload.user.tier == "gold" && user.id == 7"#,
        r#""eu" in tags && size(tags) == 2 && ok && note == null"#,
        "input_tokens + output_tokens > 1000 && latency_ms > 34.5",
        "temperature > 0.5",
        r#"tags.exists(t, t == "eu")"#,
        "input_tokens / 0 > 1",
    ];
    for expression in expressions {
        let filter = Filter::compile(expression).expect(expression);
        let from_json = filter.evaluate(&Prepared::new("ai.x", None, EVENT.as_bytes()));
        let from_avro = filter.evaluate(&Prepared::new("ai.x", None, &binary).with_context(context));
        assert_eq!(from_avro, from_json, "{expression}");
    }
}

#[test]
fn a_wire_format_payload_that_does_not_decode_is_its_own_non_match() {
    let (registry, binary) = avro_event_in_registry();
    let context = Context { registry: Some(&registry), ..Context::default() };
    let filter = Filter::compile("confidence > 0.5").expect("compiles");
    let truncated = &binary[..binary.len() - 3];
    assert_eq!(filter.evaluate(&Prepared::new("ai.x", None, truncated).with_context(context)), Verdict::Undecodable);
    assert_eq!(filter.evaluate(&Prepared::new("ai.x", None, &binary)), Verdict::NotJson, "no registry: not JSON");
    let mut unknown = binary.clone();
    unknown[4] ^= 0x40;
    assert_eq!(filter.evaluate(&Prepared::new("ai.x", None, &unknown).with_context(context)), Verdict::NotJson);
}

#[test]
fn ten_filters_share_one_parse_and_count_it() {
    let stats = super::FilterStats::default();
    let context = Context { stats: Some(&stats), ..Context::default() };
    let message = Prepared::new("ai.x", None, EVENT.as_bytes()).with_context(context);
    for i in 0..10 {
        Filter::compile(&format!("input_tokens > {i}")).expect("compiles").evaluate(&message);
    }
    assert_eq!(stats.snapshot().payload_parses, 1);
}

fn compile_error(expression: &str) -> (usize, usize, String) {
    let error = Filter::compile(expression).expect_err(expression);
    (error.line, error.column, error.reason)
}

#[test]
fn syntax_errors_name_their_position() {
    let (line, column, _) = compile_error("confidence > ");
    assert_eq!((line, column), (1, 14));
    let (line, column, _) = compile_error("a == 1 &&\n  b === 2");
    assert_eq!(line, 2);
    assert!(column >= 5, "column {column}");
    assert!(compile_error("").2.contains("empty"));
    assert!(compile_error(&"a".repeat(5000)).2.contains("longer than"));
}

#[test]
fn type_errors_and_unknown_functions_are_refused_with_positions() {
    assert_eq!(compile_error("1 + 2"), (1, 3, "a filter must be a bool, this is a int".into()));
    let (line, column, reason) = compile_error(r#"confidence > 0.5 && subject > 3"#);
    assert_eq!((line, column), (1, 29));
    assert!(reason.contains("no matching overload for '>' applied to (string, int)"), "{reason}");
    let (_, column, reason) = compile_error("frobnicate(confidence)");
    assert_eq!(column, 11);
    assert!(reason.contains("unknown function 'frobnicate'"), "{reason}");
    assert!(compile_error(r#"subject.size() + "a" == 1"#).2.contains("'+'"));
    assert!(compile_error("!subject").2.contains("bool"));
    assert!(compile_error("model_id.contains(1)").2.contains("'contains'"));
    assert!(compile_error("[1, 2]").2.contains("list"));
    assert!(compile_error("tags.all(t, tags.exists(u, u == t))").2.contains("nested"));
    let (line, column, reason) = compile_error(r#"confidence > 0.5 && model_id.matches("(llama")"#);
    assert_eq!((line, column), (1, 37));
    assert!(reason.contains("'(llama' is not a valid regex: error: unclosed group"), "{reason}");
    assert!(compile_error(r#"subject.matches(1)"#).2.contains("'matches'"));
    assert!(compile_error(r#"model_id.matches("a{1000}{1000}")"#).2.contains("size limit"));
}

#[test]
fn matches_with_a_literal_pattern_is_native() {
    assert!(Filter::compile(r#"model_id.matches("^llama")"#).expect("compiles").is_native());
    assert!(Filter::compile(r#"matches(model_id, "^llama")"#).expect("compiles").is_native());
    assert!(!Filter::compile(r#"model_id.matches(user.tier)"#).expect("compiles").is_native(), "computed pattern");
    assert_eq!(event(r#"model_id.matches("^llama[0-9]+-[0-9]+b$")"#), Verdict::Match);
    assert_eq!(event(r#"model_id.matches("gpt")"#), Verdict::NoMatch);
    assert_eq!(event(r#"input_tokens.matches("12")"#), Verdict::Error, "not a string");
}

/// Expressions × payloads, evaluated natively and by the interpreter: the verdicts agree.
#[test]
fn native_and_interpreted_agree_on_a_table() {
    let expressions = [
        "confidence > 0.85",
        "confidence >= 1",
        "input_tokens == 1200.0",
        "input_tokens != 1200u",
        r#"model_id == "llama3-70b" && confidence >= 0.9"#,
        r#"model_id in ["a", "llama3-70b"] || confidence < 0.1"#,
        r#""eu" in tags"#,
        r#""tier" in user"#,
        "has(payload.user) && has(user.id)",
        "size(tags) > 1 && size(model_id) == 10",
        "input_tokens + output_tokens > 1000",
        "input_tokens / output_tokens == 15",
        "input_tokens / 0 == 1",
        "confidence * 2.0 > 1.8",
        "confidence + 1 > 1.0",
        "missing > 1 || confidence > 0.5",
        "missing > 1 && false",
        "!(missing > 1)",
        "confidence > 0.5 || missing",
        "ok && !ok",
        "note == null",
        "model_id > 3",
        "-latency_ms < -30",
        "tags[0] == 'prod'",
        "tags[9] == 'prod'",
        "user.tier.startsWith('go')",
        "confidence ? true : false",
        "confidence > 0.5 ? ok : missing",
        "payload.model_id == model_id",
        "tags == ['prod', 'eu']",
        "user == {'tier': 'gold', 'id': 7}",
        r#"headers["Semaq-Priority"] == "0" && subject.startsWith("ai.")"#,
        "size(headers) > 0",
        "latency_ms > 1e2",
        "input_tokens % 7 == 3",
        "big > 1",
        "big == 18446744073709551615u",
        "neg < 0 && neg < 1u",
        r#"model_id.matches("^llama[0-9]-")"#,
        r#"matches(user.tier, "^g.l") && !subject.matches("us$")"#,
        r#"confidence.matches("1")"#,
    ];
    let payloads = [
        EVENT,
        r#"{"model_id":"gpt-4","confidence":0.2,"input_tokens":5,"output_tokens":0,"tags":[],"user":{},"latency_ms":3.5}"#,
        r#"{"confidence":"high","input_tokens":null,"tags":"eu","ok":1}"#,
        r#"{"big":18446744073709551615,"neg":-5}"#,
        "not json",
        "[1,2,3]",
        "{}",
    ];
    for expression in expressions {
        let filter = Filter::compile(expression).unwrap_or_else(|e| panic!("{expression}: {e}"));
        for payload in payloads {
            let message = Prepared::new("ai.inference.eu", Some(HEADERS.as_bytes()), payload.as_bytes());
            let native = filter.evaluate(&message);
            let interpreted = filter.evaluate_interpreted(&message).expect("compiles for the interpreter");
            assert_eq!(native.matched(), interpreted.matched(), "{expression} on {payload}");
            assert_eq!(native == Verdict::NoMatch, interpreted == Verdict::NoMatch, "{expression} on {payload}");
        }
    }
}

fn json_scalar() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|i| i.to_string()),
        any::<u64>().prop_map(|u| u.to_string()),
        (-1e6f64..1e6).prop_map(|d| format!("{d:?}")),
        "[a-c]{0,3}".prop_map(|s| format!("\"{s}\"")),
        any::<bool>().prop_map(|b| b.to_string()),
        Just("null".to_string()),
    ]
}

fn operand() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("a".to_string()),
        Just("b".to_string()),
        Just("missing".to_string()),
        json_scalar(),
        Just("size(s)".to_string()),
    ]
}

fn expression() -> impl Strategy<Value = String> {
    let op = prop_oneof![
        Just("=="),
        Just("!="),
        Just("<"),
        Just("<="),
        Just(">"),
        Just(">="),
        Just("+"),
        Just("-"),
        Just("*"),
        Just("/"),
        Just("%"),
        Just("&&"),
        Just("||"),
    ];
    let leaf = (operand(), op, operand()).prop_map(|(x, op, y)| format!("({x} {op} {y})"));
    leaf.prop_recursive(3, 16, 2, |inner| {
        prop_oneof![
            (inner.clone(), prop_oneof![Just("&&"), Just("||"), Just("=="), Just("!=")], inner.clone())
                .prop_map(|(x, op, y)| format!("({x} {op} {y})")),
            inner.clone().prop_map(|x| format!("!{x}")),
            (inner.clone(), inner.clone(), inner).prop_map(|(c, x, y)| format!("({c} ? {x} : {y})")),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]
    /// Random expressions over random payloads: wherever an expression compiles natively, both
    /// evaluators give the same verdict class (match / false / failure).
    #[test]
    fn native_and_interpreted_agree(expr in expression(), a in json_scalar(), b in json_scalar(), s in "[a-z]{0,4}") {
        let Ok(filter) = Filter::compile(&expr) else { return Ok(()) };
        let payload = format!(r#"{{"a":{a},"b":{b},"s":"{s}"}}"#);
        let message = Prepared::new("ai.x", None, payload.as_bytes());
        let native = filter.evaluate(&message);
        let interpreted = filter.evaluate_interpreted(&message).expect("compiles");
        prop_assert_eq!(native.matched(), interpreted.matched(), "{} on {}", expr, payload);
        prop_assert_eq!(native == Verdict::NoMatch, interpreted == Verdict::NoMatch, "{} on {}", expr, payload);
    }
}
