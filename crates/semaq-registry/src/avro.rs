//! Avro: compatibility (the Avro resolution rules, via `apache-avro`'s checker, broken down
//! per record field so every incompatibility is listed) and payload validation (Avro's JSON
//! encoding with a JSON path for the first violation; binary datums by decoding).

use std::collections::HashMap;

use apache_avro::schema::{RecordSchema, Schema, UnionSchema};
use apache_avro::schema_compatibility::SchemaCompatibility;
use serde_json::Value;

use super::format::Violation;
use crate::limits;

/// Every reason data written with `writer` cannot be read with `reader`.
pub fn incompatibilities(reader: &Schema, writer: &Schema) -> Vec<String> {
    let Err(whole) = SchemaCompatibility::can_read(writer, reader) else { return Vec::new() };
    let (Schema::Record(reader_record), Schema::Record(writer_record)) = (reader, writer) else {
        return vec![whole.to_string()];
    };
    let mut found = Vec::new();
    if reader_record.name.fullname(None) != writer_record.name.fullname(None) {
        found.push(format!(
            "record name changed from {} to {}",
            writer_record.name.fullname(None),
            reader_record.name.fullname(None)
        ));
    }
    for field in &reader_record.fields {
        match writer_field(writer_record, &field.name, field.aliases.as_deref()) {
            Some(written) => {
                if let Err(error) = SchemaCompatibility::can_read(&written.schema, &field.schema) {
                    found.push(format!("field '{}': {error}", field.name));
                }
            }
            None if field.default.is_none() => {
                found.push(format!(
                    "field '{}' was added without a default value (READER_FIELD_MISSING_DEFAULT_VALUE)",
                    field.name
                ));
            }
            None => {}
        }
    }
    if found.is_empty() {
        found.push(whole.to_string());
    }
    found
}

fn writer_field<'a>(
    writer: &'a RecordSchema,
    name: &str,
    aliases: Option<&[String]>,
) -> Option<&'a apache_avro::schema::RecordField> {
    let by_name = |wanted: &str| writer.fields.iter().find(|f| f.name == wanted);
    by_name(name).or_else(|| aliases.into_iter().flatten().find_map(|alias| by_name(alias)))
}

/// Named types of a schema by full name, so `Ref`s (recursive types) can be followed.
fn named_types(schema: &Schema, names: &mut HashMap<String, Schema>, depth: usize) {
    if depth > limits::SCHEMA_NESTING_DEPTH_MAX {
        return;
    }
    match schema {
        Schema::Record(record) => {
            names.insert(record.name.fullname(None), schema.clone());
            for field in &record.fields {
                named_types(&field.schema, names, depth + 1);
            }
        }
        Schema::Enum(e) => {
            names.insert(e.name.fullname(None), schema.clone());
        }
        Schema::Fixed(f) => {
            names.insert(f.name.fullname(None), schema.clone());
        }
        Schema::Array(array) => named_types(&array.items, names, depth + 1),
        Schema::Map(map) => named_types(&map.types, names, depth + 1),
        Schema::Union(union) => union.variants().iter().for_each(|v| named_types(v, names, depth + 1)),
        _ => {}
    }
}

/// Parses with `apache-avro`, turning its panics into errors: its parser `unwrap`s some
/// validations (a record's or alias's name, a type name) on input, so a schema such as
/// `{"type":"record","name":"a&b"}` would otherwise take the serving thread down.
fn parse_guarded(text: &str, references: &[&str]) -> Result<(Schema, Vec<Schema>), String> {
    let outcome = quiet_panics::catch(|| {
        if references.is_empty() {
            Schema::parse_str(text).map(|schema| (schema, Vec::new()))
        } else {
            Schema::parse_str_with_list(text, references)
        }
    });
    match outcome {
        Ok(parsed) => parsed.map_err(|e| e.to_string()),
        Err(message) => Err(message.replace("called `Result::unwrap()` on an `Err` value: ", "")),
    }
}

/// Catching a third-party panic without the default hook printing it as if the server had
/// crashed: the hook stays silent on this thread while `catch` runs.
mod quiet_panics {
    use std::cell::Cell;
    use std::panic::{self, AssertUnwindSafe};
    use std::sync::Once;

