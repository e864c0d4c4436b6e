//! The config file format as a specification: whole files in, options, warnings and errors out.

use std::path::PathBuf;
use std::time::Duration;

use super::*;
use crate::limits;
use crate::mappings::{MapDest, SubjectMapping};
use crate::options::{Account, AccountJetStream, Permissions, ResponsePermission, SubjectPermission, TlsOptions, User};

fn env(name: &str) -> Option<String> {
    match name {
        "SEMAQ_TEST_PORT" => Some("4333".to_string()),
        "SEMAQ_TEST_TOKEN" => Some("from-env".to_string()),
        _ => None,
    }
}

fn read_text(text: &str, options: &mut Options) -> Result<LoadReport, ConfigError> {
    read(text, None, Path::new(""), options, &env)
}

/// Options and warnings from config text applied to the defaults.
fn load_text(text: &str) -> (Options, Vec<String>) {
    let mut options = Options::default();
    match read_text(text, &mut options) {
        Ok(report) => (options, report.warnings),
        Err(error) => panic!("config should load: {error}\n{text}"),
    }
}

fn loaded(text: &str) -> Options {
    load_text(text).0
}

fn error(text: &str) -> String {
    let mut options = Options::default();
    match read_text(text, &mut options) {
        Ok(report) => panic!("config should fail, got {report:?}\n{text}"),
        Err(error) => error.to_string(),
    }
}

fn user(name: &str, password: &str) -> User {
    User { username: name.to_string(), password: password.to_string(), permissions: None }
}

fn allow(subjects: &[&str]) -> Option<SubjectPermission> {
    Some(SubjectPermission { allow: subjects.iter().map(|s| s.to_string()).collect(), deny: Vec::new() })
}

const REALISTIC: &str = r#"
# SemaQ standing in for nats-server.
server_name: "hub-1"
listen: 0.0.0.0:4222
http: 127.0.0.1:8222

max_payload: 2MB
max_pending: 128MB
max_control_line: 8KB
max_connections: 10000
max_subscriptions: 5000
ping_interval: "30s"
ping_max: 3
write_deadline = "5s"

debug: false
trace: false
log_file: "/var/log/semaq.log"
pid_file: '/var/run/semaq.pid'
ports_file_dir: /var/run

ADMIN_PASS: "s3cret"

authorization {
  timeout: 3
  users = [
    {user: admin, password: $ADMIN_PASS}
    {user: client, password: "c-pass", permissions: {
      publish: ["orders.>", "_INBOX.>"]
      subscribe: {allow: ["orders.*", "_INBOX.>"], deny: "orders.secret"}
    }}
    {user: reader, password: r, permissions: {subscribe: "public.>"}}
  ]
}

tls {
  cert_file: "./certs/server.pem"
  key_file: "./certs/server-key.pem"
  ca_file: "./certs/ca.pem"
  verify: true
  timeout: 5
}

jetstream {
  store_dir: "/data/semaq"
  max_mem_store: 1GB
  max_file_store: "10G"
  domain: hub
}

accounts {
  TEAM_A {
    users: [ {user: alice, password: a} ]
    jetstream: enabled
  }
  TEAM_B {
    users: [ {user: bob, password: b} ]
    jetstream {
      max_mem: 512MB
      max_file: 1GB
      max_streams: 10
      max_consumers: -1
    }
  }
}

no_auth_user: reader
"#;

#[test]
fn a_realistic_nats_server_config() {
    let (options, warnings) = load_text(REALISTIC);
    assert_eq!(warnings, Vec::<String>::new());
    assert_eq!(options.server_name.as_deref(), Some("hub-1"));
    assert_eq!((options.host.as_str(), options.port), ("0.0.0.0", 4222));
    assert_eq!((options.http_host.as_str(), options.http_port), ("127.0.0.1", Some(8222)));
    assert_eq!(options.payload_bytes_max, 2 << 20);
    assert_eq!(options.pending_bytes_max, 128 << 20);
    assert_eq!(options.control_line_bytes_max, 8 << 10);
    assert_eq!(options.connections_max, 10000);
    assert_eq!(options.subscriptions_per_connection_max, 5000);
    assert_eq!(options.ping_interval, Duration::from_secs(30));
    assert_eq!(options.pings_outstanding_max, 3);
    assert_eq!(options.write_deadline, Duration::from_secs(5));
    assert!(!options.debug && !options.trace);
    assert_eq!(options.log_file, Some(PathBuf::from("/var/log/semaq.log")));
    assert_eq!(options.pid_file, Some(PathBuf::from("/var/run/semaq.pid")));
    assert_eq!(options.ports_file_dir, Some(PathBuf::from("/var/run")));
    assert_eq!(options.auth_timeout, Duration::from_secs(3));
    assert_eq!(options.auth.token, None);
    assert_eq!(options.auth.no_auth_user.as_deref(), Some("reader"));
    assert_eq!(
        options.auth.users,
        vec![
            user("admin", "s3cret"),
            User {
                permissions: Some(Permissions {
                    publish: allow(&["orders.>", "_INBOX.>"]),
                    subscribe: Some(SubjectPermission {
                        allow: vec!["orders.*".to_string(), "_INBOX.>".to_string()],
                        deny: vec!["orders.secret".to_string()],
                    }),
                    responses: None,
                }),
                ..user("client", "c-pass")
            },
            User {
                permissions: Some(Permissions { publish: None, subscribe: allow(&["public.>"]), responses: None }),
                ..user("reader", "r")
            },
        ]
    );
    assert_eq!(
        options.tls,
        Some(TlsOptions {
            cert_file: PathBuf::from("./certs/server.pem"),
            key_file: PathBuf::from("./certs/server-key.pem"),
            ca_file: Some(PathBuf::from("./certs/ca.pem")),
            verify: true,
            map: false,
            timeout: Duration::from_secs(5),
        })
    );
    assert!(options.jetstream);
    assert_eq!(options.store_dir, PathBuf::from("/data/semaq"));
    assert_eq!(options.jetstream_memory_bytes_max, Some(1 << 30));
    assert_eq!(options.jetstream_file_bytes_max, Some(10 << 30));
    assert_eq!(options.jetstream_domain.as_deref(), Some("hub"));
    assert_eq!(
        options.accounts,
        vec![
            Account {
                name: "TEAM_A".to_string(),
                users: vec![user("alice", "a")],
                jetstream: Some(AccountJetStream::default()),
                nkeys: Vec::new(),
                ..Account::default()
            },
            Account {
                name: "TEAM_B".to_string(),
                users: vec![user("bob", "b")],
                jetstream: Some(AccountJetStream {
                    memory_bytes_max: Some(512 << 20),
                    file_bytes_max: Some(1 << 30),
                    streams_max: Some(10),
                    consumers_max: None,
                    ..AccountJetStream::default()
                }),
                nkeys: Vec::new(),
                ..Account::default()
            },
        ]
    );
}

