//! Schema references, as Confluent resolves them: a schema names other registered schemas
//! (`{name, subject, version}`), and is parsed together with them and, transitively, with what
//! they refer to. `version: -1` means the latest and is pinned to a number when registered, so a
//! stored schema always means the same thing. A version other schemas refer to cannot be deleted.

use std::collections::HashSet;

use super::error::RegistryError;
use super::types::{Reference, SchemaType, State, Version};
use crate::limits;

/// One schema a registration depends on, directly or through another reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The name the referring schema uses for it (import path, type name, `$ref` target).
    pub name: String,
    /// Its format (it must be the referring schema's).
    pub schema_type: SchemaType,
    /// Its text.
    pub text: String,
}

/// `references` with every `-1` pinned to the subject's latest live version; each must exist.
pub fn pin(state: &State, references: &[Reference]) -> Result<Vec<Reference>, RegistryError> {
    if references.len() > limits::REGISTRY_REFERENCES_MAX {
        return Err(RegistryError::InvalidSchema(format!("more than {} references", limits::REGISTRY_REFERENCES_MAX)));
    }
    references
        .iter()
        .map(|reference| {
            check_shape(reference)?;
            let version = find(state, reference, false)?;
            Ok(Reference { version: i64::from(version.version), ..reference.clone() })
        })
        .collect()
}

/// Every schema `references` lead to, dependencies before the schemas that need them, each
/// name once (the first binding wins, as in Confluent). Soft-deleted versions count only when
/// `deleted` (a stored schema keeps meaning what it meant; a new one may not use them).
pub fn resolve(state: &State, references: &[Reference], deleted: bool) -> Result<Vec<Resolved>, RegistryError> {
    let mut resolved = Vec::new();
    let mut seen = HashSet::new();
    visit(state, references, deleted, &mut resolved, &mut seen, 0)?;
    Ok(resolved)
}

fn visit(
    state: &State,
    references: &[Reference],
    deleted: bool,
    resolved: &mut Vec<Resolved>,
    seen: &mut HashSet<String>,
    depth: usize,
) -> Result<(), RegistryError> {
    if depth > limits::SCHEMA_NESTING_DEPTH_MAX {
        return Err(RegistryError::InvalidSchema("references nest too deeply".into()));
    }
    for reference in references {
        check_shape(reference)?;
        if !seen.insert(reference.name.clone()) {
            continue;
        }
        if seen.len() > limits::REGISTRY_REFERENCES_MAX {
            return Err(RegistryError::InvalidSchema(format!(
                "depends on more than {} referenced schemas",
                limits::REGISTRY_REFERENCES_MAX
            )));
        }
        let version = find(state, reference, deleted)?;
        let schema = state.schemas.get(&version.id).ok_or_else(|| missing(reference))?;
        visit(state, &schema.references, true, resolved, seen, depth + 1)?;
        resolved.push(Resolved {
            name: reference.name.clone(),
            schema_type: schema.schema_type,
            text: schema.schema.clone(),
        });
    }
    Ok(())
}

fn check_shape(reference: &Reference) -> Result<(), RegistryError> {
    if reference.name.is_empty() || reference.subject.is_empty() || reference.version < -1 || reference.version == 0 {
        return Err(RegistryError::InvalidSchema(format!(
            "Invalid reference: {{name={}, subject={}, version={}}}",
            reference.name, reference.subject, reference.version
        )));
    }
    Ok(())
}

fn missing(reference: &Reference) -> RegistryError {
    RegistryError::InvalidSchema(format!(
        "No schema reference found for subject \"{}\" and version {}",
        reference.subject, reference.version
    ))
}

/// The version a reference names (`-1`: the latest live one).
fn find<'a>(state: &'a State, reference: &Reference, deleted: bool) -> Result<&'a Version, RegistryError> {
    let versions = state.subjects.get(&reference.subject).map(|s| s.versions.as_slice()).unwrap_or_default();
    let found = if reference.version == -1 {
        versions.iter().rev().find(|v| !v.deleted)
    } else {
        versions.iter().find(|v| i64::from(v.version) == reference.version && (deleted || !v.deleted))
    };
    found.ok_or_else(|| missing(reference))
}

/// Ids of the schemas that refer to `subject` version `version` and are still registered
/// somewhere (live, or also soft-deleted when `deleted`), in increasing order.
pub fn referenced_by(state: &State, subject: &str, version: u32, deleted: bool) -> Vec<u32> {
    let refers =
        |references: &[Reference]| references.iter().any(|r| r.subject == subject && r.version == i64::from(version));
    state
        .schemas
        .iter()
        .filter(|(_, schema)| refers(&schema.references))
        .filter(|(id, _)| in_use(state, **id, deleted))
        .map(|(id, _)| *id)
        .collect()
}

/// The subjects whose versions (live, or also soft-deleted when `deleted`) use schema `id`.
pub fn subjects_using(state: &State, id: u32, deleted: bool) -> HashSet<&str> {
    let uses = |versions: &[Version]| versions.iter().any(|v| v.id == id && (deleted || !v.deleted));
    state.subjects.iter().filter(|(_, s)| uses(&s.versions)).map(|(name, _)| name.as_str()).collect()
}

fn in_use(state: &State, id: u32, deleted: bool) -> bool {
    state.subjects.values().any(|s| s.versions.iter().any(|v| v.id == id && (deleted || !v.deleted)))
}

/// Refuses to delete `subject` version `version` while other schemas refer to it: live ones for
/// a soft delete, soft-deleted ones too for a hard delete. Referrers within `subject` itself are
/// ignored when `whole_subject` (the subject goes with them).
pub fn check_unreferenced(
    state: &State,
    subject: &str,
    version: u32,
    permanent: bool,
    whole_subject: bool,
) -> Result<(), RegistryError> {
    let blocked = referenced_by(state, subject, version, permanent).into_iter().any(|id| {
        let users = subjects_using(state, id, permanent);
        !whole_subject || users.iter().any(|user| *user != subject)
    });
    if blocked {
        return Err(RegistryError::ReferenceExists(subject.to_string(), version));
    }
    Ok(())
}
