//! W3C trace context: reading and writing `traceparent`, and putting one into a header block
//! while every other header keeps its bytes.

/// The `traceparent` header's name, as W3C and SPEC §2 spell it (lookups ignore case).
pub const TRACEPARENT: &str = semaq_wire::headers::names::TRACEPARENT;

/// One span's identity as `traceparent` carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceParent {
    /// The trace the span belongs to (never all zero).
    pub trace_id: [u8; 16],
    /// The span (never all zero).
    pub span_id: [u8; 8],
    /// The `sampled` flag.
    pub sampled: bool,
}

impl TraceParent {
    /// Reads a `traceparent` value: `00-<32 hex>-<16 hex>-<2 hex>` (lower-case hex, W3C level 1;
    /// a later version may add fields after a dash). Anything else, or all-zero ids, is `None`.
    pub fn parse(value: &str) -> Option<Self> {
        let bytes = value.trim().as_bytes();
        if bytes.len() < 55 {
            return None;
        }
        let version = hex_byte(&bytes[0..2])?;
        if version == 0xff || (version == 0 && bytes.len() != 55) || (bytes.len() > 55 && bytes[55] != b'-') {
            return None;
        }
        if bytes[2] != b'-' || bytes[35] != b'-' || bytes[52] != b'-' {
            return None;
        }
        let mut trace_id = [0u8; 16];
        for (at, byte) in trace_id.iter_mut().enumerate() {
            *byte = hex_byte(&bytes[3 + 2 * at..5 + 2 * at])?;
        }
        let mut span_id = [0u8; 8];
        for (at, byte) in span_id.iter_mut().enumerate() {
            *byte = hex_byte(&bytes[36 + 2 * at..38 + 2 * at])?;
        }
        let flags = hex_byte(&bytes[53..55])?;
        if trace_id == [0; 16] || span_id == [0; 8] {
            return None;
        }
        Some(Self { trace_id, span_id, sampled: flags & 1 == 1 })
    }

    /// The `traceparent` value, version 00.
    pub fn format(&self) -> String {
        let mut out = String::with_capacity(55);
        out.push_str("00-");
        push_hex(&mut out, &self.trace_id);
        out.push('-');
        push_hex(&mut out, &self.span_id);
        out.push_str(if self.sampled { "-01" } else { "-00" });
        out
    }
}

/// Lower-case hex of `bytes`, appended to `out`.
pub fn push_hex(out: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for byte in bytes {
        out.push(char::from(DIGITS[usize::from(byte >> 4)]));
        out.push(char::from(DIGITS[usize::from(byte & 0xf)]));
    }
}

fn hex_byte(pair: &[u8]) -> Option<u8> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    Some((digit(*pair.first()?)? << 4) | digit(*pair.get(1)?)?)
}

/// `block` (a `NATS/1.0` header block, or none) with `traceparent: value`: the first
/// `traceparent` line is replaced in place and any later one dropped, or the header is added
/// last. Every other line, the version line with its status included, keeps its exact bytes.
pub fn with_traceparent(block: Option<&[u8]>, value: &str) -> Vec<u8> {
    let header = format!("{TRACEPARENT}: {value}");
    let Some(block) = block.filter(|b| b.starts_with(b"NATS/1.0")) else {
        return format!("NATS/1.0\r\n{header}\r\n\r\n").into_bytes();
    };
    let content = block.strip_suffix(b"\r\n\r\n").or_else(|| block.strip_suffix(b"\r\n")).unwrap_or(block);
    let mut out = Vec::with_capacity(block.len() + header.len() + 4);
    let mut written = false;
    for (index, line) in CrLfLines(Some(content)).enumerate() {
        if index > 0 && is_named(line, TRACEPARENT) {
            if !written {
                out.extend_from_slice(header.as_bytes());
                out.extend_from_slice(b"\r\n");
                written = true;
            }
            continue;
        }
        out.extend_from_slice(line);
        out.extend_from_slice(b"\r\n");
    }
    if !written {
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// Whether a header line's name (before its first colon, without blanks) is `name`.
fn is_named(line: &[u8], name: &str) -> bool {
    let Some(colon) = line.iter().position(|b| *b == b':') else { return false };
    line[..colon].trim_ascii().eq_ignore_ascii_case(name.as_bytes())
}

/// The parts of a byte string between CRLFs.
struct CrLfLines<'a>(Option<&'a [u8]>);

impl<'a> Iterator for CrLfLines<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let rest = self.0?;
        match rest.windows(2).position(|pair| pair == b"\r\n") {
            Some(at) => {
                self.0 = Some(&rest[at + 2..]);
                Some(&rest[..at])
            }
            None => {
                self.0 = None;
                Some(rest)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALID: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_valid_traceparent_reads_and_writes_back() {
        let parent = TraceParent::parse(VALID).expect("valid");
        assert!(parent.sampled);
        assert_eq!(parent.span_id, [0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7]);
        assert_eq!(parent.format(), VALID);
    }

    #[test]
    fn bad_traceparents_are_none() {
        for bad in [
            "",
            "garbage",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-x00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",
        ] {
            assert_eq!(TraceParent::parse(bad), None, "{bad}");
        }
        let later = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-more";
        assert!(TraceParent::parse(later).is_some_and(|p| !p.sampled));
    }

    #[test]
    fn rewriting_keeps_every_other_header() {
        let block = b"NATS/1.0\r\nA: 1\r\nTraceParent: old\r\nb:  two \r\ntraceparent: older\r\nC:3\r\n\r\n";
        let out = with_traceparent(Some(block), VALID);
        let expected = format!("NATS/1.0\r\nA: 1\r\ntraceparent: {VALID}\r\nb:  two \r\nC:3\r\n\r\n");
        assert_eq!(String::from_utf8_lossy(&out), expected);
        let out = with_traceparent(Some(b"NATS/1.0 100 Idle\r\nX: y\r\n\r\n"), VALID);
        assert_eq!(String::from_utf8_lossy(&out), format!("NATS/1.0 100 Idle\r\nX: y\r\ntraceparent: {VALID}\r\n\r\n"));
        let out = with_traceparent(None, VALID);
        assert_eq!(String::from_utf8_lossy(&out), format!("NATS/1.0\r\ntraceparent: {VALID}\r\n\r\n"));
        let read = semaq_wire::Headers::new(&out);
        assert!(read.check().is_ok());
        assert_eq!(read.get("traceparent"), Some(VALID));
    }
}
