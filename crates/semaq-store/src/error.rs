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
    /// A length, offset or count does not fit the field the store's format (or its in-memory
    /// bookkeeping) gives it; refused before anything was written.
    #[error("{what} {value} exceeds the store format's maximum {max}")]
    TooLarge {
        /// What did not fit (`"record length"`, `"segment offset"`, ...).
        what: &'static str,
        /// Its value.
        value: u64,
        /// The largest value the field holds.
        max: u64,
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
    /// The medium is full: the write was undone (nothing of it is kept) and the store takes
    /// writes again once space returns. Changes in between are refused until the next
    /// `sync` or `flush` reports this too, so a batch never continues past a lost message.
    #[error("insufficient storage: {0}")]
    OutOfSpace(String),
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

/// An unsigned integer type a format field is stored as.
pub(crate) trait Field: Into<u64> {
    /// Its largest value.
    const LARGEST: Self;
}

impl Field for u16 {
    const LARGEST: Self = u16::MAX;
}

impl Field for u32 {
    const LARGEST: Self = u32::MAX;
}

/// `value` as the field type `T`, or `TooLarge` naming `what` when it does not fit: the write
/// path's checked narrowing.
pub(crate) fn fit<T, V>(what: &'static str, value: V) -> StoreResult<T>
where
    T: Field + TryFrom<V>,
    V: Copy,
    u64: TryFrom<V>,
{
    T::try_from(value).map_err(|_| StoreError::TooLarge {
        what,
        value: u64::try_from(value).unwrap_or(u64::MAX),
        max: T::LARGEST.into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_fits_its_field_up_to_the_field_maximum_and_no_further() {
        assert_eq!(fit::<u16, usize>("subject length", 65_535).unwrap(), u16::MAX);
        let refused = fit::<u16, usize>("subject length", 65_536).unwrap_err();
        assert!(matches!(refused, StoreError::TooLarge { what: "subject length", value: 65_536, max: 65_535 }));
        assert_eq!(
            fit::<u32, u64>("segment offset", 1 << 32).unwrap_err().to_string(),
            "segment offset 4294967296 exceeds the store format's maximum 4294967295"
        );
    }
}
