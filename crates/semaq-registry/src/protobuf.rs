//! Protobuf: `.proto` text compiled at run time (protox; the well-known `google/protobuf/*`
//! imports resolve), payload validation (proto3 JSON with a JSON path; binary after
//! Confluent's message indexes) and Confluent's compatibility rules (messages kept, field
//! kinds wire-compatible, labels, named types, oneofs, required fields).

use std::collections::HashMap;

use prost_reflect::{Cardinality, DescriptorPool, FieldDescriptor, Kind, MessageDescriptor};
use protox::file::{ChainFileResolver, File, FileResolver, GoogleFileResolver};
use serde_json::Value;

use super::error::RegistryError;
use super::format::Violation;
use super::references::Resolved;
use crate::limits;

/// The name the registered text is compiled under, unless one of its imports has it.
const FILE_NAME: &str = "schema.proto";

/// A compiled `.proto` file.
#[derive(Debug)]
pub struct ProtoSchema {
    /// Its top-level messages, in declaration order (Confluent's message index 0, 1, ...).
    messages: Vec<MessageDescriptor>,
}

/// The registered text and the files it imports, by import path (the references' names).
struct Sources(HashMap<String, String>);

impl FileResolver for Sources {
    fn open_file(&self, name: &str) -> Result<File, protox::Error> {
        match self.0.get(name) {
            Some(text) => File::from_source(name, text),
            None => Err(protox::Error::file_not_found(name)),
        }
    }
}

/// Compiles `.proto` text, its imports resolved from `references` (by import path), then the
/// well-known `google/protobuf/*` files; it must declare at least one message.
pub fn parse(text: &str, references: &[Resolved]) -> Result<ProtoSchema, RegistryError> {
    let mut file_name = FILE_NAME.to_string();
    while references.iter().any(|r| r.name == file_name) {
        file_name.insert(0, '_');
    }
    let mut sources: HashMap<String, String> = references.iter().map(|r| (r.name.clone(), r.text.clone())).collect();
    sources.insert(file_name.clone(), text.to_string());
    let mut resolver = ChainFileResolver::new();
    resolver.add(Sources(sources));
    resolver.add(GoogleFileResolver::new());
    let mut compiler = protox::Compiler::with_file_resolver(resolver);
    compiler.open_file(&file_name).map_err(|e| RegistryError::InvalidSchema(e.to_string()))?;
    let pool: DescriptorPool = compiler.descriptor_pool();
    let file = pool
        .get_file_by_name(&file_name)
        .ok_or_else(|| RegistryError::InvalidSchema("the .proto file did not compile".into()))?;
    let messages: Vec<MessageDescriptor> = file.messages().collect();
    if messages.is_empty() {
        return Err(RegistryError::InvalidSchema("the .proto file declares no message".into()));
    }
    Ok(ProtoSchema { messages })
}

/// `.proto` text with comments dropped and one declaration per line (`;`, `{` and `}` end
/// lines; runs of white space become one space): formatting and comments no longer matter.
pub fn normalize_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    let mut pending_space = false;
    while let Some(c) = chars.next() {
        match c {
            '/' if chars.peek() == Some(&'/') => {
                chars.by_ref().take_while(|c| *c != '\n').for_each(drop);
                pending_space = true;
            }
            '/' if chars.peek() == Some(&'*') => {
                chars.next();
                let mut previous = ' ';
                for c in chars.by_ref() {
                    if previous == '*' && c == '/' {
                        break;
                    }
                    previous = c;
                }
                pending_space = true;
            }
            '"' | '\'' => {
                push_pending(&mut out, &mut pending_space);
                out.push(c);
                let mut escaped = false;
                for inner in chars.by_ref() {
                    out.push(inner);
                    if inner == c && !escaped {
                        break;
                    }
                    escaped = inner == '\\' && !escaped;
                }
            }
            ';' | '{' | '}' => {
                if c == '}' && !out.ends_with('\n') && !out.is_empty() {
                    out.push('\n');
                }
                pending_space = false;
                if c == '{' && !out.is_empty() && !out.ends_with('\n') {
                    out.push(' ');
                }
                out.push(c);
                out.push('\n');
            }
            c if c.is_whitespace() => pending_space = true,
            c => {
                push_pending(&mut out, &mut pending_space);
                out.push(c);
            }
        }
    }
    out.trim_end().to_string()
}

fn push_pending(out: &mut String, pending_space: &mut bool) {
    if *pending_space && !out.is_empty() && !out.ends_with('\n') {
        out.push(' ');
    }
    *pending_space = false;
}

