//! `/api/tokens?by=model|subject|intent|agent&window=1h`: the token load as JSON, one series per
//! key with a sum per bucket. A bad `by` or `window` is a 400 with a JSON error.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;

use super::{parse_window, Dimension, Tokens};

/// The query of `/api/tokens`; both keys are optional (`by=model`, `window=1h`).
#[derive(Debug, Deserialize)]
struct TokensQuery {
    by: Option<String>,
    window: Option<String>,
}

/// The token load's HTTP routes.
pub fn routes() -> Router<Arc<Tokens>> {
    Router::new().route("/api/tokens", get(tokens))
}

async fn tokens(State(tokens): State<Arc<Tokens>>, Query(query): Query<TokensQuery>) -> Response {
    let by = query.by.as_deref().unwrap_or("model");
    let Some(dimension) = Dimension::parse(by) else {
        let shown: String = by.chars().take(32).collect();
        return bad_request(format!("by must be model, subject, intent or agent, not {shown:?}"));
    };
    let window = match parse_window(query.window.as_deref().unwrap_or("1h")) {
        Ok(window) => window,
        Err(error) => return bad_request(error.to_string()),
    };
    Json(tokens.report(dimension, window)).into_response()
}

fn bad_request(description: String) -> Response {
    (StatusCode::BAD_REQUEST, Json(json!({ "error": { "code": 400, "description": description } }))).into_response()
}
