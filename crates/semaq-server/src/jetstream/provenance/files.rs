//! What a level-4 stream keeps beside its messages: its key pair and its checkpoints.
//!
//! ```text
//! <stream dir>/provenance/signing.key    Ed25519 secret seed (mode 0600), written once
//! <stream dir>/provenance/public.key     its public key, for offline verifiers
//! <stream dir>/provenance/checkpoints    append-only, fixed-size signed records
//! ```
//!
//! The byte formats are `semaq_store::chain::checkpoint`'s. Memory streams keep the same in
//! memory: a fresh key per start (their messages do not survive a restart either).

use std::collections::VecDeque;
use std::path::Path;
use std::sync::Arc;

use rand::TryRngCore;
use semaq_store::chain::checkpoint::{self, Checkpoint, KeyPair, PublicKey};
use semaq_store::chain::checkpoints_file::CheckpointsFile;
use semaq_store::storage::{self, StdDisk, StorageFile};

use crate::limits;

/// The provenance directory inside a stream's directory.
pub const DIR_NAME: &str = "provenance";
/// The secret key's file.
pub const SIGNING_KEY_FILE: &str = "signing.key";
/// The public key's file.
pub const PUBLIC_KEY_FILE: &str = "public.key";
/// The checkpoints file.
pub const CHECKPOINTS_FILE: &str = "checkpoints";

/// A fresh key pair from the operating system's random source.
fn generate_keys() -> Result<KeyPair, String> {
    let mut seed = [0u8; checkpoint::KEY_BYTES];
    rand::rngs::OsRng.try_fill_bytes(&mut seed).map_err(|e| format!("no randomness for a signing key: {e}"))?;
    let keys = KeyPair::from_seed(&seed);
    seed.fill(0);
    Ok(keys)
}

/// The stream's key pair: created on first use, then read back (memory streams: always fresh).
pub fn load_or_create_keys(dir: Option<&Path>) -> Result<KeyPair, String> {
    let Some(dir) = dir else { return generate_keys() };
    std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    let secret_path = dir.join(SIGNING_KEY_FILE);
    let keys = match std::fs::read(&secret_path) {
        Ok(bytes) => KeyPair::decode_file(&bytes).map_err(|e| format!("{}: {e}", secret_path.display()))?,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            let keys = generate_keys()?;
            write_new(&secret_path, &keys.encode_file(), 0o600)?;
            keys
        }
        Err(error) => return Err(format!("read {}: {error}", secret_path.display())),
    };
    let public_path = dir.join(PUBLIC_KEY_FILE);
    let recorded = std::fs::read(&public_path).ok().and_then(|bytes| PublicKey::decode_file(&bytes).ok());
    if recorded != Some(keys.public()) {
        if recorded.is_some() {
            tracing::warn!("{} did not match the signing key; rewritten", public_path.display());
        }
        write_new(&public_path, &keys.public().encode_file(), 0o644)?;
    }
    Ok(keys)
}

/// Writes a small file so a crash leaves the old one or the new one: temporary file, fsync,
/// rename, directory fsync.
fn write_new(path: &Path, bytes: &[u8], mode: u32) -> Result<(), String> {
    storage::write_atomic(&StdDisk, path, bytes, mode).map_err(|e| format!("write {}: {e}", path.display()))
}

/// The checkpoints of one stream: the newest in memory, all of them in the file (file streams).
#[derive(Debug)]
pub struct CheckpointLog {
    /// `None` for memory streams.
    file: Option<CheckpointsFile>,
    /// Records written so far (for memory streams, including those dropped from `recent`).
    total: u64,
    /// The newest records, oldest first.
    recent: VecDeque<Checkpoint>,
    /// Most records `recent` holds.
    recent_max: usize,
    /// Written since the last fsync.
    unsynced: bool,
    /// Memory streams: the sequence of the newest record dropped from `recent`.
    dropped_last_seq: Option<u64>,
}

