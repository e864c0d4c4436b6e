//! A consumer: a cursor over a stream with delivery and acknowledgement state.
//!
//! - `validate`: defaults and nats-server's checks for a consumer config.
//! - `ahead`: a priority-ordered consumer's read-ahead, handed out by `Semaq-Priority`.
//! - `state`: what has been delivered, what awaits an ack, and the waiting pull requests.
//! - `pump`: the consumer's task, which hands messages to pull requests or the push subject.
//! - `acks`: `+ACK`, `-NAK`, `+WPI`, `+TERM`, `+NXT` from `$JS.ACK.>` replies.
//! - `persist`: durable consumers' config and state on disk, and L3's durable double acks.
//! - `groups`: priority groups (overflow, pinned client, prioritized); `pause`: `pause_until`.
//!
//! Lock order: a consumer's `state` before its stream's `store`; deliveries are published only
//! after `state` is released, so a delivery can never re-enter a consumer.

mod acks;
mod ahead;
mod groups;
mod pause;
pub use self::ahead::{check as check_priority, PRIORITY_METADATA_KEY};
mod persist;
pub use self::persist::load as persist_load;
mod pump;
mod state;
pub mod validate;

use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant, SystemTime};

use semaq_wire::clock;
use serde_json::{json, Value};
use tokio::sync::Notify;

pub use self::acks::{AckKind, AckSubject};
use self::state::State;
use super::config::{AckPolicy, ConsumerConfig};
use super::stream::Stream;
use crate::filter::{CompileError, Filter};
use crate::sync::lock;

/// The consumer metadata key holding a CEL content filter (SPEC §3).
pub const FILTER_METADATA_KEY: &str = "semaq.filter";

/// Compiles a config's `semaq.filter`, if it has one.
pub fn compile_filter(config: &ConsumerConfig) -> Result<Option<Arc<Filter>>, CompileError> {
    match config.metadata.get(FILTER_METADATA_KEY) {
        Some(source) => Filter::compile(source).map(|filter| Some(Arc::new(filter))),
        None => Ok(None),
    }
}

/// A config's filter for a consumer being started or updated; it was checked at creation, so
/// a failure here means a config edited on disk, which then filters nothing out (logged).
fn filter_of(config: &ConsumerConfig, name: &str) -> Option<Arc<Filter>> {
    compile_filter(config).unwrap_or_else(|error| {
        tracing::error!(consumer = %name, %error, "ignoring an invalid semaq.filter");
        None
    })
}

/// A consumer of one stream.
pub struct Consumer {
    /// Consumer name.
    pub name: String,
    /// Name of its stream.
    pub stream_name: String,
    /// Shared so the per-ack and per-delivery paths clone a pointer, not the config.
    config: Mutex<Arc<ConsumerConfig>>,
    /// The compiled `semaq.filter`, kept in step with `config`.
    content_filter: Mutex<Option<Arc<Filter>>>,
    /// When it was created.
    pub created: SystemTime,
    /// Durable consumers survive restarts and inactivity.
    pub durable: bool,
    state: Mutex<State>,
    /// Signalled when a pump round has handed its messages to the bus (`State::in_transit`).
    handed_off: std::sync::Condvar,
    wake: Notify,
    stopped: std::sync::atomic::AtomicBool,
    stream: Weak<Stream>,
    services: Arc<super::Services>,
    dir: Option<PathBuf>,
    /// Double-ack replies waiting for the next state save (group commit; see `persist`).
    confirmations: Mutex<Vec<String>>,
    /// Serializes state saves, so "nothing changed since the last save" means "already on disk".
    save_lock: Mutex<()>,
}

impl std::fmt::Debug for Consumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer").field("stream", &self.stream_name).field("name", &self.name).finish_non_exhaustive()
    }
}

impl Consumer {
    /// Creates a consumer positioned by its deliver policy (or by restored state) and starts its task.
    pub fn start(
        stream: &Arc<Stream>,
        name: String,
        config: ConsumerConfig,
        created: SystemTime,
        dir: Option<PathBuf>,
        restored: Option<persist::SavedState>,
    ) -> Arc<Self> {
        let durable = config.durable_name.is_some();
        let state = match restored {
            Some(saved) => State::restore(saved, ack_wait(&config), stream.state().last_seq),
            None => State::positioned(stream, &config),
        };
        let content_filter = Mutex::new(filter_of(&config, &name));
        let consumer = Arc::new(Self {
            content_filter,
            name,
            stream_name: stream.name.clone(),
            config: Mutex::new(Arc::new(config)),
            created,
            durable,
            state: Mutex::new(state),
            handed_off: std::sync::Condvar::new(),
            wake: Notify::new(),
            stopped: std::sync::atomic::AtomicBool::new(false),
            stream: Arc::downgrade(stream),
            services: stream.services().clone(),
            dir,
            confirmations: Mutex::new(Vec::new()),
            save_lock: Mutex::new(()),
        });
        consumer
    }

