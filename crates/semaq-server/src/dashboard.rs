//! The web dashboard on the monitoring port: `/` serves one page (HTML, script and style
//! embedded in the binary, no CDN) that polls the JSON endpoints: `/varz`, `/api/streams`,
//! the registry's `/subjects`, `/semaq/agents`, `/api/tokens` and `/api/latency`.
//! `/api/streams` is here: each stream's info with its consumers', bounded.

use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};

use crate::jetstream::JetStream;
use crate::limits;

const INDEX_HTML: &str = include_str!("../assets/dashboard/index.html");
const APP_JS: &str = include_str!("../assets/dashboard/app.js");
const STYLE_CSS: &str = include_str!("../assets/dashboard/style.css");

/// The dashboard's routes; the state is the home account's JetStream, when it is on.
pub fn routes() -> Router<Option<Arc<JetStream>>> {
    Router::new()
        .route("/", get(|| async { ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], INDEX_HTML) }))
        .route(
            "/dashboard/app.js",
            get(|| async { ([(header::CONTENT_TYPE, "text/javascript; charset=utf-8")], APP_JS) }),
        )
        .route(
            "/dashboard/style.css",
            get(|| async { ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], STYLE_CSS) }),
        )
        .route("/api/streams", get(streams))
}

/// Every stream's info with its consumers' (at most `DASHBOARD_STREAMS_MAX` streams and
/// `DASHBOARD_CONSUMERS_PER_STREAM_MAX` consumers each, by name), and whether any were left out.
async fn streams(State(jetstream): State<Option<Arc<JetStream>>>) -> impl IntoResponse {
    let Some(jetstream) = jetstream else {
        return Json(json!({ "jetstream": false, "streams": [], "truncated": false }));
    };
    let body = tokio::task::spawn_blocking(move || streams_json(&jetstream)).await;
    Json(body.unwrap_or_else(|_| json!({ "jetstream": true, "streams": [], "truncated": false })))
}

fn streams_json(jetstream: &JetStream) -> Value {
    let mut streams = jetstream.streams();
    streams.sort_by(|a, b| a.name.cmp(&b.name));
    let truncated = streams.len() > limits::DASHBOARD_STREAMS_MAX;
    let entries: Vec<Value> = streams
        .iter()
        .take(limits::DASHBOARD_STREAMS_MAX)
        .map(|stream| {
            let mut consumers = stream.consumers();
            consumers.sort_by(|a, b| a.name.cmp(&b.name));
            let consumers: Vec<Value> =
                consumers.iter().take(limits::DASHBOARD_CONSUMERS_PER_STREAM_MAX).map(|c| c.info()).collect();
            let mut info = crate::jetstream::api::stream_info(stream);
            info["level"] = json!(stream.config().level());
            info["consumers"] = json!(consumers);
            info
        })
        .collect();
    json!({ "jetstream": true, "streams": entries, "truncated": truncated })
}
