//! Pure parsers and formatters for command-line values: durations, `-H` headers, base64.

use std::time::Duration;

/// Parses a duration such as `5s`, `500ms`, `2m`, `1.5s` or `250us`; a bare number means seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number.parse().map_err(|_| format!("invalid duration '{text}': expected e.g. 5s or 500ms"))?;
    let seconds_per_unit = match unit.trim() {
        "" | "s" | "sec" => 1.0,
        "ms" => 1e-3,
        "us" | "µs" => 1e-6,
        "ns" => 1e-9,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        other => return Err(format!("invalid duration unit '{other}' in '{text}': use ns, us, ms, s, m or h")),
    };
    let seconds = value * seconds_per_unit;
    // An upper bound keeps Duration::from_secs_f64 from panicking on absurd input.
    const SECONDS_MAX: f64 = 365.0 * 24.0 * 3600.0;
    if !seconds.is_finite() || seconds > SECONDS_MAX {
        return Err(format!("duration '{text}' is too long"));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// Formats a duration briefly for messages: `5s`, `500ms`, `1.5s`.
pub fn format_duration(duration: Duration) -> String {
    if duration.subsec_nanos() == 0 {
        format!("{}s", duration.as_secs())
    } else if duration < Duration::from_secs(1) {
        format!("{}ms", duration.as_millis())
    } else {
        let seconds = format!("{:.3}", duration.as_secs_f64());
        format!("{}s", seconds.trim_end_matches('0'))
    }
}

/// One header from `-H 'Name: value'`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderArg {
    /// Header name as given (NATS header names are case-preserving).
    pub name: String,
    /// Header value with surrounding whitespace removed.
    pub value: String,
}

/// Parses `Name: value` (also `Name:value`); the name must be non-empty printable ASCII without spaces or colons.
pub fn parse_header(text: &str) -> Result<HeaderArg, String> {
    let Some((name, value)) = text.split_once(':') else {
        return Err(format!("invalid header '{text}': expected 'Name: value'"));
    };
    let name = name.trim();
    let name_is_valid = !name.is_empty() && name.bytes().all(|b| b.is_ascii_graphic() && b != b':');
    if !name_is_valid {
        return Err(format!("invalid header name '{name}' in '{text}'"));
    }
    let value = value.trim();
    if value.contains(['\r', '\n']) {
        return Err(format!("invalid header value in '{text}': line breaks are not allowed"));
    }
    Ok(HeaderArg { name: name.to_string(), value: value.to_string() })
}

const BASE64_ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Encodes bytes as standard padded base64, for payloads that are not UTF-8 in `--json` output.
pub fn base64_encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let triple = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for position in 0..4 {
            if position <= chunk.len() {
                let index = (triple >> (18 - 6 * position)) & 0x3f;
                out.push(char::from(BASE64_ALPHABET[index as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
    }

    #[test]
    fn durations_reject_garbage() {
        assert!(parse_duration("").is_err());
        assert!(parse_duration("fast").is_err());
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("1e300s").is_err());
        assert!(parse_duration("1.2.3s").is_err());
    }

    #[test]
    fn durations_format_briefly() {
        assert_eq!(format_duration(Duration::from_secs(5)), "5s");
        assert_eq!(format_duration(Duration::from_millis(500)), "500ms");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1.5s");
    }

    #[test]
    fn headers_parse() {
        let header = parse_header("Semaq-Model: llama3-70b").unwrap();
        assert_eq!(header, HeaderArg { name: "Semaq-Model".into(), value: "llama3-70b".into() });
        let header = parse_header("X:a:b").unwrap();
        assert_eq!(header.value, "a:b");
        assert_eq!(parse_header("Empty:").unwrap().value, "");
    }

    #[test]
    fn headers_reject_malformed() {
        assert!(parse_header("no colon").is_err());
        assert!(parse_header(": value").is_err());
        assert!(parse_header("Bad Name: value").is_err());
    }

    #[test]
    fn base64_matches_rfc4648_vectors() {
        let vectors = [("", ""), ("f", "Zg=="), ("fo", "Zm8="), ("foo", "Zm9v"), ("foobar", "Zm9vYmFy")];
        for (input, expected) in vectors {
            assert_eq!(base64_encode(input.as_bytes()), expected);
        }
        assert_eq!(base64_encode(&[0xff, 0xfe]), "//4=");
    }
}
