//! TEMPORARY naive router (replaced by the trie from the router branch).
use std::sync::{Arc, RwLock};

#[derive(Debug, thiserror::Error)]
pub enum RouterError { #[error("invalid subject")] InvalidSubject }
#[derive(Debug)]
pub struct Matches<T> { pub plain: Vec<T>, pub groups: Vec<QueueGroup<T>> }
#[derive(Debug)]
pub struct QueueGroup<T> { pub name: Arc<str>, pub members: Vec<T> }
#[derive(Debug, Default)]
pub struct RouterStats { pub num_subscriptions: usize, pub num_cache: usize, pub num_inserts: u64, pub num_removes: u64, pub num_matches: u64, pub cache_hit_rate: f64, pub max_fanout: usize, pub avg_fanout: f64 }
#[derive(Debug)]
pub struct Router<T> { subs: RwLock<Vec<(String, Option<String>, T)>> }
impl<T: Clone + PartialEq + Send + Sync> Router<T> {
    pub fn new(_cache: usize) -> Self { Self { subs: RwLock::new(Vec::new()) } }
    pub fn insert(&self, filter: &str, queue: Option<&str>, subscriber: T) -> Result<(), RouterError> {
        if !semaq_wire::subject::is_valid_filter(filter) { return Err(RouterError::InvalidSubject) }
        self.subs.write().unwrap().push((filter.into(), queue.map(Into::into), subscriber)); Ok(())
    }
    pub fn remove(&self, filter: &str, queue: Option<&str>, subscriber: &T) -> bool {
        let mut subs = self.subs.write().unwrap();
        let before = subs.len();
        subs.retain(|(f, q, s)| !(f == filter && q.as_deref() == queue && s == subscriber));
        before != subs.len()
    }
    pub fn matches(&self, subject: &str) -> Arc<Matches<T>> {
        let subs = self.subs.read().unwrap();
        let mut plain = Vec::new(); let mut groups: Vec<QueueGroup<T>> = Vec::new();
        for (f, q, s) in subs.iter() {
            if !semaq_wire::subject::matches(f, subject) { continue }
            match q { None => plain.push(s.clone()), Some(q) => match groups.iter_mut().find(|g| &*g.name == q.as_str()) {
                Some(g) => g.members.push(s.clone()), None => groups.push(QueueGroup { name: q.as_str().into(), members: vec![s.clone()] }) } }
        }
        Arc::new(Matches { plain, groups })
    }
    pub fn count(&self) -> usize { self.subs.read().unwrap().len() }
    pub fn stats(&self) -> RouterStats { RouterStats { num_subscriptions: self.count(), ..Default::default() } }
}
