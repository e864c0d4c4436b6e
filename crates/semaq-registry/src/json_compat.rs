//! JSON Schema compatibility: every reason a document the writer's schema accepts may be
//! refused by the reader's, with Confluent's rules and change names.
//!
//! - Narrowing is incompatible, widening is not: types (`integer` ⊂ `number`), `enum`/`const`
//!   values, bounds (`minimum`, `maxLength`, `minItems`, ...: added or tightened), `multipleOf`,
//!   `pattern`/`format` added or changed, `uniqueItems` added, `required` (unless the new
//!   property has a `default`), open vs closed content models, `items`/`prefixItems`.
//! - `$ref`s are followed, to the same document, to `definitions`/`$defs`, or to a referenced
//!   schema by its name; a `$ref` that leads back into a pair being compared counts as
//!   compatible (recursive schemas), as in Confluent.
//! - Combinators (`allOf`, `anyOf`, `oneOf`, `not`), Confluent's way: a new `anyOf`/`oneOf` is
//!   compatible when one branch accepts the old schema (SUM_TYPE_EXTENDED); an old `allOf` when
//!   one branch is accepted (PRODUCT_TYPE_NARROWED); two combinators need the same (or a wider)
//!   criterion, no fewer `anyOf`/`oneOf` branches and no more `allOf` ones, and a matching of
//!   compatible branches. Two sound additions: a new `allOf` is compatible when each branch
//!   accepts the old schema, an old `anyOf`/`oneOf` when the new schema accepts each branch.
//!   A schema with a combinator and other keywords is the `allOf` of both, as in Confluent.

use std::collections::HashSet;
use std::sync::LazyLock;

use serde_json::{Map, Value};

use crate::limits;

/// One JSON document: the registered schema or one it refers to, at its base URI.
#[derive(Debug, Clone, PartialEq)]
pub struct Document {
    /// Absolute URI its relative `$ref`s resolve against.
    pub uri: String,
    /// The schema.
    pub root: Value,
}

/// A schema and the documents its references name.
#[derive(Debug, Clone, PartialEq)]
pub struct Documents {
    /// The registered schema.
    pub main: Document,
    /// Referenced schemas, at the URIs their names resolve to.
    pub externals: Vec<Document>,
}

/// Every reason a document valid under `writer` may be invalid under `reader` (empty: compatible).
pub fn incompatibilities(reader: &Documents, writer: &Documents) -> Vec<String> {
    let mut checker = Checker { writer, reader, active: HashSet::new(), steps: 0 };
    let mut found = Vec::new();
    checker.compare(Node::root(writer), Node::root(reader), "#", &mut found, 0);
    if checker.steps > limits::SCHEMA_COMPATIBILITY_STEPS_MAX {
        // Findings made once the budget ran out are artifacts of it: report the one reason.
        found.clear();
        found.push(format!("#: more than {} comparisons {TOO_COMPLEX}", limits::SCHEMA_COMPATIBILITY_STEPS_MAX));
    }
    found
}

const TOO_COMPLEX: &str = "needed to check the schemas (COMPATIBILITY_CHECK_TOO_COMPLEX)";

static TRUE: Value = Value::Bool(true);
static EMPTY: LazyLock<Map<String, Value>> = LazyLock::new(Map::new);

/// `$ref` hops followed in a row before a reference counts as unresolvable.
const REF_HOPS_MAX: usize = 32;

/// A schema inside one of the documents; `part` selects one side of a schema that mixes
/// keywords with combinators (each is compared as a branch of an `allOf`).
#[derive(Debug, Clone, Copy)]
struct Node<'a> {
    doc: usize,
    value: &'a Value,
    part: Part,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Part {
    Whole,
    /// The keywords other than `$ref` and the combinators.
    Rest,
    Ref,
    AllOf,
    AnyOf,
    OneOf,
    Not,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Criterion {
    All,
    Any,
    One,
}

impl Criterion {
    fn name(self) -> &'static str {
        match self {
            Criterion::All => "allOf",
            Criterion::Any => "anyOf",
            Criterion::One => "oneOf",
        }
    }

    fn is_sum(self) -> bool {
        self != Criterion::All
    }
}

