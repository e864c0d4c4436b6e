//! Filtered core subscriptions: `$SEMAQ.API.SUB.CREATE` and `$SEMAQ.API.SUB.DELETE`.
//!
//! The filtered subscriptions live in a private subject index (a [`Router`] of their own, so
//! patterns and queue groups match exactly as for `SUB`). The server's router holds one internal
//! subscription per distinct pattern, a `Trigger`. A message on `ai.inference` reaches the
//! triggers of `ai.>`, `ai.*` and `ai.inference` alike; only the one whose pattern was created
//! first among those that match (the lead) acts: it takes every filtered subscription the index
//! matches, whatever its pattern, and evaluates them all over ONE prepared message. So a payload
//! is parsed (or decoded) at most once however many patterns and filters reach it, and a
//! queue group spanning patterns still delivers each match once.
//!
//! The work runs on the publisher's read loop, bounded: `FILTERS_PER_SUBJECT_MAX` filters per
//! pattern, payloads up to `FILTER_PAYLOAD_BYTES_MAX`. Each match is republished to its
//! subscription's `deliver` subject. A subscription ends with DELETE or when the connection that
//! created it closes.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use serde::Deserialize;
use serde_json::{json, Value};

use super::{CompileError, Context, Filter, FilterStats, PayloadCache, Prepared};
use crate::bus::Bus;
use crate::delivery::{InternalSink, Message, Subscription};
use crate::limits;
use crate::registry::Registry;
use crate::router::{Matches, Router};
use crate::sync::lock;

/// The subject that creates a filtered subscription.
pub const API_CREATE: &str = "$SEMAQ.API.SUB.CREATE";
/// The subject that deletes one.
pub const API_DELETE: &str = "$SEMAQ.API.SUB.DELETE";

thread_local! {
    /// Set while a match is republished, so a delivery never enters a filter again (a
    /// `deliver` subject matched by some filtered subscription would otherwise loop).
    static DELIVERING: Cell<bool> = const { Cell::new(false) };
}

/// One filtered subscription.
#[derive(Debug)]
struct Filtered {
    id: u64,
    filter: Filter,
    deliver: String,
    /// The creation order of its pattern's trigger; the lowest among a message's matches leads.
    pattern_order: u64,
}

/// A filtered subscription as the index holds it; equal only to itself.
#[derive(Debug, Clone)]
struct Member(Arc<Filtered>);

impl PartialEq for Member {
    fn eq(&self, other: &Self) -> bool {
        self.0.id == other.0.id
    }
}

impl Eq for Member {}

impl std::hash::Hash for Member {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.id.hash(state);
    }
}

/// The server router's subscription for one pattern of filtered subscriptions.
#[derive(Debug)]
struct Trigger {
    order: u64,
    // Weak: the bus's router holds this trigger, and the filters hold the bus.
    filters: Weak<Filters>,
}

impl InternalSink for Trigger {
    fn receive(&self, message: &Message<'_>) -> bool {
        if DELIVERING.with(Cell::get) {
            return false;
        }
        let Some(filters) = self.filters.upgrade() else { return false };
        filters.dispatch(self.order, message)
    }
}

/// A pattern with filtered subscriptions.
struct Pattern {
    order: u64,
    members: usize,
    subscription: Arc<Subscription>,
}

/// A subscription's place, to remove it.
struct Placement {
    member: Member,
    pattern: String,
    queue: Option<String>,
    owner: u64,
}

#[derive(Default)]
struct Inner {
    next_id: u64,
    patterns: HashMap<String, Pattern>,
    by_id: HashMap<u64, Placement>,
    /// owner connection → its ids.
    by_owner: HashMap<u64, Vec<u64>>,
}

/// Every filtered core subscription, the server-wide filter counters, and the parsed payloads
/// consumers share.
pub struct Filters {
    /// Where triggers subscribe and matches are republished.
    bus: Arc<Bus>,
    /// Decodes wire-format payloads for filters that read them.
    pub registry: Option<Arc<Registry>>,
    inner: Mutex<Inner>,
    /// The filtered subscriptions by pattern and queue; read without `inner` by publishers.
    index: Router<Member>,
    /// Counters for `/varz`.
    pub stats: FilterStats,
    /// Stored payloads parsed once for every filtered consumer reading them.
    pub cache: PayloadCache,
}

impl std::fmt::Debug for Filters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Filters").field("subscriptions", &self.len()).finish()
    }
}

/// A refused API request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{description}")]
pub struct ApiError {
    /// HTTP-like status.
    pub code: u16,
    /// What is wrong.
    pub description: String,
    /// Where in the filter expression, for compile errors.
    pub position: Option<(usize, usize)>,
}

impl ApiError {
    fn new(code: u16, description: impl Into<String>) -> Self {
        Self { code, description: description.into(), position: None }
    }

    fn to_json(&self) -> Value {
        let mut error = json!({ "code": self.code, "description": self.description });
        if let Some((line, column)) = self.position {
            error["line"] = json!(line);
            error["column"] = json!(column);
        }
        json!({ "error": error })
    }
}

