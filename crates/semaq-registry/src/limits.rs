//! Every bound the registry enforces, in one place; units come last in each name. Each keeps one
//! request, schema or payload from costing unbounded memory, time or disk.

use std::time::Duration;

/// Nesting of a schema or a validated payload: every walk recurses, and real schemas stay far shallower.
pub const SCHEMA_NESTING_DEPTH_MAX: usize = 64;
/// Longest schema text: far beyond hand-written schemas, and it bounds one parse and the file.
pub const REGISTRY_SCHEMA_BYTES_MAX: usize = 1024 * 1024;
/// Schemas (distinct global ids): every write rewrites the whole file, workable up to about this many.
pub const REGISTRY_SCHEMAS_MAX: usize = 100_000;
/// Versions of one subject, deleted ones included: transitive checks walk them all on each registration.
pub const REGISTRY_VERSIONS_PER_SUBJECT_MAX: usize = 10_000;
/// Longest subject name: holds any topic-derived name and bounds the file's keys.
pub const REGISTRY_SUBJECT_NAME_BYTES_MAX: usize = 1024;
/// Messages (nested included) one Protobuf compatibility check walks, so one check cannot run long.
pub const REGISTRY_PROTO_MESSAGES_MAX: usize = 10_000;
/// Subjects, deleted ones included until hard-deleted: as [`REGISTRY_SCHEMAS_MAX`], the file is rewritten whole.
pub const REGISTRY_SUBJECTS_MAX: usize = 100_000;
/// Schemas one registration depends on, transitively: each is parsed with it on every registration.
pub const REGISTRY_REFERENCES_MAX: usize = 1_000;
/// Schema pairs one compatibility check compares (combinators multiply them); past it: "too complex".
pub const SCHEMA_COMPATIBILITY_STEPS_MAX: usize = 100_000;
/// Array and map items of one Avro binary datum: zero-byte items cost no input, so size alone cannot bound them.
pub const SCHEMA_DATUM_ITEMS_MAX: usize = 1 << 20;
/// Auto-evolution registrations per stream per window: follows real changes, stops random keys growing the registry.
pub const SCHEMA_EVOLUTIONS_PER_STREAM_PER_MINUTE_MAX: usize = 10;
/// The window [`SCHEMA_EVOLUTIONS_PER_STREAM_PER_MINUTE_MAX`] counts over: the minute its name says.
pub const SCHEMA_EVOLUTION_RATE_WINDOW: Duration = Duration::from_secs(60);
/// New fields one auto-evolution adds: a real change adds a few, random keys many, and each is typed and checked.
pub const SCHEMA_EVOLUTION_FIELDS_MAX: usize = 64;
/// Levels of nested objects or records below the top that auto-evolution extends: bounds the walk per payload.
pub const SCHEMA_EVOLUTION_DEPTH_MAX: usize = 8;
/// Leading elements of a payload's array of objects auto-evolution reads: a long array costs no more than this.
pub const SCHEMA_EVOLUTION_ARRAY_ITEMS_MAX: usize = 32;
