//! The `NATS/1.0` header block of `HPUB`/`HMSG`: a status line, then `Name: value` lines, then a blank line.

use bytes::{BufMut, Bytes, BytesMut};

/// Why a header block could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    /// The block does not start with `NATS/1.0`.
    #[error("header block does not start with NATS/1.0")]
    MissingVersion,
    /// The block is not UTF-8 or a line has no colon.
    #[error("malformed header line")]
    MalformedLine,
}

/// A parsed header block: optional status (e.g. `503`) and ordered name/value pairs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeaderBlock {
    /// Status code on the version line, used by server replies (`503` no responders).
    pub status: Option<u16>,
    /// Text after the status code.
    pub description: Option<String>,
    /// Headers in their order, names as written.
    pub entries: Vec<(String, String)>,
}

impl HeaderBlock {
    /// A block with just a status line, as the server sends for no-responders.
    pub fn status(code: u16, description: &str) -> Self {
        let description = (!description.is_empty()).then(|| description.to_string());
        Self { status: Some(code), description, entries: Vec::new() }
    }

    /// Reads a header block.
    pub fn parse(block: &[u8]) -> Result<Self, HeaderError> {
        let text = std::str::from_utf8(block).map_err(|_| HeaderError::MalformedLine)?;
        let mut lines = text.split("\r\n");
        let version_line = lines.next().unwrap_or_default();
        let rest = version_line.strip_prefix("NATS/1.0").ok_or(HeaderError::MissingVersion)?.trim();
        let mut out = HeaderBlock::default();
        if !rest.is_empty() {
            let (code, description) = rest.split_once(' ').unwrap_or((rest, ""));
            out.status = code.parse().ok();
            out.description = (!description.trim().is_empty()).then(|| description.trim().to_string());
        }
        for line in lines.filter(|line| !line.is_empty()) {
            let (name, value) = line.split_once(':').ok_or(HeaderError::MalformedLine)?;
            out.entries.push((name.trim().to_string(), value.trim().to_string()));
        }
        Ok(out)
    }

    /// The first value of `name`, compared case-insensitively.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.entries.iter().find(|(key, _)| key.eq_ignore_ascii_case(name)).map(|(_, value)| value.as_str())
    }

    /// Appends a header.
    pub fn insert(&mut self, name: &str, value: &str) {
        self.entries.push((name.to_string(), value.to_string()));
    }

    /// The wire form, ending with the blank line.
    pub fn encode(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(64);
        out.put_slice(b"NATS/1.0");
        if let Some(code) = self.status {
            out.put_slice(format!(" {code}").as_bytes());
            if let Some(description) = &self.description {
                out.put_u8(b' ');
                out.put_slice(description.as_bytes());
            }
        }
        out.put_slice(b"\r\n");
        for (name, value) in &self.entries {
            out.put_slice(name.as_bytes());
            out.put_slice(b": ");
            out.put_slice(value.as_bytes());
            out.put_slice(b"\r\n");
        }
        out.put_slice(b"\r\n");
        out.freeze()
    }
}

#[cfg(test)]
mod tests {
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
}
