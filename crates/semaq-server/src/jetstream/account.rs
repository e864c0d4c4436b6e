//! The JetStream account: `$JS.API.INFO` (usage, limits, API counters) and the account limits
//! checked where streams and consumers are created, with nats-server's error codes.
//!
//! Every account that enables JetStream (a `jetstream` block in the config file, or limits in
//! its JWT mapped into the same [`AccountJetStream`]) has a JetStream of its own, with that
//! account's limits ([`enabled`]; a JWT's tiered limits are kept per tier, its streams held to
//! the `R1` tier's); when none does, `$G` has it, unlimited (nats-server gives
//! `$G` one only when there is no other account; SemaQ did so before and keeps doing it, so a
//! store written then opens).
//! The server's own `jetstream { max_memory_store, max_file_store }` bound the bytes all
//! accounts' streams reserve and store together, on top of each account's limits.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{json, Value};

use super::config::{AckPolicy, ConsumerConfig, Storage, StreamConfig, MAX_ACK_PENDING_DEFAULT};
use super::errors::ApiError;
use super::stream::Stream;
use super::JetStream;
use crate::options::{AccountJetStream, Options, GLOBAL_ACCOUNT};

/// The account one JetStream serves: its name (a JWT account's public key) and its limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JetStreamAccount {
    /// The account's name.
    pub name: String,
    /// The limits its streams are held to: one server has only R1 streams, so a tiered
    /// account's `R1` tier (none but storage 0 when it has no such tier).
    pub limits: AccountLimits,
    /// Tier name → limits, when the account's JWT has tiered limits; empty for plain limits.
    pub tiers: BTreeMap<String, AccountLimits>,
}

impl JetStreamAccount {
    fn new(name: &str, limits: &AccountJetStream) -> Self {
        let tiers: BTreeMap<_, _> =
            limits.tiers.iter().map(|(tier, limits)| (tier.clone(), AccountLimits::from_account(limits))).collect();
        let limits = match tiers.is_empty() {
            true => AccountLimits::from_account(limits),
            false => tiers.get(SINGLE_SERVER_TIER).copied().unwrap_or(AccountLimits::NO_TIER),
        };
        Self { name: name.to_string(), limits, tiers }
    }

    /// Whether its streams have limits to be held to, plain or a tier's; nats-server refuses to
    /// create streams and consumers without (`no JetStream default or applicable tiered limit`).
    pub fn has_stream_limits(&self) -> bool {
        self.tiers.is_empty() || self.tiers.contains_key(SINGLE_SERVER_TIER)
    }
}

/// The tier of every stream on one server: nats-server names tiers `R<replicas>`, and refuses
/// more than one replica when not clustered.
pub const SINGLE_SERVER_TIER: &str = "R1";

/// The accounts that get a JetStream, in the order listed (config accounts, then JWT accounts
/// by key): each with a `jetstream` block or JWT JetStream limits; when none has one, `$G`
/// alone, unlimited. The first is the home account ([`Options::home_account`]).
pub fn enabled(options: &Options) -> Vec<JetStreamAccount> {
    let mut accounts: Vec<JetStreamAccount> = Vec::new();
    for account in &options.accounts {
        let Some(limits) = &account.jetstream else { continue };
        if accounts.iter().all(|known| known.name != account.name) {
            accounts.push(JetStreamAccount::new(&account.name, limits));
        }
    }
    if accounts.is_empty() {
        let name = GLOBAL_ACCOUNT.to_string();
        accounts.push(JetStreamAccount { name, limits: AccountLimits::UNLIMITED, tiers: BTreeMap::new() });
    }
    accounts
}

/// The account limits in force, nats-server's way: -1 is no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AccountLimits {
    /// Bytes in memory streams.
    pub memory_bytes_max: i64,
    /// Bytes in file streams.
    pub file_bytes_max: i64,
    /// Streams.
    pub streams_max: i64,
    /// Consumers per stream.
    pub consumers_max: i64,
    /// Unacknowledged messages per consumer.
    pub ack_pending_max: i64,
    /// `max_bytes` of one memory stream.
    pub memory_stream_bytes_max: i64,
    /// `max_bytes` of one file stream.
    pub file_stream_bytes_max: i64,
    /// Streams must set `max_bytes`.
    pub max_bytes_required: bool,
}

