//! A JetStream for every account that enables it, as in nats-server: each has its own streams
//! and consumers (two accounts may each have a stream of the same name), answers `$JS.API.>`
//! in its own account's subjects, captures only its own account's publishes and applies that
//! account's limits; the server's own bounds count all of them together. Each runs on an
//! account view of the bus ([`Bus::account_view`](crate::bus::Bus::account_view)) and shares
//! the server's other handles.
//!
//! On disk, under `<store_dir>/jetstream/`: `streams/` is where SemaQ kept its one JetStream's
//! streams before each account had its own, and it stays one account's, so an existing store
//! opens with nothing moved. `streams.account` names that account: written when this version
//! first opens the store, naming the home account (the one JetStream lived in before), and read
//! at every later start, so a config that lists its accounts in another order, or gives `$G`'s
//! place to a new account, never hands those streams to another account. Every other account's
//! streams are under `accounts/<account>/streams/`, the name percent-encoded where it is not
//! `[A-Za-z0-9_-]` (`$G` is `accounts/%24G/streams/`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use super::account;
use super::stream::Stream;
use super::{JetStream, JetStreamError, Services};
use crate::limits;
use crate::sync;

/// The directory of streams of the account named in [`OWNER_FILE`].
const OWNED_STREAMS_DIR: &str = "streams";
/// Names the account whose streams are in [`OWNED_STREAMS_DIR`].
const OWNER_FILE: &str = "streams.account";
/// Holds a directory per other account.
const ACCOUNTS_DIR: &str = "accounts";

/// Every account's JetStream, by account name.
#[derive(Debug)]
pub struct JetStreams {
    /// The account the broker's services live in.
    home: String,
    /// Filled at start, one account after the other; read afterwards.
    by_account: RwLock<BTreeMap<String, Arc<JetStream>>>,
}

impl JetStreams {
    /// Starts a JetStream for every account that enables it ([`account::enabled`]), each
    /// with `shared`'s handles and an account view of its bus, its API, acks and lineage API.
    pub fn start(shared: &Services) -> Result<Arc<Self>, JetStreamError> {
        let options = &shared.options;
        let accounts = account::enabled(options);
        if accounts.len() > limits::JETSTREAM_ACCOUNTS_MAX {
            return Err(JetStreamError::TooManyAccounts { count: accounts.len() });
        }
        let root = options.store_dir.join("jetstream");
        let owner = owner_of_streams_dir(&root, options.home_account())?;
        if accounts.iter().all(|account| account.name != owner) {
            tracing::warn!(
                account = %owner,
                "{} holds the streams of an account without JetStream now: left on disk, not served",
                root.join(OWNED_STREAMS_DIR).display()
            );
        }
        let jetstreams = Arc::new(Self { home: options.home_account().to_string(), by_account: RwLock::default() });
        for account in accounts {
            let Some(bus) = shared.bus.account_view(&account.name) else {
                tracing::error!(account = %account.name, "no subject space for the account: its JetStream is off");
                continue;
            };
            let services = Arc::new(Services { bus: Arc::new(bus), ..shared.clone() });
            let dir = streams_dir(&root, &account.name, &owner);
            let name = account.name.clone();
            let jetstream = JetStream::start(services, account, dir, Arc::downgrade(&jetstreams))?;
            super::api::start(jetstream.clone());
            super::consumers::subscribe(&jetstream);
            super::lineage::start(&jetstream);
            sync::write(&jetstreams.by_account).insert(name, jetstream);
        }
        Ok(jetstreams)
    }

    /// The home account's JetStream (the dashboard's and the provenance pages').
    pub fn home(&self) -> Option<Arc<JetStream>> {
        self.get(&self.home)
    }

    /// The JetStream of `account`, if it has one.
    pub fn get(&self, account: &str) -> Option<Arc<JetStream>> {
        sync::read(&self.by_account).get(account).cloned()
    }

    /// Every account's JetStream, by account name.
    pub fn all(&self) -> Vec<Arc<JetStream>> {
        sync::read(&self.by_account).values().cloned().collect()
    }

    /// Every account's streams.
    pub fn streams(&self) -> Vec<Arc<Stream>> {
        self.all().iter().flat_map(|jetstream| jetstream.streams()).collect()
    }

