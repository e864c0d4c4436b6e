//! The stream's meta file: the floor, below which every sequence is gone.
//!
//! Two fixed slots written alternately, each with a generation and a checksum, so a torn write
//! of one slot leaves the other intact: updating the floor costs one small write and one fsync,
//! never a rename.
//!
//! The open meta file also carries the directory's lock: an exclusive `flock` held for the
//! store's lifetime, so two stores can never append to one stream.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use crate::error::{io_error, StoreError, StoreResult};
use crate::limits::meta_slot as ms;
use crate::record::{read_u32, read_u64};
use crate::storage::{LockMode, OpenMode, Storage, StorageFile};

/// File name of the meta file inside a stream directory.
pub(crate) const META_FILE_NAME: &str = "stream.meta";

/// The open meta file and what it last said. Shared with sync tickets ([`MetaFile::handle`]),
/// which raise the floor after their fsyncs without the store.
#[derive(Debug)]
pub(crate) struct MetaFile {
    shared: MetaHandle,
}

/// A shared handle on the meta file: one floor write at a time, under its own lock.
#[derive(Debug, Clone)]
pub(crate) struct MetaHandle(Arc<Mutex<Slots>>);

#[derive(Debug)]
struct Slots {
    file: Box<dyn StorageFile>,
    path: PathBuf,
    generation: u64,
    floor_seq: u64,
}

impl MetaHandle {
    fn slots(&self) -> std::sync::MutexGuard<'_, Slots> {
        // A writer that panicked left the slots as the file last said them.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Persists `floor_seq` unless the persisted floor is already there or past it: floors
    /// only rise, so a ticket finishing after a purge's own floor write changes nothing.
    pub(crate) fn raise_floor(&self, floor_seq: u64) -> StoreResult<()> {
        let mut slots = self.slots();
        if floor_seq > slots.floor_seq {
            slots.write_floor(floor_seq)?;
        }
        Ok(())
    }
}

impl MetaFile {
    /// Opens (creating if needed) the meta file in `dir` and reads the newest intact slot.
    pub(crate) fn open(storage: &dyn Storage, dir: &Path) -> StoreResult<Self> {
        let path = dir.join(META_FILE_NAME);
        let file = storage.open(&path, OpenMode::Create, 0).map_err(io_error("open", &path))?;
        lock(file.try_lock(LockMode::Exclusive), dir)?;
        let (generation, floor_seq) = read_newest_slot(&*file, &path)?.unwrap_or((0, 0));
        let slots = Slots { file, path, generation, floor_seq };
        Ok(MetaFile { shared: MetaHandle(Arc::new(Mutex::new(slots))) })
    }

    /// The persisted floor (0 when none was ever written).
    pub(crate) fn floor_seq(&self) -> u64 {
        self.shared.slots().floor_seq
    }

    /// Persists a new floor: written to the older slot, then fsynced.
    pub(crate) fn write_floor(&mut self, floor_seq: u64) -> StoreResult<()> {
        self.shared.slots().write_floor(floor_seq)
    }

    /// A handle that can raise the floor later, without the store.
    pub(crate) fn handle(&self) -> MetaHandle {
        self.shared.clone()
    }
}

impl Slots {
    fn write_floor(&mut self, floor_seq: u64) -> StoreResult<()> {
        let generation = self.generation + 1;
        let slot = encode_slot(generation, floor_seq);
        let offset = (generation % ms::SLOT_COUNT as u64) * ms::SIZE_BYTES as u64;
        self.file.write_at(&slot, offset).map_err(io_error("write", &self.path))?;
        self.file.sync_data().map_err(io_error("fsync", &self.path))?;
        self.generation = generation;
        self.floor_seq = floor_seq;
        Ok(())
    }
}

/// The floor recorded in `dir`'s meta file (0 when there is none), read without writing and
/// under a shared lock that is returned: a running store's exclusive lock excludes it, so a
/// reader never sees a directory a server is changing.
pub(crate) fn read_floor_shared(storage: &dyn Storage, dir: &Path) -> StoreResult<(Option<Box<dyn StorageFile>>, u64)> {
    let path = dir.join(META_FILE_NAME);
    let file = match storage.open(&path, OpenMode::Read, 0) {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok((None, 0)),
        Err(error) => return Err(io_error("open", &path)(error)),
    };
    lock(file.try_lock(LockMode::Shared), dir)?;
    let floor_seq = read_newest_slot(&*file, &path)?.map_or(0, |(_, floor_seq)| floor_seq);
    Ok((Some(file), floor_seq))
}

