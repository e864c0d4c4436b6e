//! The registry over NATS: request/reply on `$SEMAQ.API.SCHEMA.<OP>`, every argument in a
//! JSON body, answers and errors in the REST API's JSON shapes.
//!
//! | subject suffix | body | answer |
//! |---|---|---|
//! A schema in a body is `"schema"`, `"schemaType"`? and `"references"`? (`[{"name", "subject",
//! "version"}]`), as in the REST API.
//!
//! | subject suffix | body | answer |
//! |---|---|---|
//! | `SUBJECTS` | `{"subjectPrefix"?, "deleted"?, "deletedOnly"?}` | `["s", ...]` |
//! | `VERSIONS` | `{"subject", "deleted"?, "deletedOnly"?}` | `[1, 2]` |
//! | `GET` | `{"subject", "version"? (latest), "deleted"?}` | `{"subject","version","id","schema",...}` |
//! | `REGISTER` | `{"subject", schema, "normalize"?, "id"?, "version"? (IMPORT mode)}` | `{"id"}` |
//! | `LOOKUP` | `{"subject", schema, "normalize"?, "deleted"?}` | as `GET` |
//! | `ID` | `{"id"}` | `{"schema", "schemaType"?, "references"?}` |
//! | `USES` | `{"id", "deleted"?}` | `[{"subject", "version"}]` |
//! | `SCHEMAS` | `{"subjectPrefix"?, "deleted"?, "latestOnly"?}` | `[{"subject","version","id","schema",...}]` |
//! | `REFERENCEDBY` | `{"subject", "version"? (latest), "deleted"?}` | `[id, ...]` |
//! | `TYPES` | | `["JSON", "PROTOBUF", "AVRO"]` |
//! | `CHECK` | `{"subject", "version"?, schema}` | `{"is_compatible", "messages"}` |
//! | `DELETE` | `{"subject", "version"?, "permanent"?}` | deleted versions, or the version |
//! | `CONFIG` | `{"subject"?, "compatibility"?, "delete"?, "defaultToGlobal"?}` | `{"compatibilityLevel"}` |
//! | `MODE` | `{"subject"?, "mode"?, "force"?, "delete"?, "defaultToGlobal"?}` | `{"mode"}` |

use std::sync::{Arc, Weak};

use bytes::Bytes;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::error::RegistryError;
use super::queries::Deleted;
use super::types::{Reference, RegisterOptions, SchemaRequest, VersionInfo};
use super::Registry;
use crate::bus::Bus;
use crate::delivery::{InternalSink, Message};
use crate::limits;
use crate::sync::ByteBudget;

/// The prefix of every schema API subject.
pub const API_PREFIX: &str = "$SEMAQ.API.SCHEMA";

#[derive(Debug)]
struct Request {
    operation: String,
    reply: Option<String>,
    payload: Bytes,
}

#[derive(Debug)]
struct SchemaApiSink {
    queue: mpsc::Sender<Request>,
    budget: Arc<ByteBudget>,
}

impl InternalSink for SchemaApiSink {
    fn receive(&self, message: &Message<'_>) -> bool {
        if !self.budget.try_take(message.payload.len()) {
            return false;
        }
        let operation = message.subject.strip_prefix(API_PREFIX).unwrap_or_default().trim_start_matches('.');
        let request = Request {
            operation: operation.to_string(),
            reply: message.reply.map(str::to_string),
            payload: Bytes::copy_from_slice(message.payload),
        };
        if self.queue.try_send(request).is_err() {
            self.budget.give_back(message.payload.len());
            return false;
        }
        true
    }
}

/// Subscribes to `$SEMAQ.API.SCHEMA.>` and starts the task that answers.
pub fn start(bus: &Arc<Bus>, registry: Arc<Registry>) {
    let (queue, requests) = mpsc::channel(limits::SCHEMA_API_QUEUE_REQUESTS_MAX);
    let budget = Arc::new(ByteBudget::new(limits::SCHEMA_API_QUEUE_BYTES_MAX));
    let sink = Arc::new(SchemaApiSink { queue, budget: budget.clone() });
    if let Err(error) = bus.subscribe_internal(&format!("{API_PREFIX}.>"), None, sink) {
        tracing::error!(%error, "cannot subscribe to the schema API");
        return;
    }
    tokio::spawn(serve(Arc::downgrade(bus), registry, requests, budget));
}

async fn serve(
    bus: Weak<Bus>,
    registry: Arc<Registry>,
    mut requests: mpsc::Receiver<Request>,
    budget: Arc<ByteBudget>,
) {
    while let Some(request) = requests.recv().await {
        budget.give_back(request.payload.len());
        let Some(reply) = request.reply else { continue };
        let answer = match handle(&registry, &request.operation, &request.payload) {
            Ok(body) => body,
            Err(error) => error.to_json(),
        };
        let Some(bus) = bus.upgrade() else { return };
        bus.publish(&reply, None, answer.to_string().as_bytes());
    }
}