    /// Starts delivering (the consumer's task). Separate from `start`, so a create response can
    /// describe the consumer before its first delivery, as nats-server's does: a client that
    /// reads `num_pending` from it (nats-py's KV watch) would otherwise see the backlog gone.
    pub fn run(self: &Arc<Self>, stream: &Stream) {
        tokio::spawn(pump::run(self.clone(), stream.watch_last_seq()));
    }

    /// The configuration.
    pub fn config(&self) -> Arc<ConsumerConfig> {
        lock(&self.config).clone()
    }

    /// Replaces the configuration with an allowed update.
    pub fn set_config(&self, config: ConsumerConfig) {
        *lock(&self.content_filter) = filter_of(&config, &self.name);
        *lock(&self.config) = Arc::new(config);
        self.save_config();
        self.wake.notify_one();
    }

    /// The stream, while it exists.
    pub fn stream(&self) -> Option<Arc<Stream>> {
        self.stream.upgrade()
    }

    /// Stops the task; durable state is saved first.
    pub fn stop(&self) {
        self.stopped.store(true, std::sync::atomic::Ordering::Release);
        self.wake.notify_one();
    }

    fn is_stopped(&self) -> bool {
        self.stopped.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Wakes the task (new pull request, ack, flow control response).
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// After a purge of its stream, as nats-server's `purgeLocked` moves consumers: an
    /// unfiltered purge (`purged` None) moves every consumer to the stream's `first_seq`; one of
    /// `purged` subjects moves a consumer whose filters it covers to the first message left
    /// on them (`filtered_first`, else past `last_seq`), and one whose filters are wider to
    /// `first_seq`; others stay. The state is saved at the task's next round.
    pub fn stream_purged(&self, purged: Option<&str>, first_seq: u64, filtered_first: Option<u64>, last_seq: u64) {
        let filters = validate::filters(&self.config());
        let (start, wider) = match purged {
            None => (first_seq, false),
            Some(purged) if filters.iter().any(|f| semaq_wire::subject::is_subset(f, purged)) => {
                (filtered_first.unwrap_or(last_seq.saturating_add(1)), false)
            }
            Some(purged) if filters.iter().any(|f| semaq_wire::subject::is_subset(purged, f)) => (first_seq, true),
            Some(_) => return,
        };
        let stream = self.stream();
        // Lock order: the state, then the store.
        let mut state = lock(&self.state);
        let store = stream.as_ref().filter(|_| wider).map(|stream| stream.store());
        let gone = |seq| store.as_ref().is_some_and(|store| matches!(store.get(seq), Ok(None)));
        state.stream_purged(start, &gone);
        drop((store, state));
        self.wake();
    }

    /// The compiled content filter, if any.
    fn content_filter(&self) -> Option<Arc<Filter>> {
        lock(&self.content_filter).clone()
    }

    /// Whether a stored message passes the content filter; counted in the server's filter stats.
    fn passes_filter(&self, filter: &Filter, message: &semaq_store::StoredMessage) -> bool {
        let filters = &self.services.filters;
        let verdict = crate::filter::evaluate_stored(Some(filters), filter, message);
        filters.stats.record(verdict);
        verdict.matched()
    }

    /// Whether `subject` is one this consumer delivers (its filters, or none).
    pub fn filter_matches(&self, subject: &str) -> bool {
        validate::filter_matches(&self.config(), subject)
    }

    /// The stream sequence its next first delivery starts from: everything below it was
    /// delivered, or passed over.
    pub fn next_delivery_seq(&self) -> u64 {
        lock(&self.state).next_seq
    }

    /// Whether this consumer has acknowledged (or will never deliver) stream sequence `seq` on `subject`.
    pub fn has_acked(&self, seq: u64, subject: &str) -> bool {
        let config = self.config();
        if !validate::filter_matches(&config, subject) {
            return true;
        }
        lock(&self.state).has_acked(seq)
    }

    /// The state once the pump round in progress, if any, has handed its messages to the bus,
    /// so an info answer never reaches a client before messages it counts as delivered. The
    /// wait is bounded: an info asked from inside that hand-off (an internal subscriber on the
    /// deliver subject) answers after [`crate::limits::CONSUMER_INFO_HAND_OFF_WAIT`].
    fn state_after_hand_off(&self) -> std::sync::MutexGuard<'_, State> {
        let state = lock(&self.state);
        let waited =
            self.handed_off.wait_timeout_while(state, crate::limits::CONSUMER_INFO_HAND_OFF_WAIT, |s| s.in_transit > 0);
        waited.map_or_else(|poisoned| poisoned.into_inner().0, |(state, _)| state)
    }

