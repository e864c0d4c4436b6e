use super::*;
use proptest::prelude::*;

fn parse_all(parser: &mut Parser, input: &[u8]) -> Vec<Result<ClientOp, ParseError>> {
    let mut buffer = BytesMut::from(input);
    let mut ops = Vec::new();
    loop {
        match parser.next_op(&mut buffer) {
            Ok(Some(op)) => ops.push(Ok(op)),
            Ok(None) => return ops,
            Err(error) => {
                let fatal = error.is_fatal();
                ops.push(Err(error));
                if fatal {
                    return ops;
                }
            }
        }
    }
}

fn parse_one(input: &[u8]) -> Result<ClientOp, ParseError> {
    let mut ops = parse_all(&mut Parser::default(), input);
    assert_eq!(ops.len(), 1, "{ops:?}");
    ops.remove(0)
}

fn publish(subject: &str, reply: Option<&str>, headers: Option<&str>, payload: &str) -> ClientOp {
    ClientOp::Publish(Publish {
        subject: subject.into(),
        reply: reply.map(Into::into),
        headers: headers.map(|h| Bytes::copy_from_slice(h.as_bytes())),
        payload: Bytes::copy_from_slice(payload.as_bytes()),
    })
}

#[test]
fn every_op_parses() {
    assert_eq!(parse_one(b"PING\r\n"), Ok(ClientOp::Ping));
    assert_eq!(parse_one(b"pong\r\n"), Ok(ClientOp::Pong));
    assert_eq!(
        parse_one(b"CONNECT {\"verbose\":false}\r\n"),
        Ok(ClientOp::Connect(Bytes::from_static(b"{\"verbose\":false}")))
    );
    assert_eq!(parse_one(b"PUB foo 5\r\nhello\r\n"), Ok(publish("foo", None, None, "hello")));
    assert_eq!(parse_one(b"pub foo bar 0\r\n\r\n"), Ok(publish("foo", Some("bar"), None, "")));
    assert_eq!(
        parse_one(b"HPUB foo 12 14\r\nNATS/1.0\r\n\r\nhi\r\n"),
        Ok(publish("foo", None, Some("NATS/1.0\r\n\r\n"), "hi"))
    );
    assert_eq!(
        parse_one(b"hpub foo r 12 12\r\nNATS/1.0\r\n\r\n\r\n"),
        Ok(publish("foo", Some("r"), Some("NATS/1.0\r\n\r\n"), ""))
    );
    assert_eq!(
        parse_one(b"SUB foo.* 1\r\n"),
        Ok(ClientOp::Subscribe { subject: "foo.*".into(), queue: None, sid: "1".into() })
    );
    assert_eq!(
        parse_one(b"sub foo.> workers 22\r\n"),
        Ok(ClientOp::Subscribe { subject: "foo.>".into(), queue: Some("workers".into()), sid: "22".into() })
    );
    assert_eq!(parse_one(b"UNSUB 1\r\n"), Ok(ClientOp::Unsubscribe { sid: "1".into(), max_msgs: None }));
    assert_eq!(parse_one(b"unsub 1 10\r\n"), Ok(ClientOp::Unsubscribe { sid: "1".into(), max_msgs: Some(10) }));
}

#[test]
fn tabs_extra_spaces_and_bare_newlines_are_accepted() {
    assert_eq!(parse_one(b"PUB\tfoo   5\nhello\r\n"), Ok(publish("foo", None, None, "hello")));
    assert_eq!(parse_one(b"PING\n"), Ok(ClientOp::Ping));
}

#[test]
fn malformed_lines_are_unknown_operations() {
    for bad in [
        &b"FOO\r\n"[..],
        b"PUB\r\n",
        b"PUB foo\r\n",
        b"PUB foo -1\r\n",
        b"PUB foo 1x\r\n",
        b"PUB a b c 1\r\n",
        b"HPUB foo 10 5\r\n",
        b"SUB\r\n",
        b"SUB foo\r\n",
        b"SUB a b c d\r\n",
        b"UNSUB\r\n",
        b"UNSUB 1 x\r\n",
        b"PINGX\r\n",
        b"CONNECT\r\n",
    ] {
        assert_eq!(parse_one(bad), Err(ParseError::UnknownOperation), "{}", String::from_utf8_lossy(bad));
    }
}

#[test]
fn wrong_byte_count_is_detected() {
    assert_eq!(parse_one(b"PUB foo 3\r\nhello\r\n"), Err(ParseError::UnknownOperation));
}

#[test]
fn limits_are_enforced() {
    let limits = ParserLimits { control_line_bytes_max: 16, payload_bytes_max: 4 };
    let mut parser = Parser::new(limits);
    assert_eq!(parse_all(&mut parser, b"PUB foo 5\r\n"), vec![Err(ParseError::PayloadTooLarge)]);
    let mut parser = Parser::new(limits);
    assert_eq!(parse_all(&mut parser, b"SUB aaaaaaaaaaaaaaaaaaaa 1"), vec![Err(ParseError::ControlLineTooLong)]);
    let mut parser = Parser::new(limits);
    assert_eq!(parse_all(&mut parser, b"SUB aaaaaaaaaaaaaaa 1\r\n"), vec![Err(ParseError::ControlLineTooLong)]);
    let mut parser = Parser::new(limits);
    assert_eq!(
        parse_all(&mut parser, b"SUB aaaaaaaaaa 1\r\n"),
        vec![Ok(ClientOp::Subscribe { subject: "aaaaaaaaaa".into(), queue: None, sid: "1".into() })]
    );
}

