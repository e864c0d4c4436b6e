//! The Confluent Schema Registry REST API on the monitoring port: same paths, JSON shapes,
//! content type and `{"error_code", "message"}` errors, so Confluent's clients work unchanged.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::{json, Value};

use super::error::RegistryError;
use super::types::SchemaRequest;
use super::Registry;
use crate::server::Shared;

/// Confluent's response content type.
pub const CONTENT_TYPE: &str = "application/vnd.schemaregistry.v1+json";

type Params = Query<HashMap<String, String>>;
type Shared_ = State<Arc<Shared>>;

/// The registry's routes, merged into the monitoring router.
pub fn routes() -> Router<Arc<Shared>> {
    Router::new()
        .route("/subjects", get(list_subjects))
        .route("/subjects/{subject}", post(lookup).delete(delete_subject))
        .route("/subjects/{subject}/versions", get(list_versions).post(register))
        .route("/subjects/{subject}/versions/{version}", get(get_version).delete(delete_version))
        .route("/subjects/{subject}/versions/{version}/schema", get(get_version_schema))
        .route("/schemas/ids/{id}", get(schema_by_id))
        .route("/schemas/ids/{id}/schema", get(raw_schema_by_id))
        .route("/schemas/ids/{id}/versions", get(versions_by_id))
        .route("/schemas/ids/{id}/subjects", get(subjects_by_id))
        .route("/schemas/types", get(schema_types))
        .route("/compatibility/subjects/{subject}/versions/{version}", post(compatibility_with_version))
        .route("/compatibility/subjects/{subject}/versions", post(compatibility_with_all))
        .route("/config", get(get_global_config).put(put_global_config))
        .route("/config/{subject}", get(get_subject_config).put(put_subject_config).delete(delete_subject_config))
}

fn flag(params: &HashMap<String, String>, name: &str) -> bool {
    params.get(name).is_some_and(|v| v.eq_ignore_ascii_case("true"))
}

fn registry(shared: &Shared) -> Result<&Arc<Registry>, RegistryError> {
    shared.registry.get().ok_or_else(|| RegistryError::Storage("the schema registry is not running".into()))
}

fn respond(result: Result<Value, RegistryError>) -> Response {
    let (status, body) = match result {
        Ok(body) => (StatusCode::OK, body),
        Err(error) => {
            (StatusCode::from_u16(error.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), error.to_json())
        }
    };
    (status, [(header::CONTENT_TYPE, CONTENT_TYPE)], body.to_string()).into_response()
}

fn body<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, RegistryError> {
    serde_json::from_slice(bytes).map_err(|e| RegistryError::InvalidRequest(format!("request body: {e}")))
}

fn schema_id(text: &str) -> Result<u32, RegistryError> {
    text.parse().map_err(|_| RegistryError::SchemaNotFound(text.to_string()))
}

async fn list_subjects(State(shared): Shared_, Query(params): Params) -> Response {
    respond(registry(&shared).map(|r| json!(r.subjects(flag(&params, "deleted")))))
}

async fn list_versions(State(shared): Shared_, Path(subject): Path<String>, Query(params): Params) -> Response {
    respond(registry(&shared).and_then(|r| r.versions(&subject, flag(&params, "deleted"))).map(|v| json!(v)))
}

async fn register(State(shared): Shared_, Path(subject): Path<String>, bytes: Bytes) -> Response {
    respond((|| {
        let request: SchemaRequest = body(&bytes)?;
        let id = registry(&shared)?.register(&subject, &request)?;
        Ok(json!({ "id": id }))
    })())
}

async fn lookup(State(shared): Shared_, Path(subject): Path<String>, Query(params): Params, bytes: Bytes) -> Response {
    respond((|| {
        let request: SchemaRequest = body(&bytes)?;
        Ok(registry(&shared)?.lookup(&subject, &request, flag(&params, "deleted"))?.to_json())
    })())
}

async fn get_version(
    State(shared): Shared_,
    Path((subject, version)): Path<(String, String)>,
    Query(params): Params,
) -> Response {
    respond(
        registry(&shared).and_then(|r| r.version(&subject, &version, flag(&params, "deleted"))).map(|v| v.to_json()),
    )
}

/// The schema text itself, as the response body.
async fn get_version_schema(State(shared): Shared_, Path((subject, version)): Path<(String, String)>) -> Response {
    let result = registry(&shared).and_then(|r| r.version(&subject, &version, false));
    raw(result.map(|info| info.schema.schema))
}

fn raw(result: Result<String, RegistryError>) -> Response {
    match result {
        Ok(text) => (StatusCode::OK, [(header::CONTENT_TYPE, CONTENT_TYPE)], text).into_response(),
        Err(error) => respond(Err(error)),
    }
}

