//! Faults on the real disk, switched from outside the process: what a running server does when
//! an fsync fails or the disk fills, tested end to end (the simulated disk, `sim`, tests the
//! store alone).
//!
//! [`FaultSwitch`] wraps [`StdDisk`] and reads a control file before each write and fsync of
//! the files it opened. Its words, any of them at once:
//! - `eio` makes fsyncs (files and directories) fail with EIO;
//! - `enospc` makes writes fail with ENOSPC before writing anything;
//! - `enospc-once` makes the next write fail so, and takes the word out of the file: a test
//!   sees the full disk met when the word is gone;
//! - `hold-one` makes the next fsync wait: it turns the word into `holding` and waits while
//!   that is there (at most `FAULT_HOLD_WAIT_MAX`); other fsyncs run. A test so keeps one
//!   commit in flight, knows when it is (`holding`), and lines a race up deterministically.
//!
//! Anything else, or no file, runs normally. Reading the file costs a syscall per call, so
//! only a server started with the fault failpoint uses it.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use super::{LockMode, OpenMode, SharedStorage, StdDisk, Storage, StorageFile};
use crate::limits::{FAULT_HOLD_POLL_INTERVAL, FAULT_HOLD_WAIT_MAX};

/// Serializes the control file's read-modify-writes (`enospc-once`, `hold-one`) between stores.
static REWRITING: Mutex<()> = Mutex::new(());
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
}

/// The control file's words.
fn words(control: &Path) -> Vec<String> {
    std::fs::read_to_string(control)
        .map(|text| text.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default()
}

/// Takes `word` out of the control file, putting `instead` in its place; false when another
/// call took it first.
fn take_word(control: &Path, word: &str, instead: Option<&str>) -> io::Result<bool> {
    let _rewriting = REWRITING.lock().unwrap_or_else(PoisonError::into_inner);
    let mut words = words(control);
    let Some(position) = words.iter().position(|known| known == word) else { return Ok(false) };
    match instead {
        Some(instead) => instead.clone_into(&mut words[position]),
        None => drop(words.remove(position)),
    }
    // Replaced at once: a held fsync polling the file mid-write would read it empty and go.
    let next = control.with_extension("next");
    std::fs::write(&next, words.join(" "))?;
    std::fs::rename(&next, control)?;
    Ok(true)
}

fn check_sync(control: &Path) -> io::Result<()> {
    let words = words(control);
    if words.iter().any(|word| word == "eio") {
        return Err(io::Error::from_raw_os_error(5));
    }
    if !words.iter().any(|word| word == "hold-one") || !take_word(control, "hold-one", Some("holding"))? {
        return Ok(());
    }
    let deadline = Instant::now() + FAULT_HOLD_WAIT_MAX;
    while self::words(control).iter().any(|word| word == "holding") && Instant::now() < deadline {
        std::thread::sleep(FAULT_HOLD_POLL_INTERVAL);
    }
    Ok(())
}

fn check_write(control: &Path) -> io::Result<()> {
    let words = words(control);
    let full = words.iter().any(|word| word == "enospc")
        || (words.iter().any(|word| word == "enospc-once") && take_word(control, "enospc-once", None)?);
    if full {
        return Err(io::Error::from(io::ErrorKind::StorageFull));
    }
    Ok(())
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
        check_write(&self.control)?;
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

    #[test]
    fn enospc_once_fails_one_write_and_hold_one_keeps_one_fsync_until_released() {
        let dir = tempfile::tempdir().unwrap();
        let control = dir.path().join("faults");
        let disk = FaultSwitch::shared(control.clone());
        let file: Arc<dyn StorageFile> = Arc::from(disk.open(&dir.path().join("log"), OpenMode::Create, 0).unwrap());

        std::fs::write(&control, "hold-one enospc-once").unwrap();
        assert!(super::super::is_out_of_space(&file.write_at(b"one", 0).unwrap_err()));
        assert_eq!(std::fs::read_to_string(&control).unwrap(), "hold-one", "the word is taken out");
        file.write_at(b"one", 0).unwrap();

        let (done, finished) = std::sync::mpsc::channel();
        let held = Arc::clone(&file);
        let syncing = std::thread::spawn(move || done.send(held.sync_data().is_ok()));
        let deadline = Instant::now() + FAULT_HOLD_WAIT_MAX;
        while std::fs::read_to_string(&control).unwrap() != "holding" {
            assert!(Instant::now() < deadline, "the fsync never took the hold");
            std::thread::sleep(FAULT_HOLD_POLL_INTERVAL);
        }
        file.sync_data().unwrap(); // another fsync runs meanwhile
        assert!(finished.try_recv().is_err(), "the held fsync waits");
        std::fs::write(&control, "").unwrap();
        assert_eq!(finished.recv_timeout(FAULT_HOLD_WAIT_MAX), Ok(true), "released, it runs");
        syncing.join().unwrap().unwrap();
    }
}
