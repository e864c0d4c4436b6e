//! The wire protocol spoken by hand over a raw socket: every op, any split, bad input.

use std::time::Duration;

use semaq_testkit::{wait_until, SemaqServer};

const SESSION: &[u8] = b"CONNECT {\"verbose\":true,\"headers\":true}\r\nSUB foo.* 1\r\nSUB foo.bar q 2\r\nPUB foo.bar 5\r\nhello\r\nHPUB foo.x 18 20\r\nNATS/1.0\r\nA: b\r\n\r\nhi\r\nUNSUB 1\r\nPUB foo.y 1\r\nz\r\nPING\r\n";

/// What the server answers to SESSION, in order.
const EXPECTED: &[&str] = &[
    "+OK\r\n",
    "+OK\r\n",
    "+OK\r\n",
    "MSG foo.bar 1 5\r\nhello\r\n",
    "MSG foo.bar 2 5\r\nhello\r\n",
    "+OK\r\n",
    "HMSG foo.x 1 18 20\r\nNATS/1.0\r\nA: b\r\n\r\nhi\r\n",
    "+OK\r\n",
    "+OK\r\n",
    "+OK\r\n",
    "PONG\r\n",
];

fn assert_session_answer(received: &str) {
    let expected: String = EXPECTED.concat();
    // The two MSG lines for the same PUB may come in either order (plain sub, then queue group).
    let normalized = received.replace(
        "MSG foo.bar 2 5\r\nhello\r\nMSG foo.bar 1 5\r\nhello\r\n",
        "MSG foo.bar 1 5\r\nhello\r\nMSG foo.bar 2 5\r\nhello\r\n",
    );
    assert_eq!(normalized, expected);
}

#[test]
fn every_op_pipelined_in_one_write() {
    let server = SemaqServer::start();
    let mut raw = server.raw();
    raw.send(SESSION);
    let received = raw.read_until("PONG\r\n");
    assert_session_answer(&received);
}

#[test]
fn every_op_answers_the_same_when_sent_one_byte_at_a_time() {
    let server = SemaqServer::start();
    let mut raw = server.raw();
    raw.send_bytewise(SESSION);
    let received = raw.read_until("PONG\r\n");
    assert_session_answer(&received);
}

#[test]
fn a_split_at_every_byte_boundary_gives_the_same_answer() {
    let server = SemaqServer::start();
    for split in (0..SESSION.len()).step_by(7) {
        let mut raw = server.raw();
        raw.send(&SESSION[..split]);
        // Pacing: the two halves leave in separate segments, so the server reads them apart.
        std::thread::sleep(Duration::from_millis(2));
        raw.send(&SESSION[split..]);
        let received = raw.read_until("PONG\r\n");
        assert_session_answer(&received);
        drop(raw);
        // The next round reuses the queue group; wait until this member has left it.
        wait_until("the previous connection closed", Duration::from_secs(5), || {
            server.http_json("/varz")["connections"] == 0
        });
    }
}

#[test]
fn ops_are_case_insensitive_and_ping_gets_pong() {
    let server = SemaqServer::start();
    let mut raw = server.raw();
    raw.send(b"connect {}\r\nsub a 1\r\npub a 2\r\nhi\r\nping\r\n");
    raw.expect("MSG a 1 2\r\nhi\r\n");
    raw.expect("PONG\r\n");
}

#[test]
fn unknown_operations_are_refused_and_the_server_stays_up() {
    let server = SemaqServer::start();
    for bad in [&b"FOO BAR\r\n"[..], b"PUB\r\n", b"PUB a -1\r\n", b"SUB\r\n", b"UNSUB\r\n", b"MSG a 1 1\r\n"] {
        let mut raw = server.raw();
        raw.send(b"CONNECT {}\r\n");
        raw.send(bad);
        raw.expect("-ERR 'Unknown Protocol Operation'");
        assert!(raw.is_closed(), "closed after {:?}", String::from_utf8_lossy(bad));
    }
    let mut raw = server.raw();
    raw.send(b"PING\r\n");
    raw.expect("PONG");
}

