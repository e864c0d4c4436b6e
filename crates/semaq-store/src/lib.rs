//! Streams on disk and in memory (see the durable streams issue).
