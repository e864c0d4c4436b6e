//! L4 auto-evolution: a stream with `semaq.evolve: auto`, bound to a JSON Schema or Avro subject
//! (latest version), widens its schema from what it observes.
//!
//! A JSON payload with fields the schema does not declare, or that fails validation, is turned
//! into a *proposal*: the schema plus each new field, typed by the same inference as
//! `semaq schema infer` ([`super::infer`]) and optional (Avro: nullable, default null). New
//! fields are found at the top level and inside nested objects (JSON Schema `properties`) and
//! inline records (Avro, alone or in a `["null", record]` union), down to
//! [`limits::SCHEMA_EVOLUTION_DEPTH_MAX`] levels, and named by their path (`user.locale`).
//! When the proposal only adds fields, the registry checks it against the subject's
//! compatibility mode and registers it as a new version; the message is then validated against
//! it and stored, and `$SEMAQ.EVENT.SCHEMA.EVOLVED` announces the change. Protobuf subjects do
//! not evolve (a stream bound to one cannot set `semaq.evolve: auto`): a field number is a
//! promise a person makes.
//!
//! The broker never narrows or breaks a schema on its own: a payload that changes the type of a
//! field or lacks a required one is refused, with what it would change and the registry's
//! compatibility report for that change (a person registers breaking versions). Registration
//! attempts are bounded per stream per minute, and fields per evolution, so random keys cannot grow the
//! registry without bound.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use serde_json::{json, Map, Value};

use super::error::RegistryError;
use super::format::{self, Parsed};
use super::infer::{self, AvroEncoding};
use super::types::{SchemaRequest, SchemaType};
use super::Registry;
use crate::limits;
use crate::server::{lock, Shared};

/// Stream metadata key: `auto` evolves the bound schema from payloads (L4 only); `off` (default) does not.
pub const EVOLVE_KEY: &str = "semaq.evolve";
/// Where each evolution is announced.
pub const EVENT_SUBJECT: &str = "$SEMAQ.EVENT.SCHEMA.EVOLVED";

/// Recent evolution attempts per (server, stream), for the per-minute bound. A process-wide map
/// keeps the ingest path's types untouched; it holds at most one entry per stream that evolved.
/// A restart empties it, so the bound also counts the subject's registrations within the window
/// as the registry keeps them (see [`Evolver::within_rate`]).
static RECENT: Mutex<BTreeMap<String, VecDeque<Instant>>> = Mutex::new(BTreeMap::new());

/// What one stream's evolution needs, resolved with its schema once per ingest batch.
#[derive(Debug)]
pub struct Evolver {
    stream: String,
    shared: Weak<Shared>,
    schema_type: SchemaType,
    /// The bound version's schema as JSON.
    schema: Value,
    /// Its fields, nested: a payload with others is a candidate for evolution.
    known: Known,
}

/// What a payload implies for the schema.
#[derive(Debug, Default, PartialEq)]
pub struct Proposal {
    /// The schema with the changes applied.
    pub schema: Value,
    /// New (optional) fields.
    pub added: Vec<String>,
    /// Existing fields whose type the payload changes.
    pub changed: Vec<String>,
    /// Required fields the payload lacks.
    pub removed: Vec<String>,
}

/// The result of one attempt, for [`super::binding::SchemaCheck`].
#[derive(Debug)]
pub enum Outcome {
    /// Nothing to evolve; the current verdict stands.
    Unchanged,
    /// A new version was registered: (version, id, parsed).
    Evolved(u32, u32, Arc<Parsed>),
    /// Refused, with the reason (the compatibility report when there is one).
    Refused(String),
}

impl Evolver {
    /// The evolver of a stream whose metadata says `semaq.evolve: auto`, bound to schema `id`.
    pub fn new(stream: &str, shared: &Weak<Shared>, registry: &Registry, id: u32) -> Option<Self> {
        let stored = registry.schema_by_id(id).ok()?;
        let schema: Value = serde_json::from_str(&stored.schema).ok()?;
        let known = Known::of(stored.schema_type, &schema)?;
        Some(Self {
            stream: stream.to_string(),
            shared: shared.clone(),
            schema_type: stored.schema_type,
            schema,
            known,
        })
    }

