//! The store's I/O seam: every file a store reads or writes goes through a [`Storage`], so
//! tests can put a simulated disk under it (`sim::SimDisk`, with the `sim` feature) that
//! loses power, tears writes, fails an fsync or runs out of space.
//!
//! The seam sits at file granularity, not per message: the active segment buffers appends in
//! memory and hands them over in one `write_at` per flush, so the real disk ([`StdDisk`]) costs
//! one virtual call per write and nothing per message.

use std::fmt;
use std::fs::{self, File, OpenOptions, TryLockError};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::Arc;

pub mod faults;
#[cfg(any(test, feature = "sim"))]
pub mod sim;

/// How a file is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    /// Read only; the file must exist.
    Read,
    /// Read and write; the file must exist.
    ReadWrite,
    /// Read and write, created empty if missing, contents kept otherwise.
    Create,
    /// Read and write, created if missing, emptied otherwise.
    Truncate,
}

/// Which lock a handle asks for (`flock` on the real disk).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockMode {
    /// Many holders, no exclusive one.
    Shared,
    /// One holder.
    Exclusive,
}

/// A filesystem: the calls the store makes on paths. Implementations must be safe to share.
pub trait Storage: Send + Sync + fmt::Debug {
    /// Opens `path` as `mode` says; `permissions` (Unix mode bits) apply when it is created.
    fn open(&self, path: &Path, mode: OpenMode, permissions: u32) -> io::Result<Box<dyn StorageFile>>;
    /// The whole file at `path`.
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        let file = self.open(path, OpenMode::Read, 0)?;
        let length = usize::try_from(file.length()?).map_err(|_| io::Error::from(io::ErrorKind::OutOfMemory))?;
        let mut bytes = vec![0; length];
        file.read_at(&mut bytes, 0)?;
        Ok(bytes)
    }
    /// The length of the file at `path` (`NotFound` when there is none).
    fn file_length(&self, path: &Path) -> io::Result<u64> {
        self.open(path, OpenMode::Read, 0)?.length()
    }
    /// Moves `from` to `to`, replacing `to`; durable once the directory is synced.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes a file; durable once the directory is synced.
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Removes a directory and everything in it.
    fn remove_dir_all(&self, path: &Path) -> io::Result<()>;
    /// Creates a directory and its missing parents.
    fn create_dir_all(&self, path: &Path) -> io::Result<()>;
    /// The names of the entries in `dir` (names that are not UTF-8 are left out).
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// Makes the directory's entries (files created, renamed or removed in it) durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
}

/// An open file. Positioned calls only, so a shared handle needs no cursor.
pub trait StorageFile: Send + Sync + fmt::Debug {
    /// Fills `buffer` from `offset`; `UnexpectedEof` when the file ends first.
    fn read_at(&self, buffer: &mut [u8], offset: u64) -> io::Result<()>;
    /// Writes all of `bytes` at `offset` (handed to the OS, not yet durable).
    fn write_at(&self, bytes: &[u8], offset: u64) -> io::Result<()>;
    /// The file's length.
    fn length(&self) -> io::Result<u64>;
    /// Cuts or extends the file to `length`.
    fn set_len(&self, length: u64) -> io::Result<()>;
    /// Makes the contents durable (`fdatasync`).
    fn sync_data(&self) -> io::Result<()>;
    /// Makes the contents and metadata durable (`fsync`).
    fn sync_all(&self) -> io::Result<()>;
    /// Asks the OS to start writing `length` bytes from `offset` to the device, without
    /// waiting: a hint that makes the fsync after it shorter, promising nothing.
    fn start_writeback(&self, _offset: u64, _length: u64) {}
    /// Takes the lock without waiting: `Ok(false)` when another handle holds it. Released when
    /// the handle is dropped (or the process dies).
    fn try_lock(&self, mode: LockMode) -> io::Result<bool>;
}

/// A shared handle to the storage a store runs on.
pub type SharedStorage = Arc<dyn Storage>;

/// The real disk, through `std::fs`.
#[derive(Debug, Default, Clone, Copy)]
pub struct StdDisk;

impl StdDisk {
    /// The real disk as a [`SharedStorage`].
    pub fn shared() -> SharedStorage {
        Arc::new(StdDisk)
    }
}

