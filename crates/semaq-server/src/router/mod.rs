//! The subject router: maps a published subject to the subscriptions whose filters match it,
//! like nats-server's sublist.
//!
//! - A trie of subject tokens. Each node has literal children (by token), one `*` child and one
//!   `>` child, and holds the plain and queue subscribers whose filter ends there. A match walks
//!   the literal and `*` children token by token and collects every `>` child it passes.
//! - Queue subscribers are merged by queue name across all matching filters, exactly as
//!   nats-server's `addNodeToResults`: with `foo.*` and `foo.bar` both in queue `q`, a message
//!   on `foo.bar` sees ONE group `q` holding both members, so it is delivered to only one of them.
//! - Results are cached per subject, at most `cache_entries_max` of them; a full cache drops a
//!   random half, but only for a subject missed twice in a while (a doorkeeper of hashed
//!   tags): one-shot subjects (each key of a KV bucket, each direct get) would otherwise evict
//!   half the cache every `cache_entries_max / 2` publishes, which cost 8% of the server's CPU
//!   on KV puts. An insert or remove drops only the cached subjects its filter matches (one
//!   hash removal for a literal filter), so `_INBOX.*` reply churn does not flush unrelated
//!   entries. Measured with 4096 cached subjects: a literal change costs ~0.2 µs, a wildcard
//!   change ~60 µs (a scan), while clearing everything would cost publishers ~1 ms of re-walks
//!   per change.
//! - Publishers take the cache read lock and, on a miss, the trie read lock; no call holds two
//!   locks at once. A miss caches its result only if no write happened since it read the trie
//!   (the generation check), so a stale result is never cached.

// FxHash: subjects are short and not attacker-chosen keys of a long-lived map we would
// need to protect against flooding more than the per-connection subscription limit already does.
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::fmt;
use std::hash::BuildHasher;
use std::hash::Hash;
use std::str::Split;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use rand::Rng;
use semaq_wire::subject::{self, REPLY_INBOX_PREFIX, WILDCARD_ONE, WILDCARD_TAIL};

#[cfg(test)]
mod tests;

/// Why a subscription could not be added.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RouterError {
    /// The filter has an empty token, whitespace, or a `>` that is not last.
    #[error("invalid subject filter")]
    InvalidSubject,
    /// The queue group name is empty or has whitespace.
    #[error("invalid queue group name")]
    InvalidQueue,
}

/// Queue subscribers of one queue name that a subject reaches; a message goes to one of them.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueGroup<T> {
    /// The queue group name.
    pub name: Arc<str>,
    /// Members from every matching filter, once per (filter, subscriber).
    pub members: Vec<T>,
}

/// Everything one published subject reaches.
#[derive(Debug, Clone, PartialEq)]
pub struct Matches<T> {
    /// Plain subscribers, once per matching filter; each gets the message.
    pub plain: Vec<T>,
    /// Queue groups, one per queue name; each delivers the message to one member.
    pub groups: Vec<QueueGroup<T>>,
}

impl<T> Default for Matches<T> {
    fn default() -> Self {
        Self { plain: Vec::new(), groups: Vec::new() }
    }
}

impl<T> Matches<T> {
    /// True when nothing is interested in the subject.
    pub fn is_empty(&self) -> bool {
        self.plain.is_empty() && self.groups.is_empty()
    }

    /// Deliveries one message makes: every plain subscriber plus one per queue group.
    pub fn fanout(&self) -> usize {
        self.plain.len() + self.groups.len()
    }
}

/// Router counters, named and computed as in nats-server's `/subsz`.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct RouterStats {
    /// Subscriptions held.
    pub num_subscriptions: u64,
    /// Subjects with a cached result.
    pub num_cache: u64,
    /// Subscriptions ever added.
    pub num_inserts: u64,
    /// Subscriptions ever removed.
    pub num_removes: u64,
    /// Calls to `matches`.
    pub num_matches: u64,
    /// Share of `matches` calls answered from the cache.
    pub cache_hit_rate: f64,
    /// Largest fanout among cached results.
    pub max_fanout: u64,
    /// Mean fanout over cached results.
    pub avg_fanout: f64,
}

