//! An account's `exports` and `imports`, in nats-server's syntax:
//!
//! ```text
//! exports: [ {stream: "foo.>"}, {service: "req.>", accounts: [B], response_type: stream},
//!            {stream: "to.*.>", account_token_position: 2} ]
//! imports: [ {stream: {account: A, subject: "foo.>"}, prefix: "a"},
//!            {service: {account: A, subject: "req.>"}, to: "areq.>"} ]
//! ```
//!
//! Each entry is checked against the others once the whole file is read, as nats-server does
//! when it adds them to its accounts.

use super::{block, boolean, integer, invalid, parse_go_duration, string, wrong_type, Mapper};
use crate::config_file::syntax::{Kind as ValueKind, Map, Value};
use crate::config_file::{ConfigError, Location};
use crate::imports::{self, AccountLinks, Export, Import, Kind, Latency, ResponseType, Sampling};
use crate::limits;

/// Where one export or import was written, to point an error at it.
#[derive(Debug, Clone)]
pub(super) struct LinkSite {
    account: String,
    import: bool,
    index: usize,
    at: Location,
}

impl Mapper<'_> {
    /// `exports: [ ... ]` of the account `account`.
    pub(super) fn exports(&mut self, account: &str, path: &str, value: &Value) -> Result<Vec<Export>, ConfigError> {
        let mut exports = Vec::new();
        for (index, item) in items(path, value)?.iter().enumerate() {
            exports.push(self.export(path, item)?);
            self.link_sites.push(LinkSite { account: account.to_string(), import: false, index, at: item.at.clone() });
        }
        Ok(exports)
    }

    /// `imports: [ ... ]` of the account `account`.
    pub(super) fn imports(&mut self, account: &str, path: &str, value: &Value) -> Result<Vec<Import>, ConfigError> {
        let mut imports = Vec::new();
        for (index, item) in items(path, value)?.iter().enumerate() {
            imports.push(self.import(path, item)?);
            self.link_sites.push(LinkSite { account: account.to_string(), import: true, index, at: item.at.clone() });
        }
        Ok(imports)
    }

    fn export(&mut self, path: &str, item: &Value) -> Result<Export, ConfigError> {
        let map = entry_block(path, "Export", item)?;
        let (mut kind, mut subject, mut accounts, mut response) = (None, None, Vec::new(), None);
        let mut position = 0;
        let (mut latency, mut threshold, mut allow_trace) = (None, None, None);
        for entry in &map.entries {
            let v = &entry.value;
            match entry.key.to_ascii_lowercase().as_str() {
                word @ ("stream" | "service") => {
                    let this = if word == "stream" { Kind::Stream } else { Kind::Service };
                    if let Some(seen) = kind.filter(|seen: &Kind| *seen != this) {
                        let text = format!("Detected {} {:?} but already saw a {}", this.word(), v.text, seen.word());
                        return Err(invalid(&entry.at, text));
                    }
                    kind = Some(this);
                    subject = Some(string(&format!("{path}.{word}"), v)?);
                }
                "accounts" => accounts = names(&format!("{path}.accounts"), v)?,
                "response" | "response_type" => response = Some((response_type(v)?, entry.at.clone())),
                // nats-server's config has no activation tokens, so it refuses the key; ignoring
                // it would make public an export meant to need one.
                "token_req" => return Err(invalid(&entry.at, "unknown field \"token_req\"".to_string())),
                "account_token_position" => {
                    let at = integer(&format!("{path}.account_token_position"), v)?;
                    position = usize::try_from(at).unwrap_or(usize::MAX);
                }
                "latency" => latency = Some((service_latency(v)?, entry.at.clone())),
                "threshold" | "response_threshold" | "response_max_time" | "response_time" => {
                    if threshold.is_some() {
                        return Err(invalid(&entry.at, "Duplicate response threshold detected".to_string()));
                    }
                    threshold = Some((response_threshold(v)?, entry.at.clone()));
                }
                "allow_trace" => allow_trace = Some((boolean(&format!("{path}.allow_trace"), v)?, entry.at.clone())),
                _ => self.unknown(entry, path),
            }
        }
        let (Some(kind), Some(subject)) = (kind, subject) else {
            return Err(invalid(&item.at, "Export entry needs a stream or a service".to_string()));
        };
        if let (Kind::Stream, Some((_, at))) = (kind, &threshold) {
            return Err(invalid(at, "Detected response directive on non-service".to_string()));
        }
        if let (Kind::Stream, Some((_, at))) = (kind, &allow_trace) {
            return Err(invalid(at, "Detected allow_trace directive on non-service".to_string()));
        }
        if let (Kind::Stream, Some((_, at))) = (kind, &response) {
            return Err(invalid(at, "Detected response directive on non-service".to_string()));
        }
        if let (Kind::Stream, Some((_, at))) = (kind, &latency) {
            return Err(invalid(at, "Detected latency directive on non-service".to_string()));
        }
        let response = response.map(|(response, _)| response).unwrap_or_default();
        let latency = latency.map(|(latency, _)| latency);
        let response_threshold = threshold.map(|(threshold, _)| threshold);
        let export = Export::new(kind, subject, accounts, response);
        let allow_trace = allow_trace.is_some_and(|(allow, _)| allow);
        Ok(Export { account_token_position: position, latency, response_threshold, allow_trace, ..export })
    }

    fn import(&mut self, path: &str, item: &Value) -> Result<Import, ConfigError> {
        let map = entry_block(path, "Import", item)?;
        let (mut source, mut prefix, mut to, mut share) = (None, None, None, false);
        let mut allow_trace = None;
        for entry in &map.entries {
            let v = &entry.value;
            match entry.key.to_ascii_lowercase().as_str() {
                word @ ("stream" | "service") => {
                    let this = if word == "stream" { Kind::Stream } else { Kind::Service };
                    if let Some((seen, _, _)) = source.as_ref().filter(|(seen, _, _)| *seen != this) {
                        let text = format!("Detected {} but already saw a {}", this.word(), Kind::word(*seen));
                        return Err(invalid(&entry.at, text));
                    }
                    let (account, subject) = account_subject(&format!("{path}.{word}"), v)?;
                    source = Some((this, account, subject));
                }
                "prefix" => prefix = Some((string(&format!("{path}.prefix"), v)?, entry.at.clone())),
                "to" => to = Some(string(&format!("{path}.to"), v)?),
                "share" => share = boolean(&format!("{path}.share"), v)?,
                "allow_trace" => allow_trace = Some((boolean(&format!("{path}.allow_trace"), v)?, entry.at.clone())),
                _ => self.unknown(entry, path),
            }
        }
        let Some((kind, account, subject)) = source else {
            return Err(invalid(&item.at, "Import entry needs a stream or a service".to_string()));
        };
        if let (Kind::Service, Some((_, at))) = (kind, &prefix) {
            return Err(invalid(at, "Detected prefix on a service import; use 'to'".to_string()));
        }
        if let (Kind::Service, Some((_, at))) = (kind, &allow_trace) {
            return Err(invalid(at, "Detected allow_trace directive on a non-stream".to_string()));
        }
        let prefix = prefix.map(|(prefix, _)| prefix);
        let allow_trace = allow_trace.is_some_and(|(allow, _)| allow);
        Ok(Import { kind, account, subject, to, prefix, activation: None, share, allow_trace })
    }

    /// Checks every account's exports and imports against each other; the first that does not
    /// hold is an error at its line, in nats-server's words.
    pub(super) fn check_imports(&self) -> Result<(), ConfigError> {
        let accounts: Vec<AccountLinks<'_>> = self
            .options
            .accounts
            .iter()
            .map(|a| AccountLinks { name: &a.name, exports: &a.exports, imports: &a.imports })
            .collect();
        let (_, errors) = imports::resolve(&accounts);
        let Some(((account, index), error)) = errors.into_iter().next() else { return Ok(()) };
        let import =
            matches!(error, imports::ImportError::UnknownAccount { .. } | imports::ImportError::Refused { .. });
        let site = self.link_sites.iter().find(|s| s.account == account && s.import == import && s.index == index);
        // Every entry was recorded with its site; a missing one would only lose the position.
        let at = site.map_or(Location { file: None, line: 0, column: 0 }, |site| site.at.clone());
        Err(invalid(&at, error.to_string()))
    }
}