impl From<CompileError> for ApiError {
    fn from(error: CompileError) -> Self {
        Self { code: 400, description: error.to_string(), position: Some((error.line, error.column)) }
    }
}

/// The body of a create request.
#[derive(Debug, Deserialize)]
struct CreateRequest {
    subject: String,
    filter: String,
    deliver: String,
    #[serde(default)]
    queue: Option<String>,
}

/// The body of a delete request.
#[derive(Debug, Deserialize)]
struct DeleteRequest {
    id: u64,
}

impl Filters {
    /// No filtered subscriptions yet; they publish on `bus` and decode with `registry`.
    pub fn new(bus: Arc<Bus>, registry: Option<Arc<Registry>>) -> Self {
        Self {
            bus,
            registry,
            inner: Mutex::default(),
            index: Router::default(),
            stats: FilterStats::default(),
            cache: PayloadCache::default(),
        }
    }

    /// Filtered subscriptions open now.
    pub fn len(&self) -> usize {
        lock(&self.inner).by_id.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Evaluates, for the trigger of order `order`, every filtered subscription `message`
    /// reaches, if that trigger leads; republishes the matches. True when any was delivered.
    fn dispatch(&self, order: u64, message: &Message<'_>) -> bool {
        let matches = self.index.matches(message.subject);
        if lead(&matches) != Some(order) {
            return false;
        }
        let context = Context { registry: self.registry.as_deref(), cache: None, stats: Some(&self.stats) };
        let prepared = Prepared::new(message.subject, message.headers, message.payload).with_context(context);
        let passes = |member: &&Member| {
            let verdict = member.0.filter.evaluate(&prepared);
            self.stats.record(verdict);
            verdict.matched()
        };
        let mut targets: Vec<&Member> = matches.plain.iter().filter(passes).collect();
        for group in &matches.groups {
            let matching: Vec<&Member> = group.members.iter().filter(passes).collect();
            if !matching.is_empty() {
                targets.push(matching[rand::random::<u32>() as usize % matching.len()]);
            }
        }
        DELIVERING.with(|flag| flag.set(true));
        for member in &targets {
            self.bus.publish_as(&member.0.deliver, &Message { publisher: None, ..*message });
        }
        DELIVERING.with(|flag| flag.set(false));
        !targets.is_empty()
    }

    fn create(self: &Arc<Self>, owner: u64, request: CreateRequest) -> Result<Value, ApiError> {
        check_subjects(&self.bus, owner, &request)?;
        let filter = Filter::compile(&request.filter)?;
        let native = filter.is_native();
        let queue = request.queue.clone().filter(|q| !q.is_empty());
        let mut inner = lock(&self.inner);
        if inner.by_id.len() >= limits::FILTERED_SUBSCRIPTIONS_MAX {
            return Err(ApiError::new(503, "too many filtered subscriptions on this server"));
        }
        if inner.by_owner.get(&owner).map_or(0, Vec::len) >= limits::FILTERED_SUBSCRIPTIONS_PER_CONNECTION_MAX {
            return Err(ApiError::new(400, "too many filtered subscriptions on this connection"));
        }
        inner.next_id += 1;
        let id = inner.next_id;
        let pattern_order = self.claim_pattern(&mut inner, &request.subject, id)?;
        let member = Member(Arc::new(Filtered { id, filter, deliver: request.deliver.clone(), pattern_order }));
        // A new pattern's trigger orders after every existing one, so it never takes the lead
        // from a trigger that already handles this subject.
        if let Err(error) = self.index.insert(&request.subject, queue.as_deref(), member.clone()) {
            self.release_pattern(&mut inner, &request.subject);
            return Err(ApiError::new(400, format!("invalid subject: {error}")));
        }
        let placement = Placement { member, pattern: request.subject.clone(), queue, owner };
        inner.by_id.insert(id, placement);
        inner.by_owner.entry(owner).or_default().push(id);
        Ok(json!({
            "id": id,
            "subject": request.subject,
            "filter": request.filter,
            "deliver": request.deliver,
            "queue": request.queue,
            "native": native,
        }))
    }

    /// Counts one more subscription on `pattern`, subscribing its trigger for the first; returns
    /// the trigger's order. `id` (fresh, increasing) orders a new trigger after all others.
    fn claim_pattern(self: &Arc<Self>, inner: &mut Inner, pattern: &str, id: u64) -> Result<u64, ApiError> {
        if let Some(existing) = inner.patterns.get_mut(pattern) {
            if existing.members >= limits::FILTERS_PER_SUBJECT_MAX {
                return Err(ApiError::new(503, "too many filters on this subject"));
            }
            existing.members += 1;
            return Ok(existing.order);
        }
        let trigger = Arc::new(Trigger { order: id, filters: Arc::downgrade(self) });
        let subscription = self
            .bus
            .subscribe_internal(pattern, None, trigger)
            .map_err(|error| ApiError::new(400, format!("invalid subject: {error}")))?;
        inner.patterns.insert(pattern.to_string(), Pattern { order: id, members: 1, subscription });
        Ok(id)
    }

    /// Counts one subscription less on `pattern`, unsubscribing its trigger after the last.
    fn release_pattern(&self, inner: &mut Inner, pattern: &str) {
        let Some(entry) = inner.patterns.get_mut(pattern) else { return };
        entry.members -= 1;
        if entry.members == 0 {
            if let Some(entry) = inner.patterns.remove(pattern) {
                self.bus.unsubscribe_internal(&entry.subscription);
            }
        }
    }

    fn delete(&self, owner: u64, id: u64) -> Result<Value, ApiError> {
        let mut inner = lock(&self.inner);
        match inner.by_id.get(&id) {
            Some(placement) if placement.owner == owner => {}
            _ => return Err(ApiError::new(404, "filtered subscription not found")),
        }
        self.remove(&mut inner, id);
        Ok(json!({ "success": true }))
    }

    /// Removes every filtered subscription the connection `owner` created (it closed).
    pub fn connection_closed(&self, owner: u64) {
        let mut inner = lock(&self.inner);
        let Some(ids) = inner.by_owner.remove(&owner) else { return };
        for id in ids {
            self.remove(&mut inner, id);
        }
    }

    fn remove(&self, inner: &mut Inner, id: u64) {
        let Some(placement) = inner.by_id.remove(&id) else { return };
        if let Some(ids) = inner.by_owner.get_mut(&placement.owner) {
            ids.retain(|other| *other != id);
            if ids.is_empty() {
                inner.by_owner.remove(&placement.owner);
            }
        }
        self.index.remove(&placement.pattern, placement.queue.as_deref(), &placement.member);
        self.release_pattern(inner, &placement.pattern);
    }
}

/// The order of the trigger that leads for a match result: the lowest among its members'.
fn lead(matches: &Matches<Member>) -> Option<u64> {
    let queued = matches.groups.iter().flat_map(|group| &group.members);
    matches.plain.iter().chain(queued).map(|member| member.0.pattern_order).min()
}

fn check_subjects(bus: &Bus, owner: u64, request: &CreateRequest) -> Result<(), ApiError> {
    use semaq_wire::subject;
    if !subject::is_valid_filter(&request.subject) {
        return Err(ApiError::new(400, "invalid subject"));
    }
    if !subject::is_valid_literal(&request.deliver) {
        return Err(ApiError::new(400, "invalid deliver subject (must be a literal subject)"));
    }
    if request.queue.as_deref().is_some_and(|q| !q.is_empty() && !subject::is_valid_queue(q)) {
        return Err(ApiError::new(400, "invalid queue group"));
    }
    let client = bus.clients.get(owner);
    let permissions = client.as_ref().and_then(|c| c.details()).and_then(|d| d.permissions.clone());
    if permissions.as_ref().is_some_and(|p| !p.may_subscribe(&request.subject)) {
        return Err(ApiError::new(403, format!("permissions violation for subscription to \"{}\"", request.subject)));
    }
    // Matches are republished on `deliver` as if the creator published them: a connection
    // may not reach, through a filter, a subject it could not publish to itself.
    if permissions.is_some_and(|p| !p.may_publish(&request.deliver)) {
        return Err(ApiError::new(403, format!("permissions violation for publish to \"{}\"", request.deliver)));
    }
    Ok(())
}

/// Answers `$SEMAQ.API.SUB.>` inline, on the requester's own read loop: compiling is bounded
/// by the expression size, and a request cannot race its connection's close.
#[derive(Debug)]
struct ApiSink {
    filters: Weak<Filters>,
}

impl InternalSink for ApiSink {
    fn receive(&self, message: &Message<'_>) -> bool {
        let (Some(filters), Some(reply)) = (self.filters.upgrade(), message.reply) else { return false };
        let result = match message.publisher {
            None => Err(ApiError::new(400, "filtered subscriptions are created by client connections")),
            Some(owner) => handle(&filters, owner, message.subject, message.payload),
        };
        let body = result.unwrap_or_else(|error| error.to_json());
        filters.bus.publish(reply, None, body.to_string().as_bytes());
        true
    }
}

fn handle(filters: &Arc<Filters>, owner: u64, subject: &str, payload: &[u8]) -> Result<Value, ApiError> {
    let invalid = |error: serde_json::Error| ApiError::new(400, format!("invalid JSON: {error}"));
    match subject {
        API_CREATE => {
            let request = serde_json::from_slice(payload).map_err(invalid)?;
            filters.create(owner, request)
        }
        API_DELETE => {
            let request: DeleteRequest = serde_json::from_slice(payload).map_err(invalid)?;
            filters.delete(owner, request.id)
        }
        _ => Err(ApiError::new(400, "unknown request")),
    }
}

/// Subscribes the API to `$SEMAQ.API.SUB.>`.
pub fn start(filters: &Arc<Filters>) {
    let sink = Arc::new(ApiSink { filters: Arc::downgrade(filters) });
    if let Err(error) = filters.bus.subscribe_internal("$SEMAQ.API.SUB.>", None, sink) {
        tracing::error!(%error, "cannot subscribe to the filtered subscription API");
    }
}