impl RouterStats {
    /// Adds `other`'s figures, as nats-server sums its accounts' sublists for `/subsz`: counts
    /// add up, rates are weighted by what they are rates of.
    pub fn add(&mut self, other: &RouterStats) {
        let weighted = |a: f64, a_weight: u64, b: f64, b_weight: u64| {
            let total = a_weight + b_weight;
            if total == 0 {
                0.0
            } else {
                (a * a_weight as f64 + b * b_weight as f64) / total as f64
            }
        };
        self.cache_hit_rate = weighted(self.cache_hit_rate, self.num_matches, other.cache_hit_rate, other.num_matches);
        self.avg_fanout = weighted(self.avg_fanout, self.num_cache, other.avg_fanout, other.num_cache);
        self.num_subscriptions += other.num_subscriptions;
        self.num_cache += other.num_cache;
        self.num_inserts += other.num_inserts;
        self.num_removes += other.num_removes;
        self.num_matches += other.num_matches;
        self.max_fanout = self.max_fanout.max(other.max_fanout);
    }
}

/// Maps literal subjects to the subscribers of matching filters; every method takes `&self`.
///
/// Subscribers are told apart by `Eq`/`Hash` (the server uses a pointer-identity handle), so
/// each node holds them in hash sets and insert/remove stay O(filter tokens) however many
/// subscribers share a subject.
pub struct Router<T> {
    trie: RwLock<Trie<T>>,
    cache: RwLock<HashMap<Box<str>, Arc<Matches<T>>>>,
    cache_entries_max: usize,
    /// Made when the cache first fills: routers that never fill it cost nothing for it.
    doorkeeper: OnceLock<Doorkeeper>,
    generation: AtomicU64,
    counters: Counters,
    empty: Arc<Matches<T>>,
}

impl<T> fmt::Debug for Router<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Separate statements: a guard in the chain would live until its end, nesting the locks.
        let count = read(&self.trie).count;
        let cached = read(&self.cache).len();
        f.debug_struct("Router")
            .field("count", &count)
            .field("cached", &cached)
            .field("generation", &self.generation.load(Ordering::Acquire))
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct Counters {
    inserts: AtomicU64,
    removes: AtomicU64,
    matches: AtomicU64,
    cache_hits: AtomicU64,
}

struct Trie<T> {
    root: Node<T>,
    count: usize,
}

impl<T: Clone + Eq + Hash> Default for Router<T> {
    fn default() -> Self {
        Self::new(crate::limits::ROUTER_CACHE_ENTRIES_MAX)
    }
}

impl<T: Clone + Eq + Hash> Router<T> {
    /// An empty router caching at most `cache_entries_max` subjects (0 disables the cache).
    pub fn new(cache_entries_max: usize) -> Self {
        Self {
            trie: RwLock::new(Trie { root: Node::default(), count: 0 }),
            cache: RwLock::new(HashMap::default()),
            cache_entries_max,
            doorkeeper: OnceLock::new(),
            generation: AtomicU64::new(0),
            counters: Counters::default(),
            empty: Arc::new(Matches::default()),
        }
    }

    /// Adds `subscriber` under `filter` (and `queue`); adding the same triple again is a no-op.
    pub fn insert(&self, filter: &str, queue: Option<&str>, subscriber: T) -> Result<(), RouterError> {
        if !subject::is_valid_filter(filter) {
            return Err(RouterError::InvalidSubject);
        }
        if queue.is_some_and(|name| !subject::is_valid_queue(name)) {
            return Err(RouterError::InvalidQueue);
        }
        {
            let mut trie = write(&self.trie);
            if !trie.root.insert_path(filter.split('.'), queue, subscriber) {
                return Ok(());
            }
            trie.count += 1;
            self.generation.fetch_add(1, Ordering::AcqRel);
        }
        self.counters.inserts.fetch_add(1, Ordering::Relaxed);
        self.invalidate(filter);
        Ok(())
    }

    /// Removes `subscriber` from `filter` (and `queue`); false when it was not there.
    pub fn remove(&self, filter: &str, queue: Option<&str>, subscriber: &T) -> bool {
        {
            let mut trie = write(&self.trie);
            if !trie.root.remove_path(&mut filter.split('.'), queue, subscriber) {
                return false;
            }
            trie.count -= 1;
            self.generation.fetch_add(1, Ordering::AcqRel);
        }
        self.counters.removes.fetch_add(1, Ordering::Relaxed);
        self.invalidate(filter);
        true
    }