/// The entries of an `exports` or `imports` array, bounded.
fn items<'v>(path: &str, value: &'v Value) -> Result<&'v [Value], ConfigError> {
    let ValueKind::Array(items) = &value.kind else {
        return Err(wrong_type(path, "an array", value));
    };
    if items.len() > limits::ACCOUNT_IMPORTS_MAX {
        return Err(invalid(&value.at, format!("{path} lists more than {} entries", limits::ACCOUNT_IMPORTS_MAX)));
    }
    Ok(items)
}

fn entry_block<'v>(path: &str, what: &str, item: &'v Value) -> Result<&'v Map, ConfigError> {
    match &item.kind {
        ValueKind::Map(map) => Ok(map),
        _ => Err(invalid(&item.at, format!("{what} Items should be a map with type entry, in \"{path}\""))),
    }
}

fn names(path: &str, value: &Value) -> Result<Vec<String>, ConfigError> {
    match &value.kind {
        ValueKind::Array(items) => items.iter().map(|item| string(path, item)).collect(),
        _ => Err(wrong_type(path, "an array of account names", value)),
    }
}

fn response_type(value: &Value) -> Result<ResponseType, ConfigError> {
    let text = string("response_type", value)?;
    match text.to_ascii_lowercase().as_str() {
        "single" | "singleton" => Ok(ResponseType::Singleton),
        "stream" => Ok(ResponseType::Stream),
        "chunk" | "chunked" => Ok(ResponseType::Chunked),
        _ => Err(invalid(&value.at, format!("Unknown response type: {text:?}"))),
    }
}

