//! Subjects of live messages: interned to small ids, with per-subject count and sequence bounds.
//!
//! Ids keep per-message metadata at 4 bytes instead of a string; an id is freed when its last
//! live message goes, so the table stays as large as the set of live subjects.

use std::collections::HashMap;
use std::sync::Arc;

use crate::error::{StoreError, StoreResult};

/// A subject's interned id, valid while the subject has live messages.
pub(crate) type SubjectId = u32;

/// Per-subject bookkeeping.
#[derive(Debug, Clone)]
struct SubjectEntry {
    name: Arc<str>,
    count: u64,
    /// Lower bound of the subject's first live sequence: exact until that message is removed,
    /// then moved forward lazily, because finding the next one means a scan.
    first_hint: u64,
    /// Upper bound of the subject's last live sequence, lazily moved back for the same reason.
    last_hint: u64,
    /// Whether the bounds are exact; with one message left, an exact bound gives the other.
    first_exact: bool,
    last_exact: bool,
}

/// A subject's bookkeeping as a checkpoint keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SubjectRecord {
    pub name: String,
    pub count: u64,
    /// Bounds of its live sequences (see `SubjectEntry`).
    pub first: u64,
    pub last: u64,
    pub first_exact: bool,
    pub last_exact: bool,
}

/// The table of live subjects.
#[derive(Debug, Default)]
pub(crate) struct Subjects {
    /// Looked up on every append and subject read: foldhash, seeded per process, is several
    /// times cheaper than SipHash on short subjects and still unpredictable to clients.
    ids: foldhash::HashMap<Arc<str>, SubjectId>,
    entries: Vec<Option<SubjectEntry>>,
    free: Vec<SubjectId>,
}

impl Subjects {
    /// The id of a subject that has live messages.
    pub(crate) fn id(&self, name: &str) -> Option<SubjectId> {
        self.ids.get(name).copied()
    }

    /// The name behind a live id ("" for a freed id, which no live slot refers to).
    pub(crate) fn name(&self, id: SubjectId) -> &str {
        self.entry(id).map_or("", |entry| &entry.name)
    }

    /// Refuses in advance what `add` would refuse: a new subject when every id is taken.
    pub(crate) fn check_room(&self, name: &str) -> StoreResult<()> {
        if self.id(name).is_none() && self.free.is_empty() {
            new_id(self.entries.len())?;
        }
        Ok(())
    }

    /// Counts a new live message of `name` at `seq` (sequences only grow) and returns its id;
    /// `TooLarge`, with nothing changed, when `name` is new and every id is taken.
    pub(crate) fn add(&mut self, name: &str, seq: u64) -> StoreResult<SubjectId> {
        if let Some(id) = self.id(name) {
            if let Some(Some(entry)) = self.entries.get_mut(id as usize) {
                entry.count += 1;
                entry.last_hint = seq;
                entry.last_exact = true;
            }
            return Ok(id);
        }
        let name: Arc<str> = Arc::from(name);
        let entry = SubjectEntry {
            name: name.clone(),
            count: 1,
            first_hint: seq,
            last_hint: seq,
            first_exact: true,
            last_exact: true,
        };
        let id = match self.free.pop() {
            Some(id) => {
                self.entries[id as usize] = Some(entry);
                id
            }
            None => {
                let id = new_id(self.entries.len())?;
                self.entries.push(Some(entry));
                id
            }
        };
        self.ids.insert(name, id);
        Ok(id)
    }

    /// Uncounts the live message of `id` at `seq`.
    pub(crate) fn remove(&mut self, id: SubjectId, seq: u64) {
        let Some(Some(entry)) = self.entries.get_mut(id as usize) else {
            debug_assert!(false, "removing a message of freed subject id {id}");
            return;
        };
        entry.count -= 1;
        if entry.count == 0 {
            self.ids.remove(&entry.name);
            self.entries[id as usize] = None;
            self.free.push(id);
            return;
        }
        if entry.first_hint == seq {
            entry.first_hint = seq + 1;
            entry.first_exact = false;
        }
        if entry.last_hint == seq {
            entry.last_hint = seq - 1;
            entry.last_exact = false;
        }
        // The common key-value case (one message per subject) then needs no scan at all.
        if entry.count == 1 && entry.last_exact {
            (entry.first_hint, entry.first_exact) = (entry.last_hint, true);
        } else if entry.count == 1 && entry.first_exact {
            (entry.last_hint, entry.last_exact) = (entry.first_hint, true);
        }
    }

