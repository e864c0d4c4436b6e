//! Faults on the real disk, switched from outside the process: what a running server does when
//! an fsync fails or the disk fills, tested end to end (the simulated disk, `sim`, tests the
//! store alone).
//!
//! [`FaultSwitch`] wraps [`StdDisk`] and reads a control file before each write and fsync of
//! the files it opened: `eio` makes fsyncs (files and directories) fail with EIO, `enospc`
//! makes writes fail with ENOSPC before writing anything; anything else, or no file, runs
//! normally. Reading the file costs a syscall per call, so only a server started with the
//! fault failpoint uses it.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{LockMode, OpenMode, SharedStorage, StdDisk, Storage, StorageFile};

/// A fault the control file asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    None,
    /// `eio`: every fsync fails.
    FailSyncs,
    /// `enospc`: every write fails, the disk being full.
    Full,
}

/// The real disk with faults switched by a control file.
#[derive(Debug, Clone)]
pub struct FaultSwitch {
    control: Arc<Path>,
}

impl FaultSwitch {
    /// The real disk, with faults read from `control` at each write and fsync.
    pub fn shared(control: PathBuf) -> SharedStorage {
        Arc::new(FaultSwitch { control: Arc::from(control) })
    }

    fn fault(control: &Path) -> Fault {
        match std::fs::read_to_string(control) {
            Ok(text) if text.trim() == "eio" => Fault::FailSyncs,
            Ok(text) if text.trim() == "enospc" => Fault::Full,
            _ => Fault::None,
        }
    }
}

fn check_sync(control: &Path) -> io::Result<()> {
    match FaultSwitch::fault(control) {
        Fault::FailSyncs => Err(io::Error::from_raw_os_error(5)),
        _ => Ok(()),
    }
}

impl Storage for FaultSwitch {
    fn open(&self, path: &Path, mode: OpenMode, permissions: u32) -> io::Result<Box<dyn StorageFile>> {
        let inner = StdDisk.open(path, mode, permissions)?;
        Ok(Box::new(FaultyFile { inner, control: self.control.clone() }))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        StdDisk.rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        StdDisk.remove_file(path)
    }

    fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        StdDisk.remove_dir_all(path)
    }

    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        StdDisk.create_dir_all(path)
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        StdDisk.list_dir(dir)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        check_sync(&self.control)?;
        StdDisk.sync_dir(dir)
    }
}

/// A file of [`FaultSwitch`].
#[derive(Debug)]
struct FaultyFile {
    inner: Box<dyn StorageFile>,
    control: Arc<Path>,
}

impl StorageFile for FaultyFile {
    fn read_at(&self, buffer: &mut [u8], offset: u64) -> io::Result<()> {
        self.inner.read_at(buffer, offset)
    }

    fn write_at(&self, bytes: &[u8], offset: u64) -> io::Result<()> {
        if FaultSwitch::fault(&self.control) == Fault::Full {
            return Err(io::Error::from(io::ErrorKind::StorageFull));
        }
        self.inner.write_at(bytes, offset)
    }

    fn length(&self) -> io::Result<u64> {
        self.inner.length()
    }

    fn set_len(&self, length: u64) -> io::Result<()> {
        self.inner.set_len(length)
    }

    fn sync_data(&self) -> io::Result<()> {
        check_sync(&self.control)?;
        self.inner.sync_data()
    }

    fn sync_all(&self) -> io::Result<()> {
        check_sync(&self.control)?;
        self.inner.sync_all()
    }

    fn start_writeback(&self, offset: u64, length: u64) {
        self.inner.start_writeback(offset, length);
    }

    fn try_lock(&self, mode: LockMode) -> io::Result<bool> {
        self.inner.try_lock(mode)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_control_file_switches_fsync_and_write_faults_on_and_off() {
        let dir = tempfile::tempdir().unwrap();
        let control = dir.path().join("faults");
        let disk = FaultSwitch::shared(control.clone());
        let file = disk.open(&dir.path().join("log"), OpenMode::Create, 0).unwrap();
        file.write_at(b"one", 0).unwrap();
        file.sync_data().unwrap();

        std::fs::write(&control, "eio\n").unwrap();
        assert_eq!(file.sync_data().unwrap_err().raw_os_error(), Some(5));
        assert!(disk.sync_dir(dir.path()).is_err());
        file.write_at(b"two", 3).unwrap();

        std::fs::write(&control, "enospc").unwrap();
        let full = file.write_at(b"three", 6).unwrap_err();
        assert!(super::super::is_out_of_space(&full));
        file.sync_data().unwrap();

        std::fs::remove_file(&control).unwrap();
        file.write_at(b"three", 6).unwrap();
        let mut read = [0u8; 11];
        file.read_at(&mut read, 0).unwrap();
        assert_eq!(&read, b"onetwothree");
    }
}
