//! A simulated disk for tests: files in memory, each with what the OS holds (the "page cache")
//! and what reached stable storage, so a test can cut the power and see exactly what a real
//! machine could be left with.
//!
//! What it models, and how:
//! - A file's contents become durable only by `sync_data`/`sync_all` on it; a directory entry
//!   (a file created, renamed or removed) only by `sync_dir` on its directory. [`SimDisk::crash`]
//!   keeps only what was durable: a created file whose directory was not synced is gone, a
//!   rename not synced reverts, a removal not synced is undone.
//! - [`Tear::Sectors`]: on a crash, a prefix (in offset order, 512-byte sectors) of each file's
//!   unsynced changes survives, as when a drive completed some of the writes in flight.
//!   [`Tear::LoseOneSector`]: one unsynced sector of each file is lost and every other kept,
//!   later ones included, as when a drive wrote out of order.
//! - [`SimDisk::fail_syncs`]: fsyncs fail with `EIO`; the unsynced data is then not durable
//!   (`fail_syncs_of`: only those of one file, to fail a step in the middle of a commit)
//!   (Linux marks the pages clean anyway, so a later fsync does not bring it back).
//! - [`SimDisk::set_free_bytes`]: writes that would grow the files past the free space write
//!   what fits and fail with `ENOSPC`; raising it again is "space returns".
//! - [`SimDisk::freeze_after`]: the power fails after the next `n` changes (writes, syncs,
//!   renames, ...): the disk's image is taken there, every later change fails with `EIO`, and
//!   [`SimDisk::crash`] restores that image. A test can so crash in the middle of an operation.
//!
//! - [`SimDisk::hold_syncs`]: fsyncs wait (outside the disk's lock, so other calls go on) until
//!   the hold is released: a slow disk, for tests that a reader does not wait for an fsync.
//!
//! Directories are durable when created (a simplification: the store syncs the directories
//! whose entries it changes, never creates one it needs to survive without its parent's sync).
//! Handles opened before a crash fail every later call.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use super::{LockMode, OpenMode, SharedStorage, Storage, StorageFile};

/// Sector size: the unit a torn write keeps or loses.
pub const SECTOR_BYTES: usize = 512;
/// `errno` of an I/O error.
const EIO: i32 = 5;
/// `errno` of a full device.
const ENOSPC: i32 = 28;

/// What survives of unsynced writes in a crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tear {
    /// Nothing unsynced survives.
    LoseUnsynced,
    /// Per file, a prefix of its unsynced sectors survives; the seed picks how long.
    Sectors {
        /// Seed of the choice (the same seed, the same crash).
        seed: u64,
    },
    /// Per file, one unsynced sector is lost and every other one, later ones included,
    /// survives: a drive that wrote out of order.
    LoseOneSector {
        /// Which: the `nth` of the file's unsynced sectors in offset order (modulo their count).
        nth: usize,
    },
}

/// A simulated disk; clones share it.
#[derive(Debug, Clone, Default)]
pub struct SimDisk {
    state: Arc<Mutex<State>>,
    /// Held fsyncs wait here, apart from `state`, so a held fsync blocks no other call.
    gate: Arc<(Mutex<Gate>, Condvar)>,
}

/// Whether fsyncs are held, and how many wait.
#[derive(Debug, Default)]
struct Gate {
    held: bool,
    /// Only directory fsyncs are held (`hold_dir_syncs`).
    dirs_only: bool,
    waiting: u64,
}

/// Holds every fsync of a [`SimDisk`] until released (or dropped).
#[derive(Debug)]
pub struct SyncHold {
    disk: SimDisk,
}

impl SyncHold {
    /// Blocks until at least `count` fsyncs are waiting at the hold; false after `timeout`.
    pub fn wait_for_waiting(&self, count: u64, timeout: std::time::Duration) -> bool {
        let (gate, changed) = &*self.disk.gate;
        let guard = gate.lock().unwrap_or_else(PoisonError::into_inner);
        let waited = changed.wait_timeout_while(guard, timeout, |gate| gate.waiting < count);
        let (gate, _) = waited.unwrap_or_else(PoisonError::into_inner);
        gate.waiting >= count
    }

    /// Lets the held fsyncs (and every later one) run.
    pub fn release(self) {}
}

impl Drop for SyncHold {
    fn drop(&mut self) {
        let (gate, changed) = &*self.disk.gate;
        gate.lock().unwrap_or_else(PoisonError::into_inner).held = false;
        changed.notify_all();
    }
}