#[test]
fn an_empty_file_changes_nothing() {
    assert_eq!(loaded(""), Options::default());
    assert_eq!(loaded("# only a comment\n\n"), Options::default());
}

#[test]
fn keys_are_case_insensitive() {
    let options =
        loaded("PORT: 4333\nDebug: true\nJetStream { Store_Dir: /x }\nAuthorization { USER: a, Password: b }\n");
    assert_eq!(options.port, 4333);
    assert!(options.debug);
    assert_eq!(options.store_dir, PathBuf::from("/x"));
    assert_eq!(options.auth.users, vec![user("a", "b")]);
}

#[test]
fn listen_forms() {
    let cases = [
        ("listen: 127.0.0.2:4333", "127.0.0.2", 4333),
        ("listen: \":4333\"", "0.0.0.0", 4333),
        ("listen: \"[::1]:4333\"", "::1", 4333),
        ("listen: localhost:4333", "localhost", 4333),
        ("listen: 4333", "127.0.0.1", 4333),
        ("listen: \"0.0.0.0:-1\"", "0.0.0.0", 0),
        ("host: 10.0.0.1\nport: 4333", "10.0.0.1", 4333),
        ("net: 10.0.0.1\nport: -1", "10.0.0.1", 0),
        ("port: 0", "127.0.0.1", 4222),
    ];
    for (text, host, port) in cases {
        let options = loaded(text);
        assert_eq!((options.host.as_str(), options.port), (host, port), "{text}");
    }
}

#[test]
fn monitoring_forms() {
    let cases = [
        ("http: 8333", "127.0.0.1", Some(8333)),
        ("http: 0.0.0.0:8333", "0.0.0.0", Some(8333)),
        ("http_port: 8333", "127.0.0.1", Some(8333)),
        ("monitor_port: -1", "127.0.0.1", Some(0)),
        ("http_port: 0", "127.0.0.1", None),
        ("http_host: 10.0.0.1\nhttp_port: 8333", "10.0.0.1", Some(8333)),
    ];
    for (text, host, port) in cases {
        let options = loaded(text);
        assert_eq!((options.http_host.as_str(), options.http_port), (host, port), "{text}");
    }
}

#[test]
fn the_report_says_which_listener_settings_were_given() {
    let given = |text: &str| read_text(text, &mut Options::default()).map(|report| report.given).ok();
    assert_eq!(given(""), Some(Given::default()));
    assert_eq!(given("port: 1"), Some(Given { port: true, ..Given::default() }));
    assert_eq!(given("listen: 1"), Some(Given { port: true, ..Given::default() }));
    assert_eq!(given("listen: \"h:1\""), Some(Given { host: true, port: true, ..Given::default() }));
    assert_eq!(given("http: 1"), Some(Given { http_port: true, ..Given::default() }));
    assert_eq!(given("http: \"h:1\""), Some(Given { http_host: true, http_port: true, ..Given::default() }));
    assert_eq!(given("monitor_port: 1"), Some(Given { http_port: true, ..Given::default() }));
}

#[test]
fn size_suffixes_follow_nats_server() {
    let payload = |text: &str| loaded(&format!("max_pending: 1GB\nmax_payload: {text}")).payload_bytes_max;
    assert_eq!(payload("1024"), 1024);
    assert_eq!(payload("1k"), 1000);
    assert_eq!(payload("1K"), 1000);
    assert_eq!(payload("1KB"), 1024);
    assert_eq!(payload("1kib"), 1024);
    assert_eq!(payload("64MB"), 64 << 20);
    assert_eq!(payload("64MiB"), 64 << 20);
    assert_eq!(payload("2m"), 2_000_000);
    assert_eq!(payload("\"1M\""), 1 << 20, "a lone letter in a string is binary (nats-server's getStorageSize)");
    assert_eq!(payload("\"8MB\""), 8 << 20);
    assert_eq!(loaded("max_pending: 1GB").pending_bytes_max, 1 << 30);
    assert_eq!(loaded("max_pending: 1g").pending_bytes_max, 1_000_000_000);
}

#[test]
fn zero_limits_mean_the_defaults() {
    let options = loaded("max_payload: 0\nmax_pending: 0\nmax_control_line: 0\nmax_subs: 0\nping_max: 0\nping_interval: 0\nwrite_deadline: \"0\"\n");
    assert_eq!(options.payload_bytes_max, limits::PAYLOAD_BYTES_MAX);
    assert_eq!(options.pending_bytes_max, limits::PENDING_BYTES_MAX);
    assert_eq!(options.control_line_bytes_max, limits::CONTROL_LINE_BYTES_MAX);
    assert_eq!(options.subscriptions_per_connection_max, limits::SUBSCRIPTIONS_PER_CONNECTION_MAX);
    assert_eq!(options.pings_outstanding_max, limits::PINGS_OUTSTANDING_MAX);
    assert_eq!(options.ping_interval, limits::PING_INTERVAL);
    assert_eq!(options.write_deadline, limits::WRITE_DEADLINE);
}

#[test]
fn max_connections_zero_refuses_everyone_with_a_warning() {
    let (options, warnings) = load_text("max_connections: 0");
    assert_eq!(options.connections_max, 0);
    assert_eq!(warnings, ["max_connections: 0 at line 1 refuses every client connection (as in nats-server)"]);
}

#[test]
fn durations_as_strings_or_seconds() {
    let ping = |text: &str| loaded(&format!("ping_interval: {text}")).ping_interval;
    assert_eq!(ping("\"2s\""), Duration::from_secs(2));
    assert_eq!(ping("\"300ms\""), Duration::from_millis(300));
    assert_eq!(ping("\"1m\""), Duration::from_secs(60));
    assert_eq!(ping("\"2h\""), Duration::from_secs(7200));
    assert_eq!(ping("\"1m30s\""), Duration::from_secs(90));
    assert_eq!(ping("2s"), Duration::from_secs(2), "bare 2s is a string to the parser");
    assert_eq!(ping("45"), Duration::from_secs(45));
    assert_eq!(ping("1.5"), Duration::from_millis(1500));
    assert_eq!(loaded("authorization { timeout: 0.5 }").auth_timeout, Duration::from_millis(500));
    assert_eq!(loaded("authorization { timeout: \"4s\" }").auth_timeout, Duration::from_secs(4));
}