/// What a node means for comparing.
enum View<'a> {
    Anything,
    Nothing,
    Plain(&'a Map<String, Value>),
    Combined(Criterion, Vec<Node<'a>>),
    Not(Node<'a>),
    Unresolved(String),
}

const APPLICATORS: [(&str, Part); 5] =
    [("$ref", Part::Ref), ("allOf", Part::AllOf), ("anyOf", Part::AnyOf), ("oneOf", Part::OneOf), ("not", Part::Not)];

/// Keywords that never change what a schema accepts.
fn is_annotation(key: &str) -> bool {
    matches!(
        key,
        "$schema"
            | "$id"
            | "id"
            | "$anchor"
            | "$dynamicAnchor"
            | "$comment"
            | "$defs"
            | "definitions"
            | "title"
            | "description"
            | "default"
            | "examples"
            | "readOnly"
            | "writeOnly"
            | "deprecated"
    ) || key.starts_with("connect.")
}

impl<'a> Node<'a> {
    fn root(documents: &'a Documents) -> Self {
        Node { doc: 0, value: &documents.main.root, part: Part::Whole }
    }

    fn child(self, value: &'a Value) -> Self {
        Node { doc: self.doc, value, part: Part::Whole }
    }

    fn key(self) -> (usize, Part) {
        (self.value as *const Value as usize, self.part)
    }
}

impl Documents {
    fn document(&self, index: usize) -> &Document {
        index.checked_sub(1).and_then(|i| self.externals.get(i)).unwrap_or(&self.main)
    }

    /// The node `reference` (a `$ref` in document `from`) points at.
    fn resolve(&self, from: usize, reference: &str) -> Option<Node<'_>> {
        let (target, fragment) = reference.split_once('#').unwrap_or((reference, ""));
        let doc = if target.is_empty() {
            from
        } else {
            let uri = super::json_schema::absolute(&self.document(from).uri, target)?;
            if uri == self.main.uri {
                0
            } else {
                1 + self.externals.iter().position(|e| e.uri == uri)?
            }
        };
        let root = &self.document(doc).root;
        let value = if fragment.is_empty() {
            root
        } else if fragment.starts_with('/') {
            root.pointer(&percent_decode(fragment))?
        } else {
            find_anchor(root, fragment, 0)?
        };
        Some(Node { doc, value, part: Part::Whole })
    }

    fn view<'s>(&'s self, node: Node<'s>, hops: usize) -> View<'s> {
        let map = match node.value {
            Value::Bool(true) => return View::Anything,
            Value::Bool(false) => return View::Nothing,
            Value::Object(map) => map,
            _ => return View::Anything,
        };
        let branches = |key: &str| -> Vec<Node<'s>> {
            map.get(key).and_then(Value::as_array).map_or(Vec::new(), |a| a.iter().map(|v| node.child(v)).collect())
        };
        match node.part {
            Part::Rest => {
                let constrained = map.keys().any(|k| !is_annotation(k) && !APPLICATORS.iter().any(|(a, _)| a == k));
                if constrained {
                    View::Plain(map)
                } else {
                    View::Anything
                }
            }
            Part::AllOf => View::Combined(Criterion::All, branches("allOf")),
            Part::AnyOf => View::Combined(Criterion::Any, branches("anyOf")),
            Part::OneOf => View::Combined(Criterion::One, branches("oneOf")),
            Part::Not => View::Not(node.child(map.get("not").unwrap_or(&TRUE))),
            Part::Ref => {
                let reference = map.get("$ref").and_then(Value::as_str).unwrap_or_default();
                match self.resolve(node.doc, reference) {
                    Some(target) if hops < REF_HOPS_MAX => self.view(target, hops + 1),
                    _ => View::Unresolved(reference.to_string()),
                }
            }
            Part::Whole => self.whole(node, map, hops),
        }
    }

    fn whole<'s>(&'s self, node: Node<'s>, map: &'s Map<String, Value>, hops: usize) -> View<'s> {
        let mut parts = Vec::new();
        if map.keys().any(|k| !is_annotation(k) && !APPLICATORS.iter().any(|(a, _)| a == k)) {
            parts.push(Part::Rest);
        }
        parts.extend(APPLICATORS.iter().filter(|(key, _)| map.contains_key(*key)).map(|(_, part)| *part));
        match parts.as_slice() {
            [] => View::Anything,
            [Part::Rest] => View::Plain(map),
            [only] => self.view(Node { part: *only, ..node }, hops),
            _ => View::Combined(Criterion::All, parts.into_iter().map(|part| Node { part, ..node }).collect()),
        }
    }
}