    /// Like [`Router::matches`], but a miss is not cached: for one-off subjects such as the
    /// reply inboxes of PubAcks, which would otherwise keep evicting the subjects worth caching.
    pub fn matches_uncached(&self, subject: &str) -> Arc<Matches<T>> {
        self.counters.matches.fetch_add(1, Ordering::Relaxed);
        if let Some(hit) = read(&self.cache).get(subject).cloned() {
            self.counters.cache_hits.fetch_add(1, Ordering::Relaxed);
            return hit;
        }
        if !subject::is_routable(subject) {
            return Arc::clone(&self.empty);
        }
        self.walk(subject).0
    }

    /// Subscribers the literal `subject` reaches; an invalid subject reaches nobody.
    pub fn matches(&self, subject: &str) -> Arc<Matches<T>> {
        self.counters.matches.fetch_add(1, Ordering::Relaxed);
        let cached = read(&self.cache).get(subject).cloned();
        if let Some(hit) = cached {
            self.counters.cache_hits.fetch_add(1, Ordering::Relaxed);
            return hit;
        }
        // Checked only on a miss: a cached subject was valid when it was stored.
        if !subject::is_routable(subject) {
            return Arc::clone(&self.empty);
        }
        let (result, generation) = self.walk(subject);
        // Reply inboxes are one request each (`_INBOX.<random>.<n>`): caching them would take the
        // cache's write lock on every reply, stall readers behind it, and fill the cache until
        // an eviction of half of it runs under that lock, for entries never read again. The
        // `_R_.` subjects of service-import replies are one request each too.
        if !subject.starts_with(REPLY_INBOX_PREFIX) && !subject.starts_with(crate::imports::REPLY_PREFIX) {
            self.store(subject, &result, generation);
        }
        result
    }

    /// Subscriptions held.
    pub fn count(&self) -> usize {
        read(&self.trie).count
    }

    /// Up to `max` of the subscribers held, in no particular order (for listings such as `SUBSZ`).
    pub fn subscribers(&self, max: usize) -> Vec<T> {
        let mut found = Vec::new();
        read(&self.trie).root.gather_all(max, &mut found);
        found
    }

    /// Bumps whenever the set of subscriptions changes, so callers can keep their own caches.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// A snapshot of the counters, as nats-server's `/subsz` reports them.
    pub fn stats(&self) -> RouterStats {
        let num_subscriptions = self.count() as u64;
        let (num_cache, max_fanout, total_fanout) = {
            let cache = read(&self.cache);
            let fanouts = cache.values().map(|result| result.fanout() as u64);
            (cache.len() as u64, fanouts.clone().max().unwrap_or(0), fanouts.sum::<u64>())
        };
        let num_matches = self.counters.matches.load(Ordering::Relaxed);
        let cache_hits = self.counters.cache_hits.load(Ordering::Relaxed);
        RouterStats {
            num_subscriptions,
            num_cache,
            num_inserts: self.counters.inserts.load(Ordering::Relaxed),
            num_removes: self.counters.removes.load(Ordering::Relaxed),
            num_matches,
            cache_hit_rate: ratio(cache_hits, num_matches),
            max_fanout,
            avg_fanout: ratio(total_fanout, num_cache),
        }
    }

    /// Walks the trie; also returns the generation the walk saw, for [`Self::store`].
    fn walk(&self, subject: &str) -> (Arc<Matches<T>>, u64) {
        let trie = read(&self.trie);
        // Writers bump the generation under the trie write lock, so this is the walked state's.
        let generation = self.generation.load(Ordering::Acquire);
        let mut collector = Collector::default();
        trie.root.collect(subject.split('.'), &mut collector);
        (collector.finish(&self.empty), generation)
    }

    /// Caches a walk's result unless a write happened after the walk (it may be stale).
    fn store(&self, subject: &str, result: &Arc<Matches<T>>, generation: u64) {
        if self.cache_entries_max == 0 {
            return;
        }
        let full = read(&self.cache).len() >= self.cache_entries_max;
        if full && !self.doorkeeper.get_or_init(|| Doorkeeper::new(self.cache_entries_max)).admits(subject) {
            return;
        }
        let mut cache = write(&self.cache);
        // Writers bump the generation before they invalidate under this lock, so either the
        // invalidation below runs after this store, or this check sees the bump.
        if self.generation.load(Ordering::Acquire) != generation {
            return;
        }
        if cache.len() >= self.cache_entries_max {
            evict_half(&mut cache);
        }
        cache.insert(subject.into(), Arc::clone(result));
    }