#[derive(Debug, Default, Clone)]
struct Inode {
    /// What reads see.
    current: Vec<u8>,
    /// What survives a crash.
    durable: Vec<u8>,
}

#[derive(Debug, Default)]
struct Locks {
    exclusive: Option<u64>,
    shared: BTreeSet<u64>,
}

/// A disk image: the durable namespace and contents.
#[derive(Debug, Clone, Default)]
struct Image {
    names: BTreeMap<PathBuf, u64>,
    inodes: HashMap<u64, Inode>,
}

#[derive(Debug, Default)]
struct State {
    inodes: HashMap<u64, Inode>,
    /// Path → inode, as reads see it.
    names: BTreeMap<PathBuf, u64>,
    /// Path → inode, as a crash leaves it.
    durable_names: BTreeMap<PathBuf, u64>,
    dirs: BTreeSet<PathBuf>,
    next_inode: u64,
    next_handle: u64,
    /// Bumped by every crash: older handles are dead.
    epoch: u64,
    locks: HashMap<u64, Locks>,
    fail_syncs: bool,
    /// The one file whose fsyncs fail with EIO (`fail_syncs_of`).
    fail_syncs_inode: Option<u64>,
    free_bytes: Option<u64>,
    /// Changes left before the power fails, and what the failure tears.
    freeze_in: Option<(u64, Tear)>,
    /// The image taken when the power failed.
    frozen: Option<Image>,
    /// Counters, for tests that want to see the faults were hit.
    counts: SimCounts,
}

/// How often each fault struck.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SimCounts {
    /// Fsyncs (files and directories) that succeeded.
    pub syncs: u64,
    /// Fsyncs failed with EIO.
    pub syncs_failed: u64,
    /// Writes failed with ENOSPC.
    pub writes_out_of_space: u64,
    /// Changes refused after the power failed.
    pub changes_after_freeze: u64,
}

fn error(code: i32) -> io::Error {
    io::Error::from_raw_os_error(code)
}

fn parent(path: &Path) -> PathBuf {
    path.parent().map(Path::to_path_buf).unwrap_or_default()
}

impl SimDisk {
    /// An empty disk with unlimited space.
    pub fn new() -> Self {
        SimDisk::default()
    }

    /// This disk as the storage a store runs on.
    pub fn shared(&self) -> SharedStorage {
        Arc::new(self.clone())
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A test that panicked while holding the lock leaves a state still worth reading.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Holds every fsync (files and directories) until the returned hold is released.
    pub fn hold_syncs(&self) -> SyncHold {
        self.hold(false)
    }

    /// Holds every directory fsync until the returned hold is released; files' fsyncs run: a
    /// commit stopped between its files and its directory, to line a race up there.
    pub fn hold_dir_syncs(&self) -> SyncHold {
        self.hold(true)
    }

    fn hold(&self, dirs_only: bool) -> SyncHold {
        let mut gate = self.gate.0.lock().unwrap_or_else(PoisonError::into_inner);
        (gate.held, gate.dirs_only) = (true, dirs_only);
        SyncHold { disk: self.clone() }
    }

    /// Waits while fsyncs (of a directory when `dir`) are held; called before an fsync takes
    /// the disk's lock.
    fn pass_gate(&self, dir: bool) {
        let (gate, changed) = &*self.gate;
        let mut guard = gate.lock().unwrap_or_else(PoisonError::into_inner);
        if !guard.held || (guard.dirs_only && !dir) {
            return;
        }
        guard.waiting += 1;
        changed.notify_all();
        let mut guard = changed.wait_while(guard, |gate| gate.held).unwrap_or_else(PoisonError::into_inner);
        guard.waiting -= 1;
    }

    /// While `failing`, every fsync fails with EIO.
    pub fn fail_syncs(&self, failing: bool) {
        self.state().fail_syncs = failing;
    }

    /// Makes the fsyncs of the file now at `path` (none: of no file) fail with EIO.
    pub fn fail_syncs_of(&self, path: Option<&Path>) {
        let mut state = self.state();
        state.fail_syncs_inode = path.and_then(|path| state.names.get(path).copied());
    }

    /// Bytes that may still be added to the files (`None`: unlimited).
    pub fn set_free_bytes(&self, free: Option<u64>) {
        let mut state = self.state();
        state.free_bytes = free.map(|free| free + state.used_bytes());
    }

    /// The power fails after `changes` more changes, tearing as `tear` says (see the module doc).
    pub fn freeze_after(&self, changes: u64, tear: Tear) {
        self.state().freeze_in = Some((changes, tear));
    }

    /// Whether the power has failed (a freeze struck) and the disk awaits [`SimDisk::crash`].
    pub fn is_frozen(&self) -> bool {
        self.state().frozen.is_some()
    }

    /// How often the faults struck.
    pub fn counts(&self) -> SimCounts {
        self.state().counts
    }

    /// Cuts the power and brings it back: only durable state is left (see [`Tear`]); open
    /// handles die; faults are cleared.
    pub fn crash(&self, tear: Tear) {
        let mut state = self.state();
        let image = match state.frozen.take() {
            Some(image) => image,
            None => state.image(tear),
        };
        state.names = image.names.clone();
        state.durable_names = image.names;
        state.inodes = image.inodes;
        state.epoch += 1;
        state.locks.clear();
        state.fail_syncs = false;
        state.fail_syncs_inode = None;
        state.free_bytes = None;
        state.freeze_in = None;
    }

    /// The current contents of `path` (what reads see), for assertions.
    pub fn contents(&self, path: &Path) -> Option<Vec<u8>> {
        let state = self.state();
        state.names.get(path).and_then(|inode| state.inodes.get(inode)).map(|inode| inode.current.clone())
    }

    /// Overwrites `path` with `bytes`, durably (test setup: planting old formats or damage).
    pub fn put(&self, path: &Path, bytes: &[u8]) {
        let mut state = self.state();
        let inode = state.inode_for(path);
        let entry = state.inodes.entry(inode).or_default();
        entry.current = bytes.to_vec();
        entry.durable = bytes.to_vec();
        state.durable_names.insert(path.to_path_buf(), inode);
    }
}

impl State {
    fn used_bytes(&self) -> u64 {
        let live: BTreeSet<u64> = self.names.values().copied().collect();
        live.iter().filter_map(|inode| self.inodes.get(inode)).map(|inode| inode.current.len() as u64).sum()
    }