/// Every message of the file by full name, nested ones included.
fn all_messages(schema: &ProtoSchema) -> HashMap<String, MessageDescriptor> {
    let mut found = HashMap::new();
    let mut pending: Vec<MessageDescriptor> = schema.messages.clone();
    while let Some(message) = pending.pop() {
        if found.len() >= limits::REGISTRY_PROTO_MESSAGES_MAX {
            break;
        }
        pending.extend(message.child_messages().filter(|m| !m.is_map_entry()));
        found.insert(message.full_name().to_string(), message);
    }
    found
}

/// Every reason data written with `writer` cannot be read with `reader`, by Confluent's rules:
/// the file's messages are matched by full name and their fields by number; a field's message
/// type defined elsewhere (an import) is compared too, so a change in a referenced schema counts.
pub fn incompatibilities(reader: &ProtoSchema, writer: &ProtoSchema) -> Vec<String> {
    let readers = all_messages(reader);
    let mut found = Vec::new();
    let mut writers: Vec<(String, MessageDescriptor)> = all_messages(writer).into_iter().collect();
    writers.sort_by(|a, b| a.0.cmp(&b.0));
    let mut walk = Walk { pending: Vec::new(), visited: readers.keys().cloned().collect() };
    for (name, written) in writers {
        match readers.get(&name) {
            Some(read) => compare_message(read, &written, &mut found, &mut walk),
            None => found.push(format!("message {name} was removed (MESSAGE_REMOVED)")),
        }
    }
    while let Some((read, written)) = walk.pending.pop() {
        if walk.visited.len() > limits::REGISTRY_PROTO_MESSAGES_MAX {
            found.push("too many message types to compare (COMPATIBILITY_CHECK_TOO_COMPLEX)".into());
            break;
        }
        compare_message(&read, &written, &mut found, &mut walk);
    }
    found
}

/// Message types reached through fields but declared outside the file, still to compare.
struct Walk {
    pending: Vec<(MessageDescriptor, MessageDescriptor)>,
    visited: std::collections::HashSet<String>,
}

/// Which wire-compatible group a field's kind belongs to (Confluent's scalar kinds; an enum is
/// a varint, so changing its type or removing its values does not break readers).
fn wire_group(kind: &Kind) -> String {
    match kind {
        Kind::Int32 | Kind::Uint32 | Kind::Int64 | Kind::Uint64 | Kind::Bool | Kind::Enum(_) => "varint".into(),
        Kind::Sint32 | Kind::Sint64 => "zigzag".into(),
        Kind::Fixed32 | Kind::Sfixed32 => "fixed32".into(),
        Kind::Fixed64 | Kind::Sfixed64 => "fixed64".into(),
        Kind::String | Kind::Bytes => "length-delimited".into(),
        Kind::Float => "float".into(),
        Kind::Double => "double".into(),
        Kind::Message(m) => format!("message {}", m.full_name()),
    }
}

fn compare_message(reader: &MessageDescriptor, writer: &MessageDescriptor, found: &mut Vec<String>, walk: &mut Walk) {
    let name = reader.full_name();
    let mut moved_into: HashMap<String, usize> = HashMap::new();
    for read in reader.fields() {
        let number = read.number();
        let Some(written) = writer.get_field(number) else {
            if read.cardinality() == Cardinality::Required {
                found.push(format!(
                    "{name}: required field {} ({number}) was added (REQUIRED_FIELD_ADDED)",
                    read.name()
                ));
            }
            continue;
        };
        compare_field(name, &read, &written, found, walk);
        let oneof_now = read.containing_oneof().filter(|o| !o.is_synthetic()).map(|o| o.name().to_string());
        let oneof_before = written.containing_oneof().filter(|o| !o.is_synthetic()).map(|o| o.name().to_string());
        if let (Some(oneof), None) = (oneof_now, oneof_before) {
            if writer.oneofs().any(|o| o.name() == oneof) {
                found.push(format!(
                    "{name}: field {number} moved into the existing oneof {oneof} (FIELD_MOVED_TO_EXISTING_ONEOF)"
                ));
            } else {
                *moved_into.entry(oneof).or_default() += 1;
            }
        }
    }
    for (oneof, count) in moved_into.into_iter().filter(|(_, count)| *count > 1) {
        found.push(format!("{name}: {count} fields moved into the new oneof {oneof} (MULTIPLE_FIELDS_MOVED_TO_ONEOF)"));
    }
    for written in writer.fields().filter(|f| f.cardinality() == Cardinality::Required) {
        if reader.get_field(written.number()).is_none() {
            found.push(format!("{name}: required field {} was removed (REQUIRED_FIELD_REMOVED)", written.name()));
        }
    }
}

