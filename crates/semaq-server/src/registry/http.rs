//! The Confluent Schema Registry REST API on the monitoring port: same paths, query
//! parameters, JSON shapes, content type and `{"error_code", "message"}` errors, so
//! Confluent's clients work unchanged.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde::Deserialize;
use serde_json::{json, Value};

use super::error::RegistryError;
use super::queries::Deleted;
use super::types::{RegisterOptions, SchemaRequest, VersionInfo};
use super::Registry;
use crate::limits;

/// Confluent's response content type.
pub const CONTENT_TYPE: &str = "application/vnd.schemaregistry.v1+json";

/// The one context this registry has: Confluent's default.
pub const DEFAULT_CONTEXT: &str = ".";

type Params = Query<HashMap<String, String>>;
type RegistryState = State<Arc<Registry>>;

/// The registry's routes, merged into the monitoring router.
pub fn routes() -> Router<Arc<Registry>> {
    Router::new()
        .route("/subjects", get(list_subjects))
        .route("/subjects/{subject}", post(lookup).delete(delete_subject))
        .route("/subjects/{subject}/versions", get(list_versions).post(register))
        .route("/subjects/{subject}/versions/{version}", get(get_version).delete(delete_version))
        .route("/subjects/{subject}/versions/{version}/schema", get(get_version_schema))
        .route("/subjects/{subject}/versions/{version}/referencedby", get(referenced_by))
        .route("/schemas", get(list_schemas))
        .route("/schemas/ids/{id}", get(schema_by_id))
        .route("/schemas/ids/{id}/schema", get(raw_schema_by_id))
        .route("/schemas/ids/{id}/versions", get(versions_by_id))
        .route("/schemas/ids/{id}/subjects", get(subjects_by_id))
        .route("/schemas/types", get(schema_types))
        .route("/compatibility/subjects/{subject}/versions/{version}", post(compatibility_with_version))
        .route("/compatibility/subjects/{subject}/versions", post(compatibility_with_all))
        .route("/config", get(get_global_config).put(put_global_config).delete(delete_global_config))
        .route("/config/{subject}", get(get_subject_config).put(put_subject_config).delete(delete_subject_config))
        .route("/mode", get(get_global_mode).put(put_global_mode).delete(delete_global_mode))
        .route("/mode/{subject}", get(get_subject_mode).put(put_subject_mode).delete(delete_subject_mode))
        .route("/contexts", get(contexts))
}

fn flag(params: &HashMap<String, String>, name: &str) -> bool {
    params.get(name).is_some_and(|v| v.eq_ignore_ascii_case("true"))
}

fn deleted_filter(params: &HashMap<String, String>) -> Deleted {
    Deleted::from_flags(flag(params, "deleted"), flag(params, "deletedOnly") || flag(params, "deleted_only"))
}