    /// Whether `object` has a field the schema does not declare, at the top level or nested.
    pub fn has_new_fields(&self, object: &Map<String, Value>) -> bool {
        self.known.lacks_any_of(object)
    }

    /// Tries to evolve `subject` (bound at `version`) so that `object` fits; `valid` says
    /// whether it already fits the current version (an open JSON Schema accepts new fields).
    pub fn attempt(
        &mut self,
        registry: &Registry,
        (subject, version, id): (&str, u32, u32),
        object: &Map<String, Value>,
        valid: bool,
    ) -> Outcome {
        let proposal = match propose(self.schema_type, &self.schema, object) {
            Ok(proposal) => proposal,
            Err(reason) if valid => return self.unchanged_because(&reason),
            Err(reason) => return Outcome::Refused(format!("auto-evolution cannot fit this payload: {reason}")),
        };
        if !proposal.changed.is_empty() || !proposal.removed.is_empty() {
            return Outcome::Refused(breaking_report(registry, subject, self.schema_type, &proposal));
        }
        if proposal.added.is_empty() {
            return Outcome::Unchanged;
        }
        if !self.within_rate(registry, subject) {
            let reason = format!(
                "auto-evolution limit reached: at most {} schema registrations per stream per minute",
                limits::SCHEMA_EVOLUTIONS_PER_STREAM_PER_MINUTE_MAX
            );
            return if valid { self.unchanged_because(&reason) } else { Outcome::Refused(reason) };
        }
        let request = request_for(self.schema_type, &proposal.schema);
        let new_id = match registry.register(subject, &request) {
            Ok(new_id) => new_id,
            Err(RegistryError::Incompatible { messages, .. }) if !valid => {
                let mode = registry.config(Some(subject), true).map(|mode| mode.name()).unwrap_or_default();
                return Outcome::Refused(format!(
                    "auto-evolution adding {} is refused by the subject's {mode} compatibility: {}",
                    quoted(&proposal.added),
                    messages.join("; ")
                ));
            }
            Err(error) if valid => return self.unchanged_because(&error.to_string()),
            Err(error) => return Outcome::Refused(format!("auto-evolution failed: {error}")),
        };
        let Some(new_version) = registry.version_of_id(subject, new_id) else {
            return Outcome::Refused(format!(
                "auto-evolution registered schema id {new_id} but cannot find its version"
            ));
        };
        let parsed = match registry.parsed(new_id) {
            Ok(parsed) => parsed,
            Err(error) => return Outcome::Refused(format!("auto-evolution failed: {error}")),
        };
        self.announce(subject, (version, id), (new_version, new_id), &proposal.added);
        self.known = Known::of(self.schema_type, &proposal.schema).unwrap_or_default();
        self.schema = proposal.schema;
        Outcome::Evolved(new_version, new_id, parsed)
    }

    fn unchanged_because(&self, reason: &str) -> Outcome {
        tracing::debug!(stream = %self.stream, %reason, "payload stored without evolving the schema");
        Outcome::Unchanged
    }

    /// Counts one registration attempt of this stream if the per-minute bound allows it. Refused
    /// attempts count too: each costs a compatibility check and a registry write, which is what
    /// the bound protects. The registry's own record of the versions registered for `subject`
    /// within the window counts as well, so a restart (which forgets the attempts) does not
    /// reopen the window; of the two, the larger count applies.
    fn within_rate(&self, registry: &Registry, subject: &str) -> bool {
        let server = self.shared.upgrade().map(|shared| shared.server_id.clone()).unwrap_or_default();
        let key = format!("{server}/{}", self.stream);
        let now = Instant::now();
        let window = limits::SCHEMA_EVOLUTION_RATE_WINDOW;
        let window_ms = u64::try_from(window.as_millis()).unwrap_or(u64::MAX);
        let registered = registry.registrations_since(subject, super::store::now_ms().saturating_sub(window_ms));
        let mut recent = lock(&RECENT);
        recent.retain(|_, times| {
            while times.front().is_some_and(|t| now.duration_since(*t) > window) {
                times.pop_front();
            }
            !times.is_empty()
        });
        let times = recent.entry(key).or_default();
        if times.len().max(registered) >= limits::SCHEMA_EVOLUTIONS_PER_STREAM_PER_MINUTE_MAX {
            return false;
        }
        times.push_back(now);
        true
    }