    /// Live messages of `id`.
    pub(crate) fn count(&self, id: SubjectId) -> u64 {
        self.entry(id).map_or(0, |entry| entry.count)
    }

    /// `(first, last)` bounds: the subject's live messages all lie within them.
    pub(crate) fn bounds(&self, id: SubjectId) -> Option<(u64, u64)> {
        self.entry(id).map(|entry| (entry.first_hint, entry.last_hint))
    }

    /// Records the exact first sequence once a scan has found it.
    pub(crate) fn set_first(&mut self, id: SubjectId, seq: u64) {
        if let Some(Some(entry)) = self.entries.get_mut(id as usize) {
            (entry.first_hint, entry.first_exact) = (seq, true);
        }
    }

    /// Distinct live subjects.
    pub(crate) fn len(&self) -> usize {
        self.ids.len()
    }

    /// Every live subject with its count.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (SubjectId, &str, u64)> + '_ {
        // `add` hands out every id `0..=SubjectId::MAX` at most, so the ids cover the entries.
        (0..=SubjectId::MAX)
            .zip(&self.entries)
            .filter_map(|(id, entry)| entry.as_ref().map(|entry| (id, &*entry.name, entry.count)))
    }

    /// Every live subject's bookkeeping, with its id.
    pub(crate) fn records(&self) -> impl Iterator<Item = (SubjectId, SubjectRecord)> + '_ {
        (0..=SubjectId::MAX).zip(&self.entries).filter_map(|(id, entry)| {
            let entry = entry.as_ref()?;
            let record = SubjectRecord {
                name: entry.name.to_string(),
                count: entry.count,
                first: entry.first_hint,
                last: entry.last_hint,
                first_exact: entry.first_exact,
                last_exact: entry.last_exact,
            };
            Some((id, record))
        })
    }

    /// Adds a subject as a checkpoint recorded it; `None` for a name already present or a
    /// record with no message (a checkpoint that says so is refused), `TooLarge` past the ids.
    pub(crate) fn restore(&mut self, record: SubjectRecord) -> StoreResult<Option<SubjectId>> {
        if record.count == 0 || record.first > record.last || self.id(&record.name).is_some() {
            return Ok(None);
        }
        let id = new_id(self.entries.len())?;
        let name: Arc<str> = Arc::from(record.name);
        self.entries.push(Some(SubjectEntry {
            name: name.clone(),
            count: record.count,
            first_hint: record.first,
            last_hint: record.last,
            first_exact: record.first_exact,
            last_exact: record.last_exact,
        }));
        self.ids.insert(name, id);
        Ok(Some(id))
    }

    /// Forgets everything (purge of the whole stream).
    pub(crate) fn clear(&mut self) {
        *self = Subjects::default();
    }

    fn entry(&self, id: SubjectId) -> Option<&SubjectEntry> {
        self.entries.get(id as usize).and_then(Option::as_ref)
    }
}

/// The id of the entry that would go at index `count`; `TooLarge` past the last `SubjectId`.
fn new_id(count: usize) -> StoreResult<SubjectId> {
    SubjectId::try_from(count).map_err(|_| StoreError::TooLarge {
        what: "distinct subjects",
        value: count as u64 + 1,
        max: u64::from(SubjectId::MAX) + 1,
    })
}

/// A subject filter resolved against the table, remembering answers for ids it has seen.
pub(crate) enum SubjectFilter<'f> {
    /// No filter, or `>`: everything matches.
    All,
    /// A literal subject; `None` when no live message has it.
    Literal(Option<SubjectId>),
    /// A filter with `*` or `>` tokens; answers cached per id for the length of one call, and the
    /// last answer kept apart because runs of one subject are common.
    Wildcard { pattern: &'f str, cache: HashMap<SubjectId, bool>, last: Option<(SubjectId, bool)> },
}

