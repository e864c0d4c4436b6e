//! The provenance chain of level-4 streams (SPEC §5), as pure functions both the server (which
//! writes it) and `semaq verify` (which checks it) use, so the two cannot drift apart.
//!
//! Every stored message of an L4 stream carries two header lines the server appends last:
//! `Semaq-Prev-Hash` (the hash of the message before it) and `Semaq-Hash`, the SHA-256 of
//!
//! ```text
//! "SQCHAIN1" ‖ prev hash (32) ‖ seq (u64 LE) ‖ event time ns (i64 LE)
//!   ‖ len(subject) (u64 LE) ‖ subject ‖ len(headers) (u64 LE) ‖ headers ‖ len(payload) (u64 LE) ‖ payload
//! ```
//!
//! where `headers` is the header block as stored without those two lines. Ed25519 checkpoints
//! ([`checkpoint`]) sign the chain head; [`verify::Verifier`] walks a stream and names the first
//! sequence where the chain breaks. `docs/design.md` ("Provenance chain") says what that proves.
//!
//! - [`event_time`]: the `Semaq-Event-Time` header (RFC 3339 or unix nanoseconds).
//! - [`checkpoint`]: signed checkpoints, the key pair, and their file formats;
//!   [`checkpoints_file`]: the checkpoints file on a [`crate::storage::Storage`].
//! - [`verify`]: the streaming verifier.
//! - [`page`]: stored messages in bulk with their exact bytes, for verifying through the API.

pub mod checkpoint;
pub mod checkpoints_file;
pub mod event_time;
pub mod page;
pub mod verify;

use semaq_wire::headers::names;
use sha2::{Digest, Sha256};

pub use checkpoint::{Checkpoint, KeyPair, PublicKey};
pub use event_time::parse_event_time;
pub use verify::{Break, BreakKind, Summary, Verifier};

/// A SHA-256 chain hash.
pub type Hash = [u8; HASH_BYTES];

/// Bytes of a chain hash.
pub const HASH_BYTES: usize = 32;
/// The predecessor of a stream's very first message.
pub const GENESIS: Hash = [0; HASH_BYTES];
/// Headers only the server may write on an L4 stream.
pub const SERVER_HEADERS: [&str; 3] = [names::HASH, names::PREV_HASH, names::CHECKPOINT];

/// Domain tag at the start of every hashed message, so a chain hash is never mistaken for
/// another SHA-256 (and the encoding can change under a new tag).
const HASH_DOMAIN: &[u8; 8] = b"SQCHAIN1";
/// The end of a header block.
const BLOCK_END: &[u8] = b"\r\n\r\n";
/// Bytes a sealed block ends with after the covered block's last line:
/// `\r\nSemaq-Prev-Hash: <64 hex>` (83) + `\r\nSemaq-Hash: <64 hex>` (78) + `\r\n\r\n` (4).
pub const SEAL_BYTES: usize =
    (2 + names::PREV_HASH.len() + 2 + 2 * HASH_BYTES) + (2 + names::HASH.len() + 2 + 2 * HASH_BYTES) + 4;

/// The fields a chain hash covers, borrowed from wherever the message is.
#[derive(Debug, Clone, Copy)]
pub struct Link<'a> {
    /// Stream sequence.
    pub seq: u64,
    /// Event time in unix nanoseconds.
    pub event_time_ns: i64,
    /// Subject.
    pub subject: &'a str,
    /// The covered header block, possibly in two pieces (see [`Sealed`]).
    pub headers: [&'a [u8]; 2],
    /// Payload.
    pub payload: &'a [u8],
}