impl AccountLimits {
    /// No limits: the global account `$G`.
    pub const UNLIMITED: Self = Self {
        memory_bytes_max: -1,
        file_bytes_max: -1,
        streams_max: -1,
        consumers_max: -1,
        ack_pending_max: -1,
        memory_stream_bytes_max: -1,
        file_stream_bytes_max: -1,
        max_bytes_required: false,
    };

    /// The limits of a tiered account without the tier its streams would be in: nothing may be
    /// stored (nats-server refuses such streams before any of these limits is looked at).
    pub const NO_TIER: Self = Self { memory_bytes_max: 0, file_bytes_max: 0, ..Self::UNLIMITED };

    /// Zero everywhere: the top-level `limits` nats-server reports for a tiered account.
    const ZERO: Self = Self {
        memory_bytes_max: 0,
        file_bytes_max: 0,
        streams_max: 0,
        consumers_max: 0,
        ack_pending_max: 0,
        memory_stream_bytes_max: 0,
        file_stream_bytes_max: 0,
        max_bytes_required: false,
    };

    fn from_account(limits: &AccountJetStream) -> Self {
        let limit = |value: Option<u64>| value.map_or(-1, |v| i64::try_from(v).unwrap_or(i64::MAX));
        Self {
            memory_bytes_max: limit(limits.memory_bytes_max),
            file_bytes_max: limit(limits.file_bytes_max),
            streams_max: limit(limits.streams_max),
            consumers_max: limit(limits.consumers_max),
            ack_pending_max: limit(limits.ack_pending_max),
            memory_stream_bytes_max: limit(limits.memory_stream_bytes_max),
            file_stream_bytes_max: limit(limits.file_stream_bytes_max),
            max_bytes_required: limits.max_bytes_required,
        }
    }

    /// The `limits` object of account info.
    pub fn to_json(&self) -> Value {
        json!({
            "max_memory": self.memory_bytes_max,
            "max_storage": self.file_bytes_max,
            "max_streams": self.streams_max,
            "max_consumers": self.consumers_max,
            "max_ack_pending": self.ack_pending_max,
            "memory_max_stream_bytes": self.memory_stream_bytes_max,
            "storage_max_stream_bytes": self.file_stream_bytes_max,
            "max_bytes_required": self.max_bytes_required,
        })
    }

    fn stream_bytes_max(&self, storage: Storage) -> i64 {
        match storage {
            Storage::Memory => self.memory_stream_bytes_max,
            Storage::File => self.file_stream_bytes_max,
        }
    }
}

/// The body of `$JS.API.INFO`, as nats-server 2.10 (2.9 has no `reserved_*`). A tiered
/// account's top-level figures are its totals, its top-level limits zero, and `tiers` has each
/// tier's usage and limits (every tier it has limits for, and the one its streams are in).
pub fn info(jetstream: &JetStream) -> Value {
    let options = &jetstream.services().options;
    let account = jetstream.account();
    let streams = jetstream.streams();
    let mut info;
    if account.tiers.is_empty() {
        info = tier_json(&streams, &account.limits);
    } else {
        info = tier_json(&streams, &AccountLimits::ZERO);
        let mut tiers = serde_json::Map::new();
        for (name, limits) in &account.tiers {
            let in_tier = if name == SINGLE_SERVER_TIER { streams.as_slice() } else { &[] };
            tiers.insert(name.clone(), tier_json(in_tier, limits));
        }
        if !streams.is_empty() && !account.tiers.contains_key(SINGLE_SERVER_TIER) {
            tiers.insert(SINGLE_SERVER_TIER.to_string(), tier_json(&streams, &AccountLimits::ZERO));
        }
        info["tiers"] = Value::Object(tiers);
    }
    info["api"] = json!({
        "total": jetstream.api_requests.load(std::sync::atomic::Ordering::Relaxed),
        "errors": jetstream.api_errors.load(std::sync::atomic::Ordering::Relaxed),
    });
    if let Some(domain) = &options.jetstream_domain {
        info["domain"] = json!(domain);
    }
    info
}

