//! The header reading: its rules case by case, then properties over arbitrary blocks.

use proptest::prelude::*;

use super::*;

#[test]
fn headers_round_trip_and_lookup_ignores_case() {
    let mut block = HeaderBlock::default();
    block.insert("Nats-Msg-Id", "abc");
    block.insert("X", "1");
    let parsed = HeaderBlock::parse(&block.encode()).expect("valid");
    assert_eq!(parsed, block);
    assert_eq!(parsed.get("nats-msg-id"), Some("abc"));
}

#[test]
fn status_line_is_read() {
    let parsed = HeaderBlock::parse(b"NATS/1.0 503\r\n\r\n").expect("valid");
    assert_eq!(parsed.status, Some(503));
    let parsed = HeaderBlock::parse(b"NATS/1.0 408 Request Timeout\r\n\r\n").expect("valid");
    assert_eq!(parsed.description.as_deref(), Some("Request Timeout"));
    assert_eq!(&HeaderBlock::status(503, "").encode()[..], b"NATS/1.0 503\r\n\r\n");
}

#[test]
fn malformed_blocks_are_errors() {
    assert_eq!(HeaderBlock::parse(b"HTTP/1.1\r\n\r\n"), Err(HeaderError::MissingVersion));
    assert_eq!(HeaderBlock::parse(b"NATS/1.0\r\nnocolon\r\n\r\n"), Err(HeaderError::MalformedLine));
}

#[test]
fn lookups_find_the_first_well_formed_header_by_name_in_any_case() {
    let block = Headers::new(b"NATS/1.0\r\nNats-Msg-Id:  a:b \r\nno colon here\r\nX: 1\r\nx: 2\r\n\r\n");
    assert_eq!(block.get("nats-msg-id"), Some("a:b"), "split at the first colon, trimmed");
    assert_eq!(block.get("X"), Some("1"), "the first of repeated names");
    assert_eq!(block.get("Nats-Msg"), None);
    assert_eq!(block.get_many(&["x", "NATS-MSG-ID", "y", "X"]), [Some("1"), Some("a:b"), None, Some("1")]);
    let all: Vec<_> = block.iter().collect();
    assert_eq!(all, [("Nats-Msg-Id", "a:b"), ("X", "1"), ("x", "2")]);
    assert_eq!(Headers::new(b"NATS/1.0 503\r\n\r\n").get("X"), None);
}

#[test]
fn empty_values_are_values_and_empty_lines_are_skipped() {
    let block = Headers::new(b"NATS/1.0\r\nA:\r\n\r\nB: \t \r\n\r\n");
    assert_eq!(block.get_many(&["A", "B"]), [Some(""), Some("")]);
    assert_eq!(block.check(), Err(HeaderError::MalformedLine), "an empty line before the end");
}

#[test]
fn malformed_lines_are_skipped_and_the_next_header_of_the_name_counts() {
    for bad in [
        &b"X: \xff"[..], // a value that is not UTF-8
        b"\xff: 1",      // a name that is not UTF-8
        b"X: 1\nY: 2",   // a lone LF: another reader would see two headers
        b"X: 1\rY: 2",   // a lone CR
        b" \t: 1",       // no name
        b"X",            // no colon
    ] {
        let block = [&b"NATS/1.0\r\n"[..], bad, b"\r\nX: good\r\nY: good\r\n\r\n"].concat();
        let headers = Headers::new(&block);
        assert_eq!(headers.get_many(&["x", "y"]), [Some("good"); 2], "{:?}", String::from_utf8_lossy(bad));
        assert_eq!(headers.iter().count(), 2, "{:?}", String::from_utf8_lossy(bad));
        assert_eq!(headers.check(), Err(HeaderError::MalformedLine), "{:?}", String::from_utf8_lossy(bad));
    }
}

#[test]
fn names_beyond_visible_ascii_are_read_but_not_well_formed() {
    for odd in ["X Y", "\u{e9}t\u{e9}", "A\u{7f}"] {
        let block = format!("NATS/1.0\r\n{odd}: 1\r\n\r\n");
        let headers = Headers::new(block.as_bytes());
        assert_eq!(headers.get(odd), Some("1"), "{odd:?}");
        assert_eq!(headers.iter().collect::<Vec<_>>(), [(odd, "1")], "{odd:?}");
        assert_eq!(headers.check(), Err(HeaderError::MalformedLine), "{odd:?}");
    }
    assert_eq!(Headers::new(b"NATS/1.0\r\n: 1\r\n\r\n").get(""), None, "no header has an empty name");
}