/// A service export's `response_threshold`: a Go duration string, as nats-server reads it.
fn response_threshold(value: &Value) -> Result<std::time::Duration, ConfigError> {
    let ValueKind::String(text) = &value.kind else {
        let text = format!("Expected response threshold to be a parseable time duration, got {}", go_type(value));
        return Err(invalid(&value.at, text));
    };
    parse_go_duration(text).ok_or_else(|| {
        invalid(&value.at, format!("Expected response threshold to be a parseable time duration, got {text:?}"))
    })
}

/// A service export's `latency`: its results subject alone (every request measured), or
/// `{sampling: 50 | "50%" | headers, subject: "..."}`, read as nats-server's `parseServiceLatency`.
fn service_latency(value: &Value) -> Result<Latency, ConfigError> {
    let map = match &value.kind {
        ValueKind::String(subject) => {
            return Ok(Latency { sampling: Sampling::Percent(100), subject: subject.clone() })
        }
        ValueKind::Map(map) => map,
        _ => {
            return Err(invalid(
                &value.at,
                format!("Expected latency entry to be a map/struct or string, got {}", go_type(value)),
            ))
        }
    };
    let (mut sampling, mut subject) = (Sampling::Percent(100), None);
    for entry in &map.entries {
        let v = &entry.value;
        match entry.key.to_ascii_lowercase().as_str() {
            "sampling" => sampling = latency_sampling(v)?,
            "subject" => match &v.kind {
                ValueKind::String(text) => subject = Some(text.clone()),
                _ => {
                    return Err(invalid(&v.at, format!("Expected latency subject to be a string, got {}", go_type(v))))
                }
            },
            _ => {}
        }
    }
    let Some(subject) = subject else {
        return Err(invalid(&value.at, "Latency subject required, but missing".to_string()));
    };
    Ok(Latency { sampling, subject })
}

/// `sampling`: a percentage (`50` or `"50%"`) from 1 to 100, or `headers`.
fn latency_sampling(value: &Value) -> Result<Sampling, ConfigError> {
    let percent = match &value.kind {
        ValueKind::Integer(number) => *number,
        ValueKind::String(text) if text.trim().eq_ignore_ascii_case("headers") => return Ok(Sampling::Headers),
        ValueKind::String(text) => text.strip_suffix('%').unwrap_or(text).parse::<i64>().map_err(|_| {
            invalid(
                &value.at,
                format!("Failed to parse latency sample: strconv.Atoi: parsing {text:?}: invalid syntax"),
            )
        })?,
        _ => {
            let text = format!("Expected latency sample to be a string or map/struct, got {}", go_type(value));
            return Err(invalid(&value.at, text));
        }
    };
    match u8::try_from(percent) {
        Ok(percent @ 1..=100) => Ok(Sampling::Percent(percent)),
        _ => Err(invalid(&value.at, "bad sampling percentage, should be 1-100".to_string())),
    }
}

/// The Go type nats-server names in its messages for a value of this kind.
fn go_type(value: &Value) -> &'static str {
    match value.kind {
        ValueKind::String(_) => "string",
        ValueKind::Integer(_) => "int64",
        ValueKind::Float(_) => "float64",
        ValueKind::Bool(_) => "bool",
        ValueKind::Array(_) => "[]interface {}",
        ValueKind::Map(_) => "map[string]interface {}",
    }
}

/// `{account: A, subject: "foo.>"}`.
fn account_subject(path: &str, value: &Value) -> Result<(String, String), ConfigError> {
    let map = block(path, value)?;
    let (mut account, mut subject) = (String::new(), String::new());
    for entry in &map.entries {
        match entry.key.to_ascii_lowercase().as_str() {
            "account" => account = string(&format!("{path}.account"), &entry.value)?,
            "subject" => subject = string(&format!("{path}.subject"), &entry.value)?,
            _ => {}
        }
    }
    if account.is_empty() || subject.is_empty() {
        return Err(invalid(&value.at, "Expect an account name and a subject".to_string()));
    }
    Ok((account, subject))
}
