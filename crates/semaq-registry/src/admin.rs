//! Changes besides registering: soft and hard deletes (refused while other schemas refer to a
//! version: 42206), compatibility levels, and modes (READONLY refuses every change: 42205).

use super::types::{Compatibility, Mode, State, VersionSelector};
use super::{check_writable, mode_in_scope, not_found, read_lock, references, select, Registry, RegistryError};

impl Registry {
    /// Deletes a subject (soft, or hard after a soft delete); returns the versions deleted.
    pub fn delete_subject(&self, subject: &str, permanent: bool) -> Result<Vec<u32>, RegistryError> {
        self.change(|state| {
            check_writable(state, Some(subject))?;
            let entry = state.subjects.get(subject).ok_or_else(|| RegistryError::SubjectNotFound(subject.into()))?;
            let doomed: Vec<u32> =
                entry.versions.iter().filter(|v| permanent || !v.deleted).map(|v| v.version).collect();
            for version in &doomed {
                references::check_unreferenced(state, subject, *version, permanent, true)?;
            }
            let entry =
                state.subjects.get_mut(subject).ok_or_else(|| RegistryError::SubjectNotFound(subject.into()))?;
            if permanent {
                if entry.versions.iter().any(|v| !v.deleted) {
                    return Err(RegistryError::SubjectNotSoftDeleted(subject.into()));
                }
                state.subjects.remove(subject);
                return Ok(doomed);
            }
            if doomed.is_empty() {
                return Err(RegistryError::SubjectSoftDeleted(subject.into()));
            }
            entry.versions.iter_mut().for_each(|v| v.deleted = true);
            Ok(doomed)
        })
    }

    /// Deletes one version (soft, or hard after a soft delete).
    pub fn delete_version(&self, subject: &str, selector: &str, permanent: bool) -> Result<u32, RegistryError> {
        let selector = VersionSelector::parse(selector)?;
        self.change(|state| {
            check_writable(state, Some(subject))?;
            let entry = state.subjects.get(subject).ok_or_else(|| RegistryError::SubjectNotFound(subject.into()))?;
            let number = select(entry, selector, permanent)?.version;
            references::check_unreferenced(state, subject, number, permanent, false)?;
            let entry =
                state.subjects.get_mut(subject).ok_or_else(|| RegistryError::SubjectNotFound(subject.into()))?;
            let index = entry.versions.iter().position(|v| v.version == number).ok_or_else(|| not_found(selector))?;
            if permanent {
                if !entry.versions[index].deleted {
                    return Err(RegistryError::VersionNotSoftDeleted(subject.into(), number));
                }
                entry.versions.remove(index);
                if entry.versions.is_empty() {
                    // As Confluent: a subject with no versions left loses its config and mode.
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
            super::check_subject_name(name)?;
        }
        self.change(|state| {
            check_writable(state, subject)?;
            match subject {
                None => state.compatibility = Some(level),
                Some(name) => super::subject_entry_any(state, name)?.compatibility = Some(level),
            }
            Ok(level)
        })
    }

    /// Removes a subject's own level (it falls back to the global one), or resets the global
    /// one to BACKWARD; returns what it was.
    pub fn delete_config(&self, subject: Option<&str>) -> Result<Compatibility, RegistryError> {
        self.change(|state| {
            check_writable(state, subject)?;
            let Some(subject) = subject else {
                return Ok(state.compatibility.take().unwrap_or_default());
            };
            let entry =
                state.subjects.get_mut(subject).ok_or_else(|| RegistryError::SubjectNotFound(subject.into()))?;
            let old = entry.compatibility.take().ok_or_else(|| RegistryError::SubjectConfigNotFound(subject.into()))?;
            drop_if_empty(state, subject);
            Ok(old)
        })
    }

    /// The mode of `subject` (its own; the one in force when `in_scope`), or the global mode.
    pub fn mode(&self, subject: Option<&str>, in_scope: bool) -> Result<Mode, RegistryError> {
        let state = read_lock(&self.state);
        match subject {
            None => Ok(state.mode.unwrap_or_default()),
            Some(name) if in_scope => Ok(mode_in_scope(&state, Some(name))),
            Some(name) => state
                .subjects
                .get(name)
                .and_then(|s| s.mode)
                .ok_or_else(|| RegistryError::SubjectModeNotFound(name.into())),
        }
    }

    /// Sets the mode of `subject`, or the global one. Entering IMPORT needs the scope to have
    /// no live subjects unless `force` (its soft-deleted versions are then hard-deleted).
    pub fn set_mode(&self, subject: Option<&str>, mode: &str, force: bool) -> Result<Mode, RegistryError> {
        let mode = Mode::parse(mode)?;
        if let Some(name) = subject {
            super::check_subject_name(name)?;
        }
        self.change(|state| {
            if mode == Mode::Import && mode_in_scope(state, subject) != Mode::Import && !force {
                clear_for_import(state, subject)?;
            }
            match subject {
                None => state.mode = Some(mode),
                Some(name) => super::subject_entry_any(state, name)?.mode = Some(mode),
            }
            Ok(mode)
        })
    }

    /// Removes a subject's own mode (40401 when it has none), or resets the global one to
    /// READWRITE; returns what it was.
    pub fn delete_mode(&self, subject: Option<&str>) -> Result<Mode, RegistryError> {
        self.change(|state| {
            let Some(subject) = subject else {
                return Ok(state.mode.take().unwrap_or_default());
            };
            let old = state.subjects.get_mut(subject).and_then(|s| s.mode.take());
            let old = old.ok_or_else(|| RegistryError::SubjectNotFound(subject.into()))?;
            drop_if_empty(state, subject);
            Ok(old)
        })
    }
}

/// A subject left with nothing (no versions, no own config or mode) is forgotten.
fn drop_if_empty(state: &mut State, subject: &str) {
    if state.subjects.get(subject).is_some_and(|s| s.is_empty()) {
        state.subjects.remove(subject);
    }
}

/// Confluent's IMPORT precondition: no live subject in scope; soft-deleted versions there are
/// hard-deleted so imported ids and versions cannot collide with them.
fn clear_for_import(state: &mut State, subject: Option<&str>) -> Result<(), RegistryError> {
    let in_scope = |name: &str| subject.is_none_or(|wanted| wanted == name);
    let live = state.subjects.iter().any(|(name, s)| in_scope(name) && s.versions.iter().any(|v| !v.deleted));
    if live {
        return Err(RegistryError::NotPermitted("Cannot import since found existing subjects".into()));
    }
    let doomed: Vec<(String, u32)> = state
        .subjects
        .iter()
        .filter(|(name, _)| in_scope(name))
        .flat_map(|(name, s)| s.versions.iter().map(move |v| (name.clone(), v.version)))
        .collect();
    for (name, version) in &doomed {
        references::check_unreferenced(state, name, *version, true, false)?;
    }
    for (name, _) in doomed {
        if let Some(entry) = state.subjects.get_mut(&name) {
            entry.versions.clear();
        }
        drop_if_empty(state, &name);
    }
    Ok(())
}
