//! The schema registry: subjects with versions, global schema ids, compatibility levels, in
//! Confluent Schema Registry's model, persisted in `<store_dir>/registry/registry.json`.
//!
//! - [`types`]: what is stored and returned; [`error`]: Confluent's error codes.
//! - [`format`], [`avro`], [`json_schema`], [`protobuf`]: parsing, compatibility and payload validation.
//! - [`store`]: the file, written atomically and checksummed.
//! - [`http`]: the Confluent REST API; [`nats`]: the same over `$SEMAQ.API.SCHEMA.*`.
//! - [`binding`]: L2 streams bound to a subject validate what they store; [`evolve`] and [`infer`]:
//!   L4 streams widen their schema from payloads, with the inference `semaq schema infer` uses.
//!
//! Every change is made to a copy of the state, written to disk, and only then swapped in, so
//! what a client was told was registered is on disk. The state lock is a leaf: taken alone.

pub mod avro;
pub mod binding;
pub mod decode;
pub mod error;
pub mod evolve;
pub mod format;
pub mod http;
pub mod infer;
pub mod json_schema;
pub mod nats;
pub mod protobuf;
pub mod store;
pub mod types;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, RwLock};

pub use self::error::RegistryError;
use self::format::Parsed;
use self::types::{
    Compatibility, SchemaRequest, SchemaType, State, StoredSchema, Subject, Version, VersionInfo, VersionSelector,
};
use crate::limits;

/// The registry of one server.
pub struct Registry {
    /// Where the file lives; `None` keeps everything in memory (tests).
    dir: Option<PathBuf>,
    state: RwLock<State>,
    /// Parsed schemas by id, so validation never re-parses.
    parsed: Mutex<HashMap<u32, Arc<Parsed>>>,
    /// Messages L2 streams refused because they did not match their schema.
    pub refusals: AtomicU64,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").field("dir", &self.dir).finish_non_exhaustive()
    }
}

fn write_lock<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(|p| p.into_inner())
}

fn read_lock<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(|p| p.into_inner())
}

impl Registry {
    /// Opens the registry kept in `dir`; a damaged file is an error, never an empty registry.
    pub fn open(dir: PathBuf) -> Result<Self, store::StoreFileError> {
        let state = store::load(&dir)?;
        Ok(Self::with_state(Some(dir), state))
    }

    /// A registry that is never written to disk.
    pub fn in_memory() -> Self {
        Self::with_state(None, State::default())
    }

    fn with_state(dir: Option<PathBuf>, mut state: State) -> Self {
        state.next_id = state.next_id.max(state.schemas.keys().max().map_or(1, |id| id + 1));
        Self { dir, state: RwLock::new(state), parsed: Mutex::new(HashMap::new()), refusals: AtomicU64::new(0) }
    }

    /// Schema subjects and version counts, for the startup log.
    pub fn summary(&self) -> (usize, usize) {
        let state = read_lock(&self.state);
        (state.subjects.len(), state.schemas.len())
    }

    /// Applies `change` to a copy of the state, persists it, then makes it current.
    fn change<T>(&self, change: impl FnOnce(&mut State) -> Result<T, RegistryError>) -> Result<T, RegistryError> {
        let mut current = write_lock(&self.state);
        let mut next = current.clone();
        let result = change(&mut next)?;
        if next != *current {
            if let Some(dir) = &self.dir {
                store::save(dir, &next).map_err(|e| RegistryError::Storage(e.to_string()))?;
            }
            *current = next;
        }
        Ok(result)
    }

    /// The parsed schema with global id `id`.
    pub fn parsed(&self, id: u32) -> Result<Arc<Parsed>, RegistryError> {
        self.parsed_in(&read_lock(&self.state), id)
    }

    /// Like [`Registry::parsed`], with the state lock already held by the caller.
    fn parsed_in(&self, state: &State, id: u32) -> Result<Arc<Parsed>, RegistryError> {
        if let Some(parsed) = crate::server::lock(&self.parsed).get(&id) {
            return Ok(parsed.clone());
        }
        let stored = state.schemas.get(&id).ok_or_else(|| RegistryError::SchemaNotFound(id.to_string()))?;
        let parsed = Arc::new(format::parse(stored.schema_type, &stored.schema)?);
        crate::server::lock(&self.parsed).insert(id, parsed.clone());
        Ok(parsed)
    }