impl<'f> SubjectFilter<'f> {
    /// Resolves `filter` for use against `subjects`.
    pub(crate) fn new(filter: Option<&'f str>, subjects: &Subjects) -> Self {
        match filter {
            None | Some(">") => SubjectFilter::All,
            Some(pattern) if semaq_wire::subject::has_wildcard(pattern) => {
                SubjectFilter::Wildcard { pattern, cache: HashMap::new(), last: None }
            }
            Some(literal) => SubjectFilter::Literal(subjects.id(literal)),
        }
    }

    /// Whether a live message with subject `id` matches.
    pub(crate) fn matches(&mut self, id: SubjectId, subjects: &Subjects) -> bool {
        match self {
            SubjectFilter::All => true,
            SubjectFilter::Literal(literal) => *literal == Some(id),
            SubjectFilter::Wildcard { pattern, cache, last } => match *last {
                Some((last_id, answer)) if last_id == id => answer,
                _ => {
                    let answer =
                        *cache.entry(id).or_insert_with(|| semaq_wire::subject::matches(pattern, subjects.name(id)));
                    *last = Some((id, answer));
                    answer
                }
            },
        }
    }

    /// Whether a subject given by name matches (no cache: used once per subject).
    pub(crate) fn matches_name(&self, name: &str, subjects: &Subjects) -> bool {
        match self {
            SubjectFilter::All => true,
            SubjectFilter::Literal(literal) => literal.is_some_and(|id| subjects.name(id) == name),
            SubjectFilter::Wildcard { pattern, .. } => semaq_wire::subject::matches(pattern, name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_freed_with_the_last_message_and_reused() {
        let mut subjects = Subjects::default();
        let a = subjects.add("a", 1).unwrap();
        let b = subjects.add("b", 2).unwrap();
        assert_eq!(subjects.add("a", 3).unwrap(), a);
        subjects.remove(b, 2);
        assert_eq!(subjects.id("b"), None);
        assert_eq!(subjects.add("c", 4).unwrap(), b, "freed id is reused");
        assert_eq!(subjects.count(a), 2);
        assert_eq!(subjects.len(), 2);
    }

    #[test]
    fn ids_run_out_after_the_last_u32() {
        let last = usize::try_from(SubjectId::MAX).unwrap();
        assert_eq!(new_id(last).unwrap(), SubjectId::MAX);
        assert!(matches!(new_id(last + 1), Err(StoreError::TooLarge { what: "distinct subjects", .. })));
    }

    #[test]
    fn bounds_stay_bounds_after_removals() {
        let mut subjects = Subjects::default();
        let a = subjects.add("a", 1).unwrap();
        subjects.add("a", 5).unwrap();
        subjects.add("a", 9).unwrap();
        subjects.remove(a, 1);
        subjects.remove(a, 9);
        assert_eq!(subjects.bounds(a), Some((2, 8)), "both ends moved: bounds around 5, not exact");
        subjects.set_first(a, 5);
        subjects.add("a", 12).unwrap();
        subjects.remove(a, 12);
        assert_eq!(subjects.bounds(a), Some((5, 5)), "one message left: the exact first pins the last");
    }

    #[test]
    fn one_message_per_subject_keeps_exact_bounds_without_scans() {
        let mut subjects = Subjects::default();
        let key = subjects.add("kv.key", 1).unwrap();
        for seq in 2..100 {
            subjects.add("kv.key", seq).unwrap();
            subjects.remove(key, seq - 1);
            assert_eq!(subjects.bounds(key), Some((seq, seq)));
        }
    }

    #[test]
    fn wildcard_filters_match_by_token() {
        let mut subjects = Subjects::default();
        let id = subjects.add("orders.eu.new", 1).unwrap();
        assert!(SubjectFilter::new(Some("orders.*.new"), &subjects).matches(id, &subjects));
        assert!(SubjectFilter::new(Some("orders.>"), &subjects).matches(id, &subjects));
        assert!(!SubjectFilter::new(Some("orders.*"), &subjects).matches(id, &subjects));
        assert!(!SubjectFilter::new(Some("orders.eu"), &subjects).matches(id, &subjects));
    }
}