#[test]
fn invalid_utf8_subject_is_not_fatal_and_the_payload_is_consumed() {
    let ops = parse_all(&mut Parser::default(), b"PUB \xff 2\r\nhi\r\nPING\r\n");
    assert_eq!(ops, vec![Err(ParseError::InvalidPublishSubject), Ok(ClientOp::Ping)]);
}

const PIPELINE: &[u8] = b"CONNECT {}\r\nSUB foo 1\r\nPUB foo r 5\r\nhello\r\nHPUB foo 18 20\r\nNATS/1.0\r\nA: b\r\n\r\nhi\r\nUNSUB 1 2\r\nPING\r\nPONG\r\n";

#[test]
fn pipelined_ops_in_one_buffer_parse_in_order() {
    let ops = parse_all(&mut Parser::default(), PIPELINE);
    assert_eq!(ops.len(), 7);
    assert!(ops.iter().all(Result::is_ok));
    assert_eq!(ops[2], Ok(publish("foo", Some("r"), None, "hello")));
    assert_eq!(ops[3], Ok(publish("foo", None, Some("NATS/1.0\r\nA: b\r\n\r\n"), "hi")));
}

#[test]
fn a_split_at_every_byte_gives_the_same_ops() {
    let whole = parse_all(&mut Parser::default(), PIPELINE);
    for split in 0..=PIPELINE.len() {
        let mut parser = Parser::default();
        let mut buffer = BytesMut::new();
        let mut ops = Vec::new();
        for chunk in [&PIPELINE[..split], &PIPELINE[split..]] {
            buffer.extend_from_slice(chunk);
            while let Some(op) = parser.next_op(&mut buffer).expect("valid input") {
                ops.push(Ok(op));
            }
        }
        assert_eq!(ops, whole, "split at {split}");
        assert!(buffer.is_empty());
    }
}

fn token() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9_$-]{1,8}"
}

fn subject() -> impl Strategy<Value = String> {
    prop::collection::vec(token(), 1..4).prop_map(|tokens| tokens.join("."))
}

fn client_op() -> impl Strategy<Value = ClientOp> {
    let payload = prop::collection::vec(any::<u8>(), 0..64).prop_map(Bytes::from);
    let headers = prop::option::of(
        "[A-Za-z]{1,6}: [a-z0-9]{0,6}".prop_map(|line| Bytes::from(format!("NATS/1.0\r\n{line}\r\n\r\n"))),
    );
    prop_oneof![
        Just(ClientOp::Ping),
        Just(ClientOp::Pong),
        "\\{[a-z\":,]{0,20}\\}".prop_map(|json| ClientOp::Connect(Bytes::from(json))),
        (subject(), prop::option::of(subject()), headers, payload).prop_map(|(subject, reply, headers, payload)| {
            ClientOp::Publish(Publish { subject: subject.into(), reply: reply.map(Into::into), headers, payload })
        }),
        (subject(), prop::option::of(token()), token()).prop_map(|(subject, queue, sid)| ClientOp::Subscribe {
            subject: subject.into(),
            queue: queue.map(Into::into),
            sid: sid.into()
        }),
        (token(), prop::option::of(0u64..1_000_000))
            .prop_map(|(sid, max_msgs)| ClientOp::Unsubscribe { sid: sid.into(), max_msgs }),
    ]
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(chunks in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..64), 0..8)) {
        let mut parser = Parser::new(ParserLimits { control_line_bytes_max: 32, payload_bytes_max: 64 });
        let mut buffer = BytesMut::new();
        'feed: for chunk in chunks {
            buffer.extend_from_slice(&chunk);
            loop {
                match parser.next_op(&mut buffer) {
                    Ok(Some(_)) => {}
                    Ok(None) => break,
                    Err(error) if error.is_fatal() => break 'feed,
                    Err(_) => {}
                }
            }
        }
    }

    #[test]
    fn valid_op_sequences_round_trip_across_any_split(ops in prop::collection::vec(client_op(), 1..12), split_seed in any::<usize>()) {
        let mut wire = BytesMut::new();
        for op in &ops {
            op.encode(&mut wire);
        }
        let split = split_seed % (wire.len() + 1);
        let mut parser = Parser::default();
        let mut buffer = BytesMut::from(&wire[..split]);
        let mut parsed = Vec::new();
        while let Some(op) = parser.next_op(&mut buffer).expect("valid") { parsed.push(op); }
        buffer.extend_from_slice(&wire[split..]);
        while let Some(op) = parser.next_op(&mut buffer).expect("valid") { parsed.push(op); }
        prop_assert_eq!(parsed, ops);
    }
}