#[test]
fn a_wrong_byte_count_is_a_protocol_error() {
    let server = SemaqServer::start();
    let mut raw = server.raw();
    raw.send(b"CONNECT {}\r\nPUB a 2\r\nhello\r\n");
    raw.expect("-ERR 'Unknown Protocol Operation'");
    assert!(raw.is_closed());
}

#[test]
fn bad_subjects_are_refused_and_the_connection_stays_open() {
    let server = SemaqServer::start();
    let mut raw = server.raw();
    raw.send(b"CONNECT {}\r\nPUB foo.* 1\r\nx\r\n");
    raw.expect("-ERR 'Invalid Publish Subject'");
    raw.send(b"PUB foo..bar 1\r\nx\r\n");
    raw.expect("-ERR 'Invalid Publish Subject'");
    raw.send(b"SUB foo.>.bar 1\r\n");
    raw.expect("-ERR 'Invalid Subject'");
    raw.send(b"SUB .foo 2\r\n");
    raw.expect("-ERR 'Invalid Subject'");
    raw.send(b"PING\r\n");
    raw.expect("PONG");
}

#[test]
fn an_oversize_control_line_closes_the_connection() {
    let server = SemaqServer::start();
    let mut raw = server.raw();
    let long = format!("SUB {} 1\r\n", "a".repeat(5000));
    raw.send(long.as_bytes());
    raw.expect("-ERR 'Maximum Control Line Exceeded'");
    assert!(raw.is_closed());
    server.raw().send(b"PING\r\n");
}

#[test]
fn unsub_with_max_delivers_that_many_then_stops() {
    let server = SemaqServer::start();
    let mut raw = server.raw();
    raw.send(b"CONNECT {\"verbose\":false}\r\nSUB a 1\r\nUNSUB 1 2\r\nPUB a 1\r\n1\r\nPUB a 1\r\n2\r\nPUB a 1\r\n3\r\nPING\r\n");
    let received = raw.read_until("PONG\r\n");
    assert_eq!(received, "MSG a 1 1\r\n1\r\nMSG a 1 1\r\n2\r\nPONG\r\n");
}

#[test]
fn headers_are_stripped_for_clients_that_did_not_ask_for_them() {
    let server = SemaqServer::start();
    let mut raw = server.raw();
    raw.send(
        b"CONNECT {\"headers\":false,\"verbose\":false}\r\nSUB a 1\r\nHPUB a 12 14\r\nNATS/1.0\r\n\r\nhi\r\nPING\r\n",
    );
    let received = raw.read_until("PONG\r\n");
    assert_eq!(received, "MSG a 1 2\r\nhi\r\nPONG\r\n");
}

#[test]
fn fifty_thousand_distinct_subscriptions_on_one_connection_are_confirmed_within_the_expect_timeout() {
    let server = SemaqServer::start();
    let mut raw = server.raw();
    let mut input = b"CONNECT {\"verbose\":false}\r\n".to_vec();
    for sid in 0..50_000 {
        input.extend_from_slice(format!("SUB many.{sid} {sid}\r\n").as_bytes());
    }
    input.extend_from_slice(b"PUB many.49999 2\r\nok\r\nPING\r\n");
    raw.send(&input);
    // Each SUB once swept the whole subscription map: 50,000 took minutes, now well under a second.
    assert_eq!(raw.read_until("PONG\r\n"), "MSG many.49999 49999 2\r\nok\r\nPONG\r\n");
}

#[test]
fn an_auto_unsubscribed_subscription_frees_its_place_under_max_subscriptions() {
    let server = SemaqServer::with_config("max_subscriptions: 2\n", &[]);
    let mut raw = server.raw();
    raw.send(b"CONNECT {\"verbose\":false}\r\nSUB a 1\r\nUNSUB 1 1\r\nSUB b 2\r\nPUB a 1\r\nx\r\nPING\r\n");
    assert_eq!(raw.read_until("PONG\r\n"), "MSG a 1 1\r\nx\r\nPONG\r\n");
    raw.send(b"SUB c 3\r\nPING\r\n");
    assert_eq!(raw.read_until("PONG\r\n"), "PONG\r\n", "sid 1 is spent, so c is the second of two");
    raw.send(b"SUB d 4\r\nPING\r\n");
    assert_eq!(raw.read_until("PONG\r\n"), "-ERR 'maximum subscriptions exceeded'\r\nPONG\r\n");
}