/// nats-server's `JetStreamTier`: the usage of `streams` (with the bytes their `max_bytes`
/// reserve) and the limits they are held to.
fn tier_json(streams: &[Arc<Stream>], limits: &AccountLimits) -> Value {
    let (mut memory, mut storage) = (0, 0);
    for stream in streams {
        let bytes = stream.state().bytes;
        match stream.config().storage {
            Storage::Memory => memory += bytes,
            Storage::File => storage += bytes,
        }
    }
    let consumers: usize = streams.iter().map(|stream| stream.consumer_count()).sum();
    json!({
        "memory": memory,
        "storage": storage,
        "reserved_memory": reserved(streams, Storage::Memory),
        "reserved_storage": reserved(streams, Storage::File),
        "streams": streams.len(),
        "consumers": consumers,
        "limits": limits.to_json(),
    })
}

/// The stream config against the account's `max_bytes` rules (create and update), after the
/// config's own checks, as nats-server's `checkStreamCfg` ends.
pub fn check_stream_config(limits: &AccountLimits, config: &StreamConfig) -> Result<(), ApiError> {
    let stream_bytes_max = limits.stream_bytes_max(config.storage);
    if limits.max_bytes_required && config.max_bytes <= 0 {
        return Err(error(400, 10113, "account requires a stream config to have max bytes set"));
    }
    if stream_bytes_max > 0 && config.max_bytes > stream_bytes_max {
        return Err(error(400, 10122, "stream max bytes exceeds account limit max stream bytes"));
    }
    Ok(())
}

/// A new stream against the account's and the server's limits: the number of streams, its
/// `max_consumers`, and the bytes its `max_bytes` would reserve beside the other streams' (the
/// account's for the account's limit, every account's for the server's).
pub fn check_stream_create(jetstream: &JetStream, config: &StreamConfig) -> Result<(), ApiError> {
    if !jetstream.account().has_stream_limits() {
        return Err(ApiError::no_limits());
    }
    let (options, limits) = (&jetstream.services().options, &jetstream.account().limits);
    let streams = jetstream.streams();
    if limits.streams_max > 0 && streams.len() as i64 >= limits.streams_max {
        return Err(error(400, 10027, "maximum number of streams reached"));
    }
    if config.max_consumers > 0 && limits.consumers_max > 0 && config.max_consumers > limits.consumers_max {
        return Err(error(400, 10026, "maximum consumers limit reached"));
    }
    // A stream without max_bytes reserves one byte, as in nats-server.
    let adding = config.max_bytes.max(1);
    let (account_max, server_max) = match config.storage {
        Storage::Memory => (limits.memory_bytes_max, options.jetstream_memory_bytes_max),
        Storage::File => (limits.file_bytes_max, options.jetstream_file_bytes_max),
    };
    let over_account = account_max >= 0 && reserved(&streams, config.storage).saturating_add(adding) > account_max;
    let over_server = server_max.is_some_and(|max| {
        let max = i64::try_from(max).unwrap_or(i64::MAX);
        reserved(&jetstream.server_streams(), config.storage).saturating_add(adding) > max
    });
    if over_account || over_server {
        return Err(insufficient(config.storage));
    }
    Ok(())
}

/// The bytes `streams` of `storage` reserve with their `max_bytes`.
pub fn reserved(streams: &[Arc<Stream>], storage: Storage) -> i64 {
    (streams.iter().map(|stream| stream.config()))
        .filter(|other| other.storage == storage && other.max_bytes > 0)
        .map(|other| other.max_bytes)
        .fold(0, i64::saturating_add)
}

/// nats-server's "insufficient resources" for the storage type (10028 memory, 10047 file).
fn insufficient(storage: Storage) -> ApiError {
    match storage {
        Storage::Memory => error(500, 10028, "insufficient memory resources available"),
        Storage::File => error(500, 10047, "insufficient storage resources available"),
    }
}

