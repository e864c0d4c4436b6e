//! The `NATS/1.0` header block of `HPUB`/`HMSG`: a version line, `Name: value` lines, a blank line.
//!
//! [`Headers`] is the one reading of a block in SemaQ. The server, the store's hash chain and
//! `semaq verify` all look headers up through it, so no two of them can read one block two
//! ways (an L4 chain would otherwise prove a message the verifier reads differently).
//! [`HeaderBlock`] is the owned form, for building and encoding blocks; its
//! [`HeaderBlock::parse`] is the same reading. [`names`] spells every header name clients see.
//!
//! # The reading
//!
//! - **Lines** end with CRLF. Text after the last CRLF, if any, is a last line too (a block cut
//!   short is read as far as it goes). A CR or LF anywhere else makes its line malformed: other
//!   readers split on a lone LF, so such a line could hide or forge a header for them.
//! - **Version line**: the first line is `NATS/1.0`, alone or followed by space or tab and a
//!   status: three digits, then optionally space or tab and a description (UTF-8). A block whose
//!   first line is anything else is not a header block: it has no headers and no status.
//! - **Header lines**: `name:value`, split at the first colon. The name and the value, without
//!   surrounding spaces and tabs, are UTF-8; the name is not empty, the value may be (an empty
//!   value is a value: `Some("")`).
//! - **Malformed lines** (no colon, an empty name, a name or value that is not UTF-8, a stray CR
//!   or LF) are not headers: lookups skip them and read on. **Empty lines** are skipped too.
//! - **Lookups** compare names ASCII-case-insensitively; the first header with the name wins.
//! - **Well-formed** ([`Headers::check`]): a valid version line and status, no malformed line,
//!   every name visible ASCII (`!` to `~`), and exactly one empty line, the last, so the block
//!   ends with CRLF CRLF. What `check` refuses, [`HeaderBlock::parse`] refuses; what it
//!   accepts, readers that split on LF or CRLF alike read the same (a property test shows it).

use bytes::{BufMut, Bytes, BytesMut};

pub mod names;

/// The version every header block starts with.
const VERSION: &[u8] = b"NATS/1.0";

/// Why a header block is not well-formed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    /// The block does not start with `NATS/1.0`.
    #[error("header block does not start with NATS/1.0")]
    MissingVersion,
    /// A line is not `Name: value` with a visible-ASCII name (or the status is not a three-digit
    /// code), or an empty line comes before the end.
    #[error("malformed header line")]
    MalformedLine,
    /// The block does not end with its blank line.
    #[error("header block does not end with a blank line")]
    Unterminated,
}

/// A header block read in place, without allocating; see the [module docs](self) for the rules.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Headers<'a> {
    block: &'a [u8],
}

impl<'a> Headers<'a> {
    /// Reads `block` (a whole `NATS/1.0` block, its blank line included); nothing is scanned yet.
    pub const fn new(block: &'a [u8]) -> Self {
        Self { block }
    }

    /// The bytes read.
    pub const fn as_bytes(&self) -> &'a [u8] {
        self.block
    }

    /// The version line's status code and description (`""` when it has none), e.g. `503` for
    /// no responders; `None` when the line carries no valid status.
    pub fn status(&self) -> Option<(u16, &'a str)> {
        let (status, _) = self.version()?;
        parse_status(status)
    }

    /// Every header in order, repeated names included, as `(name, value)` trimmed.
    pub fn iter(&self) -> Iter<'a> {
        Iter { lines: self.header_lines() }
    }

    /// The value of the first header called `name` (ASCII case ignored).
    pub fn get(&self, name: &str) -> Option<&'a str> {
        let [value] = self.get_many(&[name]);
        value
    }

    /// [`Headers::get`] for several names in one pass over the block, stopping once all are found.
    pub fn get_many<const N: usize>(&self, names: &[&str; N]) -> [Option<&'a str>; N] {
        let mut found = [None; N];
        let mut missing = N;
        for (line, clean) in self.header_lines() {
            if missing == 0 {
                break;
            }
            let Some((name, value)) = split_line(line).filter(|_| clean) else { continue };
            // Only a line whose name is wanted is checked in full: most lines are not. Its name
            // needs no UTF-8 check: equal to a `&str` but for ASCII case, it is UTF-8 too.
            let mut checked = None;
            for (slot, wanted) in found.iter_mut().zip(names) {
                if slot.is_some() || !name.eq_ignore_ascii_case(wanted.as_bytes()) {
                    continue;
                }
                let header = || (!name.is_empty()).then(|| utf8_value(value)).flatten();
                let Some(value) = *checked.get_or_insert_with(header) else { break };
                *slot = Some(value);
                missing -= 1;
            }
        }
        found
    }

    /// Whether the block is well-formed: everything in it is read as written, by this reader
    /// and by any other that follows the NATS format.
    pub fn check(&self) -> Result<(), HeaderError> {
        let (status, lines) = self.version().ok_or(HeaderError::MissingVersion)?;
        if !status.is_empty() && parse_status(status).is_none() {
            return Err(HeaderError::MalformedLine);
        }
        let mut ended = false;
        for (line, clean) in lines {
            if ended {
                return Err(HeaderError::MalformedLine);
            }
            if line.is_empty() {
                ended = true;
                continue;
            }
            let header = split_line(line).filter(|_| clean).and_then(|(name, value)| to_header(name, value));
            if !header.is_some_and(|(name, _)| name.bytes().all(|byte| byte.is_ascii_graphic())) {
                return Err(HeaderError::MalformedLine);
            }
        }
        if ended {
            Ok(())
        } else {
            Err(HeaderError::Unterminated)
        }
    }

    /// The version line's text after `NATS/1.0` (trimmed) and the lines after it; `None` when
    /// the block is not a header block.
    fn version(&self) -> Option<(&'a [u8], Lines<'a>)> {
        // Almost every block starts so (a status is only on the server's own replies).
        if let Some(rest) = self.block.strip_prefix(b"NATS/1.0\r\n") {
            return Some((b"", Lines { rest }));
        }
        let mut lines = Lines { rest: self.block };
        let (first, clean) = lines.next()?;
        let status = first.strip_prefix(VERSION)?;
        // `NATS/1.0x` is another version, not a status.
        let separated = status.first().is_none_or(|byte| is_blank(*byte));
        (clean && separated).then(|| (trim_blanks(status), lines))
    }

    /// The lines after the version line; none when there is no version line.
    fn header_lines(&self) -> Lines<'a> {
        self.version().map_or(Lines { rest: b"" }, |(_, lines)| lines)
    }
}