    /// Registers a schema under `subject`: its existing id when the subject already has it,
    /// otherwise a new version, if compatible. Returns the global id.
    pub fn register(&self, subject: &str, request: &SchemaRequest) -> Result<u32, RegistryError> {
        check_subject_name(subject)?;
        let (schema_type, parsed, canonical) = prepare(request)?;
        let parsed = Arc::new(parsed);
        let id = self.change(|state| {
            if let Some(found) = find_in_subject(state, subject, schema_type, &canonical, false) {
                return Ok(found.id);
            }
            let problems = self.check_against(state, subject, &parsed, schema_type, None)?;
            if !problems.is_empty() {
                return Err(RegistryError::Incompatible { subject: subject.into(), messages: problems });
            }
            let id = match find_id(state, schema_type, &canonical) {
                Some(id) => id,
                None => add_schema(state, schema_type, request)?,
            };
            let entry = state.subjects.entry(subject.to_string()).or_default();
            if entry.versions.len() >= limits::REGISTRY_VERSIONS_PER_SUBJECT_MAX {
                return Err(RegistryError::LimitReached(format!("subject {subject:?} has too many versions")));
            }
            let version = entry.versions.iter().map(|v| v.version).max().unwrap_or(0) + 1;
            entry.versions.push(Version { version, id, deleted: false });
            Ok(id)
        })?;
        crate::server::lock(&self.parsed).entry(id).or_insert(parsed);
        Ok(id)
    }

    /// The version of `subject` holding this schema (`POST /subjects/{s}`).
    pub fn lookup(&self, subject: &str, request: &SchemaRequest, deleted: bool) -> Result<VersionInfo, RegistryError> {
        let (schema_type, _, canonical) = prepare(request)?;
        let state = read_lock(&self.state);
        live_subject(&state, subject, deleted)?;
        let found = find_in_subject(&state, subject, schema_type, &canonical, deleted)
            .ok_or_else(|| RegistryError::SchemaNotFound("not found".into()))?;
        version_info(&state, subject, found)
    }