fn percent_decode(pointer: &str) -> String {
    let bytes = pointer.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The subschema declaring anchor `name` (`$anchor`, or draft 7's `$id: "#name"`).
fn find_anchor<'v>(value: &'v Value, name: &str, depth: usize) -> Option<&'v Value> {
    if depth > limits::SCHEMA_NESTING_DEPTH_MAX {
        return None;
    }
    match value {
        Value::Object(map) => {
            let declares = map.get("$anchor").and_then(Value::as_str) == Some(name)
                || map.get("$id").and_then(Value::as_str).and_then(|id| id.strip_prefix('#')) == Some(name);
            if declares {
                return Some(value);
            }
            map.values().find_map(|child| find_anchor(child, name, depth + 1))
        }
        Value::Array(items) => items.iter().find_map(|child| find_anchor(child, name, depth + 1)),
        _ => None,
    }
}

struct Checker<'a> {
    writer: &'a Documents,
    reader: &'a Documents,
    /// Pairs being compared further up: meeting one again is a cycle, assumed compatible.
    active: HashSet<((usize, Part), (usize, Part))>,
    steps: usize,
}

impl<'a> Checker<'a> {
    fn compare(&mut self, w: Node<'a>, r: Node<'a>, at: &str, found: &mut Vec<String>, depth: usize) {
        self.steps = self.steps.saturating_add(1);
        if self.steps > limits::SCHEMA_COMPATIBILITY_STEPS_MAX {
            // Fail closed: every check past the budget is an incompatibility, so no branch
            // matching or combinator rule can turn the exhausted check into "compatible".
            found.push(format!("{at}: {TOO_COMPLEX}"));
            return;
        }
        if depth > limits::SCHEMA_NESTING_DEPTH_MAX {
            found.push(format!("{at}: nested too deeply to check (COMPATIBILITY_CHECK_TOO_COMPLEX)"));
            return;
        }
        let key = (w.key(), r.key());
        if !self.active.insert(key) {
            return;
        }
        let (written, read) = (self.writer.view(w, 0), self.reader.view(r, 0));
        self.compare_views(w, &written, r, &read, at, found, depth);
        self.active.remove(&key);
    }

    /// Whether `w` → `r` is compatible, without reporting why not.
    fn accepts(&mut self, w: Node<'a>, r: Node<'a>, at: &str, depth: usize) -> bool {
        let mut scratch = Vec::new();
        self.compare(w, r, at, &mut scratch, depth + 1);
        scratch.is_empty()
    }

