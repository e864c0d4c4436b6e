//! L4 auto-evolution: a stream with `semaq.evolve: auto`, bound to a JSON Schema or Avro subject
//! (latest version), widens its schema from what it observes.
//!
//! A JSON payload with fields the schema does not declare, or that fails validation, is turned
//! into a *proposal*: the schema plus each new field, typed by the same inference as
//! `semaq schema infer` ([`super::infer`]) and optional (Avro: nullable, default null). New
//! fields are found at the top level, inside nested objects (JSON Schema `properties`) and
//! records (Avro, inline or referenced by name, alone or in a `["null", T]` union), and in the
//! first [`limits::SCHEMA_EVOLUTION_ARRAY_ITEMS_MAX`] elements of arrays of those, down to
//! [`limits::SCHEMA_EVOLUTION_DEPTH_MAX`] levels, and named by their path (`user.locale`,
//! `items[].price`). A record referenced by name is extended where it is defined, once.
//! When the proposal only adds fields, the registry checks it against the subject's
//! compatibility mode and registers it as a new version; the message is then validated against
//! it and stored, and the caller announces the [`Evolution`] (the broker publishes it on
//! `$SEMAQ.EVENT.SCHEMA.EVOLVED`). Protobuf subjects do not evolve (a stream bound to one cannot
//! set `semaq.evolve: auto`): a field number is a promise a person makes.
//!
//! The broker never narrows or breaks a schema on its own: a payload that changes the type of a
//! field or lacks a required one is refused, with what it would change and the registry's
//! compatibility report for that change (a person registers breaking versions). Registration
//! attempts are bounded per stream per minute, and fields per evolution, so random keys cannot grow the
//! registry without bound.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::{json, Map, Value};

use super::error::RegistryError;
use super::format::{self, Parsed};
use super::infer::{self, AvroEncoding};
use super::types::{SchemaRequest, SchemaType};
use super::Registry;
use crate::{limits, lock};

/// Recent evolution attempts per (server, stream), for the per-minute bound. A process-wide map
/// keeps the ingest path's types untouched; it holds at most one entry per stream that evolved.
/// A restart empties it, so the bound also counts the subject's registrations within the window
/// as the registry keeps them (see [`Evolver::within_rate`]).
static RECENT: Mutex<BTreeMap<String, VecDeque<Instant>>> = Mutex::new(BTreeMap::new());

