//! Schema texts of each format registered and checked; the first byte picks the format.
#![no_main]

use libfuzzer_sys::fuzz_target;
use semaq_registry::types::SchemaRequest;
use semaq_registry::{decode, Registry};

fuzz_target!(|data: &[u8]| {
    decode::bound_avro_allocations(1024 * 1024);
    let Some((&kind, rest)) = data.split_first() else { return };
    let Ok(text) = std::str::from_utf8(rest) else { return };
    let schema_type = ["AVRO", "JSON", "PROTOBUF"][usize::from(kind) % 3].to_string();
    let request = SchemaRequest { schema: text.to_string(), schema_type: Some(schema_type), references: vec![] };
    let registry = Registry::in_memory();
    let _ = registry.check("s", None, &request);
    if let Ok(id) = registry.register("s", &request) {
        if let Ok(parsed) = registry.parsed(id) {
            let _ = parsed.validate_binary(rest);
            let _ = decode::decode_body(&parsed, id, rest);
        }
    }
});
