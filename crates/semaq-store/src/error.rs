//! The store's one error type.

use std::io;
use std::path::PathBuf;

/// Everything a store operation can fail with.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// An I/O call failed; `operation` says which and `path` on what.
    #[error("{operation} {path}: {source}")]
    Io {
        /// What the store was doing (`"open"`, `"write"`, `"fsync"`, ...).
        operation: &'static str,
        /// The file or directory involved.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// Discard-new: the stream already holds `max_msgs` messages.
    #[error("maximum messages exceeded")]
    MaxMsgs,
    /// Discard-new: storing the message would exceed `max_bytes`.
    #[error("maximum bytes exceeded")]
    MaxBytes,
    /// Discard-new per subject: the subject already holds `max_msgs_per_subject` messages.
    #[error("maximum messages per subject exceeded")]
    MaxMsgsPerSubject,
    /// The message is larger than `max_msg_size` or than the store's record limit.
    #[error("message size {size_bytes} exceeds maximum {max_bytes}")]
    MessageTooLarge {
        /// Headers plus payload, in bytes.
        size_bytes: usize,
        /// The limit that refused it.
        max_bytes: usize,
    },
    /// The subject is empty, has wildcards or empty tokens, or is too long.
    #[error("invalid subject: {0}")]
    InvalidSubject(String),
    /// A purge request combined `keep` with `up_to_seq`.
    #[error("purge: keep and up_to_seq are mutually exclusive")]
    InvalidPurge,
    /// A configuration value is outside what the store supports.
    #[error("invalid store config: {0}")]
    InvalidConfig(String),
    /// A stored record failed its checksum or its framing when read.
    #[error("corrupt record at seq {seq}: {detail}")]
    Corrupt {
        /// The sequence whose record is damaged.
        seq: u64,
        /// What was wrong.
        detail: String,
    },
    /// Another open store (in this process or another) holds the stream directory.
    #[error("stream directory {0} is already open")]
    Locked(PathBuf),
    /// An earlier write or fsync failed, so what is on disk is unknown; reopen the store.
    #[error("store stopped after a failed write ({0}); reopen it to recover")]
    Poisoned(String),
}

/// Shorthand for results of store operations.
pub type StoreResult<T> = Result<T, StoreError>;

/// Wraps an `io::Error` with the operation and path it came from (for `map_err`).
pub(crate) fn io_error<'p>(
    operation: &'static str,
    path: &'p std::path::Path,
) -> impl FnOnce(io::Error) -> StoreError + 'p {
    move |source| StoreError::Io { operation, path: path.to_path_buf(), source }
}