    /// Stops every account's streams, syncing what they stored.
    pub fn shutdown(&self) {
        for jetstream in self.all() {
            jetstream.shutdown();
        }
    }
}

/// The account whose streams are in `<root>/streams/`: the one `streams.account` names, else
/// (a store this version has not opened yet) `home`, written there for the next starts. A file
/// that names no account (damaged: it is written atomically) is logged and replaced as if absent,
/// so a damaged store still starts.
fn owner_of_streams_dir(root: &Path, home: &str) -> Result<String, JetStreamError> {
    let path = root.join(OWNER_FILE);
    let failed = |source| JetStreamError::Directory { path: path.display().to_string(), source };
    match std::fs::read(&path) {
        Ok(bytes) => match account_named(&bytes) {
            Some(name) => return Ok(name.to_string()),
            None => tracing::error!("{} names no account: taking it as {home:?}'s", path.display()),
        },
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(failed(error)),
    }
    std::fs::create_dir_all(root).map_err(failed)?;
    super::write_atomically(&path, format!("{home}\n").as_bytes()).map_err(failed)?;
    Ok(home.to_string())
}

/// The account name an owner file holds: one line of UTF-8 without control characters.
fn account_named(bytes: &[u8]) -> Option<&str> {
    let text = std::str::from_utf8(bytes).ok()?;
    let name = text.strip_suffix('\n').unwrap_or(text);
    (!name.is_empty() && !name.chars().any(char::is_control)).then_some(name)
}

/// The directory of streams of `account`, given the account that owns `<root>/streams/`.
fn streams_dir(root: &Path, account: &str, owner: &str) -> PathBuf {
    if account == owner {
        return root.join(OWNED_STREAMS_DIR);
    }
    root.join(ACCOUNTS_DIR).join(directory_name(account)).join(OWNED_STREAMS_DIR)
}

/// `account` as one safe path component: bytes outside `[A-Za-z0-9_-]` as `%XX`, so no name
/// (`..`, `a/b`, `$G`) leaves the accounts directory or means something to a shell.
fn directory_name(account: &str) -> String {
    let mut name = String::with_capacity(account.len());
    for byte in account.bytes() {
        if byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-' {
            name.push(char::from(byte));
        } else {
            name.push_str(&format!("%{byte:02X}"));
        }
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_owner_of_the_streams_directory_is_the_first_home_account_and_stays() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("jetstream");
        assert_eq!(owner_of_streams_dir(&root, "A").unwrap(), "A", "first open: the home account");
        assert_eq!(std::fs::read_to_string(root.join(OWNER_FILE)).unwrap(), "A\n");
        assert_eq!(owner_of_streams_dir(&root, "B").unwrap(), "A", "a later home account does not take it");
        for damaged in [&b""[..], b"\n", b"\xff\xfe", b"A\0B\n"] {
            std::fs::write(root.join(OWNER_FILE), damaged).unwrap();
            assert_eq!(owner_of_streams_dir(&root, "C").unwrap(), "C", "a damaged file is as if absent: {damaged:?}");
            assert_eq!(std::fs::read_to_string(root.join(OWNER_FILE)).unwrap(), "C\n", "and written again");
        }
    }

    #[test]
    fn the_owner_keeps_the_streams_directory_and_others_get_their_own() {
        let root = Path::new("/store/jetstream");
        assert_eq!(streams_dir(root, "A", "A"), Path::new("/store/jetstream/streams"));
        assert_eq!(streams_dir(root, "B", "A"), Path::new("/store/jetstream/accounts/B/streams"));
        assert_eq!(streams_dir(root, "$G", "A"), Path::new("/store/jetstream/accounts/%24G/streams"));
        assert_eq!(streams_dir(root, "../x", "A"), Path::new("/store/jetstream/accounts/%2E%2E%2Fx/streams"));
        assert_eq!(directory_name("ABCDEFGHIJKLMNOPQRSTUVWXYZ_abc-123"), "ABCDEFGHIJKLMNOPQRSTUVWXYZ_abc-123");
        assert_eq!(directory_name("é"), "%C3%A9");
    }
}