/// Confluent's `offset` and `limit`: a limit outside (0, `max`] means `max` (all when `None`).
fn page<T>(items: Vec<T>, params: &HashMap<String, String>, max: Option<usize>) -> Vec<T> {
    let number = |name: &str| params.get(name).and_then(|v| v.parse::<i64>().ok());
    let offset = number("offset").and_then(|o| usize::try_from(o).ok()).unwrap_or(0);
    let ceiling = max.unwrap_or(usize::MAX);
    let limit = number("limit").and_then(|l| usize::try_from(l).ok()).filter(|l| (1..=ceiling).contains(l));
    items.into_iter().skip(offset).take(limit.unwrap_or(ceiling)).collect()
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

async fn list_subjects(State(registry): RegistryState, Query(params): Params) -> Response {
    let prefix = params.get("subjectPrefix").map(String::as_str).filter(|p| *p != ":*:").unwrap_or("");
    respond(Ok(json!(page(registry.list_subjects(prefix, deleted_filter(&params)), &params, None))))
}

async fn list_versions(State(registry): RegistryState, Path(subject): Path<String>, Query(params): Params) -> Response {
    let versions = registry.list_versions(&subject, deleted_filter(&params));
    respond(versions.map(|v| json!(page(v, &params, None))))
}

/// `POST /subjects/{s}/versions`: a schema request, plus `id` and `version` in IMPORT mode.
#[derive(Deserialize)]
struct RegisterBody {
    #[serde(flatten)]
    request: SchemaRequest,
    id: Option<i64>,
    version: Option<i64>,
}

fn positive(value: Option<i64>) -> Result<Option<u32>, RegistryError> {
    match value {
        None => Ok(None),
        Some(n) if n <= 0 => Ok(None),
        Some(n) => u32::try_from(n).map(Some).map_err(|_| RegistryError::InvalidVersion(n.to_string())),
    }
}

async fn register(
    State(registry): RegistryState,
    Path(subject): Path<String>,
    Query(params): Params,
    bytes: Bytes,
) -> Response {
    respond((|| {
        let request: RegisterBody = body(&bytes)?;
        let options = RegisterOptions {
            normalize: flag(&params, "normalize"),
            id: positive(request.id)?,
            version: positive(request.version)?,
        };
        let id = registry.register_with(&subject, &request.request, options)?;
        Ok(json!({ "id": id }))
    })())
}

async fn lookup(
    State(registry): RegistryState,
    Path(subject): Path<String>,
    Query(params): Params,
    bytes: Bytes,
) -> Response {
    respond((|| {
        let request: SchemaRequest = body(&bytes)?;
        let (deleted, normalize) = (flag(&params, "deleted"), flag(&params, "normalize"));
        Ok(registry.lookup_with(&subject, &request, deleted, normalize)?.to_json())
    })())
}

async fn get_version(
    State(registry): RegistryState,
    Path((subject, version)): Path<(String, String)>,
    Query(params): Params,
) -> Response {
    respond(registry.version(&subject, &version, flag(&params, "deleted")).map(|v| v.to_json()))
}

/// The schema text itself, as the response body.
async fn get_version_schema(
    State(registry): RegistryState,
    Path((subject, version)): Path<(String, String)>,
    Query(params): Params,
) -> Response {
    let result = registry.version(&subject, &version, flag(&params, "deleted"));
    raw(result.map(|info| info.schema.schema))
}

async fn referenced_by(
    State(registry): RegistryState,
    Path((subject, version)): Path<(String, String)>,
    Query(params): Params,
) -> Response {
    let ids = registry.referenced_by(&subject, &version, flag(&params, "deleted"));
    respond(ids.map(|ids| json!(page(ids, &params, Some(limits::REGISTRY_LIST_SCHEMAS_MAX)))))
}

fn raw(result: Result<String, RegistryError>) -> Response {
    match result {
        Ok(text) => (StatusCode::OK, [(header::CONTENT_TYPE, CONTENT_TYPE)], text).into_response(),
        Err(error) => respond(Err(error)),
    }
}

async fn delete_subject(
    State(registry): RegistryState,
    Path(subject): Path<String>,
    Query(params): Params,
) -> Response {
    respond(registry.delete_subject(&subject, flag(&params, "permanent")).map(|v| json!(v)))
}

async fn delete_version(
    State(registry): RegistryState,
    Path((subject, version)): Path<(String, String)>,
    Query(params): Params,
) -> Response {
    let result = registry.delete_version(&subject, &version, flag(&params, "permanent"));
    respond(result.map(|v| json!(v)))
}

async fn list_schemas(State(registry): RegistryState, Query(params): Params) -> Response {
    let prefix = params.get("subjectPrefix").map(String::as_str).unwrap_or("");
    let listed = registry.schemas(prefix, flag(&params, "deleted"), flag(&params, "latestOnly"));
    let listed = page(listed, &params, Some(limits::REGISTRY_LIST_SCHEMAS_MAX));
    respond(Ok(json!(listed.iter().map(VersionInfo::to_json).collect::<Vec<_>>())))
}

async fn schema_by_id(State(registry): RegistryState, Path(id): Path<String>) -> Response {
    respond(schema_id(&id).and_then(|id| registry.schema_by_id(id)).map(|s| s.to_json()))
}

async fn raw_schema_by_id(State(registry): RegistryState, Path(id): Path<String>) -> Response {
    raw(schema_id(&id).and_then(|id| registry.schema_by_id(id)).map(|s| s.schema))
}

/// Uses of schema `id`, narrowed to `?subject=` when given.
fn uses(registry: &Registry, id: &str, params: &HashMap<String, String>) -> Result<Vec<(String, u32)>, RegistryError> {
    let mut uses = registry.uses_of_with(schema_id(id)?, flag(params, "deleted"))?;
    if let Some(subject) = params.get("subject").filter(|s| !s.is_empty()) {
        uses.retain(|(name, _)| name == subject);
    }
    Ok(uses)
}

async fn versions_by_id(State(registry): RegistryState, Path(id): Path<String>, Query(params): Params) -> Response {
    let listed = uses(&registry, &id, &params).map(|uses| {
        let pairs: Vec<Value> = uses.iter().map(|(s, v)| json!({"subject": s, "version": v})).collect();
        json!(page(pairs, &params, None))
    });
    respond(listed)
}

async fn subjects_by_id(State(registry): RegistryState, Path(id): Path<String>, Query(params): Params) -> Response {
    let listed = uses(&registry, &id, &params).map(|uses| {
        let mut subjects: Vec<String> = uses.into_iter().map(|(s, _)| s).collect();
        subjects.dedup();
        json!(page(subjects, &params, None))
    });
    respond(listed)
}

async fn schema_types() -> Response {
    respond(Ok(json!(["JSON", "PROTOBUF", "AVRO"])))
}

async fn contexts() -> Response {
    respond(Ok(json!([DEFAULT_CONTEXT])))
}

fn compatibility(
    registry: &Registry,
    subject: &str,
    version: Option<&str>,
    params: &HashMap<String, String>,
    bytes: &[u8],
) -> Response {
    respond((|| {
        let request: SchemaRequest = body(bytes)?;
        let problems = registry.check(subject, version, &request)?;
        let mut answer = json!({ "is_compatible": problems.is_empty() });
        if flag(params, "verbose") {
            answer["messages"] = json!(problems);
        }
        Ok(answer)
    })())
}

async fn compatibility_with_version(
    State(registry): RegistryState,
    Path((subject, version)): Path<(String, String)>,
    Query(params): Params,
    bytes: Bytes,
) -> Response {
    compatibility(&registry, &subject, Some(&version), &params, &bytes)
}

async fn compatibility_with_all(
    State(registry): RegistryState,
    Path(subject): Path<String>,
    Query(params): Params,
    bytes: Bytes,
) -> Response {
    compatibility(&registry, &subject, None, &params, &bytes)
}

/// `PUT /config` body; Confluent's clients send `compatibility` or `compatibilityLevel`.
#[derive(Deserialize)]
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

fn config_json(level: super::types::Compatibility) -> Value {
    json!({ "compatibilityLevel": level.name() })
}

async fn get_global_config(State(registry): RegistryState) -> Response {
    respond(registry.config(None, true).map(config_json))
}

async fn put_global_config(State(registry): RegistryState, bytes: Bytes) -> Response {
    set_config(&registry, None, &bytes)
}

fn set_config(registry: &Registry, subject: Option<&str>, bytes: &[u8]) -> Response {
    respond((|| {
        let request: ConfigRequest = body(bytes)?;
        Ok(json!({ "compatibility": registry.set_config(subject, request.level()?)?.name() }))
    })())
}

async fn delete_global_config(State(registry): RegistryState) -> Response {
    respond(registry.delete_config(None).map(config_json))
}

async fn get_subject_config(
    State(registry): RegistryState,
    Path(subject): Path<String>,
    Query(params): Params,
) -> Response {
    let level = registry.config(Some(&subject), flag(&params, "defaultToGlobal"));
    respond(level.map(config_json))
}

async fn put_subject_config(State(registry): RegistryState, Path(subject): Path<String>, bytes: Bytes) -> Response {
    set_config(&registry, Some(&subject), &bytes)
}

async fn delete_subject_config(State(registry): RegistryState, Path(subject): Path<String>) -> Response {
    respond(registry.delete_config(Some(&subject)).map(config_json))
}

/// `PUT /mode` body.
#[derive(Deserialize)]
struct ModeRequest {
    mode: Option<String>,
}

fn mode_json(mode: super::types::Mode) -> Value {
    json!({ "mode": mode.name() })
}

fn get_mode(registry: &Registry, subject: Option<&str>, params: &HashMap<String, String>) -> Response {
    respond(registry.mode(subject, flag(params, "defaultToGlobal")).map(mode_json))
}

fn set_mode(registry: &Registry, subject: Option<&str>, params: &HashMap<String, String>, bytes: &[u8]) -> Response {
    respond((|| {
        let request: ModeRequest = body(bytes)?;
        let mode = request.mode.ok_or(RegistryError::InvalidMode)?;
        Ok(mode_json(registry.set_mode(subject, &mode, flag(params, "force"))?))
    })())
}

async fn get_global_mode(State(registry): RegistryState, Query(params): Params) -> Response {
    get_mode(&registry, None, &params)
}

async fn put_global_mode(State(registry): RegistryState, Query(params): Params, bytes: Bytes) -> Response {
    set_mode(&registry, None, &params, &bytes)
}

async fn delete_global_mode(State(registry): RegistryState) -> Response {
    respond(registry.delete_mode(None).map(mode_json))
}

async fn get_subject_mode(
    State(registry): RegistryState,
    Path(subject): Path<String>,
    Query(params): Params,
) -> Response {
    get_mode(&registry, Some(&subject), &params)
}

async fn put_subject_mode(
    State(registry): RegistryState,
    Path(subject): Path<String>,
    Query(params): Params,
    bytes: Bytes,
) -> Response {
    set_mode(&registry, Some(&subject), &params, &bytes)
}

async fn delete_subject_mode(State(registry): RegistryState, Path(subject): Path<String>) -> Response {
    respond(registry.delete_mode(Some(&subject)).map(mode_json))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_and_limit_page_like_confluent() {
        let params = |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let items: Vec<u32> = (1..=5).collect();
        assert_eq!(page(items.clone(), &params(&[]), None), items);
        assert_eq!(page(items.clone(), &params(&[("offset", "1"), ("limit", "2")]), None), vec![2, 3]);
        assert_eq!(page(items.clone(), &params(&[("limit", "-1")]), Some(3)), vec![1, 2, 3]);
        assert_eq!(page(items.clone(), &params(&[("limit", "9")]), Some(3)), vec![1, 2, 3]);
        assert_eq!(page(items, &params(&[("offset", "7")]), None), Vec::<u32>::new());
    }
}
