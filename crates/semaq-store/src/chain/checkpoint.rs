//! Signed checkpoints of the chain head, the stream's Ed25519 key pair, and the bytes of the
//! files they are kept in (the server writes them, `semaq verify --dir` reads them).
//!
//! ```text
//! checkpoints file: header "SQCP" | version u32, then fixed 112-byte records, appended only
//!  0        8                               40                                104      108     112
//!  +--------+-------------------------------+--------------------------------+--------+-------+
//!  | seq    | head hash                     | Ed25519 signature              |reserved| crc32 |
//!  | u64    | 32 bytes                      | 64 bytes                       |  u32   | 0..108|
//!  +--------+-------------------------------+--------------------------------+--------+-------+
//! key files (44 bytes): magic "SQSK" (secret seed) or "SQPK" (public key) | version u32 | 32 bytes | crc32 0..40
//! ```
//!
//! A signature covers `"SQCHECKPOINT1" ‖ len(stream) (u64 LE) ‖ stream ‖ seq (u64 LE) ‖ head`.

use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};

use super::{to_hex, Hash, HASH_BYTES};

/// Bytes of an Ed25519 signature.
pub const SIGNATURE_BYTES: usize = 64;
/// Bytes of a key (a secret seed or a public key).
pub const KEY_BYTES: usize = 32;
/// The checkpoints file's header: magic and version.
pub const FILE_HEADER: [u8; 8] = *b"SQCP\x01\0\0\0";
/// Bytes of one checkpoint record.
pub const RECORD_BYTES: usize = 112;
/// Bytes of a key file.
pub const KEY_FILE_BYTES: usize = 44;
/// Magic of the secret key file.
pub const SECRET_KEY_MAGIC: [u8; 4] = *b"SQSK";
/// Magic of the public key file.
pub const PUBLIC_KEY_MAGIC: [u8; 4] = *b"SQPK";
/// Version of both key files.
const KEY_FILE_VERSION: u32 = 1;
/// Domain tag of what a checkpoint signature covers.
const SIGNED_DOMAIN: &[u8] = b"SQCHECKPOINT1";

const RECORD_HEAD_OFFSET: usize = 8;
const RECORD_SIGNATURE_OFFSET: usize = RECORD_HEAD_OFFSET + HASH_BYTES;
const RECORD_CRC_OFFSET: usize = RECORD_BYTES - 4;

/// A signed statement: in stream `stream`, the message at `seq` has chain hash `head`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checkpoint {
    /// The sequence signed.
    pub seq: u64,
    /// The chain hash of the message at `seq`.
    pub head: Hash,
    /// Ed25519 signature of [`signed_bytes`].
    pub signature: [u8; SIGNATURE_BYTES],
}