impl CheckpointLog {
    /// Opens (creating) the checkpoints file in `dir`, cutting a torn last record; memory
    /// streams (`None`) start empty.
    pub fn open(dir: Option<&Path>) -> Result<Self, String> {
        let Some(dir) = dir else {
            return Ok(Self::empty(None, limits::PROVENANCE_MEMORY_CHECKPOINTS_MAX));
        };
        let path = dir.join(CHECKPOINTS_FILE);
        let (file, decoded) = CheckpointsFile::open(&StdDisk, &path).map_err(|e| e.to_string())?;
        let mut log = Self::empty(None, limits::PROVENANCE_CHECKPOINTS_CACHED_MAX);
        if !decoded.damaged.is_empty() {
            tracing::error!("{}: {} damaged checkpoint records", path.display(), decoded.damaged.len());
        }
        log.total = file.len();
        let skip = decoded.checkpoints.len().saturating_sub(log.recent_max);
        log.recent.extend(decoded.checkpoints.into_iter().skip(skip));
        log.file = Some(file);
        Ok(log)
    }

    fn empty(file: Option<CheckpointsFile>, recent_max: usize) -> Self {
        CheckpointLog { file, total: 0, recent: VecDeque::new(), recent_max, unsynced: false, dropped_last_seq: None }
    }

    /// The newest checkpoint.
    pub fn last(&self) -> Option<&Checkpoint> {
        self.recent.back()
    }

    /// Records written so far.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Appends checkpoints (handed to the OS; [`CheckpointLog::take_unsynced`] makes them durable).
    pub fn append(&mut self, checkpoints: &[Checkpoint]) -> Result<(), String> {
        if let Some(file) = &mut self.file {
            file.append(checkpoints).map_err(|e| e.to_string())?;
            self.unsynced = true;
        }
        for checkpoint in checkpoints {
            if self.recent.len() >= self.recent_max {
                self.dropped_last_seq = self.recent.pop_front().map(|c| c.seq);
            }
            self.recent.push_back(*checkpoint);
        }
        self.total += checkpoints.len() as u64;
        Ok(())
    }

    /// A handle to fsync outside the lock, when something was written since the last one.
    pub fn take_unsynced(&mut self) -> Option<Arc<dyn StorageFile>> {
        if !std::mem::take(&mut self.unsynced) {
            return None;
        }
        self.file.as_ref().map(CheckpointsFile::handle)
    }

    /// The first checkpoint at or after `seq`: the one that covers the message at `seq`.
    pub fn covering(&self, seq: u64) -> Option<Checkpoint> {
        let last = self.recent.back()?;
        if seq > last.seq {
            return None;
        }
        let at = self.recent.partition_point(|c| c.seq < seq);
        let before_window = self.total - self.recent.len() as u64;
        if at > 0 || before_window == 0 {
            return self.recent.get(at).copied();
        }
        if self.file.is_none() {
            // Memory: the records before the window are gone; the front covers `seq` only if
            // the last dropped one did not.
            return self.dropped_last_seq.is_none_or(|dropped| dropped < seq).then(|| self.recent.front().copied())?;
        }
        // Older than the cached window: binary search the file's fixed-size records.
        let (mut low, mut high) = (0u64, before_window);
        while low < high {
            let middle = low + (high - low) / 2;
            match self.read_record(middle)? {
                found if found.seq < seq => low = middle + 1,
                _ => high = middle,
            }
        }
        if low == before_window {
            return self.recent.front().copied();
        }
        self.read_record(low)
    }

    /// Records `offset..offset + limit`, oldest first; memory streams only have the newest.
    pub fn page(&self, offset: u64, limit: usize) -> Vec<Checkpoint> {
        let cached_from = self.total - self.recent.len() as u64;
        let mut out = Vec::with_capacity(limit.min(self.recent.len() + 64));
        let mut position = offset;
        while out.len() < limit && position < self.total {
            let found = match position.checked_sub(cached_from) {
                Some(index) => self.recent.get(index as usize).copied(),
                None if self.file.is_some() => self.read_record(position),
                None => {
                    position = cached_from;
                    continue;
                }
            };
            out.extend(found);
            position += 1;
        }
        out
    }

