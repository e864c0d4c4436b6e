//! Who this server is: its versions, its random id, its name and when it started.

use std::time::{Instant, SystemTime};

/// The version clients see: nats-server 2.10-compatible so they enable headers and JetStream.
pub const NATS_COMPATIBLE_VERSION: &str = "2.10.22";
/// SemaQ's own version.
pub const SEMAQ_VERSION: &str = env!("CARGO_PKG_VERSION");

/// This server process's identity, fixed at start.
#[derive(Debug, Clone)]
pub struct Identity {
    /// Random id of this server process (nats-server's form: `N` and 55 base32 characters).
    pub server_id: String,
    /// Configured or generated name.
    pub server_name: String,
    /// Start time, for uptime.
    pub started: Instant,
    /// Start time as wall clock, for `/varz`.
    pub started_at: SystemTime,
}

impl Identity {
    /// A new identity, named `server_name` or after its id.
    pub fn new(server_name: Option<String>) -> Self {
        let server_id = random_server_id();
        let server_name = server_name.unwrap_or_else(|| server_id.clone());
        Self { server_id, server_name, started: Instant::now(), started_at: SystemTime::now() }
    }
}

fn random_server_id() -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    let tail: String = (0..55).map(|_| ALPHABET[rand::random::<u32>() as usize % ALPHABET.len()] as char).collect();
    format!("N{tail}")
}

/// A fresh nonce for a client to sign (nats-server's alphabet and length).
pub fn random_nonce() -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    (0..11).map(|_| ALPHABET[rand::random::<u32>() as usize % ALPHABET.len()] as char).collect()
}