    thread_local! {
        static CATCHING: Cell<bool> = const { Cell::new(false) };
    }

    /// Runs `work`; a panic in it comes back as its message.
    pub fn catch<T>(work: impl FnOnce() -> T) -> Result<T, String> {
        static HOOK: Once = Once::new();
        HOOK.call_once(|| {
            let previous = panic::take_hook();
            panic::set_hook(Box::new(move |info| {
                if !CATCHING.with(Cell::get) {
                    previous(info);
                }
            }));
        });
        let was = CATCHING.with(|catching| catching.replace(true));
        let outcome = panic::catch_unwind(AssertUnwindSafe(work));
        CATCHING.with(|catching| catching.set(was));
        outcome.map_err(|payload| {
            payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|text| text.to_string()))
                .unwrap_or_else(|| "the Avro parser failed".to_string())
        })
    }
}

/// A parsed Avro schema, the named types its references define, and all named types by full
/// name (collected once, for following `Ref`s).
#[derive(Debug)]
pub struct AvroSchema {
    /// The schema; types defined by referenced schemas appear in it as `Ref`s.
    pub schema: Schema,
    /// The referenced schemas, parsed (needed to decode binary datums).
    schemata: Vec<Schema>,
    names: HashMap<String, Schema>,
    /// The schema with referenced types written out, for compatibility checks (`None`: no
    /// references, the schema itself).
    inlined: Option<Schema>,
}

impl AvroSchema {
    /// Parses Avro schema text, with the texts of the named types its references define.
    pub fn parse(text: &str, references: &[&str]) -> Result<Self, String> {
        let (schema, schemata) = parse_guarded(text, references)?;
        let mut names = HashMap::new();
        for named in schemata.iter().chain(std::iter::once(&schema)) {
            named_types(named, &mut names, 0);
        }
        let inlined = (!schemata.is_empty()).then(|| {
            let mut budget = limits::SCHEMA_COMPATIBILITY_STEPS_MAX;
            inline(&schema, &names, &mut Vec::new(), &mut budget)
        });
        Ok(Self { schema, schemata, names, inlined })
    }

    /// The schema compatibility checks compare: referenced types written out, so a change in
    /// a referenced schema counts, not only its name.
    pub fn comparable(&self) -> &Schema {
        self.inlined.as_ref().unwrap_or(&self.schema)
    }

    /// Checks a JSON payload (Avro's JSON encoding; a union branch may also be given bare,
    /// without its `{"type": value}` wrapper).
    pub fn validate_json(&self, value: &Value) -> Result<(), Violation> {
        let mut path = String::from("$");
        check(&self.schema, value, &mut path, &self.names, 0).map_err(|message| Violation { path, message })
    }

    /// Checks one Avro binary datum; it must use every byte, and no more.
    pub fn validate_binary(&self, body: &[u8]) -> Result<(), Violation> {
        super::avro_binary::check(&self.schema, &self.names, body)
            .map_err(|(path, message)| Violation { path, message: format!("Avro binary does not decode: {message}") })
    }

    /// The value of one Avro binary datum (types from references resolved); it must use every
    /// byte, and no more.
    pub fn decode_binary(&self, body: &[u8]) -> Result<apache_avro::types::Value, Violation> {
        let mut reader = Guarded { rest: body, overrun: false };
        let fail = |message: String| Violation { path: "$".into(), message };
        let decoded = if self.schemata.is_empty() {
            apache_avro::from_avro_datum(&self.schema, &mut reader, None)
        } else {
            // Referenced types first: each is resolved against what came before it.
            let known: Vec<&Schema> = self.schemata.iter().chain(std::iter::once(&self.schema)).collect();
            apache_avro::from_avro_datum_schemata(&self.schema, known, &mut reader, None)
        };
        if reader.overrun {
            return Err(fail("Avro binary does not decode: the datum is truncated".into()));
        }
        let value = decoded.map_err(|e| fail(format!("Avro binary does not decode: {e}")))?;
        if !reader.rest.is_empty() {
            return Err(fail(format!("{} bytes left over after the Avro datum", reader.rest.len())));
        }
        Ok(value)
    }
}

