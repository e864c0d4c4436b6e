//! The one harness for every SemaQ test that starts a server process (dev-only, not published).
//!
//! - [`SemaqServer`], configured with a [`ServerBuilder`]: a real `semaq-server` on random
//!   loopback ports with its store in a temp dir (or a directory the test owns), started from
//!   flags and/or config file text. Start-up waits (at most [`READY_TIMEOUT`]) for `Server is
//!   ready` and reads the client and monitoring addresses the server logs; the log is drained
//!   all along (so the pipe never fills) and kept for assertions. Killed on drop; `kill`
//!   (SIGKILL), `terminate` (SIGTERM), `wait_exit` and `restart` (same flags, same store) for
//!   crash and restart tests; `output` for runs that must refuse to start.
//! - [`NatsServer`]: a real `nats-server`, for side-by-side tests.
//! - [`Raw`]: a raw TCP protocol connection; [`http_get_json`], [`http_get_json_status`] and [`http_get`]: GET a monitoring endpoint.
//! - [`wait_until`] and [`wait_until_async`]: poll a condition with a deadline, never a fixed
//!   sleep; [`wait_for_exit`] and [`output_within`] bound waits on child processes.
//! - [`sync`] and [`sync_via`]: a round trip proving the server read everything a client sent.
//!
//! A missing binary fails the test, with a message saying how to get it; nothing is skipped.
//! `semaq-server` is looked for next to the running test binary, in the same target directory
//! (for `semaq`'s CLI tests that is next to `semaq`): `cargo test --workspace --all-targets`,
//! which `./scripts/test` runs, builds every workspace binary before any test runs, so it is
//! there. With `cargo test -p semaq` alone, build it first (and after changing it) with
//! `cargo build -p semaq-server`. `nats-server` is looked for on `PATH`, then at
//! `/usr/sbin/nats-server`, where the Debian package that `./scripts/test` installs puts it.

mod binaries;
mod client;
mod http;
mod nats;
mod process;
mod raw;
mod semaq;
mod wait;

pub use binaries::{nats_server_path, semaq_server_path};
pub use client::{sync, sync_via};
pub use http::{http_get, http_get_json, http_get_json_status};
pub use nats::NatsServer;
pub use process::{output_within, wait_for_exit, EXIT_TIMEOUT, READY_TIMEOUT};
pub use raw::Raw;
pub use semaq::{SemaqServer, ServerBuilder};
pub use wait::{wait_until, wait_until_async, POLL_INTERVAL};
