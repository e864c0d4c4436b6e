//! Stream and consumer config bodies as the JetStream API parses and validates them.
#![no_main]

use libfuzzer_sys::fuzz_target;
use semaq_server::jetstream::config::{ConsumerConfig, StreamConfig};
use semaq_server::jetstream::consumer::validate;
use semaq_server::jetstream::consumers::CreateRequest;

fuzz_target!(|data: &[u8]| {
    if let Ok(config) = serde_json::from_slice::<StreamConfig>(data) {
        if let Ok(stream) = semaq_server::jetstream::normalize(config) {
            if let Ok(config) = serde_json::from_slice::<ConsumerConfig>(data) {
                let _ = validate::normalize(config, &stream);
            }
        }
    }
    if let Ok(request) = serde_json::from_slice::<CreateRequest>(data) {
        let stream = StreamConfig { name: "S".to_string(), subjects: vec!["s.>".to_string()], ..StreamConfig::default() };
        if let Some(config) = request.config {
            let _ = validate::normalize(config, &stream);
        }
    }
});