/// `schema` with each `Ref` replaced by the type it names, except a type inside itself
/// (recursion stays a `Ref`), for at most `budget` nodes (past it, `Ref`s stay: compared by name).
fn inline(schema: &Schema, names: &HashMap<String, Schema>, within: &mut Vec<String>, budget: &mut usize) -> Schema {
    if *budget == 0 || within.len() > limits::SCHEMA_NESTING_DEPTH_MAX {
        return schema.clone();
    }
    *budget -= 1;
    match schema {
        Schema::Ref { name } => {
            let full = name.fullname(None);
            match names.get(&full) {
                Some(named) if !within.contains(&full) => inline(named, names, within, budget),
                _ => schema.clone(),
            }
        }
        Schema::Record(record) => {
            let mut record = record.clone();
            within.push(record.name.fullname(None));
            for field in &mut record.fields {
                field.schema = inline(&field.schema, names, within, budget);
            }
            within.pop();
            Schema::Record(record)
        }
        Schema::Array(array) => {
            let mut array = array.clone();
            array.items = Box::new(inline(&array.items, names, within, budget));
            Schema::Array(array)
        }
        Schema::Map(map) => {
            let mut map = map.clone();
            map.types = Box::new(inline(&map.types, names, within, budget));
            Schema::Map(map)
        }
        Schema::Union(union) => {
            let variants = union.variants().iter().map(|v| inline(v, names, within, budget)).collect();
            UnionSchema::new(variants).map(Schema::Union).unwrap_or_else(|_| schema.clone())
        }
        other => other.clone(),
    }
}

fn type_name(schema: &Schema) -> String {
    match schema {
        Schema::Record(r) => r.name.fullname(None),
        Schema::Enum(e) => e.name.fullname(None),
        Schema::Fixed(f) => f.name.fullname(None),
        Schema::Ref { name } => name.fullname(None),
        other => format!("{:?}", apache_avro::schema::SchemaKind::from(other)).to_ascii_lowercase(),
    }
}

fn shown(value: &Value) -> String {
    let text = value.to_string();
    if text.len() > 64 {
        format!("{}...", &text[..text.floor_char_boundary(64)])
    } else {
        text
    }
}

/// On error, `path` is left pointing at the offending value.
fn check(
    schema: &Schema,
    value: &Value,
    path: &mut String,
    names: &HashMap<String, Schema>,
    depth: usize,
) -> Result<(), String> {
    if depth > limits::SCHEMA_NESTING_DEPTH_MAX {
        return Err("nested too deeply".into());
    }
    let expect = |ok: bool, what: &str| if ok { Ok(()) } else { Err(format!("{} is not {what}", shown(value))) };
    let int_in = |min: i64, max: i64| value.as_i64().is_some_and(|n| (min..=max).contains(&n));
    match schema {
        Schema::Null => expect(value.is_null(), "null"),
        Schema::Boolean => expect(value.is_boolean(), "a boolean"),
        Schema::Int | Schema::Date | Schema::TimeMillis => {
            expect(int_in(i64::from(i32::MIN), i64::from(i32::MAX)), "an int")
        }
        Schema::Long
        | Schema::TimeMicros
        | Schema::TimestampMillis
        | Schema::TimestampMicros
        | Schema::TimestampNanos
        | Schema::LocalTimestampMillis
        | Schema::LocalTimestampMicros
        | Schema::LocalTimestampNanos => expect(value.is_i64(), "a long"),
        Schema::Float | Schema::Double => expect(value.is_number(), "a number"),
        Schema::String => expect(value.is_string(), "a string"),
        Schema::Uuid => expect(value.as_str().is_some_and(is_uuid), "a uuid string"),
        Schema::Bytes | Schema::Decimal(_) | Schema::BigDecimal => expect(value.is_string(), "a bytes string"),
        Schema::Fixed(fixed) => {
            expect(value.as_str().is_some_and(|s| s.chars().count() == fixed.size), &format!("{} bytes", fixed.size))
        }
        Schema::Duration => expect(value.as_str().is_some_and(|s| s.chars().count() == 12), "a 12-byte duration"),
        Schema::Enum(e) => {
            let known = value.as_str().is_some_and(|s| e.symbols.iter().any(|symbol| symbol == s));
            expect(known, &format!("one of {:?}", e.symbols))
        }
        Schema::Array(array) => {
            let items = value.as_array().ok_or_else(|| format!("{} is not an array", shown(value)))?;
            for (index, item) in items.iter().enumerate() {
                let before = path.len();
                path.push_str(&format!("[{index}]"));
                check(&array.items, item, path, names, depth + 1)?;
                path.truncate(before);
            }
            Ok(())
        }
        Schema::Map(map) => {
            let entries = value.as_object().ok_or_else(|| format!("{} is not a map (object)", shown(value)))?;
            for (key, item) in entries {
                let before = path.len();
                push_key(path, key);
                check(&map.types, item, path, names, depth + 1)?;
                path.truncate(before);
            }
            Ok(())
        }
        Schema::Record(record) => check_record(record, value, path, names, depth),
        Schema::Union(union) => check_union(union.variants(), value, path, names, depth),
        Schema::Ref { name } => match names.get(&name.fullname(None)) {
            Some(named) => check(named, value, path, names, depth + 1),
            None => Err(format!("unknown type {}", name.fullname(None))),
        },
    }
}