/// What a checkpoint's signature covers.
pub fn signed_bytes(stream: &str, seq: u64, head: &Hash) -> Vec<u8> {
    let mut out = Vec::with_capacity(SIGNED_DOMAIN.len() + 8 + stream.len() + 8 + HASH_BYTES);
    out.extend_from_slice(SIGNED_DOMAIN);
    out.extend_from_slice(&(stream.len() as u64).to_le_bytes());
    out.extend_from_slice(stream.as_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(head);
    out
}

impl Checkpoint {
    /// Whether the signature is `key`'s over (stream, seq, head).
    pub fn is_signed_by(&self, key: &PublicKey, stream: &str) -> bool {
        let signature = Signature::from_bytes(&self.signature);
        key.0.verify_strict(&signed_bytes(stream, self.seq, &self.head), &signature).is_ok()
    }

    /// The record's bytes in the checkpoints file.
    pub fn encode(&self) -> [u8; RECORD_BYTES] {
        let mut out = [0u8; RECORD_BYTES];
        out[..8].copy_from_slice(&self.seq.to_le_bytes());
        out[RECORD_HEAD_OFFSET..RECORD_SIGNATURE_OFFSET].copy_from_slice(&self.head);
        out[RECORD_SIGNATURE_OFFSET..RECORD_SIGNATURE_OFFSET + SIGNATURE_BYTES].copy_from_slice(&self.signature);
        let crc = crc32fast::hash(&out[..RECORD_CRC_OFFSET]);
        out[RECORD_CRC_OFFSET..].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// A record read back; `None` when its checksum fails.
    pub fn decode(raw: &[u8; RECORD_BYTES]) -> Option<Self> {
        let crc = u32::from_le_bytes(raw[RECORD_CRC_OFFSET..].try_into().ok()?);
        if crc32fast::hash(&raw[..RECORD_CRC_OFFSET]) != crc {
            return None;
        }
        Some(Checkpoint {
            seq: u64::from_le_bytes(raw[..8].try_into().ok()?),
            head: raw[RECORD_HEAD_OFFSET..RECORD_SIGNATURE_OFFSET].try_into().ok()?,
            signature: raw[RECORD_SIGNATURE_OFFSET..RECORD_SIGNATURE_OFFSET + SIGNATURE_BYTES].try_into().ok()?,
        })
    }
}

/// What a checkpoints file holds.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct CheckpointFile {
    /// Intact records, in file order.
    pub checkpoints: Vec<Checkpoint>,
    /// Positions (record index) of records whose checksum failed.
    pub damaged: Vec<u64>,
    /// Bytes of a partial last record (an append cut short by a crash).
    pub torn_bytes: usize,
}

/// Decodes a whole checkpoints file; `Err` when its header is not this format.
pub fn decode_file(bytes: &[u8]) -> Result<CheckpointFile, &'static str> {
    let body = bytes.strip_prefix(&FILE_HEADER[..]).ok_or("not a SemaQ checkpoints file (bad header)")?;
    let mut file = CheckpointFile { torn_bytes: body.len() % RECORD_BYTES, ..CheckpointFile::default() };
    for (position, raw) in body.chunks_exact(RECORD_BYTES).enumerate() {
        let raw: &[u8; RECORD_BYTES] = raw.try_into().map_err(|_| "record size")?;
        match Checkpoint::decode(raw) {
            Some(checkpoint) => file.checkpoints.push(checkpoint),
            None => file.damaged.push(position as u64),
        }
    }
    Ok(file)
}

/// A stream's public key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PublicKey(VerifyingKey);

impl PublicKey {
    /// From its 32 bytes; `None` if they are not a valid Ed25519 point.
    pub fn from_bytes(bytes: &[u8; KEY_BYTES]) -> Option<Self> {
        VerifyingKey::from_bytes(bytes).ok().map(PublicKey)
    }

    /// From hex (as the API serves it).
    pub fn from_hex(text: &str) -> Option<Self> {
        Self::from_bytes(&super::from_hex::<KEY_BYTES>(text.trim())?)
    }

    /// Its 32 bytes.
    pub fn to_bytes(&self) -> [u8; KEY_BYTES] {
        self.0.to_bytes()
    }

    /// Lower-case hex.
    pub fn to_hex(&self) -> String {
        to_hex(&self.to_bytes())
    }

    /// The public key file's bytes.
    pub fn encode_file(&self) -> [u8; KEY_FILE_BYTES] {
        encode_key_file(PUBLIC_KEY_MAGIC, &self.to_bytes())
    }

    /// Reads a public key file.
    pub fn decode_file(bytes: &[u8]) -> Result<Self, &'static str> {
        let key = decode_key_file(PUBLIC_KEY_MAGIC, bytes)?;
        Self::from_bytes(&key).ok_or("the public key file holds no valid Ed25519 key")
    }
}

/// A stream's signing key. The secret is zeroed when dropped.
pub struct KeyPair(SigningKey);

impl std::fmt::Debug for KeyPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("KeyPair").field(&self.public().to_hex()).finish()
    }
}

impl KeyPair {
    /// The key pair of a 32-byte secret seed (which must come from a cryptographic RNG).
    pub fn from_seed(seed: &[u8; KEY_BYTES]) -> Self {
        KeyPair(SigningKey::from_bytes(seed))
    }

    /// The public half.
    pub fn public(&self) -> PublicKey {
        PublicKey(self.0.verifying_key())
    }

    /// Signs (stream, seq, head).
    pub fn sign(&self, stream: &str, seq: u64, head: &Hash) -> Checkpoint {
        let signature = self.0.sign(&signed_bytes(stream, seq, head)).to_bytes();
        Checkpoint { seq, head: *head, signature }
    }