    fn inode_for(&mut self, path: &Path) -> u64 {
        if let Some(&inode) = self.names.get(path) {
            return inode;
        }
        self.next_inode += 1;
        let inode = self.next_inode;
        self.inodes.insert(inode, Inode::default());
        self.names.insert(path.to_path_buf(), inode);
        inode
    }

    /// Counts a change against a pending freeze; `Err(EIO)` once the power has failed.
    fn change(&mut self) -> io::Result<()> {
        if self.frozen.is_some() {
            self.counts.changes_after_freeze += 1;
            return Err(error(EIO));
        }
        match self.freeze_in {
            Some((0, tear)) => {
                self.frozen = Some(self.image(tear));
                self.counts.changes_after_freeze += 1;
                Err(error(EIO))
            }
            Some((left, tear)) => {
                self.freeze_in = Some((left - 1, tear));
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// What a crash now would leave.
    fn image(&self, tear: Tear) -> Image {
        let mut random = match tear {
            Tear::Sectors { seed } => Some(SplitMix(seed)),
            Tear::LoseUnsynced | Tear::LoseOneSector { .. } => None,
        };
        let mut inodes = HashMap::new();
        for &inode in self.durable_names.values() {
            let Some(file) = self.inodes.get(&inode) else { continue };
            let kept = match (tear, random.as_mut()) {
                (Tear::LoseOneSector { nth }, _) => one_sector_lost(file, nth),
                (_, Some(random)) => torn(file, random),
                (_, None) => file.durable.clone(),
            };
            inodes.insert(inode, Inode { current: kept.clone(), durable: kept });
        }
        Image { names: self.durable_names.clone(), inodes }
    }

    fn sync_file(&mut self, inode: u64) -> io::Result<()> {
        self.change()?;
        if self.fail_syncs || self.fail_syncs_inode == Some(inode) {
            self.counts.syncs_failed += 1;
            return Err(error(EIO));
        }
        self.counts.syncs += 1;
        if let Some(file) = self.inodes.get_mut(&inode) {
            file.durable.clone_from(&file.current);
        }
        Ok(())
    }
}

/// A file after a crash that kept a prefix of its unsynced sectors.
fn torn(file: &Inode, random: &mut SplitMix) -> Vec<u8> {
    let dirty = dirty_sectors(file);
    let keep = usize::try_from(random.next() % (dirty.len() as u64 + 1)).unwrap_or(0);
    if keep == dirty.len() {
        return file.current.clone();
    }
    let mut out = file.durable.clone();
    for &sector in &dirty[..keep] {
        let start = sector * SECTOR_BYTES;
        let end = ((sector + 1) * SECTOR_BYTES).min(file.current.len());
        if start >= end {
            continue; // a sector the file was cut below: the cut did not survive either
        }
        if out.len() < end {
            out.resize(end, 0);
        }
        out[start..end].copy_from_slice(&file.current[start..end]);
    }
    out
}

/// The sectors where a file's contents differ from what is durable (its unsynced writes).
fn dirty_sectors(file: &Inode) -> Vec<usize> {
    let longest = file.current.len().max(file.durable.len());
    (0..longest.div_ceil(SECTOR_BYTES))
        .filter(|&sector| {
            let range = sector * SECTOR_BYTES..((sector + 1) * SECTOR_BYTES).min(longest);
            file.current.get(range.clone()) != file.durable.get(range)
        })
        .collect()
}

/// A file after a crash that lost one of its unsynced sectors (zeros where nothing durable
/// was) and kept the rest of what the OS held.
fn one_sector_lost(file: &Inode, nth: usize) -> Vec<u8> {
    let dirty = dirty_sectors(file);
    let mut out = file.current.clone();
    if dirty.is_empty() {
        return out;
    }
    let lost = dirty[nth % dirty.len()];
    let start = lost * SECTOR_BYTES;
    let end = ((lost + 1) * SECTOR_BYTES).min(out.len());
    for (position, byte) in out.iter_mut().enumerate().take(end).skip(start) {
        *byte = file.durable.get(position).copied().unwrap_or(0);
    }
    out
}

/// A small deterministic generator (SplitMix64), so a crash is reproducible from its seed.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

impl Storage for SimDisk {
    fn open(&self, path: &Path, mode: OpenMode, _permissions: u32) -> io::Result<Box<dyn StorageFile>> {
        let mut state = self.state();
        let existing = state.names.get(path).copied();
        let inode = match (existing, mode) {
            (Some(inode), OpenMode::Truncate) => {
                state.change()?;
                if let Some(file) = state.inodes.get_mut(&inode) {
                    file.current.clear();
                }
                inode
            }
            (Some(inode), _) => inode,
            (None, OpenMode::Read | OpenMode::ReadWrite) => return Err(io::ErrorKind::NotFound.into()),
            (None, OpenMode::Create | OpenMode::Truncate) => {
                if !state.dirs.contains(&parent(path)) {
                    return Err(io::ErrorKind::NotFound.into());
                }
                state.change()?;
                state.inode_for(path)
            }
        };
        state.next_handle += 1;
        let handle = state.next_handle;
        let writable = mode != OpenMode::Read;
        Ok(Box::new(SimFile { disk: self.clone(), inode, handle, epoch: state.epoch, writable }))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut state = self.state();
        let inode = state.names.get(from).copied().ok_or(io::Error::from(io::ErrorKind::NotFound))?;
        state.change()?;
        state.names.remove(from);
        state.names.insert(to.to_path_buf(), inode);
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut state = self.state();
        if !state.names.contains_key(path) {
            return Err(io::ErrorKind::NotFound.into());
        }
        state.change()?;
        state.names.remove(path);
        Ok(())
    }

    fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        let mut state = self.state();
        state.change()?;
        state.names.retain(|name, _| !name.starts_with(path));
        state.durable_names.retain(|name, _| !name.starts_with(path));
        state.dirs.retain(|dir| !dir.starts_with(path));
        Ok(())
    }

    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        let mut state = self.state();
        for ancestor in path.ancestors() {
            state.dirs.insert(ancestor.to_path_buf());
        }
        Ok(())
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        let state = self.state();
        if !state.dirs.contains(dir) {
            return Err(io::ErrorKind::NotFound.into());
        }
        let files = state.names.keys().filter(|name| name.parent() == Some(dir));
        let subdirs = state.dirs.iter().filter(|name| name.parent() == Some(dir));
        Ok(files.chain(subdirs).filter_map(|name| name.file_name()?.to_str().map(str::to_string)).collect())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.pass_gate(true);
        let mut state = self.state();
        state.change()?;
        if state.fail_syncs {
            state.counts.syncs_failed += 1;
            return Err(error(EIO));
        }
        state.counts.syncs += 1;
        let inside = |name: &PathBuf| name.parent() == Some(dir);
        let current: Vec<(PathBuf, u64)> =
            state.names.iter().filter(|(name, _)| inside(name)).map(|(name, &inode)| (name.clone(), inode)).collect();
        state.durable_names.retain(|name, _| !inside(name));
        state.durable_names.extend(current);
        Ok(())
    }
}

/// An open file on a [`SimDisk`].
#[derive(Debug)]
struct SimFile {
    disk: SimDisk,
    inode: u64,
    handle: u64,
    epoch: u64,
    writable: bool,
}

impl SimFile {
    /// The disk's state, unless a crash killed this handle.
    fn state(&self) -> io::Result<MutexGuard<'_, State>> {
        let state = self.disk.state();
        if state.epoch != self.epoch {
            return Err(error(EIO));
        }
        Ok(state)
    }

