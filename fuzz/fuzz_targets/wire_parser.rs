//! The NATS protocol parser on arbitrary bytes, fed in two chunks split by the first byte.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use semaq_wire::{Parser, ParserLimits};

fuzz_target!(|data: &[u8]| {
    let limits = ParserLimits { control_line_bytes_max: 256, payload_bytes_max: 4096 };
    let mut parser = Parser::new(limits);
    let split = data.first().map_or(0, |&byte| usize::from(byte)).min(data.len());
    let mut buffer = BytesMut::new();
    for chunk in [&data[..split], &data[split..]] {
        buffer.extend_from_slice(chunk);
        loop {
            match parser.next_op(&mut buffer) {
                Ok(Some(_)) => {}
                Ok(None) => {
                    assert!(parser.bytes_wanted() <= limits.payload_bytes_max + 2);
                    break;
                }
                Err(error) if error.is_fatal() => return,
                Err(_) => {}
            }
        }
    }
});