/// What one stream's evolution needs, resolved with its schema once per ingest batch.
#[derive(Debug)]
pub struct Evolver {
    stream: String,
    /// The id of the server the stream runs on: the rate bound is per server and stream.
    server: String,
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

/// The result of one attempt: what the payload's validation goes on with.
#[derive(Debug)]
pub enum Outcome {
    /// Nothing to evolve; the current verdict stands.
    Unchanged,
    /// A new version was registered: (version, id, parsed).
    Evolved(u32, u32, Arc<Parsed>),
    /// Refused, with the reason (the compatibility report when there is one).
    Refused(String),
}

/// A version auto-evolution registered, for the caller to announce.
#[derive(Debug, Clone, PartialEq)]
pub struct Evolution {
    /// The stream whose payload evolved the schema.
    pub stream: String,
    /// The subject that has a new version.
    pub subject: String,
    /// The subject's schema type.
    pub schema_type: SchemaType,
    /// The version the stream was bound to.
    pub old_version: u32,
    /// That version's global id.
    pub old_id: u32,
    /// The version registered.
    pub new_version: u32,
    /// Its global id.
    pub new_id: u32,
    /// The fields added, by path (`user.locale`, `items[].price`).
    pub added: Vec<String>,
}

impl Evolution {
    /// The event body announcing it; `time` (RFC 3339) comes from the caller, whose clock it is.
    pub fn event(&self, time: &str) -> Value {
        json!({
            "stream": self.stream,
            "subject": self.subject,
            "schema_type": self.schema_type.name(),
            "old_version": self.old_version,
            "old_id": self.old_id,
            "new_version": self.new_version,
            "new_id": self.new_id,
            "added": self.added,
            "time": time,
        })
    }
}

impl Evolver {
    /// The evolver of a stream whose metadata says `semaq.evolve: auto`, bound to schema `id`,
    /// on the server with id `server`.
    pub fn new(stream: &str, server: &str, registry: &Registry, id: u32) -> Option<Self> {
        let stored = registry.schema_by_id(id).ok()?;
        let schema: Value = serde_json::from_str(&stored.schema).ok()?;
        let known = Known::of(stored.schema_type, &schema)?;
        Some(Self {
            stream: stream.to_string(),
            server: server.to_string(),
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
    /// With the outcome comes, when a version was registered, the evolution to announce.
    pub fn attempt(
        &mut self,
        registry: &Registry,
        bound: (&str, u32, u32),
        object: &Map<String, Value>,
        valid: bool,
    ) -> (Outcome, Option<Evolution>) {
        match self.evolve(registry, bound, object, valid) {
            Ok((evolution, parsed)) => {
                (Outcome::Evolved(evolution.new_version, evolution.new_id, parsed), Some(evolution))
            }
            Err(outcome) => (outcome, None),
        }
    }

    /// [`Evolver::attempt`]; every outcome but a registration is an `Err`.
    fn evolve(
        &mut self,
        registry: &Registry,
        (subject, version, id): (&str, u32, u32),
        object: &Map<String, Value>,
        valid: bool,
    ) -> Result<(Evolution, Arc<Parsed>), Outcome> {
        let proposal = match propose(self.schema_type, &self.schema, object) {
            Ok(proposal) => proposal,
            Err(reason) if valid => return Err(self.unchanged_because(&reason)),
            Err(reason) => return Err(Outcome::Refused(format!("auto-evolution cannot fit this payload: {reason}"))),
        };
        if !proposal.changed.is_empty() || !proposal.removed.is_empty() {
            return Err(Outcome::Refused(breaking_report(registry, subject, self.schema_type, &proposal)));
        }
        if proposal.added.is_empty() {
            return Err(Outcome::Unchanged);
        }
        if !self.within_rate(registry, subject) {
            let reason = format!(
                "auto-evolution limit reached: at most {} schema registrations per stream per minute",
                limits::SCHEMA_EVOLUTIONS_PER_STREAM_PER_MINUTE_MAX
            );
            return Err(if valid { self.unchanged_because(&reason) } else { Outcome::Refused(reason) });
        }
        let request = request_for(self.schema_type, &proposal.schema);
        let new_id = match registry.register(subject, &request) {
            Ok(new_id) => new_id,
            Err(RegistryError::Incompatible { messages, .. }) if !valid => {
                let mode = registry.config(Some(subject), true).map(|mode| mode.name()).unwrap_or_default();
                return Err(Outcome::Refused(format!(
                    "auto-evolution adding {} is refused by the subject's {mode} compatibility: {}",
                    quoted(&proposal.added),
                    messages.join("; ")
                )));
            }
            Err(error) if valid => return Err(self.unchanged_because(&error.to_string())),
            Err(error) => return Err(Outcome::Refused(format!("auto-evolution failed: {error}"))),
        };
        let Some(new_version) = registry.version_of_id(subject, new_id) else {
            return Err(Outcome::Refused(format!(
                "auto-evolution registered schema id {new_id} but cannot find its version"
            )));
        };
        let parsed =
            registry.parsed(new_id).map_err(|error| Outcome::Refused(format!("auto-evolution failed: {error}")))?;
        tracing::info!(stream = %self.stream, %subject, old_version = version, version = new_version, added = ?proposal.added, "schema evolved");
        let evolution = Evolution {
            stream: self.stream.clone(),
            subject: subject.to_string(),
            schema_type: self.schema_type,
            old_version: version,
            old_id: id,
            new_version,
            new_id,
            added: proposal.added,
        };
        self.known = Known::of(self.schema_type, &proposal.schema).unwrap_or_default();
        self.schema = proposal.schema;
        Ok((evolution, parsed))
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
        let key = format!("{}/{}", self.server, self.stream);
        let now = Instant::now();
        let window = limits::SCHEMA_EVOLUTION_RATE_WINDOW;
        let window_ms = u64::try_from(window.as_millis()).unwrap_or(u64::MAX);
        let registered = registry.registrations_since(subject, crate::store::now_ms().saturating_sub(window_ms));
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

/// Where the fields of a field's value are declared: the JSON pointer of an extendable node in
/// the schema, and whether the value is an array of such objects rather than one.
#[derive(Debug, Clone, PartialEq)]
struct Link {
    at: String,
    array: bool,
}

/// One step of a field's path: a field by name, or an element of an array of objects (shown as
/// `[]`: `items[].price` is the `price` of any element of `items`).
#[derive(Debug, Clone, PartialEq)]
enum Step {
    Field(String),
    Item(usize),
}

/// A path as fields are named in proposals, events and refusals: `user.id`, `items[].price`.
fn shown(path: &[Step]) -> String {
    let mut text = String::new();
    for step in path {
        match step {
            Step::Field(name) if text.is_empty() => text.push_str(name),
            Step::Field(name) => text.extend(['.'.to_string(), name.clone()]),
            Step::Item(_) => text.push_str("[]"),
        }
    }
    text
}

/// A schema with the named Avro types it defines, so a field typed by a record's name leads to
/// the ONE definition of that record (extending it extends every field that names it).
struct Tree<'a> {
    schema_type: SchemaType,
    schema: &'a Value,
    /// Full name of each named Avro type → JSON pointer of its definition (the first one).
    defined: BTreeMap<String, String>,
    /// JSON pointer of each Avro record → its namespace, which its fields' short names resolve in.
    namespaces: BTreeMap<String, String>,
}

impl<'a> Tree<'a> {
    fn of(schema_type: SchemaType, schema: &'a Value) -> Self {
        let mut tree = Self { schema_type, schema, defined: BTreeMap::new(), namespaces: BTreeMap::new() };
        if schema_type == SchemaType::Avro {
            tree.collect(schema, String::new(), "", 0);
        }
        tree
    }

    /// Records where each named type is defined, with Avro's namespace rules: a dotted name is
    /// full, else the type's `namespace`, else the enclosing named type's namespace applies.
    fn collect(&mut self, value: &Value, at: String, namespace: &str, depth: usize) {
        if depth > limits::SCHEMA_NESTING_DEPTH_MAX {
            return;
        }
        match value {
            Value::Object(object) => {
                let named = matches!(object.get("type").and_then(Value::as_str), Some("record" | "enum" | "fixed"));
                let mut inner = namespace.to_string();
                if let (true, Some(name)) = (named, object.get("name").and_then(Value::as_str)) {
                    let declared = object.get("namespace").and_then(Value::as_str).unwrap_or(namespace);
                    let full = match name.rsplit_once('.') {
                        Some(_) => name.to_string(),
                        None if declared.is_empty() => name.to_string(),
                        None => format!("{declared}.{name}"),
                    };
                    inner = full.rsplit_once('.').map_or(String::new(), |(space, _)| space.to_string());
                    self.defined.entry(full).or_insert_with(|| at.clone());
                    self.namespaces.insert(at.clone(), inner.clone());
                }
                for (key, value) in object {
                    self.collect(value, format!("{at}/{}", escaped(key)), &inner, depth + 1);
                }
            }
            Value::Array(items) => {
                for (index, value) in items.iter().enumerate() {
                    self.collect(value, format!("{at}/{index}"), namespace, depth + 1);
                }
            }
            _ => {}
        }
    }

    /// The node at pointer `at` when it is extendable.
    fn node(&self, at: &str) -> Option<&'a Value> {
        let node = self.schema.pointer(at)?;
        field_names(self.schema_type, node).is_some().then_some(node)
    }

    /// Where the fields of field `name` of the node at `at` are declared, when its value is an
    /// object (JSON Schema object, Avro record inline or by name, alone or beside `"null"`) or an
    /// array of them.
    fn link(&self, at: &str, name: &str) -> Option<Link> {
        let node = self.node(at)?;
        let (mut pointer, mut field_type) = match self.schema_type {
            SchemaType::Avro => {
                let fields = node["fields"].as_array()?;
                let index = fields.iter().position(|f| f["name"] == name)?;
                (format!("{at}/fields/{index}/type"), &fields[index]["type"])
            }
            _ => (format!("{at}/properties/{}", escaped(name)), node.get("properties")?.get(name)?),
        };
        (pointer, field_type) = self.without_null(pointer, field_type);
        let array = field_type["type"] == "array" && field_type.get("items").is_some();
        if array {
            (pointer, field_type) = self.without_null(format!("{pointer}/items"), &field_type["items"]);
        }
        if let (SchemaType::Avro, Some(reference)) = (self.schema_type, field_type.as_str()) {
            pointer = self.definition(reference, self.namespaces.get(at).map_or("", String::as_str))?.clone();
        }
        self.node(&pointer).map(|_| Link { at: pointer, array })
    }

    /// An Avro `["null", T]` union's `T` (with its pointer); anything else as it is.
    fn without_null(&self, pointer: String, field_type: &'a Value) -> (String, &'a Value) {
        let Some(branches) = field_type.as_array().filter(|_| self.schema_type == SchemaType::Avro) else {
            return (pointer, field_type);
        };
        match branches.as_slice() {
            [null, other] if *null == "null" => (format!("{pointer}/1"), other),
            [other, null] if *null == "null" => (format!("{pointer}/0"), other),
            _ => (pointer, field_type),
        }
    }

    /// Where the type `reference` names, written in `namespace`, is defined.
    fn definition(&self, reference: &str, namespace: &str) -> Option<&String> {
        if reference.contains('.') || namespace.is_empty() {
            return self.defined.get(reference);
        }
        self.defined.get(&format!("{namespace}.{reference}")).or_else(|| self.defined.get(reference))
    }
}

/// A JSON pointer token for `key` (RFC 6901).
fn escaped(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// The objects of a payload value: the value itself, or (`array`) the first
/// [`limits::SCHEMA_EVOLUTION_ARRAY_ITEMS_MAX`] elements of an array (those that are objects).
fn objects_of(array: bool, value: &Value) -> impl Iterator<Item = &Map<String, Value>> {
    let single = if array { None } else { value.as_object() };
    let items = if array { value.as_array().map(Vec::as_slice) } else { None };
    let items = items.unwrap_or_default().iter().take(limits::SCHEMA_EVOLUTION_ARRAY_ITEMS_MAX);
    single.into_iter().chain(items.filter_map(Value::as_object))
}

/// The fields a schema declares, as a graph: each node's fields, and for those whose values are
/// objects or arrays of objects with declared fields, the node declaring them. A named Avro
/// record is one node however many fields name it (a recursive one links to itself).
#[derive(Debug, Default)]
pub struct Known {
    nodes: Vec<BTreeMap<String, Option<KnownLink>>>,
}

#[derive(Debug, Clone, Copy)]
struct KnownLink {
    node: usize,
    array: bool,
}

impl Known {
    /// The fields of `schema` (an extendable node) and of the nodes below it.
    pub fn of(schema_type: SchemaType, schema: &Value) -> Option<Self> {
        let tree = Tree::of(schema_type, schema);
        tree.node("")?;
        let mut known = Self::default();
        known.add(&tree, "", &mut BTreeMap::new(), 0);
        Some(known)
    }

    /// Adds the node at pointer `at` (once: `seen` maps pointers to nodes) and returns its index.
    fn add(&mut self, tree: &Tree, at: &str, seen: &mut BTreeMap<String, usize>, depth: usize) -> usize {
        if let Some(index) = seen.get(at) {
            return *index;
        }
        let index = self.nodes.len();
        self.nodes.push(BTreeMap::new());
        seen.insert(at.to_string(), index);
        let names: Vec<String> = tree
            .node(at)
            .and_then(|node| field_names(tree.schema_type, node))
            .map_or_else(Vec::new, |names| names.map(str::to_string).collect());
        for name in names {
            let link = (depth < limits::SCHEMA_NESTING_DEPTH_MAX).then(|| tree.link(at, &name)).flatten();
            let link =
                link.map(|link| KnownLink { node: self.add(tree, &link.at, seen, depth + 1), array: link.array });
            self.nodes[index].insert(name, link);
        }
        index
    }

    /// Whether `object` has a field, down to [`limits::SCHEMA_EVOLUTION_DEPTH_MAX`] levels (in
    /// nested objects and the first elements of arrays of objects), the schema does not declare.
    pub fn lacks_any_of(&self, object: &Map<String, Value>) -> bool {
        self.lacks(0, object, 0)
    }

    fn lacks(&self, node: usize, object: &Map<String, Value>, depth: usize) -> bool {
        let Some(fields) = self.nodes.get(node) else { return false };
        object.iter().any(|(name, value)| match fields.get(name) {
            None => true,
            Some(Some(link)) if depth < limits::SCHEMA_EVOLUTION_DEPTH_MAX => {
                objects_of(link.array, value).any(|inner| self.lacks(link.node, inner, depth + 1))
            }
            Some(_) => false,
        })
    }
}

/// The schema `object` implies: new fields added (optional), at the top level or inside nested
/// objects, records and array items, fields it gives another type changed to that type, required
/// fields it lacks removed. Fields are named by their path (`user.locale`, `items[].price`).
pub fn propose(schema_type: SchemaType, schema: &Value, object: &Map<String, Value>) -> Result<Proposal, String> {
    if field_names(schema_type, schema).is_none() {
        return Err("the schema is not a record or an object schema".into());
    }
    let mut proposal = Proposal { schema: schema.clone(), ..Proposal::default() };
    let mut taken = BTreeSet::new();
    avro_names(schema, &mut taken, 0);
    let tree = Tree::of(schema_type, schema);
    let mut node = Node {
        tree: &tree,
        taken: &mut taken,
        added: &mut proposal.added,
        removed: &mut proposal.removed,
        dropped: Vec::new(),
    };
    node.extend(&mut proposal.schema, "", object, "", 0)?;
    node.drop_lacking(&mut proposal.schema);
    retype_mismatches(schema_type, &mut proposal, object)?;
    Ok(proposal)
}

/// What [`propose`] carries down the nested nodes.
struct Node<'a> {
    /// The schema as it was, whose pointers stay valid in the proposal: new fields are appended,
    /// and the Avro fields a payload lacks are only dropped at the end ([`Node::drop_lacking`]).
    tree: &'a Tree<'a>,
    /// Named Avro types taken, so inferred records do not reuse one.
    taken: &'a mut BTreeSet<String>,
    added: &'a mut Vec<String>,
    removed: &'a mut Vec<String>,
    /// Avro fields to drop: (pointer of the record, field name).
    dropped: Vec<(String, String)>,
}

impl Node<'_> {
    /// Adds `object`'s new fields to the node at pointer `at` and drops the required ones it
    /// lacks, then does the same in each nested node the payload fills with an object (or an
    /// array of objects: each of its first elements).
    /// Refuses more than [`limits::SCHEMA_EVOLUTION_FIELDS_MAX`] new fields before typing them.
    fn extend(
        &mut self,
        schema: &mut Value,
        at: &str,
        object: &Map<String, Value>,
        prefix: &str,
        depth: usize,
    ) -> Result<(), String> {
        let Some(node) = schema.pointer_mut(at) else { return Ok(()) };
        let schema_type = self.tree.schema_type;
        let known: BTreeSet<String> =
            field_names(schema_type, node).map_or_else(BTreeSet::new, |names| names.map(str::to_string).collect());
        let new_fields = self.added.len() + object.keys().filter(|name| !known.contains(*name)).count();
        if new_fields > limits::SCHEMA_EVOLUTION_FIELDS_MAX {
            return Err(format!(
                "{new_fields} new fields, more than the {} one evolution may add",
                limits::SCHEMA_EVOLUTION_FIELDS_MAX
            ));
        }
        match schema_type {
            SchemaType::Avro => self.extend_avro(node, at, object, &known, prefix),
            _ => self.extend_json(node, object, &known, prefix),
        }
        if depth >= limits::SCHEMA_EVOLUTION_DEPTH_MAX {
            return Ok(());
        }
        for (name, value) in object.iter().filter(|(name, _)| known.contains(*name)) {
            let Some(link) = self.tree.link(at, name) else { continue };
            let inner_prefix = format!("{prefix}{name}{}.", if link.array { "[]" } else { "" });
            for inner in objects_of(link.array, value) {
                self.extend(schema, &link.at, inner, &inner_prefix, depth + 1)?;
            }
        }
        Ok(())
    }

    fn note_removed(&mut self, path: String) {
        if !self.removed.contains(&path) {
            self.removed.push(path);
        }
    }

    fn extend_json(&mut self, node: &mut Value, object: &Map<String, Value>, known: &BTreeSet<String>, prefix: &str) {
        let required: Vec<String> = node["required"]
            .as_array()
            .map_or(Vec::new(), |r| r.iter().filter_map(|n| n.as_str().map(str::to_string)).collect());
        for name in required.iter().filter(|name| !object.contains_key(*name)) {
            self.note_removed(format!("{prefix}{name}"));
        }
        if node.get("required").is_some() {
            let kept: Vec<&String> = required.iter().filter(|name| object.contains_key(*name)).collect();
            node["required"] = json!(kept);
        }
        for (name, value) in object.iter().filter(|(name, _)| !known.contains(*name)) {
            node["properties"][name] = infer::json_property(value);
            self.added.push(format!("{prefix}{name}"));
        }
    }

    fn extend_avro(
        &mut self,
        node: &mut Value,
        at: &str,
        object: &Map<String, Value>,
        known: &BTreeSet<String>,
        prefix: &str,
    ) {
        let Some(fields) = node["fields"].as_array_mut() else { return };
        let lacking: Vec<String> = fields
            .iter()
            .filter(|field| field.get("default").is_none())
            .filter_map(|field| field["name"].as_str())
            .filter(|name| !object.contains_key(*name))
            .map(str::to_string)
            .collect();
        for (name, value) in object.iter().filter(|(name, _)| !known.contains(*name)) {
            fields.push(infer::avro_optional_field(name, value, self.taken, AvroEncoding::Json));
            self.added.push(format!("{prefix}{name}"));
        }
        for name in lacking {
            self.note_removed(format!("{prefix}{name}"));
            self.dropped.push((at.to_string(), name));
        }
    }

    /// Drops the Avro fields the payload lacks, deepest records first, so that removing a field
    /// does not move a record whose turn has not come yet.
    fn drop_lacking(&mut self, schema: &mut Value) {
        self.dropped.sort_by_key(|(at, _)| std::cmp::Reverse(at.len()));
        for (at, name) in &self.dropped {
            if let Some(fields) = schema.pointer_mut(at).and_then(|node| node["fields"].as_array_mut()) {
                fields.retain(|field| field["name"] != name.as_str());
            }
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
        let tree = Tree::of(schema_type, &proposal.schema);
        let Some(target) = retype_target(&tree, object, &field_path(&violation.path)) else {
            return Err(violation.to_string());
        };
        let name = shown(&target);
        if proposal.changed.contains(&name) {
            // Array elements giving one field different types: the change is reported as it is.
            return Ok(());
        }
        if proposal.added.contains(&name) {
            return Err(violation.to_string());
        }
        retype(schema_type, &mut proposal.schema, &target, object);
        proposal.changed.push(name);
    }
    Err("the payload does not fit the schema".into())
}

/// The field to retype for a violation at `path`: the deepest one along it that the schema
/// and the payload both nest (through objects, records and elements of arrays of them; a field
/// holding anything else is retyped whole).
fn retype_target(tree: &Tree, object: &Map<String, Value>, path: &[Step]) -> Option<Vec<Step>> {
    let (mut at, mut values, mut target, mut depth) = (String::new(), object, Vec::new(), 0);
    let mut steps = path.iter().peekable();
    while let Some(step) = steps.next() {
        let Step::Field(name) = step else { return None };
        let value = values.get(name)?;
        target.push(step.clone());
        let link = (depth < limits::SCHEMA_EVOLUTION_DEPTH_MAX).then(|| tree.link(&at, name)).flatten();
        let inner = match (link, steps.peek()) {
            (Some(link), Some(Step::Item(index))) if link.array => {
                value.get(*index).and_then(Value::as_object).map(|inner| (link, inner, Some(*index)))
            }
            (Some(link), Some(Step::Field(_))) if !link.array => value.as_object().map(|inner| (link, inner, None)),
            _ => None,
        };
        let Some((link, inner, index)) = inner else { return Some(target) };
        if let Some(index) = index {
            steps.next();
            target.push(Step::Item(index));
        }
        (at, values, depth) = (link.at, inner, depth + 1);
    }
    None
}

/// Gives the field at `path` (from [`retype_target`]) the type its value in `object` implies.
fn retype(schema_type: SchemaType, schema: &mut Value, path: &[Step], object: &Map<String, Value>) {
    let Some((Step::Field(field), parents)) = path.split_last() else { return };
    let mut names = BTreeSet::new();
    avro_names(schema, &mut names, 0);
    let (at, value) = {
        let tree = Tree::of(schema_type, schema);
        let (mut at, mut values) = (String::new(), object);
        let mut steps = parents.iter().peekable();
        while let Some(Step::Field(name)) = steps.next() {
            let Some(link) = tree.link(&at, name) else { return };
            let mut value = values.get(name);
            if let Some(Step::Item(index)) = steps.peek() {
                value = value.and_then(|items| items.get(*index));
                steps.next();
            }
            let Some(inner) = value.and_then(Value::as_object) else { return };
            (at, values) = (link.at, inner);
        }
        let Some(value) = values.get(field) else { return };
        (at, value)
    };
    let Some(node) = schema.pointer_mut(&at) else { return };
    if schema_type == SchemaType::Json {
        node["properties"][field] = infer::json_property(value);
        return;
    }
    let entry = node["fields"].as_array_mut().and_then(|fields| fields.iter_mut().find(|f| f["name"] == *field));
    let Some(entry) = entry else { return };
    // An optional field (default null) stays optional: other array elements may lack it.
    if entry.get("default") == Some(&Value::Null) {
        entry["type"] = infer::avro_optional_field(field, value, &mut names, AvroEncoding::Json)["type"].take();
    } else {
        entry["type"] = infer::avro_field_type(field, value, &mut names, AvroEncoding::Json);
        entry.as_object_mut().map(|f| f.remove("default"));
    }
}

/// The steps of a violation's path: `$.a.b` → `[a, b]`, `$["a b"][0].c` → `[a b, [0], c]`.
fn field_path(path: &str) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut rest = path.strip_prefix('$').unwrap_or_default();
    while !rest.is_empty() {
        if let Some(dotted) = rest.strip_prefix('.') {
            let end = dotted.find(['.', '[']).unwrap_or(dotted.len());
            steps.push(Step::Field(dotted[..end].to_string()));
            rest = &dotted[end..];
            continue;
        }
        let Some(bracketed) = rest.strip_prefix('[') else { break };
        if let Some((index, after)) = bracketed.split_once(']').filter(|(index, _)| !index.starts_with('"')) {
            let Ok(index) = index.parse() else { break };
            steps.push(Step::Item(index));
            rest = after;
            continue;
        }
        let mut stream = serde_json::Deserializer::from_str(bracketed).into_iter::<String>();
        let Some(Ok(name)) = stream.next() else { break };
        let Some(after) = bracketed[stream.byte_offset()..].strip_prefix(']') else { break };
        steps.push(Step::Field(name));
        rest = after;
    }
    steps
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
            let mut evolver = Evolver::new(stream, "", &registry, id).unwrap();
            let payload = object(json!({ field: 1 }));
            evolver.attempt(&registry, ("rate", version, id), &payload, false).0
        };
        assert!(matches!(attempt("RATE-A", "one_more"), Outcome::Evolved(..)), "{max} registrations are allowed");
        // A stream this process never saw evolve, as after a restart: the registry's record counts.
        let refused = attempt("RATE-B", "another");
        assert!(matches!(&refused, Outcome::Refused(reason) if reason.contains("limit reached")), "{refused:?}");
    }

