//! The checks of an account JWT's imports and exports that nats-io/jwt (v2.3, nats-server 2.9's)
//! counts as blocking: nats-server refuses a whole account failing one (its users get
//! `Authorization Violation`), where a check the library does not make only leaves the link out.
//! Activation tokens are checked apart ([`super::trust::activation_claims`]), as they need the
//! decoded import.

use super::jwt::{ExportClaim, ImportClaim, LatencyClaim};

/// A blocking issue of an account's links; the texts are the jwt library's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LinkError {
    /// A `type` other than `stream` or `service` (nats-server fails to even decode most).
    #[error("invalid {0} type: {1:?}")]
    Kind(&'static str, String),
    /// An import naming no account to import from.
    #[error("account to import from is not specified")]
    NoAccount,
    /// An empty subject.
    #[error("subject cannot be empty")]
    EmptySubject,
    /// A subject with a space.
    #[error("subject {0:?} cannot have spaces")]
    Spaces(String),
    /// An import with both `local_subject` and the older `to`.
    #[error("Local Subject replaces To")]
    LocalAndTo,
    /// A `local_subject` that does not rename its subject's wildcards one for one.
    #[error("local subject {0:?} does not map the wildcards of {1:?}")]
    Renaming(String, String),
    /// `share` on a stream import.
    #[error("sharing information (for latency tracking) is only valid for services: {0:?}")]
    Share(String),
    /// Two service imports whose local subjects overlap.
    #[error("overlapping subject namespace for {0:?} and {1:?}")]
    Overlap(String, String),
    /// A service's `response_type` other than `Singleton`, `Stream` or `Chunked`, or a stream's.
    #[error("invalid response type for {0}: {1:?}")]
    ResponseType(&'static str, String),
    /// Latency tracking of a stream, or with a bad sampling or results subject.
    #[error("invalid latency tracking: {0}")]
    Latency(&'static str),
    /// A negative response threshold, or one on a stream.
    #[error("invalid response threshold")]
    Threshold,
    /// An `account_token_position` not at a `*` of the subject.
    #[error("Account Token Position {0} must match a * in: {1}")]
    TokenPosition(u32, String),
    /// Two exports of one kind, one containing the other.
    #[error("{0} export subject {1:?} already exports {2:?}")]
    Exported(&'static str, String, String),
}

impl LinkError {
    /// Whether the library fails to even decode the account JWT over it (nats-server then stops
    /// at start): a `type` spelled otherwise than `stream` or `service`, or a `sampling` neither
    /// `"headers"` nor a whole number.
    pub fn is_undecodable(&self) -> bool {
        match self {
            LinkError::Kind(_, kind) => !kind.is_empty(),
            LinkError::Latency(why) => *why == UNDECODABLE_SAMPLING,
            _ => false,
        }
    }
}

const UNDECODABLE_SAMPLING: &str = "sampling must be \"headers\" or a whole number";

/// Checks `imports` as the jwt library does before nats-server admits their account.
pub fn check_imports(imports: &[ImportClaim]) -> Result<(), LinkError> {
    let mut locals: Vec<String> = Vec::new();
    for import in imports {
        if import.kind == "service" {
            let local = service_local_subject(import);
            if let Some(taken) = locals.iter().find(|k| contained_in(&local, k) || contained_in(k, &local)) {
                return Err(LinkError::Overlap(local, taken.clone()));
            }
            locals.push(local);
        }
        check_import(import)?;
    }
    Ok(())
}

fn check_import(import: &ImportClaim) -> Result<(), LinkError> {
    check_kind("import", &import.kind)?;
    if import.account.is_empty() {
        return Err(LinkError::NoAccount);
    }
    check_subject(&import.subject)?;
    if !import.local_subject.is_empty() {
        check_renaming(&import.local_subject, &import.subject)?;
        if !import.to.is_empty() {
            return Err(LinkError::LocalAndTo);
        }
    }
    if import.share && import.kind != "service" {
        return Err(LinkError::Share(import.subject.clone()));
    }
    Ok(())
}

/// The subject a service import takes requests on, `$N` references read as `*`.
fn service_local_subject(import: &ImportClaim) -> String {
    if !import.to.is_empty() {
        return import.to.clone();
    }
    if import.local_subject.is_empty() {
        return import.subject.clone();
    }
    let tokens = import.local_subject.split('.').map(|token| if reference(token).is_some() { "*" } else { token });
    tokens.collect::<Vec<_>>().join(".")
}

/// Checks `exports` as the jwt library does before nats-server admits their account.
pub fn check_exports(exports: &[ExportClaim]) -> Result<(), LinkError> {
    for export in exports {
        check_export(export)?;
    }
    for (kind, is_service) in [("service", true), ("stream", false)] {
        let subjects: Vec<&str> =
            exports.iter().filter(|e| (e.kind == "service") == is_service).map(|e| e.subject.as_str()).collect();
        for (i, inner) in subjects.iter().enumerate() {
            let outer = subjects.iter().enumerate().find(|(j, outer)| *j != i && contained_in(inner, outer));
            if let Some((_, outer)) = outer {
                return Err(LinkError::Exported(kind, (*outer).to_string(), (*inner).to_string()));
            }
        }
    }
    Ok(())
}

fn check_export(export: &ExportClaim) -> Result<(), LinkError> {
    check_kind("export", &export.kind)?;
    let service = export.kind == "service";
    let response = export.response_type.as_str();
    if service && !matches!(response, "" | "Singleton" | "Stream" | "Chunked") {
        return Err(LinkError::ResponseType("service", response.to_string()));
    }
    if !service && !response.is_empty() {
        return Err(LinkError::ResponseType("stream", response.to_string()));
    }
    if let Some(latency) = &export.latency {
        check_latency(latency, service)?;
    }
    if export.response_threshold < 0 || (export.response_threshold > 0 && !service) {
        return Err(LinkError::Threshold);
    }
    check_subject(&export.subject)?;
    check_token_position(export.account_token_position, &export.subject)
}

fn check_latency(latency: &LatencyClaim, service: bool) -> Result<(), LinkError> {
    if !service {
        return Err(LinkError::Latency("latency tracking only permitted for services"));
    }
    let percent = match &latency.sampling {
        serde_json::Value::Null => 0,
        serde_json::Value::String(text) if text.eq_ignore_ascii_case("headers") => 0,
        serde_json::Value::Number(n) => n.as_i64().ok_or(LinkError::Latency(UNDECODABLE_SAMPLING))?,
        _ => return Err(LinkError::Latency(UNDECODABLE_SAMPLING)),
    };
    if !(0..=100).contains(&percent) {
        return Err(LinkError::Latency("sampling percentage needs to be between 1-100"));
    }
    check_subject(&latency.results)?;
    if has_wildcards(&latency.results) {
        return Err(LinkError::Latency("results subject can not contain wildcards"));
    }
    Ok(())
}

fn check_token_position(position: u32, subject: &str) -> Result<(), LinkError> {
    if position == 0 {
        return Ok(());
    }
    let index = usize::try_from(position - 1).unwrap_or(usize::MAX);
    if !has_wildcards(subject) || subject.split('.').nth(index) != Some("*") {
        return Err(LinkError::TokenPosition(position, subject.to_string()));
    }
    Ok(())
}

fn check_kind(what: &'static str, kind: &str) -> Result<(), LinkError> {
    // Case matters: the library decodes only these two spellings.
    match kind {
        "stream" | "service" => Ok(()),
        _ => Err(LinkError::Kind(what, kind.to_string())),
    }
}

fn check_subject(subject: &str) -> Result<(), LinkError> {
    if subject.is_empty() {
        return Err(LinkError::EmptySubject);
    }
    if subject.contains(' ') {
        return Err(LinkError::Spaces(subject.to_string()));
    }
    Ok(())
}

/// A `local_subject` must keep its subject's trailing `>` and map each `*` once, by `*` or by a
/// `$N` reference to an existing one.
fn check_renaming(local: &str, from: &str) -> Result<(), LinkError> {
    check_subject(local)?;
    let wrong = || LinkError::Renaming(local.to_string(), from.to_string());
    let full = |s: &str| s == ">" || s.ends_with(".>");
    if full(local) != full(from) {
        return Err(wrong());
    }
    let wildcards = from.split('.').filter(|token| *token == "*").count();
    let mut mapped = 0;
    for token in local.split('.') {
        match reference(token) {
            Some(n) if n > wildcards => return Err(wrong()),
            Some(_) => mapped += 1,
            None if token == "*" => mapped += 1,
            None => {}
        }
    }
    if mapped != wildcards {
        return Err(wrong());
    }
    Ok(())
}

/// The `N` of a `$N` token.
fn reference(token: &str) -> Option<usize> {
    token.strip_prefix('$').filter(|n| !n.is_empty()).and_then(|n| n.parse().ok())
}

/// The library's test of wildcards: a `*` or `>` token anywhere it looks.
fn has_wildcards(subject: &str) -> bool {
    subject.ends_with(".>")
        || subject.contains(".*.")
        || subject.ends_with(".*")
        || subject.starts_with("*.")
        || subject == "*"
        || subject == ">"
}

/// The library's containment: every token of `outer` matches `inner`'s, `*` any one, a final `>`
/// the rest.
fn contained_in(inner: &str, outer: &str) -> bool {
    let (inner, outer): (Vec<&str>, Vec<&str>) = (inner.split('.').collect(), outer.split('.').collect());
    let full = outer.last() == Some(&">");
    if (inner.len() > outer.len() && !full) || inner.len() < outer.len() {
        return false;
    }
    for (index, token) in outer.iter().enumerate() {
        if index == outer.len() - 1 && *token == ">" {
            return true;
        }
        if inner.get(index) != Some(token) && *token != "*" {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn import(kind: &str, subject: &str, local: &str, to: &str) -> ImportClaim {
        let (kind, subject, local_subject, to) = (kind.into(), subject.into(), local.into(), to.into());
        ImportClaim { kind, subject, local_subject, to, account: "A".into(), ..ImportClaim::default() }
    }

    fn export(kind: &str, subject: &str) -> ExportClaim {
        ExportClaim { kind: kind.into(), subject: subject.into(), ..ExportClaim::default() }
    }

    #[test]
    fn imports_pass_only_with_a_known_kind_an_account_a_subject_and_a_matching_renaming() {
        assert_eq!(check_imports(&[import("stream", "a.*", "b.$1", "")]), Ok(()));
        assert_eq!(check_imports(&[import("service", "a.>", "b.>", "")]), Ok(()));
        let wrong = [
            import("Stream", "a", "", ""),
            import("", "a", "", ""),
            import("stream", "", "", ""),
            import("stream", "a b", "", ""),
            import("stream", "a.*", "b", ""),
            import("stream", "a.*", "b.$2", ""),
            import("stream", "a.>", "b.*", ""),
            import("service", "a", "b", "c"),
            ImportClaim { account: String::new(), ..import("stream", "a", "", "") },
            ImportClaim { share: true, ..import("stream", "a", "", "") },
        ];
        for claim in wrong {
            assert!(check_imports(std::slice::from_ref(&claim)).is_err(), "{claim:?}");
        }
    }

    #[test]
    fn service_imports_may_not_overlap_where_they_take_requests_but_stream_imports_may() {
        let (a, b) = (import("service", "x.>", "", ""), import("service", "x.y", "", ""));
        assert_eq!(check_imports(&[a, b]), Err(LinkError::Overlap("x.y".into(), "x.>".into())));
        let renamed = [import("service", "x.*", "z.$1", ""), import("service", "z.q", "", "")];
        assert!(check_imports(&renamed).is_err());
        assert_eq!(check_imports(&[import("stream", "x.>", "", ""), import("stream", "x.y", "", "")]), Ok(()));
    }

    #[test]
    fn exports_pass_only_when_their_options_fit_their_kind_and_none_contains_another() {
        let latency = |sampling| LatencyClaim { sampling, results: "lat".into() };
        assert_eq!(check_exports(&[export("service", "a"), export("stream", "a")]), Ok(()));
        let wrong = [
            vec![export("svc", "a")],
            vec![ExportClaim { response_type: "stream".into(), ..export("service", "a") }],
            vec![ExportClaim { response_type: "Stream".into(), ..export("stream", "a") }],
            vec![ExportClaim { latency: Some(latency(serde_json::json!(101))), ..export("service", "a") }],
            vec![ExportClaim { latency: Some(latency(serde_json::json!("50%"))), ..export("service", "a") }],
            vec![ExportClaim { latency: Some(latency(serde_json::json!(5))), ..export("stream", "a") }],
            vec![ExportClaim { response_threshold: -1, ..export("service", "a") }],
            vec![ExportClaim { account_token_position: 1, ..export("service", "a.*") }],
            vec![export("service", "a.>"), export("service", "a.b")],
        ];
        for claims in wrong {
            assert!(check_exports(&claims).is_err(), "{claims:?}");
        }
    }
}
