//! Fuzz properties for what a client can send before any authorization: damaged streams of
//! protocol ops fed in random chunks, header blocks, CONNECT JSON and subjects.
//!
//! No input panics, and the parser never asks the connection to buffer more than its limits: a
//! control line longer than `control_line_bytes_max` or a message larger than
//! `payload_bytes_max` is an error before the bytes arrive.

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use semaq_wire::info::ConnectOptions;
use semaq_wire::op::Publish;
use semaq_wire::{subject, ClientOp, HeaderBlock, Headers, Parser, ParserLimits};

const LIMITS: ParserLimits = ParserLimits { control_line_bytes_max: 64, payload_bytes_max: 128 };

fn config() -> ProptestConfig {
    ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() }
}

fn token() -> impl Strategy<Value = String> {
    "[a-z0-9]{1,6}"
}

fn any_subject() -> impl Strategy<Value = String> {
    prop_oneof!["[a-z0-9]{1,4}(\\.([a-z0-9]{1,4}|\\*|>)){0,3}", "[ -~]{0,12}", any::<String>()]
}

fn op() -> impl Strategy<Value = ClientOp> {
    let payload = prop::collection::vec(any::<u8>(), 0..160).prop_map(Bytes::from);
    let headers = prop::option::of(
        "[A-Za-z-]{1,6}: [ -~]{0,8}".prop_map(|line| Bytes::from(format!("NATS/1.0\r\n{line}\r\n\r\n"))),
    );
    prop_oneof![
        Just(ClientOp::Ping),
        Just(ClientOp::Pong),
        "\\{[a-z\":,0-9 ]{0,40}\\}".prop_map(|json| ClientOp::Connect(Bytes::from(json))),
        ("[a-z.]{1,20}", prop::option::of(token()), headers, payload).prop_map(|(subject, reply, headers, payload)| {
            ClientOp::Publish(Publish { subject: subject.into(), reply: reply.map(Into::into), headers, payload })
        }),
        ("[a-z.*>]{1,20}", prop::option::of(token()), token()).prop_map(|(subject, queue, sid)| ClientOp::Subscribe {
            subject: subject.into(),
            queue: queue.map(Into::into),
            sid: sid.into()
        }),
        (token(), prop::option::of(any::<u64>()))
            .prop_map(|(sid, max_msgs)| ClientOp::Unsubscribe { sid: sid.into(), max_msgs }),
    ]
}

/// A damage to the wire bytes.
#[derive(Debug, Clone)]
enum Damage {
    Flip(usize, u8),
    Insert(usize, Vec<u8>),
    Remove(usize, usize),
}

fn damage() -> impl Strategy<Value = Damage> {
    let noise = prop_oneof![
        prop::collection::vec(any::<u8>(), 1..6),
        Just(b"\r\n".to_vec()),
        Just(b" 99999999999999999999".to_vec()),
        Just(b" -1".to_vec()),
        Just(b"HPUB a 200 100\r\n".to_vec()),
    ];
    prop_oneof![
        (any::<usize>(), 1u8..=255).prop_map(|(at, mask)| Damage::Flip(at, mask)),
        (any::<usize>(), noise).prop_map(|(at, bytes)| Damage::Insert(at, bytes)),
        (any::<usize>(), 1usize..8).prop_map(|(at, count)| Damage::Remove(at, count)),
    ]
}

fn apply(wire: &mut Vec<u8>, damage: &Damage) {
    let length = wire.len();
    match damage {
        Damage::Flip(at, mask) if length > 0 => wire[at % length] ^= mask,
        Damage::Insert(at, bytes) => {
            let at = at % (length + 1);
            wire.splice(at..at, bytes.iter().copied());
        }
        Damage::Remove(at, count) if length > 0 => {
            let at = at % length;
            wire.drain(at..(at + count).min(length));
        }
        _ => {}
    }
}

/// Feeds `wire` in chunks of the given sizes until a fatal error, checking the buffering bound
/// each time the parser asks for more bytes.
fn feed(wire: &[u8], chunk_sizes: &[usize]) -> Result<(), TestCaseError> {
    let mut parser = Parser::new(LIMITS);
    let mut buffer = BytesMut::new();
    let mut rest = wire;
    let mut sizes = chunk_sizes.iter().cycle();
    while !rest.is_empty() {
        let take = sizes.next().copied().unwrap_or(1).clamp(1, rest.len());
        buffer.extend_from_slice(&rest[..take]);
        rest = &rest[take..];
        loop {
            match parser.next_op(&mut buffer) {
                Ok(Some(_)) => {}
                Ok(None) => {
                    let wanted = parser.bytes_wanted();
                    prop_assert!(wanted <= LIMITS.payload_bytes_max + 2, "the parser wants {} bytes", wanted);
                    if wanted == 0 {
                        prop_assert!(
                            buffer.len() <= LIMITS.control_line_bytes_max + 1,
                            "{} bytes of control line held",
                            buffer.len()
                        );
                    }
                    break;
                }
                Err(error) if error.is_fatal() => return Ok(()),
                Err(_) => {}
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn damaged_op_streams_in_any_chunks_never_panic_or_overbuffer(
        ops in prop::collection::vec(op(), 1..8),
        damages in prop::collection::vec(damage(), 0..4),
        chunk_sizes in prop::collection::vec(1usize..40, 1..6),
    ) {
        let mut wire = BytesMut::new();
        for op in &ops {
            op.encode(&mut wire);
        }
        let mut wire = wire.to_vec();
        for damage in &damages {
            apply(&mut wire, damage);
        }
        feed(&wire, &chunk_sizes)?;
    }

    #[test]
    fn any_header_block_reads_or_is_refused(bytes in prop::collection::vec(any::<u8>(), 0..96), lines in prop::collection::vec("[ -~]{0,12}", 0..5)) {
        let crafted = format!("NATS/1.0{}\r\n\r\n", lines.iter().map(|line| format!("\r\n{line}")).collect::<String>());
        for block in [&bytes[..], crafted.as_bytes()] {
            let headers = Headers::new(block);
            let _ = (headers.check(), headers.status(), headers.get("Nats-Msg-Id"), headers.iter().count());
            let _ = HeaderBlock::parse(block);
        }
    }

    #[test]
    fn any_connect_json_reads_or_is_refused(bytes in prop::collection::vec(any::<u8>(), 0..64), text in "\\{[ -~]{0,48}\\}") {
        let _ = serde_json::from_slice::<ConnectOptions>(&bytes);
        let _ = serde_json::from_str::<ConnectOptions>(&text);
    }

    #[test]
    fn any_subjects_are_judged_without_panicking(a in any_subject(), b in any_subject()) {
        let _ = (subject::is_valid_filter(&a), subject::is_routable(&a), subject::has_wildcard(&a), subject::is_valid_queue(&a));
        let _ = (subject::matches(&a, &b), subject::is_subset(&a, &b), subject::overlaps(&a, &b));
        if subject::is_valid_literal(&a) {
            prop_assert!(subject::matches(&a, &a), "a literal matches itself: {:?}", a);
        }
    }
}