    #[test]
    fn violation_paths_name_their_fields_and_array_elements() {
        let field = |name: &str| Step::Field(name.to_string());
        assert_eq!(field_path("$.confidence"), [field("confidence")]);
        assert_eq!(field_path("$.user.email"), [field("user"), field("email")]);
        assert_eq!(field_path("$[\"a b\"][0].c"), [field("a b"), Step::Item(0), field("c")]);
        assert_eq!(field_path("$.a[\"x.y\"].b"), [field("a"), field("x.y"), field("b")]);
        assert_eq!(shown(&field_path("$.items[12].price")), "items[].price");
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

    fn json_order() -> Value {
        let line = json!({"type": "object", "additionalProperties": false, "required": ["sku"],
            "properties": {"sku": {"type": "string"}, "price": {"type": "number"}}});
        json!({"type": "object", "properties": {"items": {"type": "array", "items": line}}})
    }

    fn avro_order(nullable: bool) -> Value {
        let line = json!({"type": "record", "name": "Line", "fields": [
            {"name": "sku", "type": "string"}, {"name": "price", "type": ["null", "double"], "default": null}]});
        let items = json!({"type": "array", "items": line});
        let items = if nullable { json!(["null", items]) } else { items };
        json!({"type": "record", "name": "Order", "fields": [{"name": "items", "type": items}]})
    }

    #[test]
    fn a_new_field_in_any_array_element_evolves_the_item_schema() {
        let payload = object(json!({"items": [{"sku": "a"}, {"sku": "b", "qty": 2}]}));
        let proposal = propose(SchemaType::Json, &json_order(), &payload).unwrap();
        assert_eq!((proposal.added.as_slice(), proposal.changed.len()), (&["items[].qty".to_string()][..], 0));
        let line = &proposal.schema["properties"]["items"]["items"];
        assert_eq!((&line["properties"]["qty"], &line["required"]), (&json!({"type": "integer"}), &json!(["sku"])));
        for nullable in [false, true] {
            let proposal = propose(SchemaType::Avro, &avro_order(nullable), &payload).unwrap();
            assert_eq!(proposal.added, ["items[].qty"], "nullable: {nullable}");
            let items = &proposal.schema["fields"][0]["type"];
            let line = if nullable { &items[1]["items"] } else { &items["items"] };
            assert_eq!(line["fields"][2], json!({"name": "qty", "type": ["null", "long"], "default": null}));
        }
    }

    #[test]
    fn only_the_first_array_elements_are_looked_at() {
        let max = limits::SCHEMA_EVOLUTION_ARRAY_ITEMS_MAX;
        let items = |new_at: usize| {
            let items: Vec<Value> = (0..=new_at)
                .map(|i| if i == new_at { json!({"sku": "s", "qty": 1}) } else { json!({"sku": "s"}) })
                .collect();
            object(json!({ "items": items }))
        };
        for schema_type in [SchemaType::Json, SchemaType::Avro] {
            let schema = if schema_type == SchemaType::Json { json_order() } else { avro_order(false) };
            let known = Known::of(schema_type, &schema).unwrap();
            assert!(known.lacks_any_of(&items(max - 1)), "{schema_type:?}");
            assert!(!known.lacks_any_of(&items(max)), "{schema_type:?}: beyond the bound");
            assert!(!known.lacks_any_of(&object(json!({"items": "not an array"}))));
        }
    }

    #[test]
    fn a_type_change_inside_array_items_is_named_by_its_path() {
        let retyped = object(json!({"items": [{"sku": "a"}, {"sku": "b", "price": "cheap"}]}));
        let mixed = object(json!({"items": [{"sku": "a", "price": 1.5}, {"sku": "b", "price": "cheap"}]}));
        for (schema_type, schema) in [(SchemaType::Json, json_order()), (SchemaType::Avro, avro_order(true))] {
            for payload in [&retyped, &mixed] {
                let proposal = propose(schema_type, &schema, payload).unwrap();
                assert_eq!(proposal.changed, ["items[].price"], "{schema_type:?} {payload:?}");
            }
        }
        let mixed_new = object(json!({"items": [{"sku": "a", "qty": 1}, {"sku": "b", "qty": "two"}]}));
        assert!(propose(SchemaType::Json, &json_order(), &mixed_new).is_err(), "one new field, two types");
        let lacking = object(json!({"items": [{"sku": "a"}, {"price": 2.0}, {"price": 3.0}]}));
        assert_eq!(propose(SchemaType::Avro, &avro_order(false), &lacking).unwrap().removed, ["items[].sku"]);
    }

    /// `home` defines `semaq.Address`; `work` names it in full, `past` by its short name inside
    /// an array, `next` names the record itself (recursion).
    fn avro_named() -> Value {
        let address = json!({"type": "record", "name": "Address", "fields": [{"name": "city", "type": "string"}]});
        json!({"type": "record", "name": "Person", "namespace": "semaq", "fields": [
            {"name": "home", "type": address},
            {"name": "work", "type": ["null", "semaq.Address"], "default": null},
            {"name": "past", "type": {"type": "array", "items": "Address"}, "default": []},
            {"name": "next", "type": ["null", "Person"], "default": null}]})
    }

    #[test]
    fn a_record_referenced_by_name_evolves_its_one_definition() {
        let home = json!({"city": "Lyon"});
        let cases = [
            (json!({"home": home, "work": {"city": "Paris", "zip": "75001"}}), "work.zip"),
            (json!({"home": home, "past": [{"city": "Nice", "zip": "06000"}]}), "past[].zip"),
            (json!({"home": home, "next": {"home": {"city": "Nantes", "zip": "44000"}}}), "next.home.zip"),
        ];
        for (payload, path) in cases {
            let payload = object(payload);
            assert!(Known::of(SchemaType::Avro, &avro_named()).unwrap().lacks_any_of(&payload), "{path}");
            let proposal = propose(SchemaType::Avro, &avro_named(), &payload).unwrap();
            assert_eq!((proposal.added.as_slice(), proposal.changed.len()), (&[path.to_string()][..], 0));
            let schema = &proposal.schema;
            let zip = json!({"name": "zip", "type": ["null", "string"], "default": null});
            assert_eq!(schema["fields"][0]["type"]["fields"][1], zip, "{path}: added to the definition");
            assert_eq!(schema["fields"][1]["type"], json!(["null", "semaq.Address"]), "{path}: references kept");
            assert!(format::parse(SchemaType::Avro, &schema.to_string(), &[]).is_ok(), "{path}: {schema}");
        }
        let retyped = object(json!({"home": home, "past": [{"city": 75}]}));
        let proposal = propose(SchemaType::Avro, &avro_named(), &retyped).unwrap();
        assert_eq!(proposal.changed, ["past[].city", "home.city"], "one definition: its other uses break too");
        let retyped = object(json!({"home": home, "work": {"city": 75}}));
        assert_eq!(propose(SchemaType::Avro, &avro_named(), &retyped).unwrap().changed[0], "work.city");
        let known = Known::of(SchemaType::Avro, &avro_named()).unwrap();
        assert!(!known.lacks_any_of(&object(json!({"home": home, "past": [home], "next": {"home": home}}))));
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
