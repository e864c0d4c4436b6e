//! Filtered core subscriptions: `$SEMAQ.API.SUB.CREATE` and `$SEMAQ.API.SUB.DELETE`.
//!
//! Filtered subscriptions on the same subject pattern share one internal subscription (a
//! [`Group`]), so a message is parsed at most once for all of them. The group evaluates every
//! filter on the publisher's read loop (bounded: `FILTERS_PER_SUBJECT_MAX` filters, payloads up to
//! `FILTER_PAYLOAD_BYTES_MAX`) and republishes each match to the subscription's `deliver` subject.
//! A subscription ends with DELETE or when the connection that created it closes.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use serde::Deserialize;
use serde_json::{json, Value};

use super::{CompileError, Filter, FilterStats, Prepared};
use crate::delivery::{InternalSink, Message, Subscription};
use crate::limits;
use crate::server::{lock, Shared};

/// The subject that creates a filtered subscription.
pub const API_CREATE: &str = "$SEMAQ.API.SUB.CREATE";
/// The subject that deletes one.
pub const API_DELETE: &str = "$SEMAQ.API.SUB.DELETE";

thread_local! {
    /// Set while a group republishes a match, so a delivery never enters a filter again (a
    /// `deliver` subject matched by some filtered subscription would otherwise loop).
    static DELIVERING: Cell<bool> = const { Cell::new(false) };
}

/// One filtered subscription.
#[derive(Debug)]
struct Filtered {
    id: u64,
    filter: Filter,
    deliver: String,
    queue: Option<String>,
}

/// The filtered subscriptions on one subject pattern, as one internal router subscription.
#[derive(Debug)]
struct Group {
    /// Copied on write, so a publisher takes a snapshot without holding the lock.
    members: Mutex<Arc<Vec<Arc<Filtered>>>>,
    shared: Weak<Shared>,
}

impl InternalSink for Group {
    fn receive(&self, message: &Message<'_>) -> bool {
        if DELIVERING.with(Cell::get) {
            return false;
        }
        let Some(shared) = self.shared.upgrade() else { return false };
        let members = lock(&self.members).clone();
        let prepared = Prepared::new(message.subject, message.headers, message.payload);
        let mut plain = Vec::new();
        let mut queued: HashMap<&str, Vec<&Filtered>> = HashMap::new();
        for member in members.iter() {
            let verdict = member.filter.evaluate(&prepared);
            shared.filters.stats.record(verdict);
            if !verdict.matched() {
                continue;
            }
            match &member.queue {
                None => plain.push(&**member),
                Some(queue) => queued.entry(queue.as_str()).or_default().push(member),
            }
        }
        for candidates in queued.values() {
            plain.push(candidates[rand::random::<u32>() as usize % candidates.len()]);
        }
        let delivered = !plain.is_empty();
        DELIVERING.with(|flag| flag.set(true));
        for member in plain {
            shared.publish_as(&member.deliver, &Message { publisher: None, ..*message });
        }
        DELIVERING.with(|flag| flag.set(false));
        delivered
    }
}

struct GroupEntry {
    group: Arc<Group>,
    subscription: Arc<Subscription>,
}

#[derive(Default)]
struct Inner {
    next_id: u64,
    groups: HashMap<String, GroupEntry>,
    /// id → (subject pattern, owner).
    by_id: HashMap<u64, (String, u64)>,
    /// owner connection → its ids.
    by_owner: HashMap<u64, Vec<u64>>,
}

