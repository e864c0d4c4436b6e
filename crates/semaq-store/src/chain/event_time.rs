//! `Semaq-Event-Time`: RFC 3339 (`2026-05-01T12:00:00.5Z`, `...+02:00`) or integer unix
//! nanoseconds. The chain hashes the parsed nanoseconds, so the server and the verifier must
//! read the text identically: both come here, and RFC 3339 is `semaq_wire::clock`'s one reading.

use semaq_wire::clock;

/// Unix nanoseconds from an event time header value; `None` if it is neither form or out of
/// the `i64` nanosecond range (years 1678 to 2262).
pub fn parse_event_time(text: &str) -> Option<i64> {
    let text = text.trim();
    let digits = text.strip_prefix('-').unwrap_or(text);
    if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        return text.parse().ok();
    }
    clock::parse_rfc3339(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NANOS_PER_SECOND: i64 = 1_000_000_000;

    #[test]
    fn both_forms_are_read() {
        assert_eq!(parse_event_time("0"), Some(0));
        assert_eq!(parse_event_time(" 1714564800123456789 "), Some(1_714_564_800_123_456_789));
        assert_eq!(parse_event_time("-5"), Some(-5));
        assert_eq!(parse_event_time("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_event_time("2024-05-01T12:00:00Z"), Some(1_714_564_800 * NANOS_PER_SECOND));
        assert_eq!(parse_event_time("2024-05-01T12:00:00.5Z"), Some(1_714_564_800 * NANOS_PER_SECOND + 500_000_000));
        assert_eq!(parse_event_time("2024-05-01t14:00:00.000000001+02:00"), Some(1_714_564_800 * NANOS_PER_SECOND + 1));
        assert_eq!(parse_event_time("2024-05-01T11:30:00-00:30"), Some(1_714_564_800 * NANOS_PER_SECOND));
        assert_eq!(parse_event_time("2024-02-29T00:00:00Z"), Some(1_709_164_800 * NANOS_PER_SECOND));
    }

    #[test]
    fn malformed_times_are_refused() {
        for text in [
            "",
            "-",
            "soon",
            "12.5",
            "99999999999999999999",
            "2024-05-01",
            "2024-05-01T12:00:00",
            "2024-13-01T00:00:00Z",
            "2023-02-29T00:00:00Z",
            "2024-05-01T24:00:00Z",
            "2024-05-01T12:00:00.Z",
            "2024-05-01T12:00:00.1234567890Z",
            "2024-05-01T12:00:00+2:00",
            "2024-05-01T12:00:00Zjunk",
            "3000-01-01T00:00:00Z",
        ] {
            assert_eq!(parse_event_time(text), None, "{text:?}");
        }
    }

    #[test]
    fn formatting_round_trips() {
        for ns in [0, 1, 1_714_564_800_123_456_789, -1, -86_400_000_000_001, 951_782_400_000_000_000] {
            let text = clock::rfc3339_nanos(ns);
            assert_eq!(parse_event_time(&text), Some(ns), "{text}");
        }
        assert_eq!(clock::rfc3339_nanos(1_714_564_800_500_000_000), "2024-05-01T12:00:00.500000000Z");
    }
}