    fn announce(&self, subject: &str, (old_version, old_id): (u32, u32), (version, id): (u32, u32), added: &[String]) {
        tracing::info!(stream = %self.stream, %subject, old_version, version, ?added, "schema evolved");
        let Some(shared) = self.shared.upgrade() else { return };
        let event = json!({
            "stream": self.stream,
            "subject": subject,
            "schema_type": self.schema_type.name(),
            "old_version": old_version,
            "old_id": old_id,
            "new_version": version,
            "new_id": id,
            "added": added,
            "time": crate::clock::rfc3339(std::time::SystemTime::now()),
        });
        shared.publish(EVENT_SUBJECT, None, event.to_string().as_bytes());
    }
}

/// The top-level field names of an Avro record or an object JSON Schema; `None` for schemas
/// auto-evolution cannot extend (not a record, not an object schema, Protobuf).
pub fn top_level_fields(schema_type: SchemaType, schema: &Value) -> Option<BTreeSet<String>> {
    let names = field_names(schema_type, schema)?;
    Some(names.map(str::to_string).collect())
}

/// The field names of one extendable node: an Avro record or an object JSON Schema.
fn field_names(schema_type: SchemaType, node: &Value) -> Option<Box<dyn Iterator<Item = &str> + '_>> {
    match schema_type {
        SchemaType::Avro if node["type"] == "record" => {
            Some(Box::new(node["fields"].as_array()?.iter().filter_map(|f| f["name"].as_str())))
        }
        SchemaType::Json if node.is_object() && (node["type"] == "object" || node.get("properties").is_some()) => {
            let properties = node.get("properties").and_then(Value::as_object);
            Some(Box::new(properties.into_iter().flat_map(|p| p.keys().map(String::as_str))))
        }
        _ => None,
    }
}

/// The extendable node field `name` of `node` holds: a nested object JSON Schema, or an Avro
/// record written inline (alone or beside `"null"` in a union). Named references to records
/// defined elsewhere are not followed: their new fields are not added.
fn child<'a>(schema_type: SchemaType, node: &'a Value, name: &str) -> Option<&'a Value> {
    let child = match schema_type {
        SchemaType::Avro => avro_record_of(&node["fields"].as_array()?.iter().find(|f| f["name"] == name)?["type"])?,
        _ => node.get("properties")?.get(name)?,
    };
    field_names(schema_type, child).is_some().then_some(child)
}

fn child_mut<'a>(schema_type: SchemaType, node: &'a mut Value, name: &str) -> Option<&'a mut Value> {
    child(schema_type, node, name)?;
    match schema_type {
        SchemaType::Avro => {
            let field = node["fields"].as_array_mut()?.iter_mut().find(|f| f["name"] == name)?;
            avro_record_of_mut(&mut field["type"])
        }
        _ => node.get_mut("properties")?.get_mut(name),
    }
}

fn avro_record_of(field_type: &Value) -> Option<&Value> {
    match field_type {
        Value::Array(branches) => match branches.as_slice() {
            [null, record] | [record, null] if *null == "null" => Some(record),
            _ => None,
        },
        _ => Some(field_type),
    }
}

fn avro_record_of_mut(field_type: &mut Value) -> Option<&mut Value> {
    match field_type {
        Value::Array(branches) => {
            let null_at = branches.iter().position(|b| *b == "null").filter(|_| branches.len() == 2)?;
            branches.get_mut(1 - null_at)
        }
        _ => Some(field_type),
    }
}

