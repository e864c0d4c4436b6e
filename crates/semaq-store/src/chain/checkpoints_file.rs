//! The checkpoints file on disk (format in [`super::checkpoint`]): opened with a torn last
//! record cut, appended to, read back by position. Through a [`Storage`], like every file of a
//! stream, so the crash tests cover it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::checkpoint::{decode_file, Checkpoint, CheckpointFile, FILE_HEADER, RECORD_BYTES};
use crate::error::{io_error, StoreError, StoreResult};
use crate::storage::{self, OpenMode, Storage, StorageFile};

/// An open checkpoints file.
#[derive(Debug)]
pub struct CheckpointsFile {
    file: Arc<dyn StorageFile>,
    path: PathBuf,
    /// Where the next record goes: after the last whole record, so a record cut short by a
    /// failed write is written over rather than left in the middle.
    end: u64,
}

impl CheckpointsFile {
    /// Opens the file at `path`, creating it (durably: file and directory entry) when missing,
    /// and cutting a torn last record (durably). Returns what it holds.
    pub fn open(storage: &dyn Storage, path: &Path) -> StoreResult<(Self, CheckpointFile)> {
        let bytes = storage::read_if_present(storage, path).map_err(io_error("read", path))?.unwrap_or_default();
        let file: Arc<dyn StorageFile> =
            storage.open(path, OpenMode::Create, 0).map_err(io_error("open", path))?.into();
        // Missing, or created by a crash before its header was durable: start it afresh.
        if bytes.len() < FILE_HEADER.len() && FILE_HEADER.starts_with(&bytes) {
            file.set_len(0).map_err(io_error("truncate", path))?;
            file.write_at(&FILE_HEADER, 0).map_err(io_error("write", path))?;
            file.sync_all().map_err(io_error("fsync", path))?;
            let dir = path.parent().unwrap_or(Path::new("."));
            storage.sync_dir(dir).map_err(io_error("fsync", dir))?;
            let end = FILE_HEADER.len() as u64;
            return Ok((CheckpointsFile { file, path: path.to_path_buf(), end }, CheckpointFile::default()));
        }
        let decoded = decode_file(&bytes)
            .map_err(|detail| StoreError::Corrupt { seq: 0, detail: format!("{}: {detail}", path.display()) })?;
        let end = (bytes.len() - decoded.torn_bytes) as u64;
        if decoded.torn_bytes > 0 {
            // An append cut short by a crash: the checkpoint was never reported durable.
            file.set_len(end).and_then(|()| file.sync_all()).map_err(io_error("truncate", path))?;
        }
        Ok((CheckpointsFile { file, path: path.to_path_buf(), end }, decoded))
    }

    /// Appends records (handed to the OS; [`CheckpointsFile::handle`] syncs them).
    pub fn append(&mut self, checkpoints: &[Checkpoint]) -> StoreResult<()> {
        let bytes: Vec<u8> = checkpoints.iter().flat_map(|checkpoint| checkpoint.encode()).collect();
        self.file.write_at(&bytes, self.end).map_err(io_error("write", &self.path))?;
        self.end += bytes.len() as u64;
        Ok(())
    }

    /// The open file, to fsync without holding whatever guards this value.
    pub fn handle(&self) -> Arc<dyn StorageFile> {
        Arc::clone(&self.file)
    }

    /// Makes every appended record durable.
    pub fn sync(&self) -> StoreResult<()> {
        self.file.sync_data().map_err(io_error("fsync", &self.path))
    }

    /// The path, for messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Records in the file.
    pub fn len(&self) -> u64 {
        (self.end - FILE_HEADER.len() as u64) / RECORD_BYTES as u64
    }

    /// Whether the file holds no record.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The record at `position` (0 is the oldest), if it is there and intact.
    pub fn read(&self, position: u64) -> Option<Checkpoint> {
        let mut raw = [0u8; RECORD_BYTES];
        let offset = FILE_HEADER.len() as u64 + position.checked_mul(RECORD_BYTES as u64)?;
        if offset + RECORD_BYTES as u64 > self.end {
            return None;
        }
        self.file.read_at(&mut raw, offset).ok()?;
        Checkpoint::decode(&raw)
    }
}