#[test]
fn an_unquoted_minute_is_ambiguous() {
    assert_eq!(
        error("ping_interval: 1m"),
        "line 1, column 16: ambiguous value 1m for \"ping_interval\": unquoted it is the number 1000000 (size suffix), not a duration; write \"1m\""
    );
}

#[test]
fn bad_durations() {
    assert!(error("write_deadline: \"soon\"").contains("expected a duration"));
    assert!(error("write_deadline: -1").contains("cannot be negative"));
    assert!(error("write_deadline: [1]").contains("expected a duration"));
}

#[test]
fn a_tracing_block_sets_the_sample_ratio() {
    assert_eq!(loaded("tracing { sample_ratio: 0.01 }").trace_sample_ratio, Some(0.01));
    assert_eq!(loaded("tracing { sample_ratio: 1 }").trace_sample_ratio, Some(1.0));
    assert_eq!(loaded("port: 1").trace_sample_ratio, None);
    assert!(error("tracing { sample_ratio: 2 }").contains("must be 0 to 1"));
    assert!(error("tracing { sample_ratio: \"often\" }").contains("a number from 0 to 1"));
}

#[test]
fn wrong_types_are_errors_with_line_and_column() {
    assert_eq!(
        error("debug: true\nport: \"abc\"\n"),
        "line 2, column 7: expected an integer for \"port\", found the string \"abc\""
    );
    assert_eq!(error("debug: 1"), "line 1, column 8: expected true or false for \"debug\", found the number 1");
    assert_eq!(error("server_name: [a]"), "line 1, column 14: expected a string for \"server_name\", found an array");
    assert_eq!(error("tls: true"), "line 1, column 6: expected a block { ... } for \"tls\", found the boolean true");
    assert_eq!(
        error("authorization {\n  users: [ {user: a, password: 123} ]\n}"),
        "line 2, column 32: expected a string for \"authorization.users.password\", found the number 123"
    );
}

#[test]
fn values_out_of_range_are_errors() {
    assert_eq!(
        error("port: 65536"),
        "line 1, column 7: invalid port 65536 for \"port\": expected a port between 1 and 65535, or -1 for a random free port"
    );
    assert!(error("http_port: 70000").contains("invalid port 70000"));
    assert!(error("listen: \"h:99999\"").contains("invalid port 99999"));
    assert!(error("listen: \"nope\"").contains("expected \"host:port\" or a port"));
    assert!(error("max_payload: 4GB").contains("too large"));
    assert!(error("max_payload: -5").contains("cannot be negative"));
    assert!(error("max_connections: -2").contains("cannot be negative"));
    assert!(error("ping_max: 5000000000").contains("too large"));
    assert!(error("max_pending: 1MB\nmax_payload: 2MB")
        .contains("max_payload (2097152) cannot be larger than max_pending (1048576)"));
    assert!(error("server_name: \"has space\"").contains("cannot contain spaces"));
}

#[test]
fn unknown_keys_are_warnings_naming_key_and_line() {
    let (options, warnings) =
        load_text("port: 4333\nfoo: 1\ntls_x { a: 1 }\njetstream { frob: 2 }\ncluster { port: 6222 }\n");
    assert_eq!(options.port, 4333);
    assert_eq!(
        warnings,
        [
            "unknown config key \"foo\" at line 2, ignored",
            "unknown config key \"tls_x\" at line 3, ignored",
            "unknown config key \"jetstream.frob\" at line 4, ignored",
            "config key \"cluster\" at line 5 is a nats-server feature SemaQ does not support, ignored",
        ]
    );
}

#[test]
fn unknown_keys_in_users_and_accounts_are_warnings() {
    let (_, warnings) = load_text(
        "authorization { users: [{user: a, password: b, allowed_connection_types: [STANDARD]}] }\n\
         accounts { A { colour: red } }\n",
    );
    assert_eq!(
        warnings,
        [
            "unknown config key \"authorization.users.allowed_connection_types\" at line 1, ignored",
            "unknown config key \"accounts.A.colour\" at line 2, ignored",
        ]
    );
}

#[test]
fn keys_used_as_variables_draw_no_warning() {
    let (options, warnings) = load_text("PORT: 4333\nUNUSED: 1\nport: $PORT\n");
    assert_eq!(options.port, 4333);
    assert_eq!(warnings, ["unknown config key \"UNUSED\" at line 2, ignored"]);
}

#[test]
fn variables_from_the_file_and_the_environment() {
    let options = loaded("pass: hunter2\nport: $SEMAQ_TEST_PORT\nauthorization { user: u, password: $pass }\n");
    assert_eq!(options.port, 4333, "an environment value is typed like a config value");
    assert_eq!(options.auth.users, vec![user("u", "hunter2")]);
    assert_eq!(loaded("authorization { token: $SEMAQ_TEST_TOKEN }").auth.token.as_deref(), Some("from-env"));
}

#[test]
fn an_undefined_variable_is_an_error_at_its_reference() {
    assert_eq!(
        error("port: 1\nhost: $NOWHERE\n"),
        "line 2, column 7: variable $NOWHERE is defined neither earlier in the file nor in the environment"
    );
}

#[test]
fn a_variable_keeps_its_type_for_checking() {
    assert_eq!(
        error("P: \"x\"\nport: $P\n"),
        "line 2, column 7: expected an integer for \"port\", found the string \"x\""
    );
}

#[test]
fn syntax_errors_name_line_and_column() {
    assert_eq!(
        error("port: 4222\ntls {\n  cert_file: \"a\"\n"),
        "line 4, column 1: unexpected end of file: the block opened at line 2 is never closed with '}'"
    );
    assert_eq!(
        error("port 4222 4333"),
        "line 1, column 11: expected a new line, ';' or ',' after the value, found '4'"
    );
}

#[test]
fn a_failed_load_leaves_the_options_untouched() {
    let mut options = Options::default();
    assert!(read_text("port: 4333\ndebug: true\nhost: 1\n", &mut options).is_err());
    assert_eq!(options, Options::default());
}

#[test]
fn authorization_single_user_token_and_conflicts() {
    assert_eq!(loaded("authorization { user: a, password: b }").auth.users, vec![user("a", "b")]);
    assert_eq!(loaded("authorization { token: t }").auth.token.as_deref(), Some("t"));
    assert!(error("authorization { user: a, password: b, token: t }").contains("both a user and a token"));
    assert!(error("authorization { user: a, users: [] }").contains("single user and a users array"));
    assert!(error("authorization { token: t, users: [] }").contains("token and a users array"));
    assert!(error("authorization { password: p }").contains("password but no user"));
    let variable = loaded("authorization {\n  PASS: secret\n  users: [ {user: a, password: $PASS} ]\n}");
    assert_eq!(variable.auth.users, vec![user("a", "secret")], "PASS used as $PASS is a variable");
    assert!(error("authorization { users: [ {password: p} ] }").contains("needs a user name"));
    assert!(error("authorization { users: [ {nkey: UABC} ] }").contains("not a valid public nkey for a user"));
    assert!(error("authorization { users: {user: a} }").contains("expected an array of users"));
}