fn compare_field(
    message: &str,
    read: &FieldDescriptor,
    written: &FieldDescriptor,
    found: &mut Vec<String>,
    walk: &mut Walk,
) {
    let number = read.number();
    if read.is_map() != written.is_map() {
        found.push(format!("{message}: field {number} changed between a map and a non-map (FIELD_KIND_CHANGED)"));
        return;
    }
    if let (Kind::Message(now), Kind::Message(before)) = (read.kind(), written.kind()) {
        if read.is_map() {
            let at = format!("{message}: field {number} (map");
            compare_kinds(
                &format!("{at} key)"),
                &now.map_entry_key_field(),
                &before.map_entry_key_field(),
                found,
                walk,
            );
            let (value_now, value_before) = (now.map_entry_value_field(), before.map_entry_value_field());
            compare_kinds(&format!("{at} value)"), &value_now, &value_before, found, walk);
            return;
        }
    }
    compare_kinds(&format!("{message}: field {number}"), read, written, found, walk);
    compare_labels(message, read, written, found);
}

/// Wire kinds of a field (or map key or value); same-named message types declared outside the
/// file are queued to compare field by field.
fn compare_kinds(
    at: &str,
    read: &FieldDescriptor,
    written: &FieldDescriptor,
    found: &mut Vec<String>,
    walk: &mut Walk,
) {
    let (now, before) = (read.kind(), written.kind());
    if wire_group(&now) != wire_group(&before) {
        let code = if matches!((&now, &before), (Kind::Message(_), Kind::Message(_))) {
            "FIELD_NAMED_TYPE_CHANGED"
        } else {
            "FIELD_KIND_CHANGED"
        };
        found.push(format!("{at} changed from {} to {} ({code})", wire_group(&before), wire_group(&now)));
        return;
    }
    if let (Kind::Message(now), Kind::Message(before)) = (now, before) {
        if walk.visited.insert(now.full_name().to_string()) {
            walk.pending.push((now, before));
        }
    }
}

/// Labels: for numbers, singular and repeated differ on the wire (packed), and proto2's
/// required and optional differ in meaning (FIELD_NUMERIC_LABEL_CHANGED); strings, bytes and
/// messages are length-delimited either way (FIELD_STRING_OR_BYTES_LABEL_CHANGED is compatible).
fn compare_labels(message: &str, read: &FieldDescriptor, written: &FieldDescriptor, found: &mut Vec<String>) {
    let length_delimited = matches!(read.kind(), Kind::String | Kind::Bytes | Kind::Message(_));
    if length_delimited || read.cardinality() == written.cardinality() {
        return;
    }
    let label = |field: &FieldDescriptor| match field.cardinality() {
        Cardinality::Repeated => "repeated",
        Cardinality::Required => "required",
        Cardinality::Optional => "optional",
    };
    found.push(format!(
        "{message}: field {} changed from {} to {} (FIELD_NUMERIC_LABEL_CHANGED)",
        read.number(),
        label(written),
        label(read)
    ));
}

impl ProtoSchema {
    /// Checks a proto3 JSON payload against the file's first message.
    pub fn validate_json(&self, value: &Value) -> Result<(), Violation> {
        let mut path = String::from("$");
        check_message(&self.messages[0], value, &mut path, 0).map_err(|message| Violation { path, message })
    }

    /// Decodes Confluent's message indexes then the binary message they select.
    pub fn validate_binary(&self, body: &[u8]) -> Result<(), Violation> {
        self.decode_binary(body).map(|_| ())
    }

    /// The binary message a wire-format body holds: Confluent's message indexes, then the
    /// message they select.
    pub fn decode_binary(&self, body: &[u8]) -> Result<prost_reflect::DynamicMessage, Violation> {
        let fail = |message: String| Violation { path: "$".into(), message };
        let mut rest = body;
        let count = read_zigzag(&mut rest).ok_or_else(|| fail("the message indexes are truncated".into()))?;
        let mut indexes = Vec::new();
        for _ in 0..count.clamp(0, limits::SCHEMA_NESTING_DEPTH_MAX as i64) {
            indexes.push(read_zigzag(&mut rest).ok_or_else(|| fail("the message indexes are truncated".into()))?);
        }
        if indexes.is_empty() {
            indexes.push(0);
        }
        let descriptor = self.select(&indexes).ok_or_else(|| fail(format!("no message at indexes {indexes:?}")))?;
        prost_reflect::DynamicMessage::decode(descriptor.clone(), rest)
            .map_err(|e| fail(format!("Protobuf binary of {} does not decode: {e}", descriptor.full_name())))
    }