    fn writable(&self) -> io::Result<()> {
        match self.writable {
            true => Ok(()),
            false => Err(io::Error::from_raw_os_error(9)), // EBADF, as writing a read-only fd
        }
    }
}

impl StorageFile for SimFile {
    fn read_at(&self, buffer: &mut [u8], offset: u64) -> io::Result<()> {
        let state = self.state()?;
        let file = state.inodes.get(&self.inode).ok_or(io::Error::from(io::ErrorKind::NotFound))?;
        let start = usize::try_from(offset).map_err(|_| io::Error::from(io::ErrorKind::UnexpectedEof))?;
        let bytes = start
            .checked_add(buffer.len())
            .and_then(|end| file.current.get(start..end))
            .ok_or(io::Error::from(io::ErrorKind::UnexpectedEof))?;
        buffer.copy_from_slice(bytes);
        Ok(())
    }

    fn write_at(&self, bytes: &[u8], offset: u64) -> io::Result<()> {
        self.writable()?;
        let mut state = self.state()?;
        state.change()?;
        let start = usize::try_from(offset).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        let end = start + bytes.len();
        let length = state.inodes.get(&self.inode).map_or(0, |file| file.current.len());
        let growth = end.saturating_sub(length) as u64;
        let used = state.used_bytes();
        let fits = match state.free_bytes {
            Some(limit) if used + growth > limit => {
                let room = usize::try_from(limit.saturating_sub(used)).unwrap_or(usize::MAX);
                Some(bytes.len().min(length.saturating_sub(start) + room))
            }
            _ => None,
        };
        let written = fits.unwrap_or(bytes.len());
        if let Some(file) = state.inodes.get_mut(&self.inode) {
            if file.current.len() < start + written {
                file.current.resize(start + written, 0);
            }
            file.current[start..start + written].copy_from_slice(&bytes[..written]);
        }
        if fits.is_some() {
            state.counts.writes_out_of_space += 1;
            return Err(error(ENOSPC));
        }
        Ok(())
    }