/// The bytes a stream may still store under the account's and the server's limits, checked
/// per publish as nats-server does: the server's when its usage is already over (503, 10023),
/// else the account's when the message would take it over (400, 10002).
#[derive(Debug, Clone, Copy)]
pub struct Quota {
    /// Bytes the account's other streams of the same storage type hold.
    account_others: u64,
    /// Bytes every account's other streams of the same storage type hold.
    server_others: u64,
    /// The account's bytes for this storage type (-1: none).
    account_max: i64,
    /// The server's `max_memory_store` or `max_file_store`.
    server_max: Option<u64>,
}

impl Quota {
    /// The quota of `stream` (storage `storage`) of `jetstream` for one ingest batch; `None`
    /// when nothing limits it. Reads the other streams' usage (a busy one's as last seen), so
    /// it is taken before this stream's store lock; every account's only under a server bound.
    pub fn for_stream(jetstream: &JetStream, stream: &Stream, storage: Storage) -> Option<Self> {
        let (options, limits) = (&jetstream.services().options, &jetstream.account().limits);
        let (account_max, server_max) = match storage {
            Storage::Memory => (limits.memory_bytes_max, options.jetstream_memory_bytes_max),
            Storage::File => (limits.file_bytes_max, options.jetstream_file_bytes_max),
        };
        if account_max < 0 && server_max.is_none() {
            return None;
        }
        let stored_by_others = |streams: Vec<Arc<Stream>>| {
            (streams.iter())
                .filter(|other| !std::ptr::eq(Arc::as_ptr(other), stream) && other.config().storage == storage)
                .map(|other| other.stored_bytes())
                .fold(0, u64::saturating_add)
        };
        let account_others = if account_max < 0 { 0 } else { stored_by_others(jetstream.streams()) };
        let server_others = if server_max.is_none() { 0 } else { stored_by_others(jetstream.server_streams()) };
        Some(Self { account_others, server_others, account_max, server_max })
    }

    /// Whether a message of `message_bytes` may join the `own_bytes` of the stream.
    pub fn check(&self, own_bytes: u64, message_bytes: u64) -> Result<(), ApiError> {
        if self.server_max.is_some_and(|max| self.server_others.saturating_add(own_bytes) > max) {
            return Err(error(503, 10023, "insufficient resources"));
        }
        let used = self.account_others.saturating_add(own_bytes);
        let after = i64::try_from(used.saturating_add(message_bytes)).unwrap_or(i64::MAX);
        if self.account_max >= 0 && after > self.account_max {
            return Err(error(400, 10002, "resource limits exceeded for account"));
        }
        Ok(())
    }
}

/// The account's consumer defaults, before the config's own defaults: an acknowledging
/// consumer without `max_ack_pending` gets the account's limit when it is below the default.
pub fn apply_consumer_defaults(limits: &AccountLimits, config: &mut ConsumerConfig) {
    let limit = limits.ack_pending_max;
    let acknowledging = matches!(config.ack_policy, AckPolicy::Explicit | AckPolicy::All);
    if acknowledging && config.max_ack_pending == 0 && limit > 0 && limit < MAX_ACK_PENDING_DEFAULT {
        config.max_ack_pending = limit;
    }
}

/// A consumer's `max_ack_pending` against the account's (nats-server's 10121).
pub fn check_consumer(limits: &AccountLimits, config: &ConsumerConfig) -> Result<(), ApiError> {
    let limit = limits.ack_pending_max;
    if limit > 0 && config.max_ack_pending > limit {
        return Err(error(400, 10121, format!("consumer max ack pending exceeds system limit of {limit}")));
    }
    Ok(())
}

/// The consumers a stream may have: its own `max_consumers`, lowered to the account's.
pub fn consumers_max(limits: &AccountLimits, stream: &StreamConfig) -> Option<usize> {
    let account = limits.consumers_max;
    let mut most = stream.max_consumers;
    if most <= 0 || (account > 0 && account < most) {
        most = account;
    }
    (most > 0).then(|| usize::try_from(most).unwrap_or(usize::MAX))
}