    /// The consumer info body.
    pub fn info(&self) -> Value {
        let config = self.config();
        let stream = self.stream();
        let state = self.state_after_hand_off();
        let filter = self.content_filter();
        let num_pending = stream.as_ref().map_or(0, |s| state.num_pending(s, &config, filter.as_deref()));
        let mut info = json!({
            "stream_name": self.stream_name,
            "name": self.name,
            "created": clock::rfc3339(self.created),
            "config": *config,
            "delivered": {
                "consumer_seq": state.delivered_consumer_seq,
                "stream_seq": state.delivered_stream_seq,
            },
            "ack_floor": {
                "consumer_seq": state.ack_floor_consumer_seq,
                "stream_seq": state.ack_floor_stream_seq,
            },
            "num_ack_pending": state.pending.len(),
            "num_redelivered": state.num_redelivered(),
            "num_waiting": state.waiting.len(),
            "num_pending": num_pending,
            "ts": clock::rfc3339(SystemTime::now()),
        });
        if config.deliver_subject.is_some() {
            info["push_bound"] = json!(state.push_bound);
        }
        // As nats-server: `last_active` appears once there was a delivery (an ack).
        for (key, at) in [("delivered", state.last_delivered), ("ack_floor", state.last_acked)] {
            if let Some(at) = at.and_then(wall_time) {
                info[key]["last_active"] = json!(clock::rfc3339(at));
            }
        }
        if let Some(left) = pause::remaining(&config) {
            info["paused"] = json!(true);
            info["pause_remaining"] = json!(left.as_nanos() as u64);
        }
        if let Some(group) = config.priority_groups.first() {
            let pin = state.pin.as_ref().filter(|pin| pin.expires > Instant::now());
            let mut entry = json!({ "group": group });
            if let Some(pin) = pin {
                entry["pinned_client_id"] = json!(pin.id);
                entry["pinned_ts"] = json!(clock::rfc3339(pin.since));
            }
            info["priority_groups"] = json!([entry]);
        }
        info
    }

    /// Pauses deliveries until `until` (RFC 3339), or resumes them (`None` or a past time), as
    /// `CONSUMER.PAUSE` asks; returns the pause response body.
    pub fn pause(&self, until: Option<String>) -> Value {
        let mut config = (*self.config()).clone();
        config.pause_until = until;
        let remaining = pause::remaining(&config);
        let until = config.pause_until.clone().unwrap_or_else(|| "0001-01-01T00:00:00Z".to_string());
        self.set_config(config);
        let mut body = json!({ "paused": remaining.is_some(), "pause_until": until });
        if let Some(left) = remaining {
            body["pause_remaining"] = json!(left.as_nanos() as u64);
        }
        body
    }

    /// Unpins the pinned client of `group` (`CONSUMER.UNPIN`); a new client is pinned at the
    /// next delivery.
    pub fn unpin(&self, group: &str) -> Result<(), super::errors::ApiError> {
        if !self.config().priority_groups.iter().any(|g| g == group) {
            return Err(super::errors::ApiError::invalid_priority_group());
        }
        lock(&self.state).pin = None;
        self.wake();
        Ok(())
    }

    /// Checks a pull request's priority group fields; a request from the pinned client keeps
    /// its pin alive.
    fn check_group(
        &self,
        config: &ConsumerConfig,
        group: &groups::PullGroup,
        now: Instant,
    ) -> Result<(), (u16, String)> {
        let mut state = lock(&self.state);
        let pin = state.pin.as_mut().filter(|pin| pin.expires > now);
        groups::check_request(config, pin.as_deref(), group)?;
        if let Some(pin) = pin.filter(|pin| !group.id.is_empty() && pin.id == group.id) {
            pin.expires = now + groups::pin_timeout(config);
        }
        Ok(())
    }
}

/// The wall-clock time of `at`: monotonic stamps are cheap to take on the delivery path and
/// only converted when someone asks.
fn wall_time(at: Instant) -> Option<SystemTime> {
    SystemTime::now().checked_sub(at.elapsed())
}

/// The ack wait of a config, with nats-server's default.
pub fn ack_wait(config: &ConsumerConfig) -> Duration {
    if config.ack_wait > 0 {
        Duration::from_nanos(config.ack_wait as u64)
    } else {
        Duration::from_nanos(super::config::ACK_WAIT_DEFAULT_NS as u64)
    }
}

/// When a delivery made now (the `deliveries`-th) is due for redelivery.
pub fn redelivery_deadline(config: &ConsumerConfig, deliveries: u64, now: Instant) -> Instant {
    if config.ack_policy == AckPolicy::None {
        return now;
    }
    let index = (deliveries.saturating_sub(1) as usize).min(config.backoff.len().saturating_sub(1));
    match config.backoff.get(index) {
        Some(delay) if *delay > 0 => now + Duration::from_nanos(*delay as u64),
        _ => now + ack_wait(config),
    }
}