    fn length(&self) -> io::Result<u64> {
        let state = self.state()?;
        Ok(state.inodes.get(&self.inode).map_or(0, |file| file.current.len() as u64))
    }

    fn set_len(&self, length: u64) -> io::Result<()> {
        self.writable()?;
        let mut state = self.state()?;
        state.change()?;
        let length = usize::try_from(length).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        let current = state.inodes.get(&self.inode).map_or(0, |file| file.current.len());
        if let Some(limit) = state.free_bytes {
            if length > current && state.used_bytes() + (length - current) as u64 > limit {
                state.counts.writes_out_of_space += 1;
                return Err(error(ENOSPC));
            }
        }
        if let Some(file) = state.inodes.get_mut(&self.inode) {
            file.current.resize(length, 0);
        }
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        self.disk.pass_gate(false);
        let mut state = self.state()?;
        state.sync_file(self.inode)
    }

    fn sync_all(&self) -> io::Result<()> {
        self.sync_data()
    }

    fn try_lock(&self, mode: LockMode) -> io::Result<bool> {
        let mut state = self.state()?;
        let locks = state.locks.entry(self.inode).or_default();
        let free = match mode {
            LockMode::Shared => locks.exclusive.is_none_or(|holder| holder == self.handle),
            LockMode::Exclusive => {
                locks.exclusive.is_none_or(|holder| holder == self.handle)
                    && locks.shared.iter().all(|&holder| holder == self.handle)
            }
        };
        if free {
            match mode {
                LockMode::Shared => {
                    locks.shared.insert(self.handle);
                }
                LockMode::Exclusive => locks.exclusive = Some(self.handle),
            }
        }
        Ok(free)
    }
}

impl Drop for SimFile {
    fn drop(&mut self) {
        if let Ok(mut state) = self.state() {
            if let Some(locks) = state.locks.get_mut(&self.inode) {
                locks.shared.remove(&self.handle);
                if locks.exclusive == Some(self.handle) {
                    locks.exclusive = None;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> (SimDisk, PathBuf) {
        let disk = SimDisk::new();
        let dir = PathBuf::from("/s");
        disk.create_dir_all(&dir).unwrap();
        (disk, dir)
    }

    #[test]
    fn a_created_file_whose_directory_was_not_synced_is_gone_after_a_crash() {
        let (disk, dir) = dir();
        let file = disk.open(&dir.join("a"), OpenMode::Create, 0).unwrap();
        file.write_at(b"hello", 0).unwrap();
        file.sync_all().unwrap();
        disk.crash(Tear::LoseUnsynced);
        assert_eq!(disk.contents(&dir.join("a")), None, "the entry was never made durable");
        assert!(file.length().is_err(), "a handle from before the crash is dead");

        let file = disk.open(&dir.join("a"), OpenMode::Create, 0).unwrap();
        file.write_at(b"hello", 0).unwrap();
        file.sync_all().unwrap();
        disk.sync_dir(&dir).unwrap();
        disk.rename(&dir.join("a"), &dir.join("b")).unwrap();
        disk.crash(Tear::LoseUnsynced);
        assert_eq!(disk.contents(&dir.join("a")).as_deref(), Some(&b"hello"[..]), "the rename reverts");
        assert_eq!(disk.contents(&dir.join("b")), None);
    }

    #[test]
    fn a_torn_crash_keeps_a_prefix_of_the_unsynced_sectors() {
        let (disk, dir) = dir();
        let path = dir.join("log");
        let file = disk.open(&path, OpenMode::Create, 0).unwrap();
        file.write_at(&[1; 100], 0).unwrap();
        file.sync_all().unwrap();
        disk.sync_dir(&dir).unwrap();
        file.write_at(&[2; 4 * SECTOR_BYTES], 100).unwrap();
        let mut lengths = BTreeSet::new();
        for seed in 0..64 {
            let copy = SimDisk::new();
            copy.create_dir_all(&dir).unwrap();
            copy.put(&path, &[1; 100]);
            let file = copy.open(&path, OpenMode::ReadWrite, 0).unwrap();
            file.write_at(&[2; 4 * SECTOR_BYTES], 100).unwrap();
            copy.crash(Tear::Sectors { seed });
            let after = copy.contents(&path).unwrap();
            assert!(
                after.len() == 100 || after.len().is_multiple_of(SECTOR_BYTES) || after.len() == 100 + 4 * SECTOR_BYTES
            );
            assert_eq!(after[..100], [1; 100][..]);
            assert!(after[100..].iter().all(|&byte| byte == 2), "only whole written sectors, in order");
            lengths.insert(after.len());
        }
        assert!(lengths.len() > 2, "different seeds tear at different sectors: {lengths:?}");
    }

    #[test]
    fn a_failed_fsync_leaves_the_data_undurable_and_a_full_disk_writes_what_fits() {
        let (disk, dir) = dir();
        let path = dir.join("f");
        let file = disk.open(&path, OpenMode::Create, 0).unwrap();
        disk.sync_dir(&dir).unwrap();
        file.write_at(b"abc", 0).unwrap();
        disk.fail_syncs(true);
        assert_eq!(file.sync_data().unwrap_err().raw_os_error(), Some(EIO));
        disk.fail_syncs(false);
        disk.set_free_bytes(Some(5));
        let refused = file.write_at(b"0123456789", 3).unwrap_err();
        assert_eq!(refused.kind(), io::ErrorKind::StorageFull);
        assert_eq!(disk.contents(&path).unwrap(), b"abc01234");
        disk.crash(Tear::LoseUnsynced);
        assert_eq!(disk.contents(&path).unwrap(), b"");
    }

    #[test]
    fn a_freeze_takes_the_image_mid_way_and_refuses_later_changes() {
        let (disk, dir) = dir();
        let path = dir.join("f");
        let file = disk.open(&path, OpenMode::Create, 0).unwrap();
        disk.sync_dir(&dir).unwrap();
        disk.freeze_after(2, Tear::LoseUnsynced);
        file.write_at(b"one", 0).unwrap();
        file.sync_data().unwrap();
        assert!(file.write_at(b"two", 3).is_err());
        assert!(disk.is_frozen());
        disk.crash(Tear::LoseUnsynced);
        assert_eq!(disk.contents(&path).unwrap(), b"one");
    }
}
