//! The registry file: `<store_dir>/registry/registry.json`, one header line
//! (`SEMAQ-REGISTRY 1 <crc32 hex> <json length>`) then the state as JSON. Written atomically
//! through the store's I/O seam (`semaq_store::storage::write_atomic`: temporary file, fsync,
//! rename, directory fsync), so a crash leaves the old or the new file, and the simulated disk
//! reaches it as it reaches every stream file; the checksum and length make a truncated or
//! damaged file an error at startup, never an empty registry.

use std::path::{Path, PathBuf};

use semaq_store::storage::{self, Storage};
use semaq_store::StdDisk;

use super::types::State;

/// The file's name inside the registry directory.
pub const FILE_NAME: &str = "registry.json";
const MAGIC: &str = "SEMAQ-REGISTRY";
const FORMAT_VERSION: u32 = 1;

/// Why the registry file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum StoreFileError {
    /// Reading or writing failed.
    #[error("schema registry file {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The file exists but is not a whole, intact registry file.
    #[error("schema registry file {path} is damaged ({reason}); refusing to start rather than drop registered schemas (restore it or move it away)")]
    Damaged {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
}

/// The current time in unix milliseconds, as version registration times are kept.
pub(crate) fn now_ms() -> u64 {
    let since_epoch = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX)
}

/// The registry file inside `dir`.
pub fn file_path(dir: &Path) -> PathBuf {
    dir.join(FILE_NAME)
}

/// Reads the state from the real disk; an absent file is an empty registry.
pub fn load(dir: &Path) -> Result<State, StoreFileError> {
    load_on(&StdDisk, dir)
}

/// Reads the state from `storage`; an absent file is an empty registry.
pub fn load_on(storage: &dyn Storage, dir: &Path) -> Result<State, StoreFileError> {
    let path = file_path(dir);
    let shown = path.display().to_string();
    let bytes = match storage::read_if_present(storage, &path) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return Ok(State::default()),
        Err(source) => return Err(StoreFileError::Io { path: shown, source }),
    };
    decode(&bytes).map_err(|reason| StoreFileError::Damaged { path: shown, reason })
}

/// Writes the state atomically to the real disk.
pub fn save(dir: &Path, state: &State) -> Result<(), StoreFileError> {
    save_on(&StdDisk, dir, state)
}

/// Writes the state atomically to `storage`: durable when it returns; on an error the old file
/// is still the one read back.
pub fn save_on(storage: &dyn Storage, dir: &Path, state: &State) -> Result<(), StoreFileError> {
    let path = file_path(dir);
    let io = |source| StoreFileError::Io { path: path.display().to_string(), source };
    storage.create_dir_all(dir).map_err(io)?;
    let bytes = encode(state).map_err(|e| io(std::io::Error::other(e)))?;
    storage::write_atomic(storage, &path, &bytes, 0).map_err(io)
}

/// The file's bytes for `state`.
pub fn encode(state: &State) -> Result<Vec<u8>, serde_json::Error> {
    let body = serde_json::to_vec_pretty(state)?;
    let mut bytes = format!("{MAGIC} {FORMAT_VERSION} {:08x} {}\n", crc32fast::hash(&body), body.len()).into_bytes();
    bytes.extend_from_slice(&body);
    Ok(bytes)
}

/// The state in `bytes`, or what is wrong with them.
pub fn decode(bytes: &[u8]) -> Result<State, String> {
    let newline = bytes.iter().position(|b| *b == b'\n').ok_or("no header line")?;
    let header = std::str::from_utf8(&bytes[..newline]).map_err(|_| "header is not text")?;
    let body = &bytes[newline + 1..];
    let fields: Vec<&str> = header.split(' ').collect();
    let [magic, version, crc, length] = fields.as_slice() else { return Err(format!("bad header {header:?}")) };
    if *magic != MAGIC || *version != FORMAT_VERSION.to_string() {
        return Err(format!("unknown header {header:?}"));
    }
    let length: usize = length.parse().map_err(|_| format!("bad length in header {header:?}"))?;
    if body.len() != length {
        return Err(format!("{} bytes of state where the header says {length} (truncated?)", body.len()));
    }
    let expected = u32::from_str_radix(crc, 16).map_err(|_| format!("bad checksum in header {header:?}"))?;
    if crc32fast::hash(body) != expected {
        return Err("checksum mismatch".into());
    }
    serde_json::from_slice(body).map_err(|e| format!("state is not valid JSON: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> State {
        let mut state = State { next_id: 2, ..State::default() };
        state.schemas.insert(
            1,
            super::super::types::StoredSchema {
                schema_type: super::super::types::SchemaType::Avro,
                schema: "\"string\"".into(),
                references: vec![],
            },
        );
        state
    }

    #[test]
    fn a_saved_state_loads_back_identical() {
        let dir = tempfile::tempdir().unwrap();
        save(dir.path(), &sample()).unwrap();
        assert_eq!(load(dir.path()).unwrap(), sample());
    }

    #[test]
    fn files_written_before_registration_times_still_load() {
        let body = br#"{"next_id":2,"schemas":{},"subjects":{"s":{"versions":[{"version":1,"id":1}]}}}"#;
        let mut bytes = format!("{MAGIC} {FORMAT_VERSION} {:08x} {}\n", crc32fast::hash(body), body.len()).into_bytes();
        bytes.extend_from_slice(body);
        let state = decode(&bytes).unwrap();
        assert_eq!(state.subjects["s"].versions[0].registered_ms, None);
        let mut timed = state.clone();
        timed.subjects.get_mut("s").unwrap().versions[0].registered_ms = Some(now_ms());
        assert_eq!(decode(&encode(&timed).unwrap()).unwrap(), timed, "the time is kept");
    }

    #[test]
    fn a_missing_file_is_an_empty_registry() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(load(dir.path()).unwrap(), State::default());
    }

    #[test]
    fn every_truncation_and_every_flipped_byte_is_reported() {
        let bytes = encode(&sample()).unwrap();
        for cut in 0..bytes.len() {
            assert!(decode(&bytes[..cut]).is_err(), "truncated at {cut} was accepted");
        }
        for at in 0..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[at] ^= 0x01;
            assert!(decode(&damaged).is_err() || decode(&damaged).as_ref() == Ok(&sample()), "flip at {at}");
        }
    }
}