#[test]
fn default_permissions_fill_users_without_their_own() {
    let options = loaded(
        "authorization {\n  permissions: { publish: \"a.>\" }\n  users: [\n    {user: x, password: x}\n    {user: y, password: y, permissions: {publish: \"b\"}}\n  ]\n}\n",
    );
    let publish: Vec<_> = options.auth.users.iter().map(|u| u.permissions.clone().and_then(|p| p.publish)).collect();
    assert_eq!(publish, [allow(&["a.>"]), allow(&["b"])]);
}

#[test]
fn permission_forms() {
    let permissions = |text: &str| {
        let config = format!("authorization {{ users: [ {{user: u, password: p, permissions: {text}}} ] }}");
        loaded(&config).auth.users[0].permissions.clone()
    };
    assert_eq!(
        permissions("{publish: \"a.b\", subscribe: [\"c.*\", \"d.> workers\"]}"),
        Some(Permissions { publish: allow(&["a.b"]), subscribe: allow(&["c.*", "d.> workers"]), responses: None })
    );
    assert_eq!(
        permissions("{pub: {deny: [\"x.>\"]}, sub: {}}"),
        Some(Permissions {
            publish: Some(SubjectPermission { allow: Vec::new(), deny: vec!["x.>".to_string()] }),
            subscribe: None,
            responses: None,
        })
    );
}

#[test]
fn permission_mistakes_are_errors_not_warnings() {
    let with = |text: &str| format!("authorization {{ users: [ {{user: u, password: p, permissions: {text}}} ] }}");
    assert!(error(&with("{publsh: \"a\"}")).contains("unknown key \"publsh\""));
    assert!(error(&with("{publish: {allow: \"a\", dney: \"b\"}}")).contains("unknown key \"dney\""));
    assert!(error(&with("{publish: \"a..b\"}")).contains("invalid subject \"a..b\""));
    assert!(error(&with("{publish: \"a q\"}")).contains("invalid subject"), "queues only in subscribe");
    assert!(error(&with("{publish: 5}")).contains("expected a subject or an array of subjects"));
}

fn responses_of(permissions: &str) -> Option<ResponsePermission> {
    let text = format!("authorization {{ users: [ {{user: u, password: p, permissions: {permissions}}} ] }}");
    let (options, warnings) = load_text(&text);
    assert!(warnings.is_empty(), "{warnings:?}");
    options.auth.users[0].permissions.as_ref().and_then(|p| p.responses)
}

#[test]
fn allow_responses_true_takes_one_reply_within_two_minutes() {
    let default = ResponsePermission { msgs_max: Some(1), expires: Some(Duration::from_secs(120)) };
    assert_eq!(responses_of("{allow_responses: true}"), Some(default));
    assert_eq!(responses_of("{allow_responses: false}"), None);
    assert_eq!(responses_of("{allow_responses: {max: 0, expires: \"0s\"}}"), Some(default), "0 keeps the default");
}

#[test]
fn allow_responses_block_sets_max_and_expires_and_negative_means_unbounded() {
    let given = responses_of("{allow_responses: {max: 5, expires: \"1m30s\"}}");
    assert_eq!(given, Some(ResponsePermission { msgs_max: Some(5), expires: Some(Duration::from_secs(90)) }));
    let unbounded = responses_of("{publish_allow_responses: {max_msgs: -1, ttl: \"-1s\"}}");
    assert_eq!(unbounded, Some(ResponsePermission { msgs_max: None, expires: None }));
}

#[test]
fn allow_responses_mistakes_are_errors() {
    let with = |text: &str| format!("authorization {{ users: [ {{user: u, password: p, permissions: {text}}} ] }}");
    assert!(error(&with("{allow_responses: 5}")).contains("true, false or a block"));
    assert!(error(&with("{allow_responses: {expires: 60}}")).contains("duration string"));
    assert!(error(&with("{allow_responses: {expires: \"soon\"}}")).contains("expected a duration"));
    assert!(error(&with("{allow_responses: {maxx: 2}}")).contains("unknown key \"maxx\""));
}

#[test]
fn users_must_be_unique_and_no_auth_user_must_exist() {
    let duplicated =
        "authorization { users: [ {user: a, password: x} ] }\naccounts { B { users: [ {user: a, password: y} ] } }";
    assert_eq!(error(duplicated), "line 2, column 25: user \"a\" is defined twice (first at line 1)");
    assert_eq!(
        error("no_auth_user: ghost\nauthorization { user: a, password: b }"),
        "line 1, column 15: no_auth_user \"ghost\" is not a user defined in authorization or accounts"
    );
    assert_eq!(
        loaded("accounts { A { users: [{user: a, password: b}] } }\nno_auth_user: a").auth.no_auth_user.as_deref(),
        Some("a")
    );
}

#[test]
fn tls_block() {
    let options = loaded("tls { cert_file: c.pem, key_file: k.pem }");
    assert_eq!(
        options.tls,
        Some(TlsOptions {
            cert_file: PathBuf::from("c.pem"),
            key_file: PathBuf::from("k.pem"),
            ca_file: None,
            verify: false,
            map: false,
            timeout: limits::TLS_HANDSHAKE_TIMEOUT,
        })
    );
    assert_eq!(error("tls {\n  cert_file: c.pem\n}"), "line 1, column 5: tls needs both cert_file and key_file");
    let timed = loaded("tls { cert_file: c, key_file: k, timeout: \"500ms\" }");
    assert_eq!(timed.tls.map(|tls| tls.timeout), Some(Duration::from_millis(500)));
}

#[test]
fn tls_verify_and_map_verifies_and_maps_without_a_warning() {
    let (options, warnings) = load_text("tls { cert_file: c, key_file: k, verify_and_map: true }");
    assert_eq!(options.tls.map(|tls| (tls.verify, tls.map)), Some((true, true)));
    assert_eq!(warnings, Vec::<String>::new());
    let (options, _) = load_text("websocket { port: -1, tls { cert_file: c, key_file: k, verify_and_map: true } }");
    let ws_tls = options.websocket.and_then(|ws| ws.tls);
    assert_eq!(ws_tls.map(|tls| (tls.verify, tls.map)), Some((true, true)));
}

