//! What the registry persists and what its API returns, with Confluent's JSON field names.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::error::RegistryError;

/// A schema format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum SchemaType {
    /// Apache Avro (the default when a request names none).
    Avro,
    /// JSON Schema (drafts 7 and 2020-12).
    Json,
    /// Protocol Buffers (`.proto` text).
    Protobuf,
}

impl SchemaType {
    /// Reads Confluent's `schemaType` field; absent means AVRO.
    pub fn parse(text: Option<&str>) -> Result<Self, RegistryError> {
        match text.map(str::to_ascii_uppercase).as_deref() {
            None | Some("AVRO") => Ok(Self::Avro),
            Some("JSON") => Ok(Self::Json),
            Some("PROTOBUF") => Ok(Self::Protobuf),
            Some(other) => Err(RegistryError::InvalidSchema(format!("unknown schema type {other:?}"))),
        }
    }

    /// The name as Confluent spells it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Avro => "AVRO",
            Self::Json => "JSON",
            Self::Protobuf => "PROTOBUF",
        }
    }
}

/// A compatibility level, with Confluent's meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Compatibility {
    /// A new schema can read data written with the latest one.
    #[default]
    Backward,
    /// ... with every earlier one.
    BackwardTransitive,
    /// The latest schema can read data written with the new one.
    Forward,
    /// Every earlier schema can read data written with the new one.
    ForwardTransitive,
    /// Backward and forward, against the latest.
    Full,
    /// Backward and forward, against every earlier one.
    FullTransitive,
    /// No check.
    None,
}

impl Compatibility {
    /// Reads a level in any case (`backward_transitive`, `FULL`, ...).
    pub fn parse(text: &str) -> Result<Self, RegistryError> {
        serde_json::from_value(json!(text.to_ascii_uppercase())).map_err(|_| RegistryError::InvalidCompatibility)
    }

    /// The name as Confluent spells it.
    pub fn name(self) -> String {
        serde_json::to_value(self).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()
    }

    /// (new reads old, old reads new, against every earlier version).
    pub fn directions(self) -> (bool, bool, bool) {
        match self {
            Self::Backward => (true, false, false),
            Self::BackwardTransitive => (true, false, true),
            Self::Forward => (false, true, false),
            Self::ForwardTransitive => (false, true, true),
            Self::Full => (true, true, false),
            Self::FullTransitive => (true, true, true),
            Self::None => (false, false, false),
        }
    }
}

/// What a subject (or the whole registry) accepts, as Confluent's `/mode` sets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Mode {
    /// Registrations and deletes allowed (the default).
    #[default]
    Readwrite,
    /// Nothing may change: registrations, deletes and config changes are refused (42205).
    Readonly,
    /// As READONLY; set globally, it also overrides every subject's own mode.
    ReadonlyOverride,
    /// Registrations must bring their id (and may bring a version): schemas copied from
    /// another registry keep their ids. No compatibility check.
    Import,
}

impl Mode {
    /// Reads a mode in any case.
    pub fn parse(text: &str) -> Result<Self, RegistryError> {
        serde_json::from_value(json!(text.to_ascii_uppercase())).map_err(|_| RegistryError::InvalidMode)
    }

    /// The name as Confluent spells it.
    pub fn name(self) -> String {
        serde_json::to_value(self).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()
    }

    /// Whether nothing may change.
    pub fn is_read_only(self) -> bool {
        matches!(self, Self::Readonly | Self::ReadonlyOverride)
    }
}

/// A reference from one schema to a schema registered under another subject: a Protobuf
/// import path, an Avro named type's full name, or a JSON Schema `$ref` target.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Reference {
    /// The name the referring schema uses.
    pub name: String,
    /// The subject it is registered under.
    pub subject: String,
    /// Its version there; `-1` (latest) in a request is pinned to a number when registered.
    pub version: i64,
}

/// The body of a register, lookup or compatibility request.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SchemaRequest {
    /// The schema text.
    pub schema: String,
    /// AVRO (default), JSON or PROTOBUF.
    pub schema_type: Option<String>,
    /// Other registered schemas it refers to.
    #[serde(default)]
    pub references: Vec<Reference>,
}