    /// The first position [`CheckpointLog::page`] can serve.
    pub fn first_available(&self) -> u64 {
        if self.file.is_some() {
            0
        } else {
            self.total - self.recent.len() as u64
        }
    }

    fn read_record(&self, position: u64) -> Option<Checkpoint> {
        self.file.as_ref()?.read(position)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signed(keys: &KeyPair, seqs: impl IntoIterator<Item = u64>) -> Vec<Checkpoint> {
        seqs.into_iter().map(|seq| keys.sign("S", seq, &[seq as u8; 32])).collect()
    }

    #[test]
    fn keys_are_created_once_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let first = load_or_create_keys(Some(dir.path())).unwrap();
        let again = load_or_create_keys(Some(dir.path())).unwrap();
        assert_eq!(first.public(), again.public());
        let public = std::fs::read(dir.path().join(PUBLIC_KEY_FILE)).unwrap();
        assert_eq!(PublicKey::decode_file(&public).unwrap(), first.public());
        assert_ne!(load_or_create_keys(None).unwrap().public(), first.public());
    }

    #[test]
    fn checkpoints_survive_reopening_and_old_ones_are_found_in_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let keys = KeyPair::from_seed(&[3; 32]);
        let mut log = CheckpointLog::open(Some(dir.path())).unwrap();
        let all = signed(&keys, (1..=5000).map(|n| n * 10));
        log.append(&all).unwrap();
        assert!(log.take_unsynced().is_some() && log.take_unsynced().is_none());
        drop(log);
        let log = CheckpointLog::open(Some(dir.path())).unwrap();
        assert_eq!((log.total(), log.last().map(|c| c.seq)), (5000, Some(50_000)));
        assert_eq!(log.covering(1).map(|c| c.seq), Some(10), "the oldest comes from the file");
        assert_eq!(log.covering(10).map(|c| c.seq), Some(10));
        assert_eq!(log.covering(11_005).map(|c| c.seq), Some(11_010));
        assert_eq!(log.covering(49_995).map(|c| c.seq), Some(50_000));
        assert_eq!(log.covering(50_001), None, "not covered yet");
        assert_eq!(log.page(0, 3), all[..3].to_vec());
        assert_eq!(log.page(4998, 10), all[4998..].to_vec());
    }

    #[test]
    fn a_torn_last_record_is_cut() {
        let dir = tempfile::tempdir().unwrap();
        let keys = KeyPair::from_seed(&[3; 32]);
        let mut log = CheckpointLog::open(Some(dir.path())).unwrap();
        log.append(&signed(&keys, [5, 9])).unwrap();
        drop(log);
        let path = dir.path().join(CHECKPOINTS_FILE);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.extend_from_slice(&[1, 2, 3]);
        std::fs::write(&path, &bytes).unwrap();
        let mut log = CheckpointLog::open(Some(dir.path())).unwrap();
        assert_eq!(log.total(), 2);
        log.append(&signed(&keys, [12])).unwrap();
        drop(log);
        let decoded = checkpoint::decode_file(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(decoded.checkpoints.iter().map(|c| c.seq).collect::<Vec<_>>(), vec![5, 9, 12]);
    }

    #[test]
    fn memory_logs_keep_the_newest() {
        let keys = KeyPair::from_seed(&[3; 32]);
        let mut log = CheckpointLog::open(None).unwrap();
        log.recent_max = 4;
        log.append(&signed(&keys, 1..=10)).unwrap();
        assert_eq!(log.first_available(), 6);
        assert_eq!(log.page(0, 10).iter().map(|c| c.seq).collect::<Vec<_>>(), vec![7, 8, 9, 10]);
        assert_eq!(log.covering(2), None, "dropped");
        assert_eq!(log.covering(6), None, "dropped");
        assert_eq!(log.covering(7).map(|c| c.seq), Some(7));
        assert_eq!(log.covering(8).map(|c| c.seq), Some(8));
    }
}