/// The chain hash of a message whose predecessor's hash is `prev`.
pub fn message_hash(prev: &Hash, link: &Link<'_>) -> Hash {
    let length = |bytes: usize| (bytes as u64).to_le_bytes();
    let headers_length = link.headers[0].len() + link.headers[1].len();
    let mut hasher = Sha256::new();
    hasher.update(HASH_DOMAIN);
    hasher.update(prev);
    hasher.update(link.seq.to_le_bytes());
    hasher.update(link.event_time_ns.to_le_bytes());
    hasher.update(length(link.subject.len()));
    hasher.update(link.subject.as_bytes());
    hasher.update(length(headers_length));
    hasher.update(link.headers[0]);
    hasher.update(link.headers[1]);
    hasher.update(length(link.payload.len()));
    hasher.update(link.payload);
    hasher.finalize().into()
}

/// `covered` (a complete `NATS/1.0` header block) with the chain lines appended, as stored.
/// `None` when `covered` does not end like a header block.
pub fn seal(covered: &[u8], prev: &Hash, hash: &Hash) -> Option<Vec<u8>> {
    let head = covered.strip_suffix(BLOCK_END)?;
    let mut out = Vec::with_capacity(head.len() + SEAL_BYTES);
    out.extend_from_slice(head);
    for (name, value) in [(names::PREV_HASH, prev), (names::HASH, hash)] {
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(to_hex(value).as_bytes());
    }
    out.extend_from_slice(BLOCK_END);
    Some(out)
}

/// A stored L4 header block split into what the hash covers and the two chain hashes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sealed<'a> {
    /// The stored block up to the chain lines; with `b"\r\n\r\n"` after it, the covered block.
    pub head: &'a [u8],
    /// The recorded predecessor hash.
    pub prev: Hash,
    /// The recorded hash.
    pub hash: Hash,
}

impl<'a> Sealed<'a> {
    /// The covered block as two pieces, for [`Link::headers`] (no copy).
    pub fn covered(&self) -> [&'a [u8]; 2] {
        [self.head, BLOCK_END]
    }
}

/// Splits a stored block sealed by [`seal`]; `Err` says what is missing or malformed.
pub fn unseal(stored: &[u8]) -> Result<Sealed<'_>, &'static str> {
    let Some(cut) = stored.len().checked_sub(SEAL_BYTES) else {
        return Err("its header block has no Semaq-Prev-Hash and Semaq-Hash lines");
    };
    let (head, tail) = stored.split_at(cut);
    let tail = tail.strip_suffix(BLOCK_END).ok_or("its header block does not end with the chain lines")?;
    let rest = tail.strip_prefix(b"\r\n").ok_or("its header block does not end with the chain lines")?;
    let (prev_line, hash_line) = rest.split_at(names::PREV_HASH.len() + 2 + 2 * HASH_BYTES);
    let value = |line: &[u8], name: &str| -> Option<Hash> {
        let line = line.strip_prefix(name.as_bytes())?.strip_prefix(b": ")?;
        hash_from_hex(std::str::from_utf8(line).ok()?)
    };
    let prev = value(prev_line, names::PREV_HASH).ok_or("its Semaq-Prev-Hash line is missing or malformed")?;
    let hash_line = hash_line.strip_prefix(b"\r\n").ok_or("its Semaq-Hash line is missing or malformed")?;
    let hash = value(hash_line, names::HASH).ok_or("its Semaq-Hash line is missing or malformed")?;
    if !head.starts_with(b"NATS/1.0") {
        return Err("its header block does not start with NATS/1.0");
    }
    Ok(Sealed { head, prev, hash })
}

/// Lower-case hex.
pub fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        out.push(DIGITS[usize::from(byte >> 4)] as char);
        out.push(DIGITS[usize::from(byte & 0xf)] as char);
    }
    out
}

/// Bytes from hex of exactly `N` bytes (either case).
pub fn from_hex<const N: usize>(text: &str) -> Option<[u8; N]> {
    let text = text.as_bytes();
    if text.len() != 2 * N {
        return None;
    }
    let nibble = |c: u8| char::from(c).to_digit(16).and_then(|d| u8::try_from(d).ok());
    let mut out = [0u8; N];
    for (byte, pair) in out.iter_mut().zip(text.chunks_exact(2)) {
        *byte = nibble(pair[0])? << 4 | nibble(pair[1])?;
    }
    Some(out)
}