/// Every field any operation takes.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct Body {
    subject: Option<String>,
    version: Option<Value>,
    schema: Option<String>,
    schema_type: Option<String>,
    references: Vec<Reference>,
    id: Option<u32>,
    deleted: bool,
    deleted_only: bool,
    permanent: bool,
    compatibility: Option<String>,
    mode: Option<String>,
    delete: bool,
    force: bool,
    default_to_global: bool,
    normalize: bool,
    subject_prefix: String,
    latest_only: bool,
}

impl Body {
    fn subject(&self) -> Result<&str, RegistryError> {
        self.subject.as_deref().ok_or_else(|| RegistryError::InvalidRequest("\"subject\" is required".into()))
    }

    fn version(&self) -> Option<String> {
        self.version.as_ref().map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
    }

    fn id(&self) -> Result<u32, RegistryError> {
        self.id.ok_or_else(|| RegistryError::InvalidRequest("\"id\" is required".into()))
    }

    fn deleted(&self) -> Deleted {
        Deleted::from_flags(self.deleted, self.deleted_only)
    }

    /// REGISTER's options: `normalize`, and the IMPORT-mode id and version.
    fn register_options(&self) -> Result<RegisterOptions, RegistryError> {
        let version = match self.version() {
            None => None,
            Some(text) => Some(text.parse().map_err(|_| RegistryError::InvalidVersion(text))?),
        };
        Ok(RegisterOptions { normalize: self.normalize, id: self.id, version })
    }

    fn schema_request(&self) -> Result<SchemaRequest, RegistryError> {
        let schema =
            self.schema.clone().ok_or_else(|| RegistryError::InvalidRequest("\"schema\" is required".into()))?;
        Ok(SchemaRequest { schema, schema_type: self.schema_type.clone(), references: self.references.clone() })
    }
}

/// Answers one request.
pub fn handle(registry: &Registry, operation: &str, payload: &[u8]) -> Result<Value, RegistryError> {
    let body: Body = if payload.trim_ascii().is_empty() {
        Body::default()
    } else {
        serde_json::from_slice(payload).map_err(|e| RegistryError::InvalidRequest(format!("request body: {e}")))?
    };
    match operation {
        "SUBJECTS" => Ok(json!(registry.list_subjects(&body.subject_prefix, body.deleted()))),
        "VERSIONS" => Ok(json!(registry.list_versions(body.subject()?, body.deleted())?)),
        "GET" => {
            let version = body.version().unwrap_or_else(|| "latest".into());
            Ok(registry.version(body.subject()?, &version, body.deleted)?.to_json())
        }
        "REGISTER" => {
            let id = registry.register_with(body.subject()?, &body.schema_request()?, body.register_options()?)?;
            Ok(json!({ "id": id }))
        }
        "LOOKUP" => {
            let request = body.schema_request()?;
            Ok(registry.lookup_with(body.subject()?, &request, body.deleted, body.normalize)?.to_json())
        }
        "ID" => Ok(registry.schema_by_id(body.id()?)?.to_json()),
        "USES" => {
            let uses = registry.uses_of_with(body.id()?, body.deleted)?;
            Ok(json!(uses.iter().map(|(s, v)| json!({"subject": s, "version": v})).collect::<Vec<_>>()))
        }
        "SCHEMAS" => {
            let mut listed = registry.schemas(&body.subject_prefix, body.deleted, body.latest_only);
            listed.truncate(limits::REGISTRY_LIST_SCHEMAS_MAX);
            Ok(json!(listed.iter().map(VersionInfo::to_json).collect::<Vec<_>>()))
        }
        "REFERENCEDBY" => {
            let version = body.version().unwrap_or_else(|| "latest".into());
            Ok(json!(registry.referenced_by(body.subject()?, &version, body.deleted)?))
        }
        "TYPES" => Ok(json!(["JSON", "PROTOBUF", "AVRO"])),
        "CHECK" => {
            let problems = registry.check(body.subject()?, body.version().as_deref(), &body.schema_request()?)?;
            Ok(json!({ "is_compatible": problems.is_empty(), "messages": problems }))
        }
        "DELETE" => match body.version() {
            Some(version) => Ok(json!(registry.delete_version(body.subject()?, &version, body.permanent)?)),
            None => Ok(json!(registry.delete_subject(body.subject()?, body.permanent)?)),
        },
        "CONFIG" => config(registry, &body),
        "MODE" => mode(registry, &body),
        other => Err(RegistryError::InvalidRequest(format!("unknown schema API operation {other:?}"))),
    }
}

fn config(registry: &Registry, body: &Body) -> Result<Value, RegistryError> {
    let subject = body.subject.as_deref();
    let level = match (&body.compatibility, body.delete, subject) {
        (Some(level), _, _) => registry.set_config(subject, level)?,
        (None, true, subject) => registry.delete_config(subject)?,
        (None, _, _) => registry.config(subject, body.default_to_global)?,
    };
    Ok(json!({ "compatibilityLevel": level.name() }))
}

fn mode(registry: &Registry, body: &Body) -> Result<Value, RegistryError> {
    let subject = body.subject.as_deref();
    let mode = match (&body.mode, body.delete) {
        (Some(mode), _) => registry.set_mode(subject, mode, body.force)?,
        (None, true) => registry.delete_mode(subject)?,
        (None, false) => registry.mode(subject, body.default_to_global)?,
    };
    Ok(json!({ "mode": mode.name() }))
}