    /// The message Confluent's message indexes name: a top-level message, then nested ones.
    fn select(&self, indexes: &[i64]) -> Option<MessageDescriptor> {
        let first = usize::try_from(*indexes.first()?).ok()?;
        let mut message = self.messages.get(first)?.clone();
        for index in &indexes[1..] {
            let child = message.child_messages().nth(usize::try_from(*index).ok()?)?;
            message = child;
        }
        Some(message)
    }
}

fn read_zigzag(bytes: &mut &[u8]) -> Option<i64> {
    let mut value: u64 = 0;
    for shift in (0..64).step_by(7) {
        let (byte, rest) = bytes.split_first()?;
        *bytes = rest;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(((value >> 1) as i64) ^ -((value & 1) as i64));
        }
    }
    None
}

fn check_message(message: &MessageDescriptor, value: &Value, path: &mut String, depth: usize) -> Result<(), String> {
    if depth > limits::SCHEMA_NESTING_DEPTH_MAX {
        return Err("nested too deeply".into());
    }
    if message.full_name().starts_with("google.protobuf.") {
        // Well-known types have their own JSON forms (timestamps as strings, ...).
        return Ok(());
    }
    let object = value.as_object().ok_or_else(|| format!("{value} is not a {} object", message.full_name()))?;
    for (key, item) in object {
        let before = path.len();
        path.push('.');
        path.push_str(key);
        let field = message
            .get_field_by_json_name(key)
            .or_else(|| message.get_field_by_name(key))
            .ok_or_else(|| format!("is not a field of message {}", message.full_name()))?;
        check_field(&field, item, path, depth)?;
        path.truncate(before);
    }
    Ok(())
}

fn check_field(field: &FieldDescriptor, value: &Value, path: &mut String, depth: usize) -> Result<(), String> {
    if value.is_null() {
        return Ok(());
    }
    if field.is_map() {
        let entries = value.as_object().ok_or_else(|| format!("{value} is not a map (object)"))?;
        let Kind::Message(entry) = field.kind() else { return Ok(()) };
        let value_field = entry.map_entry_value_field();
        for (key, item) in entries {
            let before = path.len();
            path.push_str(&format!("[{}]", Value::from(key.as_str())));
            check_kind(&value_field.kind(), item, path, depth)?;
            path.truncate(before);
        }
        return Ok(());
    }
    if field.is_list() {
        let items = value.as_array().ok_or_else(|| format!("{value} is not an array"))?;
        for (index, item) in items.iter().enumerate() {
            let before = path.len();
            path.push_str(&format!("[{index}]"));
            check_kind(&field.kind(), item, path, depth)?;
            path.truncate(before);
        }
        return Ok(());
    }
    check_kind(&field.kind(), value, path, depth)
}

fn integer_in(value: &Value, min: i128, max: i128) -> bool {
    let number = match value {
        Value::Number(n) => n.as_i64().map(i128::from).or_else(|| n.as_u64().map(i128::from)),
        Value::String(s) => s.parse::<i128>().ok(),
        _ => None,
    };
    number.is_some_and(|n| (min..=max).contains(&n))
}

fn check_kind(kind: &Kind, value: &Value, path: &mut String, depth: usize) -> Result<(), String> {
    let expect = |ok: bool, what: &str| if ok { Ok(()) } else { Err(format!("{value} is not {what}")) };
    match kind {
        Kind::Double | Kind::Float => {
            expect(value.is_number() || matches!(value.as_str(), Some("NaN" | "Infinity" | "-Infinity")), "a number")
        }
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => {
            expect(integer_in(value, i32::MIN.into(), i32::MAX.into()), "an int32")
        }
        Kind::Uint32 | Kind::Fixed32 => expect(integer_in(value, 0, u32::MAX.into()), "a uint32"),
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => {
            expect(integer_in(value, i64::MIN.into(), i64::MAX.into()), "an int64")
        }
        Kind::Uint64 | Kind::Fixed64 => expect(integer_in(value, 0, u64::MAX.into()), "a uint64"),
        Kind::Bool => expect(value.is_boolean(), "a bool"),
        Kind::String => expect(value.is_string(), "a string"),
        Kind::Bytes => expect(value.is_string(), "base64 bytes"),
        Kind::Enum(e) => {
            let known = match value {
                Value::String(name) => e.get_value_by_name(name).is_some(),
                Value::Number(n) => {
                    n.as_i64().and_then(|n| i32::try_from(n).ok()).is_some_and(|n| e.get_value(n).is_some())
                }
                _ => false,
            };
            expect(known, &format!("a value of enum {}", e.full_name()))
        }
        Kind::Message(message) => check_message(message, value, path, depth + 1),
    }
}