    /// Subject names (with soft-deleted ones when `deleted`).
    pub fn subjects(&self, deleted: bool) -> Vec<String> {
        let state = read_lock(&self.state);
        state
            .subjects
            .iter()
            .filter(|(_, s)| s.versions.iter().any(|v| deleted || !v.deleted))
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// Version numbers of `subject`.
    pub fn versions(&self, subject: &str, deleted: bool) -> Result<Vec<u32>, RegistryError> {
        let state = read_lock(&self.state);
        let entry = live_subject(&state, subject, deleted)?;
        Ok(entry.versions.iter().filter(|v| deleted || !v.deleted).map(|v| v.version).collect())
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
    pub fn schema_by_id(&self, id: u32) -> Result<StoredSchema, RegistryError> {
        read_lock(&self.state).schemas.get(&id).cloned().ok_or_else(|| RegistryError::SchemaNotFound(id.to_string()))
    }

    /// Every (subject, version) using schema `id`.
    pub fn uses_of(&self, id: u32) -> Result<Vec<(String, u32)>, RegistryError> {
        let state = read_lock(&self.state);
        if !state.schemas.contains_key(&id) {
            return Err(RegistryError::SchemaNotFound(id.to_string()));
        }
        let uses = state.subjects.iter().flat_map(|(name, s)| {
            s.versions.iter().filter(|v| v.id == id && !v.deleted).map(move |v| (name.clone(), v.version))
        });
        Ok(uses.collect())
    }

    /// Deletes a subject (soft, or hard after a soft delete); returns the versions deleted.
    pub fn delete_subject(&self, subject: &str, permanent: bool) -> Result<Vec<u32>, RegistryError> {
        self.change(|state| {
            let entry =
                state.subjects.get_mut(subject).ok_or_else(|| RegistryError::SubjectNotFound(subject.into()))?;
            if permanent {
                if entry.versions.iter().any(|v| !v.deleted) {
                    return Err(RegistryError::SubjectNotSoftDeleted(subject.into()));
                }
                let versions = entry.versions.iter().map(|v| v.version).collect();
                state.subjects.remove(subject);
                return Ok(versions);
            }
            let live: Vec<u32> = entry.versions.iter().filter(|v| !v.deleted).map(|v| v.version).collect();
            if live.is_empty() {
                return Err(RegistryError::SubjectSoftDeleted(subject.into()));
            }
            entry.versions.iter_mut().for_each(|v| v.deleted = true);
            Ok(live)
        })
    }

    /// Deletes one version (soft, or hard after a soft delete).
    pub fn delete_version(&self, subject: &str, selector: &str, permanent: bool) -> Result<u32, RegistryError> {
        let selector = VersionSelector::parse(selector)?;
        self.change(|state| {
            let entry =
                state.subjects.get_mut(subject).ok_or_else(|| RegistryError::SubjectNotFound(subject.into()))?;
            let number = select(entry, selector, permanent)?.version;
            let index = entry.versions.iter().position(|v| v.version == number).ok_or_else(|| not_found(selector))?;
            if permanent {
                if !entry.versions[index].deleted {
                    return Err(RegistryError::VersionNotSoftDeleted(subject.into(), number));
                }
                entry.versions.remove(index);
                if entry.versions.is_empty() && entry.compatibility.is_none() {
                    state.subjects.remove(subject);
                }
            } else if entry.versions[index].deleted {
                return Err(RegistryError::VersionSoftDeleted(subject.into(), number));
            } else {
                entry.versions[index].deleted = true;
            }
            Ok(number)
        })
    }

    /// Every incompatibility of `request` with `subject` at `selector` (`None`: as the
    /// subject's compatibility level would check a registration).
    pub fn check(
        &self,
        subject: &str,
        selector: Option<&str>,
        request: &SchemaRequest,
    ) -> Result<Vec<String>, RegistryError> {
        let selector = selector.map(VersionSelector::parse).transpose()?;
        let (schema_type, parsed, _) = prepare(request)?;
        let state = read_lock(&self.state);
        if let Some(selector) = selector {
            if !matches!(selector, VersionSelector::Latest) || state.subjects.contains_key(subject) {
                let entry = live_subject(&state, subject, false)?;
                select(entry, selector, false)?;
            }
        }
        self.check_against(&state, subject, &parsed, schema_type, selector)
    }

    fn check_against(
        &self,
        state: &State,
        subject: &str,
        parsed: &Parsed,
        schema_type: SchemaType,
        only: Option<VersionSelector>,
    ) -> Result<Vec<String>, RegistryError> {
        let level = subject_level(state, subject);
        let (backward, forward, transitive) = level.directions();
        let Some(entry) = state.subjects.get(subject) else { return Ok(Vec::new()) };
        let live: Vec<&Version> = entry.versions.iter().filter(|v| !v.deleted).collect();
        let targets: Vec<&Version> = match only {
            Some(selector) => vec![select(entry, selector, false)?],
            None if transitive => live,
            None => live.last().copied().into_iter().collect(),
        };
        let mut problems = Vec::new();
        for target in targets {
            let old_type = state.schemas.get(&target.id).map(|s| s.schema_type);
            if old_type != Some(schema_type) {
                problems.push(format!("version {}: the schema type changed", target.version));
                continue;
            }
            let old = self.parsed_in(state, target.id)?;
            let mut found = Vec::new();
            if backward {
                found.extend(format::incompatibilities(parsed, &old));
            }
            if forward {
                found.extend(format::incompatibilities(&old, parsed));
            }
            problems.extend(found.into_iter().map(|p| format!("version {}: {p}", target.version)));
        }
        Ok(problems)
    }

    /// The compatibility level of `subject` (its own, or the global one when `fallback`), or
    /// the global level.
    pub fn config(&self, subject: Option<&str>, fallback: bool) -> Result<Compatibility, RegistryError> {
        let state = read_lock(&self.state);
        match subject {
            None => Ok(state.compatibility.unwrap_or_default()),
            Some(name) => match state.subjects.get(name).and_then(|s| s.compatibility) {
                Some(level) => Ok(level),
                None if fallback => Ok(state.compatibility.unwrap_or_default()),
                None => Err(RegistryError::SubjectConfigNotFound(name.into())),
            },
        }
    }

    /// Sets the level of `subject`, or the global one.
    pub fn set_config(&self, subject: Option<&str>, level: &str) -> Result<Compatibility, RegistryError> {
        let level = Compatibility::parse(level)?;
        if let Some(name) = subject {
            check_subject_name(name)?;
        }
        self.change(|state| {
            match subject {
                None => state.compatibility = Some(level),
                Some(name) => state.subjects.entry(name.to_string()).or_default().compatibility = Some(level),
            }
            Ok(level)
        })
    }

    /// Removes a subject's own level (it falls back to the global one); returns what it was.
    pub fn delete_config(&self, subject: &str) -> Result<Compatibility, RegistryError> {
        self.change(|state| {
            let entry =
                state.subjects.get_mut(subject).ok_or_else(|| RegistryError::SubjectNotFound(subject.into()))?;
            let old = entry.compatibility.take().ok_or_else(|| RegistryError::SubjectConfigNotFound(subject.into()))?;
            if entry.versions.is_empty() {
                state.subjects.remove(subject);
            }
            Ok(old)
        })
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

    /// The newest live version of `subject` that uses schema `id`.
    pub fn version_of_id(&self, subject: &str, id: u32) -> Option<u32> {
        let state = read_lock(&self.state);
        state.subjects.get(subject)?.versions.iter().rev().find(|v| v.id == id && !v.deleted).map(|v| v.version)
    }
}

/// Opens `<store_dir>/registry`, serves it over NATS and makes it the server's registry. A
/// damaged registry file stops the server: starting empty would silently drop schemas.
pub fn start(shared: &Arc<crate::server::Shared>) -> Result<(), store::StoreFileError> {
    let dir = shared.options.store_dir.join("registry");
    let registry = match Registry::open(dir) {
        Ok(registry) => Arc::new(registry),
        Err(error) => {
            tracing::error!("{error}");
            return Err(error);
        }
    };
    let (subjects, schemas) = registry.summary();
    if subjects > 0 {
        tracing::info!("  Schema registry: {subjects} subjects, {schemas} schemas");
    }
    nats::start(shared, registry.clone());
    let _ = shared.registry.set(registry);
    Ok(())
}

fn subject_level(state: &State, subject: &str) -> Compatibility {
    state.subjects.get(subject).and_then(|s| s.compatibility).or(state.compatibility).unwrap_or_default()
}

fn check_subject_name(subject: &str) -> Result<(), RegistryError> {
    if subject.is_empty()
        || subject.len() > limits::REGISTRY_SUBJECT_NAME_BYTES_MAX
        || subject.chars().any(char::is_control)
    {
        return Err(RegistryError::InvalidRequest(format!("invalid subject name {subject:?}")));
    }
    Ok(())
}

/// Parses a request: its type, the parsed schema and the text registrations are compared by.
fn prepare(request: &SchemaRequest) -> Result<(SchemaType, Parsed, String), RegistryError> {
    if request.schema.len() > limits::REGISTRY_SCHEMA_BYTES_MAX {
        return Err(RegistryError::InvalidSchema(format!("longer than {} bytes", limits::REGISTRY_SCHEMA_BYTES_MAX)));
    }
    if !request.references.is_empty() {
        return Err(RegistryError::InvalidSchema("schema references are not supported by this server yet".into()));
    }
    let schema_type = SchemaType::parse(request.schema_type.as_deref())?;
    let parsed = format::parse(schema_type, &request.schema)?;
    Ok((schema_type, parsed, format::canonical(schema_type, &request.schema)?))
}

fn find_in_subject<'a>(
    state: &'a State,
    subject: &str,
    schema_type: SchemaType,
    canonical: &str,
    deleted: bool,
) -> Option<&'a Version> {
    let id = find_id(state, schema_type, canonical)?;
    state.subjects.get(subject)?.versions.iter().rev().find(|v| v.id == id && (deleted || !v.deleted))
}

fn find_id(state: &State, schema_type: SchemaType, canonical: &str) -> Option<u32> {
    state.schemas.iter().find_map(|(id, stored)| {
        let same = stored.schema_type == schema_type
            && format::canonical(stored.schema_type, &stored.schema).ok().as_deref() == Some(canonical);
        same.then_some(*id)
    })
}

fn add_schema(state: &mut State, schema_type: SchemaType, request: &SchemaRequest) -> Result<u32, RegistryError> {
    if state.schemas.len() >= limits::REGISTRY_SCHEMAS_MAX {
        return Err(RegistryError::LimitReached("the registry holds the most schemas it may".into()));
    }
    let id = state.next_id.max(1);
    state.next_id = id + 1;
    let stored = StoredSchema { schema_type, schema: request.schema.clone(), references: request.references.clone() };
    state.schemas.insert(id, stored);
    Ok(id)
}

fn live_subject<'a>(state: &'a State, subject: &str, deleted: bool) -> Result<&'a Subject, RegistryError> {
    state
        .subjects
        .get(subject)
        .filter(|s| s.versions.iter().any(|v| deleted || !v.deleted))
        .ok_or_else(|| RegistryError::SubjectNotFound(subject.into()))
}

fn not_found(selector: VersionSelector) -> RegistryError {
    match selector {
        VersionSelector::Latest => RegistryError::VersionNotFound("latest".into()),
        VersionSelector::Number(n) => RegistryError::VersionNotFound(n.to_string()),
    }
}

fn select(subject: &Subject, selector: VersionSelector, deleted: bool) -> Result<&Version, RegistryError> {
    let mut candidates = subject.versions.iter().filter(|v| deleted || !v.deleted);
    let found = match selector {
        VersionSelector::Latest => candidates.next_back(),
        VersionSelector::Number(n) => candidates.find(|v| v.version == n),
    };
    found.ok_or_else(|| not_found(selector))
}

fn version_info(state: &State, subject: &str, version: &Version) -> Result<VersionInfo, RegistryError> {
    let schema =
        state.schemas.get(&version.id).cloned().ok_or_else(|| RegistryError::SchemaNotFound(version.id.to_string()))?;
    Ok(VersionInfo { subject: subject.to_string(), version: version.version, id: version.id, schema })
}

#[cfg(test)]
mod tests;
