//! A `$SYS` request's body as nats-server reads it: empty, or a JSON object of the endpoint's
//! options with the event filter (`server_name`, `host`, `cluster`, `exact_match`, `tags`,
//! `domain`) that picks which servers answer.

use serde_json::Value;

use crate::monitor::jsz::JszOptions;
use crate::monitor::{ConnzQuery, Monitor};

/// What an endpoint makes of a request.
#[derive(Debug)]
pub enum Outcome {
    /// The answer's `data`.
    Data(Value),
    /// nats-server's `ApiError`: a code (400 for a body it cannot read, 500 for a request it
    /// cannot serve) and a description.
    Error(u16, String),
}

/// The body's options: `{}` for an empty body, the object otherwise; a body that is not a JSON
/// object is refused with the words Go's `encoding/json` uses for the common cases.
pub fn read(payload: &[u8]) -> Result<Value, String> {
    if payload.is_empty() {
        return Ok(Value::Object(Default::default()));
    }
    match serde_json::from_slice::<Value>(payload) {
        Ok(value @ Value::Object(_)) => Ok(value),
        Ok(other) => Err(format!("json: cannot unmarshal {} into Go value of type struct", kind(&other))),
        Err(error) => Err(go_syntax_error(payload, &error)),
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Array(_) => "array",
        Value::String(_) => "string",
        Value::Number(_) => "number",
        Value::Bool(_) => "bool",
        Value::Null | Value::Object(_) => "object",
    }
}

/// Go's message for a body that does not start as JSON does, else serde's.
fn go_syntax_error(payload: &[u8], error: &serde_json::Error) -> String {
    let first = payload.iter().copied().find(|byte| !byte.is_ascii_whitespace());
    match first {
        Some(byte) if !b"{[\"-0123456789tfn".contains(&byte) => {
            format!("invalid character {:?} looking for beginning of value", char::from(byte))
        }
        None => "unexpected end of JSON input".to_string(),
        Some(_) => error.to_string(),
    }
}

/// nats-server's `EventFilterOptions`.
#[derive(Debug, Default)]
pub struct Filter<'a> {
    name: Option<&'a str>,
    host: Option<&'a str>,
    cluster: Option<&'a str>,
    domain: Option<&'a str>,
    tags: bool,
    exact: bool,
}

impl<'a> From<&'a Value> for Filter<'a> {
    fn from(options: &'a Value) -> Self {
        let text = |key: &str| options.get(key).and_then(Value::as_str).filter(|text| !text.is_empty());
        Self {
            name: text("server_name"),
            host: text("host"),
            cluster: text("cluster"),
            domain: text("domain"),
            tags: options.get("tags").and_then(Value::as_array).is_some_and(|tags| !tags.is_empty()),
            exact: options.get("exact_match").and_then(Value::as_bool).unwrap_or(false),
        }
    }
}

impl Filter<'_> {
    /// Whether the filter names other servers than this one, which then stays silent. SemaQ has
    /// no cluster and no tags: a filter on either excludes it.
    pub fn excludes(&self, monitor: &Monitor) -> bool {
        let name = monitor.identity.server_name.as_str();
        let host = monitor.client_addr.map(|a| a.ip().to_string()).unwrap_or_default();
        let differs = |wanted: Option<&str>, actual: &str| {
            wanted.is_some_and(|wanted| if self.exact { wanted != actual } else { !actual.contains(wanted) })
        };
        let domain = monitor.options.jetstream_domain.as_deref().unwrap_or_default();
        differs(self.name, name)
            || differs(self.host, &host)
            || differs(self.cluster, "")
            || self.tags
            || self.domain.is_some_and(|wanted| wanted != domain)
    }
}

/// nats-server's `ConnzOptions` (`offset`, `limit`, `state` 0 open, 1 closed, 2 all, `acc`),
/// the account forced to `account` when given.
pub fn connz(options: &Value, account: Option<&str>) -> ConnzQuery {
    let number = |key: &str| options.get(key).and_then(Value::as_u64).and_then(|n| usize::try_from(n).ok());
    let state = match options.get("state").and_then(Value::as_u64) {
        Some(1) => Some("closed".to_string()),
        Some(2) => Some("all".to_string()),
        _ => None,
    };
    let acc = account.map(str::to_string).or_else(|| options.get("acc").and_then(Value::as_str).map(str::to_string));
    ConnzQuery { offset: number("offset"), limit: number("limit").filter(|limit| *limit > 0), state, acc }
}

/// nats-server's `JSzOptions` from a request body, with `account` when given.
pub fn jsz(options: &Value) -> JszOptions {
    let flag = |key: &str| options.get(key).and_then(Value::as_bool).unwrap_or(false);
    let number = |key: &str| options.get(key).and_then(Value::as_i64).unwrap_or(0);
    let mut params = std::collections::HashMap::new();
    if let Some(account) = options.get("account").and_then(Value::as_str) {
        params.insert("acc".to_string(), account.to_string());
    }
    for (key, param) in
        [("accounts", "accounts"), ("streams", "streams"), ("consumer", "consumers"), ("config", "config")]
    {
        params.insert(param.to_string(), flag(key).to_string());
    }
    for key in ["offset", "limit"] {
        params.insert(key.to_string(), number(key).to_string());
    }
    JszOptions::from_query(&params).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_body_is_empty_or_a_json_object_and_anything_else_gets_gos_words() {
        assert_eq!(read(b""), Ok(json!({})));
        assert_eq!(read(br#"{"limit": 2}"#), Ok(json!({ "limit": 2 })));
        assert_eq!(read(b"hello"), Err("invalid character 'h' looking for beginning of value".to_string()));
        assert_eq!(read(b"  "), Err("unexpected end of JSON input".to_string()));
        assert!(read(b"5").is_err_and(|error| error.contains("cannot unmarshal number")));
        assert!(read(b"{nope").is_err());
    }

    #[test]
    fn connz_options_map_nats_servers_numbers_and_the_forced_account() {
        let query = connz(&json!({ "state": 1, "offset": 2, "limit": 0, "acc": "B" }), Some("A"));
        assert_eq!(query.state.as_deref(), Some("closed"));
        assert_eq!((query.offset, query.limit), (Some(2), None), "a limit of 0 is the default");
        assert_eq!(query.acc.as_deref(), Some("A"), "an account request is about that account alone");
        assert_eq!(connz(&json!({ "state": 2 }), None).state.as_deref(), Some("all"));
        assert_eq!(connz(&json!({ "acc": "B" }), None).acc.as_deref(), Some("B"));
    }
}