fn error(code: u16, err_code: u32, description: impl Into<String>) -> ApiError {
    ApiError { code, err_code, description: description.into() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::Account;

    fn account(name: &str, limits: Option<AccountJetStream>) -> Account {
        Account { name: name.to_string(), jetstream: limits, ..Account::default() }
    }

    fn names_and_streams_max(options: &Options) -> Vec<(String, i64)> {
        enabled(options).into_iter().map(|account| (account.name, account.limits.streams_max)).collect()
    }

    #[test]
    fn every_account_that_enables_jetstream_gets_one_with_its_limits_else_g_alone() {
        let two = AccountJetStream { streams_max: Some(2), ..AccountJetStream::default() };
        let options = Options {
            accounts: vec![
                account("B", None),
                account("A", Some(two)),
                account("C", Some(AccountJetStream::default())),
            ],
            ..Options::default()
        };
        let expected = [("A".to_string(), 2), ("C".to_string(), -1)];
        assert_eq!(names_and_streams_max(&options), expected, "in the order listed; B has none");
        assert_eq!(options.home_account(), "A", "the first is the home account");
        let none = Options { accounts: vec![account("B", None)], ..Options::default() };
        assert_eq!(names_and_streams_max(&none), [("$G".to_string(), -1)], "no account has JetStream: $G, unlimited");
        assert_eq!(enabled(&none)[0].limits, AccountLimits::UNLIMITED);
    }

    #[test]
    fn a_tiered_account_holds_its_streams_to_the_r1_tier_and_without_one_has_no_stream_limits() {
        let tier = |streams| AccountJetStream { streams_max: Some(streams), ..AccountJetStream::default() };
        let tiered = |tiers: &[(&str, u64)]| AccountJetStream {
            tiers: tiers.iter().map(|(name, streams)| (name.to_string(), tier(*streams))).collect(),
            ..AccountJetStream::default()
        };
        let with_r1 = JetStreamAccount::new("T", &tiered(&[("R1", 2), ("R3", 7)]));
        assert_eq!(with_r1.limits.streams_max, 2);
        assert_eq!(with_r1.tiers.get("R3").map(|limits| limits.streams_max), Some(7));
        assert!(with_r1.has_stream_limits());
        let without_r1 = JetStreamAccount::new("T", &tiered(&[("R3", 7)]));
        assert_eq!(without_r1.limits, AccountLimits::NO_TIER);
        assert!(!without_r1.has_stream_limits());
        let plain = JetStreamAccount::new("P", &tier(4));
        assert!(plain.has_stream_limits() && plain.tiers.is_empty());
        assert_eq!(plain.limits.streams_max, 4);
    }

    #[test]
    fn a_quota_refuses_what_would_take_the_account_over() {
        let quota = Quota { account_others: 600, server_others: 600, account_max: 1000, server_max: None };
        assert!(quota.check(300, 100).is_ok(), "exactly at the limit is allowed");
        assert_eq!(quota.check(300, 101).map_err(|e| e.err_code), Err(10002));
        let server = Quota { account_others: 0, server_others: 600, account_max: -1, server_max: Some(500) };
        assert_eq!(server.check(0, 1).map_err(|e| e.err_code), Err(10023), "other accounts' bytes count");
    }

    #[test]
    fn consumers_max_is_the_lower_of_stream_and_account() {
        let limits = AccountLimits { consumers_max: 3, ..AccountLimits::UNLIMITED };
        let stream = |max_consumers| StreamConfig { max_consumers, ..StreamConfig::default() };
        assert_eq!(consumers_max(&limits, &stream(-1)), Some(3));
        assert_eq!(consumers_max(&limits, &stream(2)), Some(2));
        assert_eq!(consumers_max(&limits, &stream(5)), Some(3));
        assert_eq!(consumers_max(&AccountLimits::UNLIMITED, &stream(-1)), None);
    }
}