/// The fields a schema declares, nested: each field's own fields when it is an extendable node.
#[derive(Debug, Default)]
pub struct Known {
    fields: BTreeMap<String, Option<Known>>,
}

impl Known {
    /// The fields of `node` (an extendable node), down to [`limits::SCHEMA_EVOLUTION_DEPTH_MAX`].
    pub fn of(schema_type: SchemaType, node: &Value) -> Option<Self> {
        Self::walk(schema_type, node, 0)
    }

    fn walk(schema_type: SchemaType, node: &Value, depth: usize) -> Option<Self> {
        let names = field_names(schema_type, node)?;
        let fields = names
            .map(|name| {
                let nested = (depth < limits::SCHEMA_EVOLUTION_DEPTH_MAX)
                    .then(|| child(schema_type, node, name))
                    .flatten()
                    .and_then(|child| Self::walk(schema_type, child, depth + 1));
                (name.to_string(), nested)
            })
            .collect();
        Some(Self { fields })
    }

    /// Whether `object` has a field, at any level walked, that the schema does not declare.
    pub fn lacks_any_of(&self, object: &Map<String, Value>) -> bool {
        object.iter().any(|(name, value)| match self.fields.get(name) {
            None => true,
            Some(Some(nested)) => value.as_object().is_some_and(|inner| nested.lacks_any_of(inner)),
            Some(None) => false,
        })
    }
}

/// The schema `object` implies: new fields added (optional), at the top level or inside nested
/// objects and records, fields it gives another type changed to that type, required fields it
/// lacks removed. Fields are named by their dotted path (`user.locale`).
pub fn propose(schema_type: SchemaType, schema: &Value, object: &Map<String, Value>) -> Result<Proposal, String> {
    if field_names(schema_type, schema).is_none() {
        return Err("the schema is not a record or an object schema".into());
    }
    let mut proposal = Proposal { schema: schema.clone(), ..Proposal::default() };
    let mut names = BTreeSet::new();
    avro_names(schema, &mut names, 0);
    let mut node = Node { schema_type, names: &mut names, added: &mut proposal.added, removed: &mut proposal.removed };
    node.extend(&mut proposal.schema, object, "", 0)?;
    retype_mismatches(schema_type, &mut proposal, object)?;
    Ok(proposal)
}

/// What [`propose`] carries down the nested nodes.
struct Node<'a> {
    schema_type: SchemaType,
    /// Named Avro types taken, so inferred records do not reuse one.
    names: &'a mut BTreeSet<String>,
    added: &'a mut Vec<String>,
    removed: &'a mut Vec<String>,
}