#[test]
fn jetstream_forms() {
    assert!(!loaded("jetstream: false").jetstream);
    assert!(loaded("jetstream: true").jetstream);
    assert!(!loaded("jetstream: disabled").jetstream);
    assert!(loaded("jetstream: enabled").jetstream);
    assert!(!loaded("jetstream: off").jetstream);
    assert!(loaded("jetstream: false\njetstream {}").jetstream, "a block enables");
    assert!(!loaded("jetstream { enabled: false, store_dir: /x }").jetstream);
    assert_eq!(loaded("jetstream { max_mem: -1 }").jetstream_memory_bytes_max, None);
    assert_eq!(loaded("jetstream { max_memory_store: 1MB }").jetstream_memory_bytes_max, Some(1 << 20));
    assert_eq!(loaded("store_dir: /top").store_dir, PathBuf::from("/top"));
    assert!(error("jetstream: maybe").contains("expected \"enabled\" or \"disabled\""));
    assert!(error("jetstream: 1").contains("expected a boolean"));
    assert!(error("store_dir: /a\njetstream { store_dir: /b }").contains("store_dir is set twice (first at line 1)"));
}

#[test]
fn accounts_forms() {
    let names: Vec<_> = loaded("accounts: [A, B]").accounts.into_iter().map(|a| a.name).collect();
    assert_eq!(names, ["A", "B"]);
    assert!(error("accounts: [A, A]").contains("listed twice"));
    assert!(error("accounts { A: 1 }").contains("expected a block"));
    let account = &loaded("accounts { A { jetstream: false } }").accounts[0];
    assert_eq!(account.jetstream, None);
    let account = &loaded("accounts { A { jetstream: true } }").accounts[0];
    assert_eq!(account.jetstream, Some(AccountJetStream::default()));
    let account = &loaded(
        "accounts { A {\n  default_permissions: { subscribe: \"a.>\" }\n  users: [{user: a, password: b}]\n} }",
    )
    .accounts[0];
    assert_eq!(account.users[0].permissions.as_ref().and_then(|p| p.subscribe.clone()), allow(&["a.>"]));
}

#[test]
fn variables_defined_in_accounts_are_not_accounts() {
    let options = loaded("accounts {\n  PW: secret\n  A { users: [{user: a, password: $PW}] }\n}");
    assert_eq!(options.accounts.len(), 1);
    assert_eq!(options.accounts[0].users, vec![user("a", "secret")]);
}

mod files {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("create dir");
        }
        std::fs::write(&path, text).expect("write");
        path
    }

    #[test]
    fn load_reads_a_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = write(dir.path(), "server.conf", "port: 4333\nodd: 1\n");
        let mut options = Options::default();
        let warnings = load(&path, &mut options).expect("loads");
        assert_eq!(options.port, 4333);
        assert_eq!(warnings, ["unknown config key \"odd\" at line 2, ignored"]);
    }

    #[test]
    fn load_errors_name_the_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = write(dir.path(), "server.conf", "port: x\n");
        let message = load(&path, &mut Options::default()).expect_err("fails").to_string();
        assert_eq!(
            message,
            format!("{}: line 1, column 7: expected an integer for \"port\", found the string \"x\"", path.display())
        );
        let missing = dir.path().join("missing.conf");
        assert!(matches!(load(&missing, &mut Options::default()), Err(ConfigError::Read { .. })));
    }

    #[test]
    fn includes_are_relative_to_the_including_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        write(dir.path(), "conf/auth/users.conf", "authorization { user: a, password: $PW }\n");
        write(dir.path(), "conf/auth.conf", "PW: secret\ninclude 'auth/users.conf'\n");
        let main = write(dir.path(), "conf/main.conf", "port: 4333\ninclude auth.conf\ndebug: true\n");
        let mut options = Options::default();
        let warnings = load(&main, &mut options);
        // An included file is parsed on its own, so it cannot see the includer's variables.
        assert!(matches!(warnings, Err(ConfigError::UndefinedVariable { ref name, .. }) if name == "PW"));
        write(dir.path(), "conf/auth/users.conf", "PW2: secret\nauthorization { user: a, password: $PW2 }\n");
        let warnings = load(&main, &mut options).expect("loads");
        assert_eq!(options.port, 4333);
        assert!(options.debug);
        assert_eq!(options.auth.users, vec![user("a", "secret")]);
        assert_eq!(
            warnings,
            ["unknown config key \"PW\" at line 1 of ".to_string()
                + &dir.path().join("conf/auth.conf").display().to_string()
                + ", ignored"]
        );
    }

    #[test]
    fn included_keys_can_feed_later_variables_and_blocks() {
        let dir = tempfile::tempdir().expect("temp dir");
        write(dir.path(), "vars.conf", "BASE_PORT: 4333\n");
        write(dir.path(), "tls.conf", "cert_file: c.pem\nkey_file: k.pem\n");
        let main =
            write(dir.path(), "main.conf", "include \"vars.conf\"\nport: $BASE_PORT\ntls {\n  include tls.conf\n}\n");
        let mut options = Options::default();
        let warnings = load(&main, &mut options).expect("loads");
        assert_eq!(options.port, 4333);
        assert_eq!(options.tls.map(|tls| tls.cert_file), Some(PathBuf::from("c.pem")));
        assert!(warnings.is_empty(), "{warnings:?}");
    }

    #[test]
    fn include_errors() {
        let dir = tempfile::tempdir().expect("temp dir");
        let main = write(dir.path(), "main.conf", "port: 1\ninclude nowhere.conf\n");
        let message = load(&main, &mut Options::default()).expect_err("fails").to_string();
        assert!(message.contains("line 2, column 1: cannot read included file"), "{message}");
        let looping = write(dir.path(), "loop.conf", "include loop.conf\n");
        let message = load(&looping, &mut Options::default()).expect_err("fails").to_string();
        assert!(message.contains("nested more than 10 deep"), "{message}");
        write(dir.path(), "bad.conf", "\nport: [\n");
        let outer = write(dir.path(), "outer.conf", "include bad.conf\n");
        let message = load(&outer, &mut Options::default()).expect_err("fails").to_string();
        assert!(
            message.starts_with(&format!("{}: line 3, column 1", dir.path().join("bad.conf").display())),
            "{message}"
        );
    }
}