/// A chain hash from hex.
pub fn hash_from_hex(text: &str) -> Option<Hash> {
    from_hex::<HASH_BYTES>(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link<'a>(seq: u64, headers: &'a [u8], payload: &'a [u8]) -> Link<'a> {
        Link { seq, event_time_ns: 7, subject: "ai.x", headers: [headers, b""], payload }
    }

    #[test]
    fn sealing_appends_two_lines_and_unsealing_gives_back_the_covered_block() {
        let covered = b"NATS/1.0\r\nSemaq-Event-Time: 7\r\n\r\n";
        let (prev, hash) = ([1u8; 32], [2u8; 32]);
        let stored = seal(covered, &prev, &hash).unwrap();
        assert_eq!(stored.len(), covered.len() - 4 + SEAL_BYTES);
        let text = String::from_utf8(stored.clone()).unwrap();
        assert!(text.ends_with(&format!(
            "Semaq-Prev-Hash: {}\r\nSemaq-Hash: {}\r\n\r\n",
            "01".repeat(32),
            "02".repeat(32)
        )));
        let sealed = unseal(&stored).unwrap();
        assert_eq!((sealed.prev, sealed.hash), (prev, hash));
        assert_eq!(sealed.covered().concat(), covered);
        let read = semaq_wire::Headers::new(&stored);
        assert_eq!(read.get("semaq-event-time"), Some("7"));
        assert_eq!(read.get(names::HASH), Some(&*"02".repeat(32)));
        assert!(seal(b"NATS/1.0\r\nA: b\r\n", &prev, &hash).is_none(), "not a complete block");
    }

    #[test]
    fn unsealing_refuses_blocks_without_intact_chain_lines() {
        let stored = seal(b"NATS/1.0\r\nA: b\r\n\r\n", &[1; 32], &[2; 32]).unwrap();
        assert!(unseal(b"NATS/1.0\r\nA: b\r\n\r\n").is_err());
        let mut damaged = stored.clone();
        let at = damaged.len() - 10;
        damaged[at] = b'g';
        assert!(unseal(&damaged).is_err());
        let mut renamed = stored;
        let at = renamed.len() - SEAL_BYTES + 3;
        renamed[at] = b'X';
        assert!(unseal(&renamed).is_err());
    }

    #[test]
    fn every_field_changes_the_hash_and_the_encoding_is_unambiguous() {
        let base = message_hash(&GENESIS, &link(1, b"NATS/1.0\r\n\r\n", b"{}"));
        assert_ne!(base, message_hash(&[1; 32], &link(1, b"NATS/1.0\r\n\r\n", b"{}")));
        assert_ne!(base, message_hash(&GENESIS, &link(2, b"NATS/1.0\r\n\r\n", b"{}")));
        assert_ne!(base, message_hash(&GENESIS, &link(1, b"NATS/1.0\r\n\r\n", b"{ }")));
        let mut later = link(1, b"NATS/1.0\r\n\r\n", b"{}");
        later.event_time_ns = 8;
        assert_ne!(base, message_hash(&GENESIS, &later));
        // Moving a byte from the headers to the payload changes the lengths, so the hash.
        let moved = message_hash(&GENESIS, &link(1, b"NATS/1.0\r\n\r\n{", b"}"));
        assert_ne!(base, moved);
        // The covered block may come in pieces.
        let split = Link { headers: [b"NATS/1.0", b"\r\n\r\n"], ..link(1, b"", b"{}") };
        assert_eq!(base, message_hash(&GENESIS, &split));
    }

    #[test]
    fn hex_round_trips() {
        let hash = [0xab; 32];
        assert_eq!(hash_from_hex(&to_hex(&hash)), Some(hash));
        assert_eq!(hash_from_hex(&to_hex(&hash).to_uppercase()), Some(hash));
        assert_eq!(hash_from_hex("abc"), None);
        assert_eq!(from_hex::<1>("zz"), None);
    }
}
