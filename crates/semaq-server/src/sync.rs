//! Lock helpers and the byte budget that bounds queues of work, shared by every module.

use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Locks a mutex, recovering from poisoning: the maps it guards stay consistent per operation.
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Takes a read lock, recovering from poisoning for the same reason as [`lock`].
pub fn read<T>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Takes a write lock, recovering from poisoning for the same reason as [`lock`].
pub fn write<T>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A bound on the bytes held by a queue of work (a stream's ingest queue, the API queue).
#[derive(Debug)]
pub struct ByteBudget {
    used: std::sync::atomic::AtomicUsize,
    max: usize,
}

impl ByteBudget {
    /// A budget of `max` bytes.
    pub fn new(max: usize) -> Self {
        Self { used: std::sync::atomic::AtomicUsize::new(0), max }
    }

    /// Reserves `bytes`; false when that would exceed the budget.
    pub fn try_take(&self, bytes: usize) -> bool {
        use std::sync::atomic::Ordering;
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                (used + bytes <= self.max).then_some(used + bytes)
            })
            .is_ok()
    }

    /// Returns bytes reserved with [`ByteBudget::try_take`].
    pub fn give_back(&self, bytes: usize) {
        self.used.fetch_sub(bytes, std::sync::atomic::Ordering::AcqRel);
    }
}