#[test]
fn a_metrics_block_sets_detail_and_depth() {
    let options = loaded("metrics { detail: true, subject_depth: 2 }");
    assert!(options.metrics.detail);
    assert_eq!(options.metrics.subject_depth, 2);
    let defaults = loaded("");
    assert!(!defaults.metrics.detail, "low cardinality by default");
    assert_eq!(defaults.metrics.subject_depth, limits::METRICS_SUBJECT_DEPTH);
    assert!(error("metrics { subject_depth: 0 }").contains("metrics.subject_depth must be 1 to"));
    assert!(error("metrics { detail: 3 }").contains("metrics.detail"));
    let (_, warnings) = load_text("metrics { details: true }");
    assert!(warnings.iter().any(|w| w.contains("metrics.details")), "{warnings:?}");
}

#[test]
fn lame_duck_settings_follow_nats_servers_rules() {
    let options = loaded("lame_duck_duration: \"45s\"\nlame_duck_grace_period: \"2s\"\n");
    assert_eq!(
        (options.lame_duck_duration, options.lame_duck_grace_period),
        (Duration::from_secs(45), Duration::from_secs(2))
    );
    let defaults = loaded("");
    assert_eq!(
        (defaults.lame_duck_duration, defaults.lame_duck_grace_period),
        (limits::LAME_DUCK_DURATION, limits::LAME_DUCK_GRACE_PERIOD)
    );
    assert!(error("lame_duck_duration: \"5s\"\n").contains("invalid lame_duck_duration of 5s, minimum is 30 seconds"));
    assert!(error("lame_duck_duration: \"30s\"\nlame_duck_grace_period: \"30s\"\n").contains("strictly lower"));
}

#[test]
fn account_jetstream_blocks_take_every_limit() {
    let text = "accounts { A { jetstream { max_ack_pending: 100, max_bytes_required: true, \
                memory_max_stream_bytes: 1KB, store_max_stream_bytes: 2KB } } }\n";
    let limits = loaded(text).accounts[0].jetstream.clone().expect("jetstream block");
    assert_eq!(limits.ack_pending_max, Some(100));
    assert!(limits.max_bytes_required);
    assert_eq!((limits.memory_stream_bytes_max, limits.file_stream_bytes_max), (Some(1024), Some(2048)));
}

#[test]
fn nkey_users_in_authorization_and_accounts_with_default_permissions() {
    let (user_nkey, other_nkey) = (nkeys::KeyPair::new_user().public_key(), nkeys::KeyPair::new_user().public_key());
    let options = loaded(&format!(
        "authorization {{ users: [ {{ nkey: {user_nkey} }}, {{ user: a, password: b }} ] }}\n\
         accounts {{ A {{ users: [ {{ nkey: {other_nkey}, permissions: {{ publish: x }} }} ] }} }}\n"
    ));
    assert_eq!(options.auth.users, vec![user("a", "b")]);
    assert_eq!(options.auth.nkeys.len(), 1);
    assert_eq!(options.auth.nkeys[0].nkey, user_nkey);
    assert!(options.accounts[0].nkeys[0].permissions.is_some());
    assert!(error(&format!("authorization {{ users: [ {{ nkey: {user_nkey}, user: a }} ] }}")).contains("both an nkey"));
}

#[test]
fn operator_mode_needs_a_resolver_and_allows_no_users_of_its_own() {
    let operator = "operator: \"eyJhbGciOiJlZDI1NTE5LW5rZXkifQ.e30.x\"\n";
    let system = nkeys::KeyPair::new_account().public_key();
    let preload = format!("resolver_preload {{ {system}: \"eyJ.e30.x\" }}\n");
    let options = loaded(&format!("{operator}resolver: MEMORY\n{preload}system_account: {system}\n"));
    let trust = options.auth.operator.expect("operator mode");
    assert_eq!(trust.jwts.len(), 1);
    assert_eq!(trust.system_account.as_deref(), Some(system.as_str()));
    let unloaded = error(&format!("{operator}resolver: MEMORY\nsystem_account: {system}\n"));
    assert!(unloaded.contains("error resolving system account: account missing"), "{unloaded}");
    assert!(error(operator).contains("require an account resolver"));
    assert!(error(&format!("{operator}resolver: MEMORY\nauthorization {{ token: t }}\n")).contains("users"));
    assert!(error(&format!("{operator}resolver: MEMORY\naccounts {{ A {{ }} }}\n")).contains("Accounts"));
    assert!(error("resolver: MEMORY\n").contains("need an operator"));
    assert!(error(&format!("{operator}resolver: \"URL(http://x)\"\n")).contains("resolver: MEMORY"));
    assert!(error(&format!("{operator}resolver: MEMORY\nresolver_preload {{ NOTAKEY: x }}\n")).contains("account nkey"));
    assert!(error("operator: /nonexistent/op.jwt\nresolver: MEMORY\n").contains("cannot read operator JWT file"));
}

#[test]
fn the_system_account_is_named_by_an_account_called_sys_or_is_implicit_as_in_nats_server() {
    let app = "A { users [ {user: a, password: a} ] }";
    let named = loaded(&format!("system: A\naccounts {{ {app} }}\n"));
    assert_eq!(named.system_account(), Some("A"));
    assert_eq!(loaded(&format!("accounts {{ {app}, $SYS {{ }} }}\n")).system_account(), Some("$SYS"));
    assert_eq!(loaded("").system_account(), Some("$SYS"), "implicit");
    let mut off = loaded("no_system_account: true\n");
    assert!(off.jetstream, "JetStream is on by default");
    assert_eq!(off.system_account(), Some("$SYS"), "JetStream makes one regardless");
    off.jetstream = false;
    assert_eq!(off.system_account(), None);
    let missing = error("system_account: \"$SYS\"\n");
    assert!(missing.contains("error resolving system account: account missing"), "{missing}");
    assert_eq!(loaded("system_account: \"$G\"\n").system_account(), Some("$G"));
}

#[test]
fn only_a_system_account_leaves_clients_without_credentials_in_the_global_account() {
    let sys = "accounts { $SYS { users [ {user: s, password: s} ] } }\n";
    assert!(loaded(sys).auth.no_auth_global);
    assert!(!loaded(&format!("{sys}authorization {{ users [ {{user: g, password: g}} ] }}\n")).auth.no_auth_global);
    assert!(!loaded("accounts { $SYS { }, A { } }\n").auth.no_auth_global);
    assert!(!loaded("accounts { A { users [ {user: a, password: a} ] } }\n").auth.no_auth_global);
}