    #[allow(clippy::too_many_arguments)]
    fn compare_views(
        &mut self,
        w: Node<'a>,
        written: &View<'a>,
        r: Node<'a>,
        read: &View<'a>,
        at: &str,
        found: &mut Vec<String>,
        depth: usize,
    ) {
        match (written, read) {
            (_, View::Anything) | (View::Nothing, _) => {}
            (View::Unresolved(a), View::Unresolved(b)) if a == b => {}
            (View::Unresolved(reference), _) | (_, View::Unresolved(reference)) => {
                found.push(format!("{at}: '$ref' {reference:?} cannot be resolved (REF_UNRESOLVED)"));
            }
            (View::Combined(cw, ws), View::Combined(cr, rs)) => self.combined(*cw, ws, *cr, rs, at, found, depth),
            (_, View::Combined(criterion, branches)) => {
                if !self.new_combinator_accepts(w, *criterion, branches, at, depth) {
                    found.push(format!(
                        "{at}: no branch of the new '{}' accepts what the old schema allowed (TYPE_CHANGED)",
                        criterion.name()
                    ));
                }
            }
            (View::Combined(criterion, branches), _) => {
                if !self.old_combinator_accepted(*criterion, branches, r, at, depth) {
                    found.push(format!(
                        "{at}: the new schema does not accept what the old '{}' allowed (TYPE_CHANGED)",
                        criterion.name()
                    ));
                }
            }
            (View::Not(w_inner), View::Not(r_inner)) => {
                // `not A` accepts what `not B` does when A accepts what B does.
                if !self.accepts(*r_inner, *w_inner, &format!("{at}/not"), depth) {
                    found.push(format!("{at}/not: the excluded schema was extended (NOT_TYPE_EXTENDED)"));
                }
            }
            (View::Anything, View::Plain(rm)) => self.plain(w, &EMPTY, r, rm, at, found, depth),
            (View::Plain(wm), View::Plain(rm)) => self.plain(w, wm, r, rm, at, found, depth),
            (_, View::Nothing) => found.push(format!("{at}: the schema now rejects every document (TYPE_CHANGED)")),
            _ => found.push(format!("{at}: the kind of schema changed (TYPE_CHANGED)")),
        }
    }

