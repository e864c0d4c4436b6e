//! SemaQ's schema registry: subjects with versions, global schema ids, compatibility levels and
//! modes, schema references, in Confluent Schema Registry's model, persisted in
//! `<dir>/registry.json`. The broker serves it over HTTP and NATS, binds streams to subjects
//! and publishes evolution events; nothing here depends on the broker.
//!
//! - [`Registry`] (this file): registering, looking up and checking schemas.
//! - [`types`]: what is stored and returned (subjects, versions, requests, levels, modes).
//! - [`error`]: registry errors with Confluent's error codes and HTTP statuses.
//! - [`queries`]: what the registry lists, and the lookups stream bindings make.
//! - [`admin`]: soft and hard deletes, compatibility levels and modes.
//! - [`references`]: a schema's references pinned, and resolved into the schemas it is parsed with.
//! - [`format`](mod@format): one parsed schema of any format: parse, canonical text, compatibility, validation.
//! - [`avro`]: Avro compatibility (per record field) and payload validation.
//! - [`avro_binary`]: an Avro binary datum checked against its schema without building its value.
//! - [`json_schema`]: JSON Schema compiled with its referenced documents, and payload validation.
//! - [`json_compat`]: JSON Schema compatibility, with Confluent's rules and change names.
//! - [`protobuf`]: `.proto` text compiled at run time, payload validation and compatibility.
//! - [`store`]: the registry file, written atomically and checksummed.
//! - [`decode`]: Confluent wire-format payloads decoded into the JSON value content filters read.
//! - [`infer`]: schemas inferred from JSON samples (`semaq schema infer`, auto-evolution).
//! - [`evolve`]: L4 auto-evolution: a schema widened from a payload, checked and registered.
//! - [`limits`]: every bound the registry enforces.
//!
//! Every change is made to a copy of the state, written to disk, and only then swapped in, so
//! what a client was told was registered is on disk. The state lock is a leaf: taken alone.

pub mod admin;
pub mod avro;
pub mod avro_binary;
pub mod decode;
pub mod error;
pub mod evolve;
pub mod format;
pub mod infer;
pub mod json_compat;
pub mod json_schema;
pub mod limits;
pub mod protobuf;
pub mod queries;
pub mod references;
pub mod store;
pub mod types;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use semaq_store::{SharedStorage, StdDisk};

pub use self::error::RegistryError;
use self::format::Parsed;
use self::types::{
    Compatibility, Identity, Mode, Reference, RegisterOptions, SchemaRequest, SchemaType, State, StoredSchema, Subject,
    Version, VersionInfo, VersionSelector,
};

/// The registry of one server.
pub struct Registry {
    /// Where the file lives; `None` keeps everything in memory (tests).
    dir: Option<PathBuf>,
    /// What the registry file is read and written through (the real disk outside tests).
    storage: SharedStorage,
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

/// A panic while the lock was held leaves the data as consistent as each change makes it (every
/// change is made on a copy first), so a poisoned lock is used rather than propagated.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// A schema request made ready: parsed with its references, in the text it is stored as.
struct Prepared {
    schema_type: SchemaType,
    parsed: Parsed,
    /// The text to store (normalized when asked).
    text: String,
    /// References with their versions pinned.
    references: Vec<Reference>,
    identity: Identity,
}

impl Registry {
    /// Opens the registry kept in `dir`; a damaged file is an error, never an empty registry.
    pub fn open(dir: PathBuf) -> Result<Self, store::StoreFileError> {
        Self::open_on(dir, StdDisk::shared())
    }

    /// [`Registry::open`] on the given storage (a simulated disk in tests).
    pub fn open_on(dir: PathBuf, storage: SharedStorage) -> Result<Self, store::StoreFileError> {
        let state = store::load_on(&*storage, &dir)?;
        Ok(Self::with_state(Some(dir), storage, state))
    }