fn push_key(path: &mut String, key: &str) {
    if !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        path.push('.');
        path.push_str(key);
    } else {
        path.push_str(&format!("[{}]", Value::from(key)));
    }
}

fn check_record(
    record: &RecordSchema,
    value: &Value,
    path: &mut String,
    names: &HashMap<String, Schema>,
    depth: usize,
) -> Result<(), String> {
    let object = value.as_object().ok_or_else(|| format!("{} is not a record ({})", shown(value), record.name))?;
    for field in &record.fields {
        let before = path.len();
        push_key(path, &field.name);
        match object.get(&field.name) {
            Some(item) => check(&field.schema, item, path, names, depth + 1)?,
            None if field.default.is_some() => {}
            None => return Err(format!("required field is missing (type {})", type_name(&field.schema))),
        }
        path.truncate(before);
    }
    if let Some(unknown) = object.keys().find(|key| !record.lookup.contains_key(*key)) {
        push_key(path, unknown);
        return Err(format!("is not a field of record {}", record.name.fullname(None)));
    }
    Ok(())
}

fn check_union(
    variants: &[Schema],
    value: &Value,
    path: &mut String,
    names: &HashMap<String, Schema>,
    depth: usize,
) -> Result<(), String> {
    // Avro's JSON encoding: null bare, every other branch as {"<type name>": value}.
    if let Some((branch, inner)) = value.as_object().filter(|o| o.len() == 1).and_then(|o| o.iter().next()) {
        if let Some(variant) = variants.iter().find(|v| type_name(v) == *branch || short_name(v) == *branch) {
            let before = path.len();
            push_key(path, branch);
            check(variant, inner, path, names, depth + 1)?;
            path.truncate(before);
            return Ok(());
        }
    }
    // A value for an optional type (`["null", T]`) that is not null: T's own error says where.
    if let [Schema::Null, only] | [only, Schema::Null] = variants {
        if !value.is_null() {
            return check(only, value, path, names, depth + 1);
        }
    }
    let before = path.len();
    for variant in variants {
        if check(variant, value, path, names, depth + 1).is_ok() {
            path.truncate(before);
            return Ok(());
        }
        path.truncate(before);
    }
    let branches: Vec<String> = variants.iter().map(type_name).collect();
    Err(format!("{} matches no branch of the union [{}]", shown(value), branches.join(", ")))
}

fn short_name(schema: &Schema) -> String {
    let name = type_name(schema);
    name.rsplit('.').next().unwrap_or(&name).to_string()
}

/// A hyphenated UUID (8-4-4-4-12 hex digits).
pub(super) fn is_uuid(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes.len() == 36
        && bytes.iter().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => *b == b'-',
            _ => b.is_ascii_hexdigit(),
        })
}

/// A reader over a datum that notices when the decoder asks for bytes past its end: the
/// decoder does not always treat a short read as an error.
struct Guarded<'a> {
    rest: &'a [u8],
    overrun: bool,
}

impl std::io::Read for Guarded<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if buf.len() > self.rest.len() {
            self.overrun = true;
        }
        self.rest.read(buf)
    }
}