impl Node<'_> {
    /// Adds `object`'s new fields to `node` and drops the required ones it lacks, then does the
    /// same in each nested node the payload fills with an object.
    /// Refuses more than [`limits::SCHEMA_EVOLUTION_FIELDS_MAX`] new fields before typing them.
    fn extend(
        &mut self,
        node: &mut Value,
        object: &Map<String, Value>,
        prefix: &str,
        depth: usize,
    ) -> Result<(), String> {
        let known: BTreeSet<String> =
            field_names(self.schema_type, node).map_or_else(BTreeSet::new, |names| names.map(str::to_string).collect());
        let new_fields = self.added.len() + object.keys().filter(|name| !known.contains(*name)).count();
        if new_fields > limits::SCHEMA_EVOLUTION_FIELDS_MAX {
            return Err(format!(
                "{new_fields} new fields, more than the {} one evolution may add",
                limits::SCHEMA_EVOLUTION_FIELDS_MAX
            ));
        }
        match self.schema_type {
            SchemaType::Avro => self.extend_avro(node, object, &known, prefix),
            _ => self.extend_json(node, object, &known, prefix),
        }
        if depth >= limits::SCHEMA_EVOLUTION_DEPTH_MAX {
            return Ok(());
        }
        for (name, value) in object.iter().filter(|(name, _)| known.contains(*name)) {
            let Some(inner) = value.as_object() else { continue };
            if let Some(nested) = child_mut(self.schema_type, node, name) {
                self.extend(nested, inner, &format!("{prefix}{name}."), depth + 1)?;
            }
        }
        Ok(())
    }

    fn extend_json(&mut self, node: &mut Value, object: &Map<String, Value>, known: &BTreeSet<String>, prefix: &str) {
        let required: Vec<String> = node["required"]
            .as_array()
            .map_or(Vec::new(), |r| r.iter().filter_map(|n| n.as_str().map(str::to_string)).collect());
        let lacking = required.iter().filter(|name| !object.contains_key(*name));
        self.removed.extend(lacking.map(|name| format!("{prefix}{name}")));
        if node.get("required").is_some() {
            let kept: Vec<&String> = required.iter().filter(|name| object.contains_key(*name)).collect();
            node["required"] = json!(kept);
        }
        for (name, value) in object.iter().filter(|(name, _)| !known.contains(*name)) {
            node["properties"][name] = infer::json_property(value);
            self.added.push(format!("{prefix}{name}"));
        }
    }

    fn extend_avro(&mut self, node: &mut Value, object: &Map<String, Value>, known: &BTreeSet<String>, prefix: &str) {
        let Some(fields) = node["fields"].as_array_mut() else { return };
        fields.retain(|field| {
            let name = field["name"].as_str().unwrap_or_default();
            let lacking = !object.contains_key(name) && field.get("default").is_none();
            if lacking {
                self.removed.push(format!("{prefix}{name}"));
            }
            !lacking
        });
        for (name, value) in object.iter().filter(|(name, _)| !known.contains(*name)) {
            fields.push(infer::avro_optional_field(name, value, self.names, AvroEncoding::Json));
            self.added.push(format!("{prefix}{name}"));
        }
    }
}

/// The names of every named Avro type in `schema`, so inferred records do not reuse one.
fn avro_names(schema: &Value, names: &mut BTreeSet<String>, depth: usize) {
    if depth > limits::SCHEMA_NESTING_DEPTH_MAX {
        return;
    }
    match schema {
        Value::Object(object) => {
            let named = matches!(object.get("type").and_then(Value::as_str), Some("record" | "enum" | "fixed"));
            if let (true, Some(name)) = (named, object.get("name").and_then(Value::as_str)) {
                names.insert(name.rsplit('.').next().unwrap_or(name).to_string());
            }
            object.values().for_each(|value| avro_names(value, names, depth + 1));
        }
        Value::Array(items) => items.iter().for_each(|value| avro_names(value, names, depth + 1)),
        _ => {}
    }
}

/// Validates `object` against the proposal and retypes, one at a time, the fields the
/// violations point at (bounded by the number of fields plus one).
fn retype_mismatches(
    schema_type: SchemaType,
    proposal: &mut Proposal,
    object: &Map<String, Value>,
) -> Result<(), String> {
    let payload = Value::Object(object.clone());
    for _ in 0..=limits::SCHEMA_EVOLUTION_FIELDS_MAX {
        let text = proposal.schema.to_string();
        let parsed = format::parse(schema_type, &text, &[]).map_err(|error| error.to_string())?;
        let Err(violation) = parsed.validate_json(&payload) else { return Ok(()) };
        let target = retype_target(schema_type, &proposal.schema, object, &field_path(&violation.path));
        let Some(target) = target else { return Err(violation.to_string()) };
        let dotted = target.join(".");
        if proposal.changed.contains(&dotted) || proposal.added.contains(&dotted) {
            return Err(violation.to_string());
        }
        retype(schema_type, &mut proposal.schema, &target, object);
        proposal.changed.push(dotted);
    }
    Err("the payload does not fit the schema".into())
}