    /// A registry that is never written to disk.
    pub fn in_memory() -> Self {
        Self::with_state(None, StdDisk::shared(), State::default())
    }

    fn with_state(dir: Option<PathBuf>, storage: SharedStorage, mut state: State) -> Self {
        state.next_id = state.next_id.max(state.schemas.keys().max().map_or(1, |id| id + 1));
        state.ids = state
            .schemas
            .iter()
            .rev()
            .filter_map(|(id, stored)| identity_of(stored).ok().map(|identity| (identity, *id)))
            .collect();
        let parsed = Mutex::new(HashMap::new());
        Self { dir, storage, state: RwLock::new(state), parsed, refusals: AtomicU64::new(0) }
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
                store::save_on(&*self.storage, dir, &next).map_err(|e| RegistryError::Storage(e.to_string()))?;
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
        if let Some(parsed) = lock(&self.parsed).get(&id) {
            return Ok(parsed.clone());
        }
        let stored = state.schemas.get(&id).ok_or_else(|| RegistryError::SchemaNotFound(id.to_string()))?;
        let resolved = references::resolve(state, &stored.references, true)?;
        let parsed = Arc::new(format::parse(stored.schema_type, &stored.schema, &resolved)?);
        lock(&self.parsed).insert(id, parsed.clone());
        Ok(parsed)
    }

    /// Registers a schema under `subject`: its existing id when the subject already has it,
    /// otherwise a new version, if compatible. Returns the global id.
    pub fn register(&self, subject: &str, request: &SchemaRequest) -> Result<u32, RegistryError> {
        self.register_with(subject, request, RegisterOptions::default())
    }

    /// [`Registry::register`] with Confluent's options: `normalize`, and in IMPORT mode the id
    /// and version the schema keeps (no compatibility check then).
    pub fn register_with(
        &self,
        subject: &str,
        request: &SchemaRequest,
        options: RegisterOptions,
    ) -> Result<u32, RegistryError> {
        check_subject_name(subject)?;
        let mut parsed = None;
        let id = self.change(|state| {
            check_register_mode(state, subject, options.id.is_some())?;
            let prepared = prepare(state, request, options.normalize)?;
            let id = match options.id {
                Some(id) => register_import(state, subject, &prepared, id, options.version)?,
                None => self.register_new(state, subject, &prepared)?,
            };
            parsed = Some(prepared.parsed);
            Ok(id)
        })?;
        if let Some(parsed) = parsed {
            lock(&self.parsed).entry(id).or_insert_with(|| Arc::new(parsed));
        }
        Ok(id)
    }

    fn register_new(&self, state: &mut State, subject: &str, prepared: &Prepared) -> Result<u32, RegistryError> {
        let known = state.ids.get(&prepared.identity).copied();
        let live_here =
            |id| state.subjects.get(subject).is_some_and(|s| s.versions.iter().any(|v| v.id == id && !v.deleted));
        if let Some(id) = known.filter(|id| live_here(*id)) {
            return Ok(id);
        }
        let problems = self.check_against(state, subject, &prepared.parsed, prepared.schema_type, None)?;
        if !problems.is_empty() {
            return Err(RegistryError::Incompatible { subject: subject.into(), messages: problems });
        }
        let id = match known {
            Some(id) => id,
            None => add_schema(state, prepared, None)?,
        };
        let entry = subject_entry(state, subject)?;
        let version = entry.versions.iter().map(|v| v.version).max().unwrap_or(0) + 1;
        entry.versions.push(Version { version, id, deleted: false, registered_ms: Some(store::now_ms()) });
        Ok(id)
    }

    /// The version of `subject` holding this schema (`POST /subjects/{s}`).
    pub fn lookup(&self, subject: &str, request: &SchemaRequest, deleted: bool) -> Result<VersionInfo, RegistryError> {
        self.lookup_with(subject, request, deleted, false)
    }