async fn delete_subject(State(shared): Shared_, Path(subject): Path<String>, Query(params): Params) -> Response {
    respond(registry(&shared).and_then(|r| r.delete_subject(&subject, flag(&params, "permanent"))).map(|v| json!(v)))
}

async fn delete_version(
    State(shared): Shared_,
    Path((subject, version)): Path<(String, String)>,
    Query(params): Params,
) -> Response {
    let result = registry(&shared).and_then(|r| r.delete_version(&subject, &version, flag(&params, "permanent")));
    respond(result.map(|v| json!(v)))
}

async fn schema_by_id(State(shared): Shared_, Path(id): Path<String>) -> Response {
    respond(schema_id(&id).and_then(|id| registry(&shared)?.schema_by_id(id)).map(|s| s.to_json()))
}

async fn raw_schema_by_id(State(shared): Shared_, Path(id): Path<String>) -> Response {
    raw(schema_id(&id).and_then(|id| registry(&shared)?.schema_by_id(id)).map(|s| s.schema))
}

async fn versions_by_id(State(shared): Shared_, Path(id): Path<String>) -> Response {
    let uses = schema_id(&id).and_then(|id| registry(&shared)?.uses_of(id));
    respond(uses.map(|uses| json!(uses.iter().map(|(s, v)| json!({"subject": s, "version": v})).collect::<Vec<_>>())))
}

async fn subjects_by_id(State(shared): Shared_, Path(id): Path<String>) -> Response {
    let uses = schema_id(&id).and_then(|id| registry(&shared)?.uses_of(id));
    respond(uses.map(|uses| {
        let mut subjects: Vec<String> = uses.into_iter().map(|(s, _)| s).collect();
        subjects.dedup();
        json!(subjects)
    }))
}

async fn schema_types() -> Response {
    respond(Ok(json!(["JSON", "PROTOBUF", "AVRO"])))
}

fn compatibility(
    shared: &Shared,
    subject: &str,
    version: Option<&str>,
    params: &HashMap<String, String>,
    bytes: &[u8],
) -> Response {
    respond((|| {
        let request: SchemaRequest = body(bytes)?;
        let problems = registry(shared)?.check(subject, version, &request)?;
        let mut answer = json!({ "is_compatible": problems.is_empty() });
        if flag(params, "verbose") {
            answer["messages"] = json!(problems);
        }
        Ok(answer)
    })())
}

async fn compatibility_with_version(
    State(shared): Shared_,
    Path((subject, version)): Path<(String, String)>,
    Query(params): Params,
    bytes: Bytes,
) -> Response {
    compatibility(&shared, &subject, Some(&version), &params, &bytes)
}

async fn compatibility_with_all(
    State(shared): Shared_,
    Path(subject): Path<String>,
    Query(params): Params,
    bytes: Bytes,
) -> Response {
    compatibility(&shared, &subject, None, &params, &bytes)
}

/// `PUT /config` body; Confluent's clients send `compatibility` or `compatibilityLevel`.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct ConfigRequest {
    compatibility: Option<String>,
    compatibility_level: Option<String>,
}

impl ConfigRequest {
    fn level(&self) -> Result<&str, RegistryError> {
        self.compatibility.as_deref().or(self.compatibility_level.as_deref()).ok_or(RegistryError::InvalidCompatibility)
    }
}

async fn get_global_config(State(shared): Shared_) -> Response {
    respond(registry(&shared).and_then(|r| r.config(None, true)).map(|l| json!({ "compatibilityLevel": l.name() })))
}

async fn put_global_config(State(shared): Shared_, bytes: Bytes) -> Response {
    respond((|| {
        let request: ConfigRequest = body(&bytes)?;
        Ok(json!({ "compatibility": registry(&shared)?.set_config(None, request.level()?)?.name() }))
    })())
}

async fn get_subject_config(State(shared): Shared_, Path(subject): Path<String>, Query(params): Params) -> Response {
    let level = registry(&shared).and_then(|r| r.config(Some(&subject), flag(&params, "defaultToGlobal")));
    respond(level.map(|l| json!({ "compatibilityLevel": l.name() })))
}

async fn put_subject_config(State(shared): Shared_, Path(subject): Path<String>, bytes: Bytes) -> Response {
    respond((|| {
        let request: ConfigRequest = body(&bytes)?;
        Ok(json!({ "compatibility": registry(&shared)?.set_config(Some(&subject), request.level()?)?.name() }))
    })())
}

async fn delete_subject_config(State(shared): Shared_, Path(subject): Path<String>) -> Response {
    respond(
        registry(&shared).and_then(|r| r.delete_config(&subject)).map(|l| json!({ "compatibilityLevel": l.name() })),
    )
}