/// Every filtered core subscription and the server-wide filter counters.
#[derive(Default)]
pub struct Registry {
    inner: Mutex<Inner>,
    /// Counters for `/varz`.
    pub stats: FilterStats,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").field("subscriptions", &self.len()).finish()
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

impl Registry {
    /// Filtered subscriptions open now.
    pub fn len(&self) -> usize {
        lock(&self.inner).by_id.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn create(&self, shared: &Arc<Shared>, owner: u64, request: CreateRequest) -> Result<Value, ApiError> {
        check_subjects(shared, owner, &request)?;
        let filter = Filter::compile(&request.filter)?;
        let native = filter.is_native();
        let mut inner = lock(&self.inner);
        if inner.by_id.len() >= limits::FILTERED_SUBSCRIPTIONS_MAX {
            return Err(ApiError::new(503, "too many filtered subscriptions on this server"));
        }
        if inner.by_owner.get(&owner).map_or(0, Vec::len) >= limits::FILTERED_SUBSCRIPTIONS_PER_CONNECTION_MAX {
            return Err(ApiError::new(400, "too many filtered subscriptions on this connection"));
        }
        inner.next_id += 1;
        let id = inner.next_id;
        let filtered = Arc::new(Filtered {
            id,
            filter,
            deliver: request.deliver.clone(),
            queue: request.queue.clone().filter(|q| !q.is_empty()),
        });
        add_to_group(&mut inner, shared, &request.subject, filtered)?;
        inner.by_id.insert(id, (request.subject.clone(), owner));
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

    fn delete(&self, shared: &Shared, owner: u64, id: u64) -> Result<Value, ApiError> {
        let mut inner = lock(&self.inner);
        match inner.by_id.get(&id) {
            Some((_, holder)) if *holder == owner => {}
            _ => return Err(ApiError::new(404, "filtered subscription not found")),
        }
        remove(&mut inner, shared, id);
        Ok(json!({ "success": true }))
    }

    /// Removes every filtered subscription the connection `owner` created (it closed).
    pub fn connection_closed(&self, shared: &Shared, owner: u64) {
        let mut inner = lock(&self.inner);
        let Some(ids) = inner.by_owner.remove(&owner) else { return };
        for id in ids {
            remove(&mut inner, shared, id);
        }
    }
}

fn check_subjects(shared: &Shared, owner: u64, request: &CreateRequest) -> Result<(), ApiError> {
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
    let client = lock(&shared.clients).get(&owner).cloned();
    let permissions = client.as_ref().and_then(|c| c.details()).and_then(|d| d.permissions.clone());
    if permissions.is_some_and(|p| !p.may_subscribe(&request.subject)) {
        return Err(ApiError::new(403, format!("permissions violation for subscription to \"{}\"", request.subject)));
    }
    Ok(())
}

fn add_to_group(
    inner: &mut Inner,
    shared: &Arc<Shared>,
    pattern: &str,
    filtered: Arc<Filtered>,
) -> Result<(), ApiError> {
    if let Some(entry) = inner.groups.get(pattern) {
        let mut members = lock(&entry.group.members);
        if members.len() >= limits::FILTERS_PER_SUBJECT_MAX {
            return Err(ApiError::new(503, "too many filters on this subject"));
        }
        let mut next = (**members).clone();
        next.push(filtered);
        *members = Arc::new(next);
        return Ok(());
    }
    let group = Arc::new(Group { members: Mutex::new(Arc::new(vec![filtered])), shared: Arc::downgrade(shared) });
    let subscription = shared
        .subscribe_internal(pattern, None, group.clone())
        .map_err(|error| ApiError::new(400, format!("invalid subject: {error}")))?;
    inner.groups.insert(pattern.to_string(), GroupEntry { group, subscription });
    Ok(())
}

fn remove(inner: &mut Inner, shared: &Shared, id: u64) {
    let Some((pattern, owner)) = inner.by_id.remove(&id) else { return };
    if let Some(ids) = inner.by_owner.get_mut(&owner) {
        ids.retain(|other| *other != id);
        if ids.is_empty() {
            inner.by_owner.remove(&owner);
        }
    }
    let Some(entry) = inner.groups.get(&pattern) else { return };
    let empty = {
        let mut members = lock(&entry.group.members);
        let next: Vec<Arc<Filtered>> = members.iter().filter(|m| m.id != id).cloned().collect();
        let empty = next.is_empty();
        *members = Arc::new(next);
        empty
    };
    if empty {
        if let Some(entry) = inner.groups.remove(&pattern) {
            shared.unsubscribe_internal(&entry.subscription);
        }
    }
}

/// Answers `$SEMAQ.API.SUB.>` inline, on the requester's own read loop: compiling is bounded
/// by the expression size, and a request cannot race its connection's close.
#[derive(Debug)]
struct ApiSink {
    shared: Weak<Shared>,
}

impl InternalSink for ApiSink {
    fn receive(&self, message: &Message<'_>) -> bool {
        let (Some(shared), Some(reply)) = (self.shared.upgrade(), message.reply) else { return false };
        let result = match message.publisher {
            None => Err(ApiError::new(400, "filtered subscriptions are created by client connections")),
            Some(owner) => handle(&shared, owner, message.subject, message.payload),
        };
        let body = result.unwrap_or_else(|error| error.to_json());
        shared.publish(reply, None, body.to_string().as_bytes());
        true
    }
}

fn handle(shared: &Arc<Shared>, owner: u64, subject: &str, payload: &[u8]) -> Result<Value, ApiError> {
    let invalid = |error: serde_json::Error| ApiError::new(400, format!("invalid JSON: {error}"));
    match subject {
        API_CREATE => {
            let request = serde_json::from_slice(payload).map_err(invalid)?;
            shared.filters.create(shared, owner, request)
        }
        API_DELETE => {
            let request: DeleteRequest = serde_json::from_slice(payload).map_err(invalid)?;
            shared.filters.delete(shared, owner, request.id)
        }
        _ => Err(ApiError::new(400, "unknown request")),
    }
}

/// Subscribes the API to `$SEMAQ.API.SUB.>`.
pub fn start(shared: &Arc<Shared>) {
    let sink = Arc::new(ApiSink { shared: Arc::downgrade(shared) });
    if let Err(error) = shared.subscribe_internal("$SEMAQ.API.SUB.>", None, sink) {
        tracing::error!(%error, "cannot subscribe to the filtered subscription API");
    }
}