    /// [`Registry::lookup`], the request normalized first when `normalize`.
    pub fn lookup_with(
        &self,
        subject: &str,
        request: &SchemaRequest,
        deleted: bool,
        normalize: bool,
    ) -> Result<VersionInfo, RegistryError> {
        let state = read_lock(&self.state);
        live_subject(&state, subject, deleted)?;
        let prepared = prepare(&state, request, normalize)?;
        let id = state.ids.get(&prepared.identity).copied();
        let found = id.and_then(|id| {
            let versions = state.subjects.get(subject)?.versions.iter().rev();
            versions
                .clone()
                .find(|v| v.id == id && !v.deleted)
                .or_else(|| versions.clone().find(|v| deleted && v.id == id))
        });
        let found = found.ok_or_else(|| RegistryError::SchemaNotFound("not found".into()))?;
        version_info(&state, subject, found)
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
        let state = read_lock(&self.state);
        let prepared = prepare(&state, request, false)?;
        if let Some(selector) = selector {
            if !matches!(selector, VersionSelector::Latest) || state.subjects.contains_key(subject) {
                let entry = live_subject(&state, subject, false)?;
                select(entry, selector, false)?;
            }
        }
        self.check_against(&state, subject, &prepared.parsed, prepared.schema_type, selector)
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
}

/// IMPORT mode: the schema keeps the id (and version) it had where it came from.
fn register_import(
    state: &mut State,
    subject: &str,
    prepared: &Prepared,
    id: u32,
    version: Option<u32>,
) -> Result<u32, RegistryError> {
    if id == 0 || id > i32::MAX as u32 {
        return Err(RegistryError::InvalidRequest(format!("schema id {id} is not in [1, 2^31-1]")));
    }
    match state.schemas.get(&id) {
        Some(stored) if identity_of(stored)? != prepared.identity => {
            return Err(RegistryError::NotPermitted(format!(
                "Overwrite new schema with id {id} in context . is not permitted."
            )));
        }
        Some(_) => {}
        None => {
            add_schema(state, prepared, Some(id))?;
        }
    }
    let entry = subject_entry(state, subject)?;
    let number = version.unwrap_or_else(|| entry.versions.iter().map(|v| v.version).max().unwrap_or(0) + 1);
    if number == 0 || number > i32::MAX as u32 {
        return Err(RegistryError::InvalidVersion(number.to_string()));
    }
    match entry.versions.iter().find(|v| v.version == number) {
        Some(existing) if existing.id == id => return Ok(id),
        Some(_) => {
            return Err(RegistryError::NotPermitted(format!(
                "Subject {subject} version {number} already holds another schema; overwriting it is not permitted."
            )))
        }
        None => {}
    }
    let at = entry.versions.partition_point(|v| v.version < number);
    entry.versions.insert(at, Version { version: number, id, deleted: false, registered_ms: Some(store::now_ms()) });
    Ok(id)
}

fn subject_level(state: &State, subject: &str) -> Compatibility {
    state.subjects.get(subject).and_then(|s| s.compatibility).or(state.compatibility).unwrap_or_default()
}

/// The mode that applies to `subject`: a global READONLY_OVERRIDE, else its own, else the global.
fn mode_in_scope(state: &State, subject: Option<&str>) -> Mode {
    let global = state.mode.unwrap_or_default();
    if global == Mode::ReadonlyOverride {
        return global;
    }
    subject.and_then(|name| state.subjects.get(name)).and_then(|s| s.mode).unwrap_or(global)
}

/// Refuses a change to `subject` (`None`: the global settings) in a read-only mode.
fn check_writable(state: &State, subject: Option<&str>) -> Result<(), RegistryError> {
    if mode_in_scope(state, subject).is_read_only() {
        return Err(RegistryError::NotPermitted(match subject {
            Some(name) => format!("Subject {name} in context . is in read-only mode"),
            None => "The registry is in read-only mode".into(),
        }));
    }
    Ok(())
}

/// Confluent's rule: registering needs READWRITE, or IMPORT when the request brings an id.
fn check_register_mode(state: &State, subject: &str, with_id: bool) -> Result<(), RegistryError> {
    check_writable(state, Some(subject))?;
    let mode = mode_in_scope(state, Some(subject));
    match (with_id, mode) {
        (true, Mode::Import) | (false, Mode::Readwrite) => Ok(()),
        (true, _) => Err(RegistryError::NotPermitted(format!("Subject {subject} in context . is not in import mode"))),
        (false, _) => {
            Err(RegistryError::NotPermitted(format!("Subject {subject} in context . is not in read-write mode")))
        }
    }
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

/// Parses a request with its references (pinned to versions; soft-deleted ones refused).
fn prepare(state: &State, request: &SchemaRequest, normalize: bool) -> Result<Prepared, RegistryError> {
    if request.schema.len() > limits::REGISTRY_SCHEMA_BYTES_MAX {
        return Err(RegistryError::InvalidSchema(format!("longer than {} bytes", limits::REGISTRY_SCHEMA_BYTES_MAX)));
    }
    if request.schema.trim().is_empty() {
        return Err(RegistryError::InvalidSchema("the schema is empty".into()));
    }
    let schema_type = SchemaType::parse(request.schema_type.as_deref())?;
    let mut references = references::pin(state, &request.references)?;
    if normalize {
        references.sort();
        references.dedup();
    }
    let resolved = references::resolve(state, &references, false)?;
    let parsed = format::parse(schema_type, &request.schema, &resolved)?;
    let text =
        if normalize { format::normalize(schema_type, &parsed, &request.schema)? } else { request.schema.clone() };
    let identity = (schema_type, format::canonical(schema_type, &text)?, references.clone());
    Ok(Prepared { schema_type, parsed, text, references, identity })
}

fn identity_of(stored: &StoredSchema) -> Result<Identity, RegistryError> {
    Ok((stored.schema_type, format::canonical(stored.schema_type, &stored.schema)?, stored.references.clone()))
}

/// Stores a new schema under `id` (`None`: the next free one) and indexes it.
fn add_schema(state: &mut State, prepared: &Prepared, id: Option<u32>) -> Result<u32, RegistryError> {
    if state.schemas.len() >= limits::REGISTRY_SCHEMAS_MAX {
        return Err(RegistryError::LimitReached("the registry holds the most schemas it may".into()));
    }
    let id = id.unwrap_or(state.next_id.max(1));
    state.next_id = state.next_id.max(id + 1);
    let stored = StoredSchema {
        schema_type: prepared.schema_type,
        schema: prepared.text.clone(),
        references: prepared.references.clone(),
    };
    state.schemas.insert(id, stored);
    state.ids.entry(prepared.identity.clone()).or_insert(id);
    Ok(id)
}

/// The subject's entry, created when absent (within the subjects limit).
fn subject_entry_any<'a>(state: &'a mut State, subject: &str) -> Result<&'a mut Subject, RegistryError> {
    if !state.subjects.contains_key(subject) && state.subjects.len() >= limits::REGISTRY_SUBJECTS_MAX {
        return Err(RegistryError::LimitReached("the registry holds the most subjects it may".into()));
    }
    Ok(state.subjects.entry(subject.to_string()).or_default())
}

/// The subject's entry, created when absent, with room for one more version.
fn subject_entry<'a>(state: &'a mut State, subject: &str) -> Result<&'a mut Subject, RegistryError> {
    let entry = subject_entry_any(state, subject)?;
    if entry.versions.len() >= limits::REGISTRY_VERSIONS_PER_SUBJECT_MAX {
        return Err(RegistryError::LimitReached(format!("subject {subject:?} has too many versions")));
    }
    Ok(entry)
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
mod compat_tests;
#[cfg(test)]
mod reference_tests;
#[cfg(test)]
mod tests;