impl<'a> IntoIterator for Headers<'a> {
    type Item = (&'a str, &'a str);
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

/// The headers of a block, in order; from [`Headers::iter`].
#[derive(Debug, Clone)]
pub struct Iter<'a> {
    lines: Lines<'a>,
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a str, &'a str);

    fn next(&mut self) -> Option<Self::Item> {
        self.lines.find_map(|(line, clean)| {
            let (name, value) = split_line(line).filter(|_| clean)?;
            to_header(name, value)
        })
    }
}

/// The lines of a block, each with whether it is clean (no CR or LF inside it).
#[derive(Debug, Clone)]
struct Lines<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Lines<'a> {
    type Item = (&'a [u8], bool);

    fn next(&mut self) -> Option<Self::Item> {
        let rest = self.rest;
        if rest.is_empty() {
            return None;
        }
        // The blank line that ends a block, without memchr's setup.
        if let Some(after) = rest.strip_prefix(b"\r\n") {
            self.rest = after;
            return Some((b"", true));
        }
        let mut clean = true;
        let mut from = 0;
        while let Some(offset) = memchr::memchr2(b'\r', b'\n', &rest[from..]) {
            let at = from + offset;
            if rest[at] == b'\r' && rest.get(at + 1) == Some(&b'\n') {
                self.rest = &rest[at + 2..];
                return Some((&rest[..at], clean));
            }
            clean = false;
            from = at + 1;
        }
        self.rest = b"";
        Some((rest, clean))
    }
}

/// Space or horizontal tab: what may surround names, values and the status.
fn is_blank(byte: u8) -> bool {
    byte == b' ' || byte == b'\t'
}

fn trim_blanks(mut bytes: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = bytes {
        bytes = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = bytes {
        bytes = rest;
    }
    bytes
}

/// A line split at its first colon: the trimmed name (not yet checked) and the raw value.
fn split_line(line: &[u8]) -> Option<(&[u8], &[u8])> {
    // Names are short: a plain scan spares memchr's setup, which small blocks feel most.
    let colon = line.iter().position(|byte| *byte == b':')?;
    Some((trim_blanks(&line[..colon]), &line[colon + 1..]))
}

/// The header a split line holds, if its name and value are valid.
fn to_header<'a>(name: &'a [u8], value: &'a [u8]) -> Option<(&'a str, &'a str)> {
    if name.is_empty() {
        return None;
    }
    Some((std::str::from_utf8(name).ok()?, utf8_value(value)?))
}

/// A split line's value, trimmed, if it is UTF-8.
fn utf8_value(value: &[u8]) -> Option<&str> {
    std::str::from_utf8(trim_blanks(value)).ok()
}

/// `503` or `408 Request Timeout` (already trimmed): three digits, then a blank and a description.
fn parse_status(text: &[u8]) -> Option<(u16, &str)> {
    let (code, rest) = (text.get(..3)?, text.get(3..)?);
    if !code.iter().all(u8::is_ascii_digit) || rest.first().is_some_and(|byte| !is_blank(*byte)) {
        return None;
    }
    let code = code.iter().fold(0, |code, digit| code * 10 + u16::from(digit - b'0'));
    Some((code, std::str::from_utf8(trim_blanks(rest)).ok()?))
}

/// A header block owned, to build and encode: optional status and ordered name/value pairs.
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

    /// Reads a well-formed block ([`Headers::check`]) into owned form, as [`Headers`] reads it.
    pub fn parse(block: &[u8]) -> Result<Self, HeaderError> {
        let headers = Headers::new(block);
        headers.check()?;
        let status = headers.status();
        Ok(HeaderBlock {
            status: status.map(|(code, _)| code),
            description: status.map(|(_, text)| text).filter(|text| !text.is_empty()).map(str::to_string),
            entries: headers.iter().map(|(name, value)| (name.to_string(), value.to_string())).collect(),
        })
    }

    /// The first value of `name`, compared case-insensitively.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.entries.iter().find(|(key, _)| key.eq_ignore_ascii_case(name)).map(|(_, value)| value.as_str())
    }

    /// Appends a header.
    pub fn insert(&mut self, name: &str, value: &str) {
        self.entries.push((name.to_string(), value.to_string()));
    }

    /// The wire form, ending with the blank line. It reads back as written when names are
    /// visible ASCII without colons and values hold no CR or LF and start and end with neither
    /// space nor tab (the reader trims those).
    pub fn encode(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(64);
        out.put_slice(VERSION);
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
mod tests;