/// The field to retype for a violation at `path`: the deepest one along it that the schema
/// and the payload both nest (a field inside an array is retyped as the whole array field).
fn retype_target(
    schema_type: SchemaType,
    schema: &Value,
    object: &Map<String, Value>,
    path: &[String],
) -> Option<Vec<String>> {
    let (mut node, mut object) = (schema, object);
    for (at, name) in path.iter().enumerate() {
        let value = object.get(name)?;
        let deeper = at + 1 < path.len() && at < limits::SCHEMA_EVOLUTION_DEPTH_MAX;
        match (deeper, child(schema_type, node, name), value.as_object()) {
            (true, Some(nested), Some(inner)) => (node, object) = (nested, inner),
            _ => return Some(path[..=at].to_vec()),
        }
    }
    None
}

/// Gives the field at `path` the type its value in `object` implies.
fn retype(schema_type: SchemaType, schema: &mut Value, path: &[String], object: &Map<String, Value>) {
    let Some((field, parents)) = path.split_last() else { return };
    let mut names = BTreeSet::new();
    avro_names(schema, &mut names, 0);
    let mut node = schema;
    let mut values = object;
    for name in parents {
        let (Some(nested), Some(inner)) =
            (child_mut(schema_type, node, name), values.get(name).and_then(Value::as_object))
        else {
            return;
        };
        (node, values) = (nested, inner);
    }
    let Some(value) = values.get(field) else { return };
    if schema_type == SchemaType::Json {
        node["properties"][field] = infer::json_property(value);
        return;
    }
    let new_type = infer::avro_field_type(field, value, &mut names, AvroEncoding::Json);
    let entry = node["fields"].as_array_mut().and_then(|fields| fields.iter_mut().find(|f| f["name"] == *field));
    if let Some(entry) = entry {
        entry["type"] = new_type;
        entry.as_object_mut().map(|f| f.remove("default"));
    }
}

/// The field names along a violation's path, up to the first array index:
/// `$.a.b` → `[a, b]`, `$["a b"][0].c` → `[a b]`.
fn field_path(path: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = path.strip_prefix('$').unwrap_or_default();
    while !rest.is_empty() {
        if let Some(dotted) = rest.strip_prefix('.') {
            let end = dotted.find(['.', '[']).unwrap_or(dotted.len());
            names.push(dotted[..end].to_string());
            rest = &dotted[end..];
            continue;
        }
        // `["name"]`; an array index (`[0]`) ends the walk.
        let Some(bracketed) = rest.strip_prefix('[').filter(|b| b.starts_with('"')) else { break };
        let mut stream = serde_json::Deserializer::from_str(bracketed).into_iter::<String>();
        let Some(Ok(name)) = stream.next() else { break };
        let Some(after) = bracketed[stream.byte_offset()..].strip_prefix(']') else { break };
        names.push(name);
        rest = after;
    }
    names
}

fn request_for(schema_type: SchemaType, schema: &Value) -> SchemaRequest {
    SchemaRequest {
        schema: schema.to_string(),
        schema_type: Some(schema_type.name().to_string()),
        ..SchemaRequest::default()
    }
}

/// Why a breaking proposal is refused: what it would change and the registry's verdict on it.
fn breaking_report(registry: &Registry, subject: &str, schema_type: SchemaType, proposal: &Proposal) -> String {
    let mut changes = Vec::new();
    if !proposal.changed.is_empty() {
        changes.push(format!("change the type of {}", quoted(&proposal.changed)));
    }
    if !proposal.removed.is_empty() {
        changes.push(format!("remove required {}", quoted(&proposal.removed)));
    }
    let mode = registry.config(Some(subject), true).map(|mode| mode.name()).unwrap_or_default();
    let report = match registry.check(subject, None, &request_for(schema_type, &proposal.schema)) {
        Ok(problems) if problems.is_empty() => format!("the {mode} compatibility check alone would allow it"),
        Ok(problems) => format!("{mode} compatibility report: {}", problems.join("; ")),
        Err(error) => format!("compatibility check failed: {error}"),
    };
    format!("auto-evolution only adds optional fields; this payload would {} ({report})", changes.join(" and "))
}

