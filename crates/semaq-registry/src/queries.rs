//! What the registry lists: subjects, versions, schemas by id, the versions using a schema,
//! the schemas referring to a version, and the lookups L2 stream bindings make.

use super::types::{VersionInfo, VersionSelector};
use super::{live_subject, read_lock, references, select, version_info, Registry, RegistryError};

/// Which versions (or subjects) a listing shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Deleted {
    /// Live ones only.
    #[default]
    Exclude,
    /// Live and soft-deleted ones (`?deleted=true`).
    Include,
    /// Soft-deleted ones only (`?deletedOnly=true`).
    Only,
}

impl Deleted {
    /// From Confluent's two flags; `deletedOnly` wins.
    pub fn from_flags(deleted: bool, deleted_only: bool) -> Self {
        match (deleted, deleted_only) {
            (_, true) => Deleted::Only,
            (true, false) => Deleted::Include,
            (false, false) => Deleted::Exclude,
        }
    }

    fn shows(self, deleted: bool) -> bool {
        match self {
            Deleted::Exclude => !deleted,
            Deleted::Include => true,
            Deleted::Only => deleted,
        }
    }
}

impl Registry {
    /// Subject names (with soft-deleted ones when `deleted`).
    pub fn subjects(&self, deleted: bool) -> Vec<String> {
        self.list_subjects("", Deleted::from_flags(deleted, false))
    }

    /// Subject names starting with `prefix`; a subject shows when one of its versions does.
    pub fn list_subjects(&self, prefix: &str, which: Deleted) -> Vec<String> {
        let state = read_lock(&self.state);
        let shown = |versions: &[super::types::Version]| match which {
            // A subject is soft-deleted when all its versions are.
            Deleted::Only => !versions.is_empty() && versions.iter().all(|v| v.deleted),
            _ => versions.iter().any(|v| which.shows(v.deleted)),
        };
        state
            .subjects
            .iter()
            .filter(|(name, subject)| name.starts_with(prefix) && shown(&subject.versions))
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// Version numbers of `subject`.
    pub fn versions(&self, subject: &str, deleted: bool) -> Result<Vec<u32>, RegistryError> {
        self.list_versions(subject, Deleted::from_flags(deleted, false))
    }

    /// Version numbers of `subject` that `which` shows.
    pub fn list_versions(&self, subject: &str, which: Deleted) -> Result<Vec<u32>, RegistryError> {
        let state = read_lock(&self.state);
        let entry = live_subject(&state, subject, which != Deleted::Exclude)?;
        Ok(entry.versions.iter().filter(|v| which.shows(v.deleted)).map(|v| v.version).collect())
    }

    /// One version of `subject`.
    pub fn version(&self, subject: &str, selector: &str, deleted: bool) -> Result<VersionInfo, RegistryError> {
        let selector = VersionSelector::parse(selector)?;
        let state = read_lock(&self.state);
        let entry = live_subject(&state, subject, deleted)?;
        let version = select(entry, selector, deleted)?;
        version_info(&state, subject, version)
    }

    /// The schema with global id `id`.
    pub fn schema_by_id(&self, id: u32) -> Result<super::types::StoredSchema, RegistryError> {
        read_lock(&self.state).schemas.get(&id).cloned().ok_or_else(|| RegistryError::SchemaNotFound(id.to_string()))
    }

    /// Every live (subject, version) using schema `id`.
    pub fn uses_of(&self, id: u32) -> Result<Vec<(String, u32)>, RegistryError> {
        self.uses_of_with(id, false)
    }

    /// Every (subject, version) using schema `id`, soft-deleted ones too when `deleted`.
    pub fn uses_of_with(&self, id: u32, deleted: bool) -> Result<Vec<(String, u32)>, RegistryError> {
        let state = read_lock(&self.state);
        if !state.schemas.contains_key(&id) {
            return Err(RegistryError::SchemaNotFound(id.to_string()));
        }
        let uses = state.subjects.iter().flat_map(|(name, s)| {
            s.versions.iter().filter(|v| v.id == id && (deleted || !v.deleted)).map(move |v| (name.clone(), v.version))
        });
        Ok(uses.collect())
    }

    /// `GET /schemas`: the versions of every subject starting with `prefix`, by subject then
    /// version (only each subject's latest when `latest_only`).
    pub fn schemas(&self, prefix: &str, deleted: bool, latest_only: bool) -> Vec<VersionInfo> {
        let state = read_lock(&self.state);
        let mut listed = Vec::new();
        for (name, subject) in state.subjects.iter().filter(|(name, _)| name.starts_with(prefix)) {
            let shown: Vec<_> = subject.versions.iter().filter(|v| deleted || !v.deleted).collect();
            let chosen = if latest_only { &shown[shown.len().saturating_sub(1)..] } else { &shown[..] };
            listed.extend(chosen.iter().filter_map(|version| version_info(&state, name, version).ok()));
        }
        listed
    }

    /// Ids of the schemas referring to `subject` at `selector` (live referrers; soft-deleted
    /// ones too when `deleted`). The version itself may be soft-deleted.
    pub fn referenced_by(&self, subject: &str, selector: &str, deleted: bool) -> Result<Vec<u32>, RegistryError> {
        let selector = VersionSelector::parse(selector)?;
        let state = read_lock(&self.state);
        let entry = live_subject(&state, subject, true)?;
        let version = select(entry, selector, true)?.version;
        Ok(references::referenced_by(&state, subject, version, deleted))
    }

    /// The live version of `subject` selected by `version` (`None`: latest), for stream binding.
    pub fn resolve(&self, subject: &str, version: Option<u32>) -> Result<VersionInfo, RegistryError> {
        let selector = version.map_or(VersionSelector::Latest, VersionSelector::Number);
        let state = read_lock(&self.state);
        let entry = live_subject(&state, subject, false)?;
        version_info(&state, subject, select(entry, selector, false)?)
    }

    /// The live (version, id) of `subject` selected by `version` (`None`: latest), without
    /// copying the schema text (called once per ingest batch).
    pub fn resolve_id(&self, subject: &str, version: Option<u32>) -> Result<(u32, u32), RegistryError> {
        let selector = version.map_or(VersionSelector::Latest, VersionSelector::Number);
        let state = read_lock(&self.state);
        let found = select(live_subject(&state, subject, false)?, selector, false)?;
        Ok((found.version, found.id))
    }

    /// How many versions of `subject` (deleted ones included) were registered at or after
    /// `since_ms` (unix milliseconds); versions from files that predate timestamps do not count.
    pub fn registrations_since(&self, subject: &str, since_ms: u64) -> usize {
        let state = read_lock(&self.state);
        let Some(entry) = state.subjects.get(subject) else { return 0 };
        entry.versions.iter().filter(|v| v.registered_ms.is_some_and(|at| at >= since_ms)).count()
    }

    /// The newest live version of `subject` that uses schema `id`.
    pub fn version_of_id(&self, subject: &str, id: u32) -> Option<u32> {
        let state = read_lock(&self.state);
        state.subjects.get(subject)?.versions.iter().rev().find(|v| v.id == id && !v.deleted).map(|v| v.version)
    }
}
