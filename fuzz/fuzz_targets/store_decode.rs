//! Every decoder of the store's disk bytes on arbitrary input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use semaq_store::chain::{checkpoint, page, unseal};
use semaq_store::decoders;

fuzz_target!(|data: &[u8]| {
    let _ = decoders::decode_record(data, 1);
    let _ = decoders::check_record(data);
    let _ = decoders::decode_segment_header(data);
    let _ = decoders::decode_index(data, 1, 4096);
    let _ = decoders::decode_delete_log(data);
    let scan = decoders::scan_log(data, 1);
    assert!(scan.valid_end <= data.len() as u64);
    let _ = page::decode(data);
    let _ = unseal(data);
    let _ = checkpoint::decode_file(data);
});