    /// The secret key file's bytes.
    pub fn encode_file(&self) -> [u8; KEY_FILE_BYTES] {
        encode_key_file(SECRET_KEY_MAGIC, &self.0.to_bytes())
    }

    /// Reads a secret key file.
    pub fn decode_file(bytes: &[u8]) -> Result<Self, &'static str> {
        decode_key_file(SECRET_KEY_MAGIC, bytes).map(|seed| Self::from_seed(&seed))
    }
}

fn encode_key_file(magic: [u8; 4], key: &[u8; KEY_BYTES]) -> [u8; KEY_FILE_BYTES] {
    let mut out = [0u8; KEY_FILE_BYTES];
    out[..4].copy_from_slice(&magic);
    out[4..8].copy_from_slice(&KEY_FILE_VERSION.to_le_bytes());
    out[8..8 + KEY_BYTES].copy_from_slice(key);
    let crc = crc32fast::hash(&out[..KEY_FILE_BYTES - 4]);
    out[KEY_FILE_BYTES - 4..].copy_from_slice(&crc.to_le_bytes());
    out
}

fn decode_key_file(magic: [u8; 4], bytes: &[u8]) -> Result<[u8; KEY_BYTES], &'static str> {
    let bytes: &[u8; KEY_FILE_BYTES] = bytes.try_into().map_err(|_| "key file has the wrong size")?;
    if bytes[..4] != magic || bytes[4..8] != KEY_FILE_VERSION.to_le_bytes() {
        return Err("key file has the wrong magic or version");
    }
    let crc = u32::from_le_bytes([bytes[40], bytes[41], bytes[42], bytes[43]]);
    if crc32fast::hash(&bytes[..KEY_FILE_BYTES - 4]) != crc {
        return Err("key file fails its checksum");
    }
    let mut key = [0u8; KEY_BYTES];
    key.copy_from_slice(&bytes[8..8 + KEY_BYTES]);
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_verifies_only_for_its_stream_seq_head_and_key() {
        let keys = KeyPair::from_seed(&[7; 32]);
        let other = KeyPair::from_seed(&[8; 32]);
        let checkpoint = keys.sign("EVENTS", 1000, &[3; 32]);
        assert!(checkpoint.is_signed_by(&keys.public(), "EVENTS"));
        assert!(!checkpoint.is_signed_by(&other.public(), "EVENTS"));
        assert!(!checkpoint.is_signed_by(&keys.public(), "OTHER"));
        assert!(!Checkpoint { seq: 1001, ..checkpoint }.is_signed_by(&keys.public(), "EVENTS"));
        assert!(!Checkpoint { head: [4; 32], ..checkpoint }.is_signed_by(&keys.public(), "EVENTS"));
    }

    #[test]
    fn records_and_files_round_trip_and_damage_is_found() {
        let keys = KeyPair::from_seed(&[1; 32]);
        let first = keys.sign("S", 5, &[1; 32]);
        let second = keys.sign("S", 9, &[2; 32]);
        let mut bytes = FILE_HEADER.to_vec();
        bytes.extend_from_slice(&first.encode());
        bytes.extend_from_slice(&second.encode());
        bytes.extend_from_slice(&first.encode()[..10]);
        let file = decode_file(&bytes).unwrap();
        assert_eq!(file.checkpoints, vec![first, second]);
        assert_eq!(file.torn_bytes, 10);
        bytes[FILE_HEADER.len() + RECORD_BYTES + 20] ^= 1;
        assert_eq!(decode_file(&bytes).unwrap().damaged, vec![1]);
        assert!(decode_file(b"nope").is_err());
    }

    #[test]
    fn key_files_round_trip_and_refuse_damage() {
        let keys = KeyPair::from_seed(&[9; 32]);
        let secret = keys.encode_file();
        assert_eq!(KeyPair::decode_file(&secret).unwrap().public(), keys.public());
        let public = keys.public().encode_file();
        assert_eq!(PublicKey::decode_file(&public).unwrap(), keys.public());
        assert!(PublicKey::decode_file(&secret).is_err(), "magic differs");
        let mut damaged = public;
        damaged[10] ^= 1;
        assert!(PublicKey::decode_file(&damaged).is_err());
        assert_eq!(PublicKey::from_hex(&keys.public().to_hex()), Some(keys.public()));
    }
}