#[test]
fn websocket_block_reads_nats_server_keys() {
    let options = loaded(
        r#"websocket {
            listen: "127.0.0.1:8443"
            tls { cert_file: "ws.pem", key_file: "ws-key.pem" }
            same_origin: true
            allowed_origins: ["https://app.example.com", "http://localhost:3000"]
            handshake_timeout: "5s"
        }"#,
    );
    let ws = options.websocket.expect("websocket on");
    assert_eq!((ws.host.as_str(), ws.port), ("127.0.0.1", 8443));
    assert_eq!(ws.tls.expect("tls").cert_file, PathBuf::from("ws.pem"));
    assert!(ws.same_origin);
    assert_eq!(ws.allowed_origins[0], crate::options::Origin::parse("https://app.example.com:443").unwrap());
    assert_eq!(ws.allowed_origins[1].port, 3000);
    assert_eq!(ws.handshake_timeout, Duration::from_secs(5));
}

#[test]
fn websocket_block_refusals_and_defaults_follow_nats_server() {
    assert!(error("websocket { port: 8080 }").contains("websocket requires TLS configuration"));
    assert!(error(r#"websocket { port: 8080, no_tls: true, allowed_origins: ["ftp://x"] }"#)
        .contains("allowed origins must be absolute URLs with http or https scheme"));
    // Without a port, or with port 0, there is no listener and nothing else is checked.
    assert_eq!(loaded("websocket { host: \"0.0.0.0\" }").websocket, None);
    assert_eq!(loaded("websocket { port: 0 }").websocket, None);
    let ws = loaded("ws { port: -1, no_tls: true }").websocket.expect("ws alias");
    assert_eq!((ws.host.as_str(), ws.port, ws.handshake_timeout), ("0.0.0.0", 0, limits::WEBSOCKET_HANDSHAKE_TIMEOUT));
    let (options, warnings) = load_text("websocket { port: -1, no_tls: true, compression: true, advertise: \"x:1\" }");
    assert!(options.websocket.expect("listener").compression);
    assert_eq!(warnings, Vec::<String>::new());
}

#[test]
fn websocket_advertise_headers_and_ping_interval_are_read_and_checked_as_nats_server_does() {
    let block = |extra: &str| format!("websocket {{ port: -1, no_tls: true, {extra} }}");
    let ws =
        loaded(&block("headers { X-Frame-Options: DENY, \"Cache-Control\": \"no-store\" }, ping_interval: \"5s\""))
            .websocket
            .expect("listener");
    let headers =
        [("X-Frame-Options", "DENY"), ("Cache-Control", "no-store")].map(|(n, v)| (n.to_string(), v.to_string()));
    assert_eq!(ws.headers, headers);
    assert_eq!(ws.ping_interval, Some(Duration::from_secs(5)));
    assert_eq!(loaded(&block("ping_interval: \"0s\"")).websocket.and_then(|ws| ws.ping_interval), None);
    for advertise in ["\"ws.example.com\"", "\"ws.example.com:443\"", "\"[::1]:443\""] {
        assert!(loaded(&block(&format!("advertise: {advertise}"))).websocket.is_some(), "{advertise}");
    }
    assert!(error(&block("advertise: \"host:port\"")).contains("unable to get websocket connect URLs"));
    assert!(
        error(&block("headers { Connection: close }")).contains("websocket: invalid header \"Connection\" not allowed")
    );
    assert!(error(&block("headers { sec-websocket-protocol: x }"))
        .contains("websocket: invalid header \"sec-websocket-protocol\", \"Sec-WebSocket-\" prefix not allowed"));
    assert!(error(&block("headers { X-Count: 3 }")).contains("websocket.headers.X-Count"));
    assert!(error(&block("headers { \"X-Bad\": \"a\\r\\nInjected: yes\" }")).contains("invalid header \"X-Bad\""));
    assert!(error(&block("headers: \"x\"")).contains("websocket.headers"));
}

#[test]
fn websocket_block_reads_its_own_authorization_no_auth_user_and_cookies() {
    let (options, warnings) = load_text(
        r#"authorization { user: tcp, password: p, timeout: 3 }
        websocket {
            port: -1, no_tls: true
            authorization { user: web, password: "w", timeout: 0.5 }
            user_cookie: u, pass_cookie: p, token_cookie: t
        }"#,
    );
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(options.auth.single_user.as_deref(), Some("tcp"));
    let ws = options.websocket.expect("listener");
    let auth = &ws.auth;
    assert_eq!((auth.username.as_deref(), auth.password.as_deref()), (Some("web"), Some("w")));
    assert_eq!(auth.timeout, Some(Duration::from_millis(500)));
    assert!(auth.overrides());
    assert_eq!((ws.cookies.user.as_deref(), ws.cookies.pass.as_deref()), (Some("u"), Some("p")));
    assert_eq!((ws.cookies.token.as_deref(), ws.cookies.jwt.as_deref()), (Some("t"), None));
    // A password alone overrides nothing, as in nats-server.
    let ws = loaded("websocket { port: -1, no_tls: true, authorization { password: x } }").websocket.expect("on");
    assert!(!ws.auth.overrides());
    // The checks that need every user run once the file is read: users may come after the block.
    let later_users = "websocket { port: -1, no_tls: true, no_auth_user: a }
authorization { users: [{user: a, password: b}] }";
    assert_eq!(loaded(later_users).websocket.expect("on").auth.no_auth_user.as_deref(), Some("a"));
    assert!(error(
        "websocket { port: -1, no_tls: true, no_auth_user: a }
authorization { user: a, password: b }"
    )
    .contains("no_auth_user: \"a\" present, but users/nkeys are not defined"));
}

#[test]
fn exports_and_imports_are_read_in_nats_server_syntax() {
    use crate::imports::{Export, Import, Kind, ResponseType};
    let options = loaded(
        "accounts {\n\
           A { exports: [ {stream: \"orders.>\"}, {stream: bar, accounts: [B]}, {service: \"req.>\"},\n\
                          {service: x, response_type: stream, accounts: [B]} ] }\n\
           B { imports: [ {stream: {account: A, subject: \"orders.>\"}, prefix: a},\n\
                          {stream: {account: A, subject: bar}, to: \"from.a.bar\"},\n\
                          {service: {account: A, subject: \"req.>\"}, to: \"areq.>\"},\n\
                          {service: {account: A, subject: x}} ] }\n\
         }\n",
    );
    let export = |kind, subject: &str, accounts: &[&str], response| {
        Export::new(kind, subject.into(), accounts.iter().map(|a| a.to_string()).collect(), response)
    };
    assert_eq!(
        options.accounts[0].exports,
        [
            export(Kind::Stream, "orders.>", &[], ResponseType::Singleton),
            export(Kind::Stream, "bar", &["B"], ResponseType::Singleton),
            export(Kind::Service, "req.>", &[], ResponseType::Singleton),
            export(Kind::Service, "x", &["B"], ResponseType::Stream),
        ]
    );
    let import = |kind, subject: &str, to: Option<&str>, prefix: Option<&str>| Import {
        kind,
        account: "A".into(),
        subject: subject.into(),
        to: to.map(Into::into),
        prefix: prefix.map(Into::into),
        activation: None,
        share: false,
        allow_trace: false,
    };
    assert_eq!(
        options.accounts[1].imports,
        [
            import(Kind::Stream, "orders.>", None, Some("a")),
            import(Kind::Stream, "bar", Some("from.a.bar"), None),
            import(Kind::Service, "req.>", Some("areq.>"), None),
            import(Kind::Service, "x", None, None),
        ]
    );
}

#[test]
fn an_import_that_does_not_hold_is_an_error_at_its_line() {
    let accounts = |imports: &str| {
        format!("accounts {{\n  A {{ exports: [ {{stream: \"public.>\"}}, {{service: svc, accounts: [C]}} ] }}\n  B {{ imports: [\n{imports}\n] }}\n  C {{}}\n}}\n")
    };
    assert_eq!(
        error(&accounts("{stream: {account: A, subject: \"private.>\"}}")),
        "line 4, column 1: Error adding stream import \"private.>\": stream import not authorized"
    );
    assert_eq!(
        error(&accounts("{service: {account: A, subject: svc}}")),
        "line 4, column 1: Error adding service import \"svc\": service import not authorized"
    );
    assert_eq!(
        error(&accounts("{stream: {account: Z, subject: x}}")),
        "line 4, column 1: \"Z\" account not defined for stream import"
    );
    assert_eq!(
        error(&accounts("{stream: {account: A, subject: \"public.x\"}, prefix: p, to: q}")),
        "line 4, column 1: Error adding stream import \"public.x\": Stream import can not have a 'prefix' and a 'to' property"
    );
    assert!(error(&accounts("{stream: {account: A}}")).contains("Expect an account name and a subject"));
    assert!(error("accounts { A { exports: [ {stream: a, response_type: singleton} ] } }")
        .contains("Detected response directive on non-service"));
    assert!(error("accounts { A { exports: [ {service: a, response_type: many} ] } }")
        .contains("Unknown response type: \"many\""));
}

#[test]
fn service_latency_and_share_are_read_as_nats_server_reads_them() {
    use crate::imports::{Latency, Sampling};
    let options = loaded(
        "accounts {\n\
           A { exports: [ {service: a, latency: {sampling: 50, subject: la}}, {service: b, latency: lb},\n\
                          {service: c, latency: {sampling: \"25%\", subject: lc}},\n\
                          {service: d, latency: {sampling: headers, subject: ld}} ] }\n\
           B { imports: [ {service: {account: A, subject: a}, share: true}, {service: {account: A, subject: b}} ] }\n\
         }\n",
    );
    let latency = |sampling, subject: &str| Some(Latency { sampling, subject: subject.into() });
    let read: Vec<_> = options.accounts[0].exports.iter().map(|e| e.latency.clone()).collect();
    assert_eq!(
        read,
        [
            latency(Sampling::Percent(50), "la"),
            latency(Sampling::Percent(100), "lb"),
            latency(Sampling::Percent(25), "lc"),
            latency(Sampling::Headers, "ld"),
        ]
    );
    let shares: Vec<bool> = options.accounts[1].imports.iter().map(|i| i.share).collect();
    assert_eq!(shares, [true, false]);
    let bad = |latency: &str| error(&format!("accounts {{ A {{ exports: [ {{service: a, latency: {latency}}} ] }} }}"));
    assert!(bad("{sampling: 0, subject: l}").contains("bad sampling percentage, should be 1-100"));
    assert!(bad("{sampling: \"x%\", subject: l}").contains("Failed to parse latency sample"));
    assert!(bad("{sampling: 10}").contains("Latency subject required, but missing"));
    assert!(bad("[l]").contains("Expected latency entry to be a map/struct or string"));
}

#[test]
fn mappings_top_level_and_per_account_fill_the_options() {
    let options = loaded(
        "mappings { foo: bar, \"a.*\": [ {destination: \"b.$1\", weight: 40%}, {dest: c, weight: 60, cluster: x} ] }\n\
         accounts { A { maps { x: y } } }\n",
    );
    let whole = |subject: &str| MapDest::whole(subject);
    let weighted = |subject: &str, weight: u8, cluster: &str| MapDest {
        subject: subject.to_string(),
        weight,
        cluster: cluster.to_string(),
    };
    assert_eq!(
        options.mappings,
        [
            SubjectMapping { source: "foo".into(), destinations: vec![whole("bar")] },
            SubjectMapping {
                source: "a.*".into(),
                destinations: vec![weighted("b.$1", 40, ""), weighted("c", 60, "x")]
            },
        ]
    );
    assert_eq!(options.accounts[0].mappings, [SubjectMapping { source: "x".into(), destinations: vec![whole("y")] }]);
}

#[test]
fn bad_mappings_stop_the_config_with_nats_server_texts() {
    let cases = [
        ("\"foo.*\": \"bar.$2\"", "Error adding mapping for \"foo.*\" to \"bar.$2\" : invalid mapping destination: wildcard index out of range in $2: [2]"),
        ("\"foo.*\": \"bar.{{nope(1)}}\"", "Error adding mapping for \"foo.*\" to \"bar.{{nope(1)}}\" : invalid mapping destination: unknown function in {{nope(1)}}"),
        ("\"foo..x\": bar", "Subject \"foo..x\" is not a valid subject"),
        ("\"foo.>\": bar", "Error adding mapping for \"foo.>\" to \"bar\" : invalid subject"),
        ("foo: [{destination: a, weight: 160%}]", "Invalid weight 160 for mapping destination"),
        ("foo: [{destination: a, weight: x%}]", "Invalid weight \"x\" for mapping destination"),
        ("foo: [{destination: a}]", "Missing weight for mapping destination \"a\""),
        ("foo: [{destination: a, weight: 10, colour: x}]", "Unknown field \"colour\" for mapping destination"),
        ("foo: 5", "Expected an entry for the mapping destination"),
        ("foo: [{destination: a, weight: 60}, {destination: b, weight: 50}]", "Error adding mapping for \"foo\" : total weight needs to be <= 100"),
        ("foo: [{destination: a, weight: 50}, {destination: a, weight: 10}]", "Error adding mapping for \"foo\" : duplicate entry for \"a\""),
    ];
    for (mapping, expected) in cases {
        let message = error(&format!("mappings {{ {mapping} }}\n"));
        assert!(message.ends_with(expected), "{mapping}: {message}");
    }
}