#[test]
fn only_a_nats_version_line_makes_a_header_block() {
    for not_headers in [&b""[..], b"HTTP/1.1\r\nX: 1\r\n\r\n", b"NATS/1.0x\r\nX: 1\r\n\r\n", b"\r\nX: 1\r\n\r\n"] {
        let headers = Headers::new(not_headers);
        assert_eq!((headers.get("X"), headers.status()), (None, None), "{not_headers:?}");
        assert_eq!(headers.check(), Err(HeaderError::MissingVersion), "{not_headers:?}");
    }
    assert_eq!(Headers::new(b"NATS/1.0\tX\nY: 1\r\nX: 1\r\n\r\n").get("X"), None, "a stray LF on the version line");
}

#[test]
fn statuses_are_three_digits_and_an_optional_description() {
    assert_eq!(Headers::new(b"NATS/1.0 503\r\n\r\n").status(), Some((503, "")));
    assert_eq!(Headers::new(b"NATS/1.0  408  Request Timeout \r\n\r\n").status(), Some((408, "Request Timeout")));
    assert_eq!(Headers::new(b"NATS/1.0\r\n\r\n").status(), None);
    for bad in
        [&b"NATS/1.0 50\r\n\r\n"[..], b"NATS/1.0 5034\r\n\r\n", b"NATS/1.0 +50\r\n\r\n", b"NATS/1.0 503 \xff\r\n\r\n"]
    {
        let headers = Headers::new(bad);
        assert_eq!(headers.status(), None, "{bad:?}");
        assert_eq!(headers.check(), Err(HeaderError::MalformedLine), "{bad:?}");
    }
    let no_status_but_headers = Headers::new(b"NATS/1.0 x\r\nX: 1\r\n\r\n");
    assert_eq!(no_status_but_headers.get("x"), Some("1"));
}

#[test]
fn a_block_cut_short_is_read_as_far_as_it_goes_but_is_not_well_formed() {
    assert_eq!(Headers::new(b"NATS/1.0\r\nA: b").get("a"), Some("b"));
    for short in [&b"NATS/1.0"[..], b"NATS/1.0\r\n", b"NATS/1.0\r\nA: b", b"NATS/1.0\r\nA: b\r\n"] {
        assert_eq!(Headers::new(short).check(), Err(HeaderError::Unterminated), "{short:?}");
    }
    assert_eq!(Headers::new(b"NATS/1.0\r\n\r\n").check(), Ok(()));
    assert_eq!(Headers::new(b"NATS/1.0 503\r\nA: b\r\n\r\n").check(), Ok(()));
    assert_eq!(Headers::new(b"NATS/1.0\r\nA: b\r\n\r\n\r\n").check(), Err(HeaderError::MalformedLine));
}

/// A name [`HeaderBlock::encode`] writes readably: visible ASCII but the colon.
fn name() -> impl Strategy<Value = String> {
    "[!-9;-~]{1,12}"
}

/// Any value without CR or LF, surrounding blanks included (the reader trims them).
fn value() -> impl Strategy<Value = String> {
    "[^\r\n]{0,12}"
}

/// Bytes that look like a header block often enough to reach every rule.
fn block_like() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        Just(b"NATS/1.0".to_vec()),
        Just(b"\r\n".to_vec()),
        Just(b":".to_vec()),
        Just(b" ".to_vec()),
        Just(b"\r".to_vec()),
        Just(b"\n".to_vec()),
        Just(b"503".to_vec()),
        "[A-Za-z-]{1,4}".prop_map(String::into_bytes),
        prop::collection::vec(any::<u8>(), 1..4),
    ];
    prop::collection::vec(piece, 0..24).prop_map(|pieces| pieces.concat())
}