    /// Drops the cached subjects `filter` matches, the only results a change to it can alter.
    fn invalidate(&self, filter: &str) {
        if self.cache_entries_max == 0 {
            return;
        }
        let mut cache = write(&self.cache);
        if subject::has_wildcard(filter) {
            cache.retain(|cached, _| !subject::matches(filter, cached));
        } else {
            cache.remove(filter);
        }
    }

    /// Trie nodes below the root; zero once every subscription is removed.
    #[cfg(test)]
    fn node_count(&self) -> usize {
        read(&self.trie).root.descendants()
    }

    /// Subjects currently cached.
    #[cfg(test)]
    fn cache_len(&self) -> usize {
        read(&self.cache).len()
    }
}

/// One trie node: the children by next token and the subscribers whose filter ends here.
struct Node<T> {
    literal: HashMap<Box<str>, Node<T>>,
    one: Option<Box<Node<T>>>,
    tail: Option<Box<Node<T>>>,
    plain: HashSet<T>,
    queues: HashMap<Arc<str>, HashSet<T>>,
}

impl<T> Default for Node<T> {
    fn default() -> Self {
        Self {
            literal: HashMap::default(),
            one: None,
            tail: None,
            plain: HashSet::default(),
            queues: HashMap::default(),
        }
    }
}

impl<T: Clone + Eq + Hash> Node<T> {
    /// Adds the subscribers of this node and those below it to `found`, until it holds `max`.
    fn gather_all(&self, max: usize, found: &mut Vec<T>) {
        // A stack rather than recursion: a filter may have as many tokens as the subject allows.
        let mut pending = vec![self];
        while let Some(node) = pending.pop() {
            for subscriber in node.plain.iter().chain(node.queues.values().flatten()) {
                if found.len() >= max {
                    return;
                }
                found.push(subscriber.clone());
            }
            pending.extend(node.literal.values());
            pending.extend(node.one.as_deref());
            pending.extend(node.tail.as_deref());
        }
    }

    /// Adds the subscriber at the end of `tokens`, creating nodes; false if it was already there.
    fn insert_path<'a>(&mut self, tokens: impl Iterator<Item = &'a str>, queue: Option<&str>, subscriber: T) -> bool {
        let mut node = self;
        for token in tokens {
            node = node.child_or_insert(token);
        }
        match queue {
            None => node.plain.insert(subscriber),
            Some(name) => match node.queues.get_mut(name) {
                Some(members) => members.insert(subscriber),
                None => node.queues.insert(name.into(), HashSet::from_iter([subscriber])).is_none(),
            },
        }
    }

    /// Removes the subscriber at the end of `tokens`, pruning nodes left empty on the way back.
    fn remove_path<'a>(
        &mut self,
        tokens: &mut impl Iterator<Item = &'a str>,
        queue: Option<&str>,
        subscriber: &T,
    ) -> bool {
        let Some(token) = tokens.next() else {
            return self.remove_here(queue, subscriber);
        };
        let Some(child) = self.child_mut(token) else {
            return false;
        };
        let found = child.remove_path(tokens, queue, subscriber);
        if child.is_empty() {
            self.drop_child(token);
        }
        found
    }

    fn remove_here(&mut self, queue: Option<&str>, subscriber: &T) -> bool {
        let Some(name) = queue else {
            return self.plain.remove(subscriber);
        };
        let Some(members) = self.queues.get_mut(name) else {
            return false;
        };
        let found = members.remove(subscriber);
        if members.is_empty() {
            self.queues.remove(name);
        }
        found
    }

    /// Adds the subscribers of every filter matching the remaining `tokens` below this node.
    fn collect(&self, mut tokens: Split<'_, char>, out: &mut Collector<T>) {
        let Some(token) = tokens.next() else {
            out.add(self);
            return;
        };
        // `>` needs one or more tokens, and `token` is one.
        if let Some(tail) = &self.tail {
            out.add(tail);
        }
        if let Some(one) = &self.one {
            one.collect(tokens.clone(), out);
        }
        if let Some(child) = self.literal.get(token) {
            child.collect(tokens, out);
        }
    }

    fn child_mut(&mut self, token: &str) -> Option<&mut Node<T>> {
        match token {
            WILDCARD_ONE => self.one.as_deref_mut(),
            WILDCARD_TAIL => self.tail.as_deref_mut(),
            _ => self.literal.get_mut(token),
        }
    }

    fn child_or_insert(&mut self, token: &str) -> &mut Node<T> {
        match token {
            WILDCARD_ONE => self.one.get_or_insert_with(Box::default),
            WILDCARD_TAIL => self.tail.get_or_insert_with(Box::default),
            _ => self.literal.entry(token.into()).or_default(),
        }
    }

    fn drop_child(&mut self, token: &str) {
        match token {
            WILDCARD_ONE => self.one = None,
            WILDCARD_TAIL => self.tail = None,
            _ => {
                self.literal.remove(token);
                // A burst of unique tokens (`_INBOX.<id>`) would otherwise pin its peak capacity.
                if self.literal.capacity() > 64 && self.literal.len() * 4 < self.literal.capacity() {
                    self.literal.shrink_to_fit();
                }
            }
        }
    }
}