/// The outcome of taking the directory lock (a non-blocking `flock` on the real disk):
/// `Locked` when another open file holds it. The lock belongs to the open file and goes away
/// when it is closed (the store dropped) or the process dies.
fn lock(attempt: std::io::Result<bool>, dir: &Path) -> StoreResult<()> {
    match attempt {
        Ok(true) => Ok(()),
        Ok(false) => Err(StoreError::Locked(dir.to_path_buf())),
        Err(error) => Err(io_error("lock", dir)(error)),
    }
}

/// `(generation, floor)` of the newest intact slot of the meta file at `path`, if any.
fn read_newest_slot(file: &dyn StorageFile, path: &Path) -> StoreResult<Option<(u64, u64)>> {
    let mut raw = [0u8; ms::SIZE_BYTES * ms::SLOT_COUNT];
    let length = file.length().map_err(io_error("stat", path))?;
    // A length beyond `usize` is longer than both slots: they are read whole.
    let readable = usize::try_from(length).map_or(raw.len(), |length| length.min(raw.len()));
    file.read_at(&mut raw[..readable], 0).map_err(io_error("read", path))?;
    Ok(raw.chunks_exact(ms::SIZE_BYTES).filter_map(decode_slot).max_by_key(|&(generation, _)| generation))
}

fn encode_slot(generation: u64, floor_seq: u64) -> [u8; ms::SIZE_BYTES] {
    let mut raw = [0u8; ms::SIZE_BYTES];
    raw[ms::MAGIC_OFFSET..ms::MAGIC_OFFSET + 4].copy_from_slice(&ms::MAGIC.to_le_bytes());
    raw[ms::VERSION_OFFSET..ms::VERSION_OFFSET + 4].copy_from_slice(&ms::VERSION.to_le_bytes());
    raw[ms::GENERATION_OFFSET..ms::GENERATION_OFFSET + 8].copy_from_slice(&generation.to_le_bytes());
    raw[ms::FLOOR_SEQ_OFFSET..ms::FLOOR_SEQ_OFFSET + 8].copy_from_slice(&floor_seq.to_le_bytes());
    let crc = crc32fast::hash(&raw[..ms::CRC_OFFSET]);
    raw[ms::CRC_OFFSET..ms::CRC_OFFSET + 4].copy_from_slice(&crc.to_le_bytes());
    raw
}

/// `(generation, floor)` of an intact slot.
fn decode_slot(raw: &[u8]) -> Option<(u64, u64)> {
    let intact = read_u32(raw, ms::MAGIC_OFFSET) == ms::MAGIC
        && read_u32(raw, ms::VERSION_OFFSET) == ms::VERSION
        && crc32fast::hash(&raw[..ms::CRC_OFFSET]) == read_u32(raw, ms::CRC_OFFSET);
    intact.then(|| (read_u64(raw, ms::GENERATION_OFFSET), read_u64(raw, ms::FLOOR_SEQ_OFFSET)))
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::storage::StdDisk;
    use std::fs::OpenOptions;
    use std::os::unix::fs::FileExt;

    #[test]
    fn a_directory_is_opened_by_one_store_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let first = MetaFile::open(&StdDisk, dir.path()).unwrap();
        assert!(matches!(MetaFile::open(&StdDisk, dir.path()), Err(StoreError::Locked(_))));
        drop(first);
        MetaFile::open(&StdDisk, dir.path()).unwrap();
    }

    #[test]
    fn the_newest_intact_slot_wins_and_a_torn_slot_falls_back() {
        let dir = tempfile::tempdir().unwrap();
        let mut meta = MetaFile::open(&StdDisk, dir.path()).unwrap();
        assert_eq!(meta.floor_seq(), 0);
        meta.write_floor(10).unwrap();
        meta.write_floor(20).unwrap();
        drop(meta);
        assert_eq!(MetaFile::open(&StdDisk, dir.path()).unwrap().floor_seq(), 20);
        // Tear the newest slot (generation 2 lives in slot 0).
        let file = OpenOptions::new().write(true).open(dir.path().join(META_FILE_NAME)).unwrap();
        file.write_all_at(&[0xff; 4], ms::FLOOR_SEQ_OFFSET as u64).unwrap();
        assert_eq!(MetaFile::open(&StdDisk, dir.path()).unwrap().floor_seq(), 10);
    }
}