impl Storage for StdDisk {
    fn open(&self, path: &Path, mode: OpenMode, permissions: u32) -> io::Result<Box<dyn StorageFile>> {
        let mut options = OpenOptions::new();
        options.read(true);
        match mode {
            OpenMode::Read => {}
            OpenMode::ReadWrite => {
                options.write(true);
            }
            OpenMode::Create => {
                options.write(true).create(true).truncate(false);
            }
            OpenMode::Truncate => {
                options.write(true).create(true).truncate(true);
            }
        }
        if permissions != 0 {
            options.mode(permissions);
        }
        Ok(Box::new(StdFile(options.open(path)?)))
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        fs::read(path)
    }

    fn file_length(&self, path: &Path) -> io::Result<u64> {
        Ok(fs::metadata(path)?.len())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }

    fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        fs::remove_dir_all(path)
    }

    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        fs::create_dir_all(path)
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in fs::read_dir(dir)? {
            if let Ok(name) = entry?.file_name().into_string() {
                names.push(name);
            }
        }
        Ok(names)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
}

/// A file on the real disk.
#[derive(Debug)]
struct StdFile(File);

impl StorageFile for StdFile {
    fn read_at(&self, buffer: &mut [u8], offset: u64) -> io::Result<()> {
        self.0.read_exact_at(buffer, offset)
    }

    fn write_at(&self, bytes: &[u8], offset: u64) -> io::Result<()> {
        self.0.write_all_at(bytes, offset)
    }

    fn length(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }

    fn set_len(&self, length: u64) -> io::Result<()> {
        self.0.set_len(length)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.0.sync_data()
    }

    fn sync_all(&self) -> io::Result<()> {
        self.0.sync_all()
    }

    #[cfg(target_os = "linux")]
    fn start_writeback(&self, offset: u64, length: u64) {
        use rustix::fs::{fadvise, Advice};
        // Linux's DONTNEED starts the writeback of the range's dirty pages without waiting
        // (`WB_SYNC_NONE`) and drops only clean ones: a run just written is dirty, so it stays
        // cached (BENCHMARKS.md). A hint only: the fsync after it reports any failure.
        let _ = fadvise(&self.0, offset, std::num::NonZeroU64::new(length), Advice::DontNeed);
    }

    fn try_lock(&self, mode: LockMode) -> io::Result<bool> {
        let attempt = match mode {
            LockMode::Shared => self.0.try_lock_shared(),
            LockMode::Exclusive => self.0.try_lock(),
        };
        match attempt {
            Ok(()) => Ok(true),
            Err(TryLockError::WouldBlock) => Ok(false),
            Err(TryLockError::Error(error)) => Err(error),
        }
    }
}

/// Whether a file exists at `path` on `storage`.
pub fn exists(storage: &dyn Storage, path: &Path) -> bool {
    storage.file_length(path).is_ok()
}

/// The whole file at `path`, or `None` when there is none.
pub fn read_if_present(storage: &dyn Storage, path: &Path) -> io::Result<Option<Vec<u8>>> {
    match storage.read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(error),
    }
}

/// Replaces the file at `path` with `bytes` so that a crash leaves the old or the new contents,
/// never a mix: written to `<path>.tmp`, fsynced, renamed over `path`, directory fsynced.
/// Durable when it returns. `permissions` as in [`Storage::open`].
pub fn write_atomic(storage: &dyn Storage, path: &Path, bytes: &[u8], permissions: u32) -> io::Result<()> {
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(".tmp");
    let temporary = Path::new(&temporary);
    let file = storage.open(temporary, OpenMode::Truncate, permissions)?;
    file.write_at(bytes, 0)?;
    file.sync_all()?;
    drop(file);
    storage.rename(temporary, path)?;
    storage.sync_dir(path.parent().filter(|parent| !parent.as_os_str().is_empty()).unwrap_or(Path::new(".")))
}

/// Whether an I/O error means the medium is full (`ENOSPC`, or a quota hit): a state that
/// passes when space returns, unlike a failed fsync.
pub fn is_out_of_space(error: &io::Error) -> bool {
    matches!(error.kind(), io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded)
}