/// A version line, lines that are mostly headers, and mostly the blank line at the end: blocks
/// that are well-formed often, and otherwise broken in one place.
fn structured_block(good_weight: u32) -> impl Strategy<Value = Vec<u8>> {
    let status = prop_oneof![Just(""), Just(" 503"), Just(" 408 Request Timeout"), Just(" 5x"), Just("x")];
    let header = "[!-9;-~]{1,6}[ \t]?:[ \t]?[ -~\t\u{e9}\u{2028}]{0,8}".prop_map(String::into_bytes);
    let byte =
        prop_oneof![Just(b'a'), Just(b':'), Just(b' '), Just(b'\t'), Just(b'\r'), Just(b'\n'), Just(0xc3), Just(0xff)];
    let broken = prop::collection::vec(byte, 0..8);
    let line = prop_oneof![good_weight => header, 1 => broken];
    let ending = prop_oneof![good_weight => Just(&b"\r\n"[..]), 1 => Just(&b""[..]), 1 => Just(&b"\r\n\r\n"[..])];
    (status, prop::collection::vec(line, 0..5), ending).prop_map(|(status, lines, ending)| {
        let mut block = [b"NATS/1.0", status.as_bytes(), b"\r\n"].concat();
        for line in lines {
            block.extend_from_slice(&line);
            block.extend_from_slice(b"\r\n");
        }
        block.extend_from_slice(ending);
        block
    })
}

fn any_block() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![prop::collection::vec(any::<u8>(), 0..64), block_like(), structured_block(3)]
}

proptest! {
    #[test]
    fn encoded_pairs_read_back_trimmed_in_order(pairs in prop::collection::vec((name(), value()), 0..8), status in prop::option::of(100u16..1000)) {
        let block = HeaderBlock { status, description: None, entries: pairs.clone() };
        let encoded = block.encode();
        let headers = Headers::new(&encoded);
        let blanks: &[char] = &[' ', '\t'];
        let expected: Vec<(&str, &str)> = pairs.iter().map(|(n, v)| (n.as_str(), v.trim_matches(blanks))).collect();
        prop_assert_eq!(headers.iter().collect::<Vec<_>>(), expected.clone());
        prop_assert_eq!(headers.status().map(|(code, _)| code), status);
        prop_assert_eq!(headers.check(), Ok(()));
        let parsed = HeaderBlock::parse(&encoded).expect("an encoded block is well-formed");
        let owned: Vec<(String, String)> = expected.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect();
        prop_assert_eq!(parsed.entries, owned);
        prop_assert_eq!(parsed.status, status);
    }

    #[test]
    fn reading_never_panics_and_lookups_agree_with_iteration(block in any_block(), probe in "[A-Za-z -]{0,4}") {
        let headers = Headers::new(&block);
        let all: Vec<(&str, &str)> = headers.iter().collect();
        let _ = (headers.status(), headers.check());
        let mut names: Vec<&str> = all.iter().map(|(name, _)| *name).collect();
        names.push(&probe);
        for name in &names {
            let first = all.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| *v);
            prop_assert_eq!(headers.get(name), first, "{}", name);
        }
        let wanted = [names[0], probe.as_str(), names[names.len() / 2], "NATS/1.0"];
        let one_by_one = wanted.map(|name| headers.get(name));
        prop_assert_eq!(headers.get_many(&wanted), one_by_one);
    }

    #[test]
    fn what_parse_accepts_is_what_the_reader_reads(block in any_block()) {
        let headers = Headers::new(&block);
        match HeaderBlock::parse(&block) {
            Ok(parsed) => {
                prop_assert!(headers.check().is_ok());
                let read: Vec<(String, String)> = headers.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect();
                prop_assert_eq!(parsed.entries, read);
                prop_assert_eq!(parsed.status, headers.status().map(|(code, _)| code));
            }
            Err(error) => prop_assert_eq!(headers.check(), Err(error)),
        }
    }

    #[test]
    fn a_well_formed_block_reads_the_same_split_on_lf_as_on_crlf(block in structured_block(12)) {
        // Readers that split on LF and trim CR (as nats.go's textproto does) must agree on a
        // block `check` accepts: that is what makes it safe to chain.
        prop_assume!(Headers::new(&block).check().is_ok());
        let text = std::str::from_utf8(&block).expect("well-formed blocks are UTF-8");
        let lf_reading: Vec<(&str, &str)> = text
            .split('\n')
            .skip(1)
            .map(|line| line.strip_suffix('\r').unwrap_or(line))
            .take_while(|line| !line.is_empty())
            .filter_map(|line| line.split_once(':'))
            .map(|(name, value)| (name.trim_matches([' ', '\t']), value.trim_matches([' ', '\t'])))
            .collect();
        prop_assert_eq!(Headers::new(&block).iter().collect::<Vec<_>>(), lf_reading);
    }
}