    /// A plain old schema against a new combinator.
    fn new_combinator_accepts(
        &mut self,
        w: Node<'a>,
        criterion: Criterion,
        branches: &[Node<'a>],
        at: &str,
        depth: usize,
    ) -> bool {
        let at = format!("{at}/{}", criterion.name());
        match (criterion, branches) {
            (_, [only]) => self.accepts(w, *only, &at, depth),
            (Criterion::All, _) => branches.iter().all(|branch| self.accepts(w, *branch, &at, depth)),
            _ => branches.iter().any(|branch| self.accepts(w, *branch, &at, depth)),
        }
    }

    /// An old combinator against a plain new schema.
    fn old_combinator_accepted(
        &mut self,
        criterion: Criterion,
        branches: &[Node<'a>],
        r: Node<'a>,
        at: &str,
        depth: usize,
    ) -> bool {
        let at = format!("{at}/{}", criterion.name());
        match (criterion, branches) {
            (_, [only]) => self.accepts(*only, r, &at, depth),
            (Criterion::All, _) => branches.iter().any(|branch| self.accepts(*branch, r, &at, depth)),
            _ => branches.iter().all(|branch| self.accepts(*branch, r, &at, depth)),
        }
    }

    /// Two combinators: Confluent's criterion, size and branch-matching rules.
    #[allow(clippy::too_many_arguments)]
    fn combined(
        &mut self,
        cw: Criterion,
        ws: &[Node<'a>],
        cr: Criterion,
        rs: &[Node<'a>],
        at: &str,
        found: &mut Vec<String>,
        depth: usize,
    ) {
        let ws = distinct(ws);
        let rs = distinct(rs);
        let widened = cr == Criterion::Any
            || (ws.len() == 1 && rs.len() == 1)
            || (ws.len() == 1 && cr == Criterion::One)
            || (rs.len() == 1 && cw == Criterion::All);
        if cw != cr && !widened {
            found.push(format!("{at}: '{}' became '{}' (COMBINED_TYPE_CHANGED)", cw.name(), cr.name()));
            return;
        }
        if ws.len() < rs.len() && cr == Criterion::All {
            found.push(format!("{at}/allOf: a branch was added (PRODUCT_TYPE_EXTENDED)"));
        } else if ws.len() > rs.len() && cw.is_sum() {
            found.push(format!("{at}/{}: a branch was removed (SUM_TYPE_NARROWED)", cw.name()));
        }
        let path = format!("{at}/{}", cr.name());
        let edges: Vec<Vec<usize>> =
            ws.iter().map(|w| (0..rs.len()).filter(|j| self.accepts(*w, rs[*j], &path, depth)).collect()).collect();
        if max_matching(&edges, rs.len()) < ws.len().min(rs.len()) {
            found.push(format!(
                "{path}: the branches no longer match the old ones one to one (COMBINED_TYPE_SUBSCHEMAS_CHANGED)"
            ));
        }
    }

    /// Two schemas without combinators, keyword by keyword.
    #[allow(clippy::too_many_arguments)]
    fn plain(
        &mut self,
        w: Node<'a>,
        wm: &'a Map<String, Value>,
        r: Node<'a>,
        rm: &'a Map<String, Value>,
        at: &str,
        found: &mut Vec<String>,
        depth: usize,
    ) {
        compare_types(wm, rm, at, found);
        compare_values(wm, rm, at, found);
        compare_bounds(wm, rm, at, found);
        compare_multiple_of(wm, rm, at, found);
        for keyword in CHANGED_WHEN_ADDED_OR_CHANGED {
            if rm.get(keyword).is_some_and(|value| Some(value) != wm.get(keyword)) {
                found.push(format!("{at}: '{keyword}' was added or changed ({}_CHANGED)", code(keyword)));
            }
        }
        if rm.get("uniqueItems") == Some(&Value::Bool(true)) && wm.get("uniqueItems") != Some(&Value::Bool(true)) {
            found.push(format!("{at}: 'uniqueItems' was added (UNIQUE_ITEMS_ADDED)"));
        }
        compare_dependencies(wm, rm, at, found);
        self.object(w, wm, r, rm, at, found, depth);
        self.items(w, wm, r, rm, at, found, depth);
    }

    #[allow(clippy::too_many_arguments)]
    fn object(
        &mut self,
        w: Node<'a>,
        wm: &'a Map<String, Value>,
        r: Node<'a>,
        rm: &'a Map<String, Value>,
        at: &str,
        found: &mut Vec<String>,
        depth: usize,
    ) {
        let reader_props = rm.get("properties").and_then(Value::as_object).unwrap_or(&EMPTY);
        let writer_props = wm.get("properties").and_then(Value::as_object).unwrap_or(&EMPTY);
        let reader_extra = rm.get("additionalProperties").unwrap_or(&TRUE);
        let writer_extra = wm.get("additionalProperties").unwrap_or(&TRUE);
        let writer_required = required(wm);
        for name in required(rm).into_iter().filter(|name| !writer_required.contains(name)) {
            let has_default = reader_props.get(name).is_some_and(|p| p.get("default").is_some());
            if !has_default {
                found.push(format!("{at}: property '{name}' became required (REQUIRED_PROPERTY_ADDED)"));
            }
        }
        for (name, schema) in reader_props {
            let where_ = format!("{at}/properties/{name}");
            match writer_props.get(name) {
                Some(written) => self.compare(w.child(written), r.child(schema), &where_, found, depth + 1),
                None if writer_extra == &Value::Bool(false) => {}
                None if accepts_anything(writer_extra) && !accepts_anything(schema) => found.push(format!(
                    "{where_}: property added to an open content model, where old documents may hold any value \
                     (PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL)"
                )),
                None => self.compare(w.child(writer_extra), r.child(schema), &where_, found, depth + 1),
            }
        }
        for (name, written) in writer_props.iter().filter(|(name, _)| !reader_props.contains_key(*name)) {
            let where_ = format!("{at}/properties/{name}");
            if written == &Value::Bool(false) {
                continue;
            }
            if reader_extra == &Value::Bool(false) {
                found.push(format!(
                    "{where_}: property removed from a closed content model (PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL)"
                ));
            } else {
                self.compare(w.child(written), r.child(reader_extra), &where_, found, depth + 1);
            }
        }
        if !accepts_anything(reader_extra) && writer_extra != &Value::Bool(false) {
            let where_ = format!("{at}/additionalProperties");
            if reader_extra == &Value::Bool(false) {
                found.push(format!("{where_}: the content model was closed (ADDITIONAL_PROPERTIES_REMOVED)"));
            } else {
                self.compare(w.child(writer_extra), r.child(reader_extra), &where_, found, depth + 1);
            }
        }
    }

    /// Array items, position by position: `prefixItems` (or draft 7's `items` array) first,
    /// then what applies to the rest (`items`, or `additionalItems`).
    #[allow(clippy::too_many_arguments)]
    fn items(
        &mut self,
        w: Node<'a>,
        wm: &'a Map<String, Value>,
        r: Node<'a>,
        rm: &'a Map<String, Value>,
        at: &str,
        found: &mut Vec<String>,
        depth: usize,
    ) {
        let mentions =
            |m: &Map<String, Value>| ["items", "prefixItems", "additionalItems"].iter().any(|k| m.contains_key(*k));
        if !mentions(rm) {
            return;
        }
        let (w_tuple, w_rest) = tuple_and_rest(wm);
        let (r_tuple, r_rest) = tuple_and_rest(rm);
        for index in 0..w_tuple.len().max(r_tuple.len()) {
            let written = w_tuple.get(index).unwrap_or(w_rest);
            let read = r_tuple.get(index).unwrap_or(r_rest);
            self.compare(w.child(written), r.child(read), &format!("{at}/items/{index}"), found, depth + 1);
        }
        self.compare(w.child(w_rest), r.child(r_rest), &format!("{at}/items"), found, depth + 1);
    }
}

fn tuple_and_rest(m: &Map<String, Value>) -> (&[Value], &Value) {
    let prefix = m.get("prefixItems").and_then(Value::as_array);
    match (prefix, m.get("items")) {
        (Some(prefix), items) => (prefix, items.unwrap_or(&TRUE)),
        (None, Some(Value::Array(tuple))) => (tuple, m.get("additionalItems").unwrap_or(&TRUE)),
        (None, items) => (&[], items.unwrap_or(&TRUE)),
    }
}

/// Schemas with equal text collapsed (Confluent compares branch sets).
fn distinct<'a>(nodes: &[Node<'a>]) -> Vec<Node<'a>> {
    let mut kept: Vec<Node<'a>> = Vec::with_capacity(nodes.len());
    for node in nodes {
        if !kept.iter().any(|k| k.part == node.part && k.value == node.value) {
            kept.push(*node);
        }
    }
    kept
}

/// The size of a maximum matching between left nodes and right nodes `0..right` (Kuhn's
/// augmenting paths; branch lists are short).
fn max_matching(edges: &[Vec<usize>], right: usize) -> usize {
    fn augment(left: usize, edges: &[Vec<usize>], seen: &mut [bool], owner: &mut [Option<usize>]) -> bool {
        for &candidate in &edges[left] {
            if seen[candidate] {
                continue;
            }
            seen[candidate] = true;
            let free = match owner[candidate] {
                None => true,
                Some(other) => augment(other, edges, seen, owner),
            };
            if free {
                owner[candidate] = Some(left);
                return true;
            }
        }
        false
    }
    let mut owner = vec![None; right];
    (0..edges.len()).filter(|left| augment(*left, edges, &mut vec![false; right], &mut owner)).count()
}

fn code(keyword: &str) -> String {
    let mut out = String::new();
    for c in keyword.trim_start_matches('$').chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

fn accepts_anything(schema: &Value) -> bool {
    schema == &Value::Bool(true) || schema.as_object().is_some_and(|o| o.keys().all(|k| is_annotation(k)))
}

const ALL_TYPES: [&str; 6] = ["null", "boolean", "object", "array", "number", "string"];

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn declared_types(schema: &Map<String, Value>) -> Option<Vec<String>> {
    match schema.get("type")? {
        Value::String(one) => Some(vec![one.clone()]),
        Value::Array(many) => Some(many.iter().filter_map(|t| t.as_str().map(str::to_string)).collect()),
        _ => None,
    }
}

/// The values a schema allows, when it lists them (`enum`, or `const` as a one-value enum).
fn listed_values(schema: &Map<String, Value>) -> Option<Vec<&Value>> {
    let enumerated = schema.get("enum").and_then(Value::as_array).map(|values| values.iter().collect::<Vec<_>>());
    match (enumerated, schema.get("const")) {
        (Some(values), Some(constant)) => Some(values.into_iter().filter(|v| *v == constant).collect()),
        (Some(values), None) => Some(values),
        (None, Some(constant)) => Some(vec![constant]),
        (None, None) => None,
    }
}

/// Keywords a reader may not add or change: any difference narrows (or reshapes) what it accepts.
const CHANGED_WHEN_ADDED_OR_CHANGED: [&str; 11] = [
    "pattern",
    "format",
    "contains",
    "propertyNames",
    "patternProperties",
    "dependentSchemas",
    "if",
    "then",
    "else",
    "unevaluatedProperties",
    "unevaluatedItems",
];

fn compare_types(w: &Map<String, Value>, r: &Map<String, Value>, at: &str, found: &mut Vec<String>) {
    let Some(allowed) = declared_types(r) else { return };
    let written = declared_types(w)
        .or_else(|| listed_values(w).map(|values| values.into_iter().map(|v| json_type(v).to_string()).collect()))
        .unwrap_or_else(|| ALL_TYPES.iter().map(|t| t.to_string()).collect());
    let mut reported = HashSet::new();
    for kind in written {
        let covered = allowed.contains(&kind) || (kind == "integer" && allowed.iter().any(|a| a == "number"));
        if !covered && reported.insert(kind.clone()) {
            found.push(format!("{at}: type '{kind}' is no longer allowed (TYPE_NARROWED)"));
        }
    }
}

fn compare_values(w: &Map<String, Value>, r: &Map<String, Value>, at: &str, found: &mut Vec<String>) {
    let Some(allowed) = listed_values(r) else { return };
    match listed_values(w) {
        Some(written) => {
            for value in written.into_iter().filter(|v| !allowed.contains(v)) {
                found.push(format!("{at}: value {value} is no longer allowed (ENUM_ARRAY_NARROWED)"));
            }
        }
        None => found.push(format!("{at}: the allowed values were restricted to a list (ENUM_ARRAY_NARROWED)")),
    }
}

fn compare_bounds(w: &Map<String, Value>, r: &Map<String, Value>, at: &str, found: &mut Vec<String>) {
    // (keyword, true when a larger value is looser)
    const BOUNDS: [(&str, bool); 12] = [
        ("maximum", true),
        ("exclusiveMaximum", true),
        ("maxLength", true),
        ("maxItems", true),
        ("maxProperties", true),
        ("maxContains", true),
        ("minimum", false),
        ("exclusiveMinimum", false),
        ("minLength", false),
        ("minItems", false),
        ("minProperties", false),
        ("minContains", false),
    ];
    for (keyword, larger_is_looser) in BOUNDS {
        let Some(limit) = r.get(keyword).and_then(Value::as_f64) else { continue };
        let (narrowed, code) = match w.get(keyword).and_then(Value::as_f64) {
            None => (true, "ADDED"),
            Some(old) if larger_is_looser => (limit < old, "DECREASED"),
            Some(old) => (limit > old, "INCREASED"),
        };
        if narrowed {
            found.push(format!("{at}: '{keyword}' was added or tightened ({}_{code})", self::code(keyword)));
        }
    }
}

fn compare_multiple_of(w: &Map<String, Value>, r: &Map<String, Value>, at: &str, found: &mut Vec<String>) {
    let Some(new) = r.get("multipleOf").and_then(Value::as_f64) else { return };
    let divides = |old: f64| new != 0.0 && ((old / new) - (old / new).round()).abs() < 1e-9;
    match w.get("multipleOf").and_then(Value::as_f64) {
        Some(old) if divides(old) => {}
        Some(_) => found.push(format!("{at}: 'multipleOf' no longer divides the old one (MULTIPLE_OF_CHANGED)")),
        None => found.push(format!("{at}: 'multipleOf' was added (MULTIPLE_OF_ADDED)")),
    }
}

/// `dependentRequired` (and draft 7's array `dependencies`): a new dependency narrows.
fn compare_dependencies(w: &Map<String, Value>, r: &Map<String, Value>, at: &str, found: &mut Vec<String>) {
    let lists = |m: &Map<String, Value>| -> Vec<(String, Vec<String>)> {
        ["dependentRequired", "dependencies"]
            .iter()
            .filter_map(|k| m.get(*k).and_then(Value::as_object))
            .flat_map(|deps| deps.iter())
            .filter_map(|(name, needs)| {
                let needs = needs.as_array()?.iter().filter_map(|n| n.as_str().map(str::to_string)).collect();
                Some((name.clone(), needs))
            })
            .collect()
    };
    let written = lists(w);
    for (name, needs) in lists(r) {
        let before: Vec<&String> = written.iter().filter(|(n, _)| *n == name).flat_map(|(_, needs)| needs).collect();
        for need in needs.iter().filter(|need| !before.contains(need)) {
            found.push(format!("{at}: '{name}' now requires '{need}' (DEPENDENCY_ARRAY_EXTENDED)"));
        }
    }
    let schema_deps = |m: &Map<String, Value>| -> Option<Value> {
        let deps = m.get("dependencies")?.as_object()?;
        let schemas: Map<String, Value> =
            deps.iter().filter(|(_, v)| !v.is_array()).map(|(k, v)| (k.clone(), v.clone())).collect();
        (!schemas.is_empty()).then_some(Value::Object(schemas))
    };
    if let Some(read) = schema_deps(r) {
        if Some(&read) != schema_deps(w).as_ref() {
            found.push(format!("{at}: a schema dependency was added or changed (DEPENDENCY_SCHEMA_CHANGED)"));
        }
    }
}

fn required(schema: &Map<String, Value>) -> Vec<&str> {
    schema
        .get("required")
        .and_then(Value::as_array)
        .map_or(Vec::new(), |r| r.iter().filter_map(Value::as_str).collect())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_maximum_matching_pairs_every_branch_it_can() {
        // 0 fits {0, 1}, 1 fits {0}: both pair up only if 0 takes 1.
        assert_eq!(max_matching(&[vec![0, 1], vec![0]], 2), 2);
        assert_eq!(max_matching(&[vec![0], vec![0]], 2), 1);
        assert_eq!(max_matching(&[vec![], vec![]], 2), 0);
    }

    #[test]
    fn keywords_become_confluent_change_names() {
        assert_eq!(code("maxLength"), "MAX_LENGTH");
        assert_eq!(code("$ref"), "REF");
        assert_eq!(percent_decode("/definitions/a%20b"), "/definitions/a b");
    }

    #[test]
    fn a_check_past_its_budget_is_incompatible_not_compatible() {
        // Level k is a oneOf of three spellings of level k-1: each level compares 3 × 3 pairs
        // below it, 3^20 pairs in all, from a schema of a few kilobytes.
        let mut definitions = serde_json::Map::new();
        definitions.insert("d0".into(), json!({"type": "string"}));
        for level in 1..=10 {
            let below = json!({"$ref": format!("#/definitions/d{}", level - 1)});
            let spellings = json!([below.clone(), {"allOf": [below.clone()]}, {"anyOf": [below]}]);
            definitions.insert(format!("d{level}"), json!({"oneOf": spellings}));
        }
        let root = json!({"definitions": definitions, "$ref": "#/definitions/d10"});
        let documents =
            || Documents { main: Document { uri: "json-schema:///".into(), root: root.clone() }, externals: vec![] };
        let found = incompatibilities(&documents(), &documents());
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].ends_with(TOO_COMPLEX), "{found:?}");
    }
}
