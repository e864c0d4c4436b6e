//! nats-server config text: loads, or fails naming a line and leaving the options untouched.
#![no_main]

use libfuzzer_sys::fuzz_target;
use semaq_server::config_file;
use semaq_server::options::Options;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    // `include` would read files relative to the working directory.
    if text.contains("include") {
        return;
    }
    let mut options = Options::default();
    let before = format!("{options:?}");
    if config_file::parse_str(text, &mut options).is_err() {
        assert_eq!(format!("{options:?}"), before);
    }
});