/// A registration's settings besides its schema: Confluent's `normalize` query parameter and,
/// in IMPORT mode, the id (and version) the schema keeps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RegisterOptions {
    /// Store and compare the schema in its normalized form.
    pub normalize: bool,
    /// The global id to register under (IMPORT mode only).
    pub id: Option<u32>,
    /// The version to register as (IMPORT mode only; default: the next one).
    pub version: Option<u32>,
}

/// A schema as stored, under its global id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredSchema {
    /// Its format.
    pub schema_type: SchemaType,
    /// The text as first registered.
    pub schema: String,
    /// Schemas it refers to, each pinned to a version.
    #[serde(default)]
    pub references: Vec<Reference>,
}

impl StoredSchema {
    /// `GET /schemas/ids/{id}`'s body.
    pub fn to_json(&self) -> Value {
        let mut body = json!({ "schema": self.schema });
        add_type_and_references(&mut body, self);
        body
    }
}

fn add_type_and_references(body: &mut Value, schema: &StoredSchema) {
    if schema.schema_type != SchemaType::Avro {
        body["schemaType"] = json!(schema.schema_type.name());
    }
    if !schema.references.is_empty() {
        body["references"] = json!(schema.references);
    }
}

/// One version of a subject.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Version {
    /// 1, 2, ... within the subject.
    pub version: u32,
    /// The global schema id.
    pub id: u32,
    /// Soft-deleted: kept, but hidden and out of compatibility checks.
    #[serde(default)]
    pub deleted: bool,
    /// When it was registered (unix milliseconds); absent in files written before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registered_ms: Option<u64>,
}

/// A subject: its versions, oldest first, and its own compatibility level.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Subject {
    /// Versions, oldest first.
    pub versions: Vec<Version>,
    /// Subject-level compatibility, when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compatibility: Option<Compatibility>,
    /// Subject-level mode, when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<Mode>,
}

impl Subject {
    /// Whether it holds nothing but could be dropped (no versions, no own config or mode).
    pub fn is_empty(&self) -> bool {
        self.versions.is_empty() && self.compatibility.is_none() && self.mode.is_none()
    }
}

/// Everything the registry persists.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct State {
    /// The id the next new schema gets.
    pub next_id: u32,
    /// Schemas by global id.
    pub schemas: BTreeMap<u32, StoredSchema>,
    /// Subjects by name.
    pub subjects: BTreeMap<String, Subject>,
    /// Global compatibility level, when set (BACKWARD otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compatibility: Option<Compatibility>,
    /// Global mode, when set (READWRITE otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<Mode>,
    /// Ids by what makes schemas the same, so a registration finds its id without comparing
    /// every stored schema. Derived from `schemas`: rebuilt when loaded, never stored.
    #[serde(skip)]
    pub ids: HashMap<Identity, u32>,
}

/// What makes two registrations the same schema (and id): format, canonical text, references.
pub type Identity = (SchemaType, String, Vec<Reference>);

/// One subject version with its schema: `GET /subjects/{s}/versions/{v}`'s body.
#[derive(Debug, Clone, PartialEq)]
pub struct VersionInfo {
    /// Subject.
    pub subject: String,
    /// Version within it.
    pub version: u32,
    /// Global id.
    pub id: u32,
    /// The schema.
    pub schema: StoredSchema,
}

impl VersionInfo {
    /// Confluent's JSON shape (`schemaType` omitted for AVRO).
    pub fn to_json(&self) -> Value {
        let mut body =
            json!({ "subject": self.subject, "version": self.version, "id": self.id, "schema": self.schema.schema });
        add_type_and_references(&mut body, &self.schema);
        body
    }
}

/// A version selector: a number or `latest` (also `-1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VersionSelector {
    /// The newest live version.
    Latest,
    /// A given version.
    Number(u32),
}

impl VersionSelector {
    /// Reads `latest`, `-1` or a number in [1, 2^31-1].
    pub fn parse(text: &str) -> Result<Self, RegistryError> {
        if text == "latest" || text == "-1" {
            return Ok(Self::Latest);
        }
        match text.parse::<u32>() {
            Ok(number) if number >= 1 && number <= i32::MAX as u32 => Ok(Self::Number(number)),
            _ => Err(RegistryError::InvalidVersion(text.to_string())),
        }
    }
}