impl<T> Node<T> {
    fn is_empty(&self) -> bool {
        self.plain.is_empty()
            && self.queues.is_empty()
            && self.literal.is_empty()
            && self.one.is_none()
            && self.tail.is_none()
    }

    #[cfg(test)]
    fn descendants(&self) -> usize {
        let wildcards = self.one.iter().chain(&self.tail).map(|child| 1 + child.descendants());
        self.literal.values().map(|child| 1 + child.descendants()).chain(wildcards).sum()
    }
}

/// Gathers a match result, merging queue subscribers by queue name as nats-server does.
struct Collector<T> {
    plain: Vec<T>,
    groups: Vec<QueueGroup<T>>,
    slot_by_name: HashMap<Arc<str>, usize>,
}

impl<T> Default for Collector<T> {
    fn default() -> Self {
        Self { plain: Vec::new(), groups: Vec::new(), slot_by_name: HashMap::default() }
    }
}

impl<T: Clone> Collector<T> {
    fn add(&mut self, node: &Node<T>) {
        self.plain.extend(node.plain.iter().cloned());
        for (name, members) in &node.queues {
            let slot = *self.slot_by_name.entry(Arc::clone(name)).or_insert_with(|| {
                self.groups.push(QueueGroup { name: Arc::clone(name), members: Vec::new() });
                self.groups.len() - 1
            });
            self.groups[slot].members.extend(members.iter().cloned());
        }
    }

    /// The result; no-interest subjects share `empty` so caching them costs only the key.
    fn finish(self, empty: &Arc<Matches<T>>) -> Arc<Matches<T>> {
        if self.plain.is_empty() && self.groups.is_empty() {
            return Arc::clone(empty);
        }
        Arc::new(Matches { plain: self.plain, groups: self.groups })
    }
}

/// Remembers a tag of each subject a full cache turned away, two slots per cache entry: a
/// subject is let in when its slot still holds its tag, i.e. on its second miss before another
/// subject took the slot. Collisions only let a subject in early or late; never a wrong result.
struct Doorkeeper {
    tags: Box<[AtomicU32]>,
}

impl Doorkeeper {
    fn new(cache_entries_max: usize) -> Self {
        let slots = cache_entries_max.saturating_mul(2).next_power_of_two();
        Self { tags: (0..slots).map(|_| AtomicU32::new(0)).collect() }
    }

    /// Whether `subject` was turned away recently; remembers it either way.
    fn admits(&self, subject: &str) -> bool {
        let hash = rustc_hash::FxBuildHasher.hash_one(subject);
        // The slot comes from the low bits, the tag from the high ones; never 0, the empty slot.
        let slot = &self.tags[(hash as usize) & (self.tags.len() - 1)];
        let tag = ((hash >> 32) as u32) | 1;
        slot.swap(tag, Ordering::Relaxed) == tag
    }
}

/// Keeps a uniformly random half: selection sampling keeps exactly `len / 2` entries.
fn evict_half<V>(cache: &mut HashMap<Box<str>, V>) {
    let mut rng = rand::rng();
    let mut unseen = cache.len();
    let mut keep = unseen / 2;
    cache.retain(|_, _| {
        let kept = rng.random_range(0..unseen) < keep;
        unseen -= 1;
        keep -= usize::from(kept);
        kept
    });
}

fn ratio(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

// A poisoned lock means another thread panicked inside T's `Hash`/`Eq` while holding it. That
// can at worst leave an empty trie node behind; matching stays correct, so the broker carries on.
fn read<L>(lock: &RwLock<L>) -> RwLockReadGuard<'_, L> {
    lock.read().unwrap_or_else(PoisonError::into_inner)
}

fn write<L>(lock: &RwLock<L>) -> RwLockWriteGuard<'_, L> {
    lock.write().unwrap_or_else(PoisonError::into_inner)
}