fn quoted(names: &[String]) -> String {
    let names: Vec<String> = names.iter().map(|name| format!("'{name}'")).collect();
    format!("field{} {}", if names.len() == 1 { "" } else { "s" }, names.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap()
    }

    #[test]
    fn a_new_field_is_added_optional_in_avro() {
        let schema = json!({"type": "record", "name": "Ev", "fields": [{"name": "model", "type": "string"}]});
        let proposal = propose(SchemaType::Avro, &schema, &object(json!({"model": "m", "score": 0.5}))).unwrap();
        assert_eq!(proposal.added, ["score"]);
        assert!(proposal.changed.is_empty() && proposal.removed.is_empty());
        assert_eq!(proposal.schema["fields"][1], json!({"name": "score", "type": ["null", "double"], "default": null}));
    }

    #[test]
    fn a_new_field_is_a_property_but_not_required_in_json_schema() {
        let schema = json!({"type": "object", "properties": {"model": {"type": "string"}}, "required": ["model"]});
        let proposal = propose(SchemaType::Json, &schema, &object(json!({"model": "m", "n": 2}))).unwrap();
        assert_eq!(proposal.added, ["n"]);
        assert_eq!(proposal.schema["properties"]["n"], json!({"type": "integer"}));
        assert_eq!(proposal.schema["required"], json!(["model"]));
    }

    #[test]
    fn type_changes_and_missing_required_fields_are_named() {
        let schema = json!({"type": "record", "name": "Ev", "fields": [
            {"name": "model", "type": "string"}, {"name": "confidence", "type": "double"}]});
        let proposal = propose(SchemaType::Avro, &schema, &object(json!({"confidence": "high"}))).unwrap();
        assert_eq!(proposal.changed, ["confidence"]);
        assert_eq!(proposal.removed, ["model"]);
        let json = json!({"type": "object", "properties": {"c": {"type": "number"}}, "required": ["c"]});
        let proposal = propose(SchemaType::Json, &json, &object(json!({"c": "high"}))).unwrap();
        assert_eq!(
            (proposal.changed, proposal.schema["properties"]["c"].clone()),
            (vec!["c".to_string()], json!({"type": "string"}))
        );
    }

    #[test]
    fn too_many_new_fields_are_refused() {
        let schema = json!({"type": "object", "properties": {}});
        let many: Map<String, Value> =
            (0..=limits::SCHEMA_EVOLUTION_FIELDS_MAX).map(|i| (format!("k{i}"), json!(i))).collect();
        assert!(propose(SchemaType::Json, &schema, &many).unwrap_err().contains("new fields"));
    }

    fn avro_with_fields(count: usize) -> Value {
        let fields: Vec<Value> =
            (0..count).map(|i| json!({"name": format!("k{i}"), "type": ["null", "long"], "default": null})).collect();
        json!({"type": "record", "name": "Ev", "fields": fields})
    }

    #[test]
    fn the_rate_counts_registrations_the_registry_kept_so_a_restart_does_not_reset_it() {
        let registry = Registry::in_memory();
        let max = limits::SCHEMA_EVOLUTIONS_PER_STREAM_PER_MINUTE_MAX;
        for count in 1..max {
            registry.register("rate", &request_for(SchemaType::Avro, &avro_with_fields(count))).unwrap();
        }
        let attempt = |stream: &str, field: &str| {
            let (version, id) = registry.resolve_id("rate", None).unwrap();
            let mut evolver = Evolver::new(stream, &Weak::new(), &registry, id).unwrap();
            let payload = object(json!({ field: 1 }));
            evolver.attempt(&registry, ("rate", version, id), &payload, false)
        };
        assert!(matches!(attempt("RATE-A", "one_more"), Outcome::Evolved(..)), "{max} registrations are allowed");
        // A stream this process never saw evolve, as after a restart: the registry's record counts.
        let refused = attempt("RATE-B", "another");
        assert!(matches!(&refused, Outcome::Refused(reason) if reason.contains("limit reached")), "{refused:?}");
    }

    #[test]
    fn violation_paths_name_their_fields_up_to_an_array_index() {
        assert_eq!(field_path("$.confidence"), ["confidence"]);
        assert_eq!(field_path("$.user.email"), ["user", "email"]);
        assert_eq!(field_path("$[\"a b\"][0].c"), ["a b"]);
        assert_eq!(field_path("$.a[\"x.y\"].b"), ["a", "x.y", "b"]);
        assert!(field_path("$").is_empty());
    }

    fn json_user() -> Value {
        json!({"type": "object", "required": ["user"], "properties": {
            "user": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}}})
    }

    fn avro_user(nullable: bool) -> Value {
        let user = json!({"type": "record", "name": "User", "fields": [{"name": "id", "type": "long"}]});
        let user = if nullable { json!(["null", user]) } else { user };
        json!({"type": "record", "name": "Ev", "fields": [{"name": "user", "type": user}]})
    }

    #[test]
    fn a_new_nested_field_is_added_optional_where_it_belongs() {
        let payload = object(json!({"user": {"id": 1, "locale": "fr"}}));
        let proposal = propose(SchemaType::Json, &json_user(), &payload).unwrap();
        assert_eq!((proposal.added.as_slice(), proposal.changed.len()), (&["user.locale".to_string()][..], 0));
        assert_eq!(proposal.schema["properties"]["user"]["properties"]["locale"], json!({"type": "string"}));
        assert_eq!(proposal.schema["properties"]["user"]["required"], json!(["id"]), "not required");
        for nullable in [false, true] {
            let proposal = propose(SchemaType::Avro, &avro_user(nullable), &payload).unwrap();
            assert_eq!(proposal.added, ["user.locale"], "nullable: {nullable}");
            let user = &proposal.schema["fields"][0]["type"];
            let record = if nullable { &user[1] } else { user };
            assert_eq!(record["fields"][1], json!({"name": "locale", "type": ["null", "string"], "default": null}));
        }
    }

    #[test]
    fn a_nested_type_change_or_missing_field_is_named_by_its_path() {
        let retyped = object(json!({"user": {"id": "u-1"}}));
        assert_eq!(propose(SchemaType::Json, &json_user(), &retyped).unwrap().changed, ["user.id"]);
        assert_eq!(propose(SchemaType::Avro, &avro_user(false), &retyped).unwrap().changed, ["user.id"]);
        let lacking = object(json!({"user": {"locale": "fr"}}));
        let proposal = propose(SchemaType::Avro, &avro_user(true), &lacking).unwrap();
        assert_eq!((proposal.added, proposal.removed), (vec!["user.locale".to_string()], vec!["user.id".to_string()]));
    }

    #[test]
    fn nested_new_fields_are_noticed_down_to_the_depth_bound() {
        let max = limits::SCHEMA_EVOLUTION_DEPTH_MAX;
        let nest = |depth: usize, leaf: Value| {
            (0..depth).fold(leaf, |inner, _| json!({"type": "object", "properties": {"n": inner}}))
        };
        let schema = nest(max + 1, json!({"type": "object", "properties": {}}));
        let known = Known::of(SchemaType::Json, &schema).unwrap();
        let payload = |depth: usize| (0..depth).fold(json!({"new": 1}), |inner, _| json!({"n": inner}));
        assert!(known.lacks_any_of(&object(payload(max))));
        assert!(!known.lacks_any_of(&object(payload(max + 1))), "deeper than the bound");
        assert!(!known.lacks_any_of(&object(json!({"n": {"n": 1}}))), "a value where an object was is no new field");
        let proposal = propose(SchemaType::Json, &schema, &object(payload(max))).unwrap();
        assert_eq!(proposal.added, [format!("{}new", "n.".repeat(max))]);
        assert!(propose(SchemaType::Json, &schema, &object(payload(max + 1))).unwrap().added.is_empty());
    }
}
