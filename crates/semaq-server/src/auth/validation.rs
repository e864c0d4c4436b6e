//! The checks of an account JWT's imports, exports and JetStream limits that nats-io/jwt (v2.3,
//! nats-server 2.9's) counts as blocking: nats-server refuses a whole account failing one (its
//! users get `Authorization Violation`), where a check the library does not make only leaves the
//! link out.
//! Activation tokens are checked apart ([`super::trust::activation_claims`]), as they need the
//! decoded import.

use std::collections::BTreeMap;

use super::go_url;
use super::jwt::WeightedMapping;
use super::jwt::{AccountLimits, DefaultPermissions, ExportClaim, ImportClaim, LatencyClaim, SigningKey, SubjectList};
use super::nkey::{self, Role};
use crate::limits;

/// A blocking issue of an account's links or limits; the texts are the jwt library's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClaimError {
    /// No `type` (the library decodes no `type` given but `stream` or `service`).
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
    /// More imports or exports than the account's limits allow.
    #[error("the account contains more {0} than allowed by the operator")]
    TooMany(&'static str),
    /// A wildcard export where the limits allow none.
    #[error("the account contains wildcard exports that are not allowed by the operator")]
    Wildcards,
    /// A signing key that is not an account public key.
    #[error("{0:?} is not a valid account signing key")]
    SigningKey(String),
    /// A default permission subject that is empty, has a queue where none may be, or more spaces.
    #[error("Permission Subject {0:?} is not valid")]
    Permission(String),
    /// A tier named "".
    #[error("Tiered JetStream Limits can not contain a blank \"\" tier name")]
    BlankTier,
    /// A subject mapping to a subject with wildcards.
    #[error("Subject {0:?} in weighted mapping {1:?} is not allowed to contains wildcard")]
    MappingWildcard(String, String),
    /// A subject mapping whose weights sum over 100.
    #[error("Mapping {0:?} exceeds 100% among all of it's weighted to mappings")]
    MappingWeight(String),
    /// A `description` or `info_url` longer than [`limits::JWT_INFO_BYTES_MAX`].
    #[error("{0} is too long")]
    InfoTooLong(&'static str),
    /// An `info_url` that is not an absolute URL as Go parses one.
    #[error("error parsing info url: {0}")]
    InfoUrl(String),
}

/// Checks a `description` and `info_url` (an account's or an export's) as the jwt library's
/// `Info` does: each at most [`limits::JWT_INFO_BYTES_MAX`] bytes, the URL one Go parses with a
/// scheme and a host name.
pub fn check_info(description: Option<&str>, info_url: Option<&str>) -> Result<(), ClaimError> {
    if description.is_some_and(|text| text.len() > limits::JWT_INFO_BYTES_MAX) {
        return Err(ClaimError::InfoTooLong("Description"));
    }
    let Some(url) = info_url.filter(|url| !url.is_empty()) else {
        return Ok(());
    };
    if url.len() > limits::JWT_INFO_BYTES_MAX {
        return Err(ClaimError::InfoTooLong("Info URL"));
    }
    match go_url::scheme_and_host_name(url) {
        Ok((scheme, host)) if scheme.is_empty() || host.is_empty() => {
            Err(ClaimError::InfoUrl("no hostname or scheme".to_string()))
        }
        Ok(_) => Ok(()),
        Err(error) => Err(ClaimError::InfoUrl(format!("parse {url:?}: {error}"))),
    }
}

/// Checks that each of an account's signing keys, plain or scoped, is an account public key.
pub fn check_signing_keys(keys: &[SigningKey]) -> Result<(), ClaimError> {
    for key in keys {
        let (SigningKey::Plain(key) | SigningKey::Scoped { key, .. }) = key;
        if !nkey::is_public_key(key, Role::Account) {
            return Err(ClaimError::SigningKey(key.clone()));
        }
    }
    Ok(())
}

/// Checks an account's default permissions' subjects as the library does: each a subject, or for
/// subscriptions a subject and a queue.
pub fn check_default_permissions(defaults: &DefaultPermissions) -> Result<(), ClaimError> {
    let subjects = |list: &SubjectList| {
        let (allow, deny) = (list.allow.clone().unwrap_or_default(), list.deny.clone().unwrap_or_default());
        allow.into_iter().chain(deny)
    };
    let valid = |subject: &str, queue_allowed: bool| match subject.split(' ').collect::<Vec<_>>().as_slice() {
        [one] => !one.is_empty(),
        [one, queue] => queue_allowed && !one.is_empty() && !queue.is_empty(),
        _ => false,
    };
    let publish = subjects(&defaults.publish).map(|subject| (subject, false));
    let subscribe = subjects(&defaults.subscribe).map(|subject| (subject, true));
    match publish.chain(subscribe).find(|(subject, queue_allowed)| !valid(subject, *queue_allowed)) {
        Some((subject, _)) => Err(ClaimError::Permission(subject)),
        None => Ok(()),
    }
}

/// Checks an account's `limits`, and its imports and exports against them, as the jwt library
/// does: a missing `imports` or `exports` limit is 0 there, so it allows none. (Its check that
/// plain JetStream limits and tiers exclude each other never fires: decoding drops the plain
/// ones beside tiers.)
pub fn check_limits(
    limits: &AccountLimits,
    imports: &[ImportClaim],
    exports: &[ExportClaim],
) -> Result<(), ClaimError> {
    let too_many = |count: usize, allowed: i64| allowed != -1 && i64::try_from(count).unwrap_or(i64::MAX) > allowed;
    if too_many(imports.len(), limits.imports) {
        return Err(ClaimError::TooMany("imports"));
    }
    if too_many(exports.len(), limits.exports) {
        return Err(ClaimError::TooMany("exports"));
    }
    if limits.exports != -1 && !limits.wildcards && exports.iter().any(|export| has_wildcards(&export.subject)) {
        return Err(ClaimError::Wildcards);
    }
    let blank_tier = limits.tiered_limits.as_ref().is_some_and(|tiers| tiers.contains_key(""));
    if blank_tier {
        return Err(ClaimError::BlankTier);
    }
    Ok(())
}

impl ClaimError {
    /// Whether the library fails to even decode the account JWT over it (nats-server then stops
    /// at start): a `sampling` neither `"headers"` nor a whole number. (A `type` it cannot decode
    /// already fails SemaQ's decoding.)
    pub fn is_undecodable(&self) -> bool {
        matches!(self, ClaimError::Latency(why) if *why == UNDECODABLE_SAMPLING)
    }
}

const UNDECODABLE_SAMPLING: &str = "sampling must be \"headers\" or a whole number";

/// Checks an account's subject `mappings` as the jwt library v2.3 does: subjects neither empty
/// nor with spaces, destinations without wildcards, and the weights of each mapping (of every
/// cluster together) summed in a byte, wrapping as it does, at most 100.
pub fn check_mappings(mappings: &BTreeMap<String, Vec<WeightedMapping>>) -> Result<(), ClaimError> {
    for (source, destinations) in mappings {
        check_subject(source)?;
        let mut total = 0u8;
        for destination in destinations {
            check_subject(&destination.subject)?;
            if has_wildcards(&destination.subject) {
                return Err(ClaimError::MappingWildcard(destination.subject.clone(), source.clone()));
            }
            total = total.wrapping_add(destination.weight());
        }
        if total > 100 {
            return Err(ClaimError::MappingWeight(source.clone()));
        }
    }
    Ok(())
}

/// Checks `imports` as the jwt library does before nats-server admits their account.
pub fn check_imports(imports: &[ImportClaim]) -> Result<(), ClaimError> {
    let mut locals: Vec<String> = Vec::new();
    for import in imports {
        if import.kind == "service" {
            let local = service_local_subject(import);
            if let Some(taken) = locals.iter().find(|k| contained_in(&local, k) || contained_in(k, &local)) {
                return Err(ClaimError::Overlap(local, taken.clone()));
            }
            locals.push(local);
        }
        check_import(import)?;
    }
    Ok(())
}

fn check_import(import: &ImportClaim) -> Result<(), ClaimError> {
    check_kind("import", &import.kind)?;
    if import.account.is_empty() {
        return Err(ClaimError::NoAccount);
    }
    check_subject(&import.subject)?;
    if !import.local_subject.is_empty() {
        check_renaming(&import.local_subject, &import.subject)?;
        if !import.to.is_empty() {
            return Err(ClaimError::LocalAndTo);
        }
    }
    if import.share && import.kind != "service" {
        return Err(ClaimError::Share(import.subject.clone()));
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
pub fn check_exports(exports: &[ExportClaim]) -> Result<(), ClaimError> {
    for export in exports {
        check_export(export)?;
    }
    for (kind, is_service) in [("service", true), ("stream", false)] {
        let subjects: Vec<&str> =
            exports.iter().filter(|e| (e.kind == "service") == is_service).map(|e| e.subject.as_str()).collect();
        for (i, inner) in subjects.iter().enumerate() {
            let outer = subjects.iter().enumerate().find(|(j, outer)| *j != i && contained_in(inner, outer));
            if let Some((_, outer)) = outer {
                return Err(ClaimError::Exported(kind, (*outer).to_string(), (*inner).to_string()));
            }
        }
    }
    Ok(())
}

fn check_export(export: &ExportClaim) -> Result<(), ClaimError> {
    check_kind("export", &export.kind)?;
    let service = export.kind == "service";
    let response = export.response_type.as_str();
    if service && !matches!(response, "" | "Singleton" | "Stream" | "Chunked") {
        return Err(ClaimError::ResponseType("service", response.to_string()));
    }
    if !service && !response.is_empty() {
        return Err(ClaimError::ResponseType("stream", response.to_string()));
    }
    if let Some(latency) = &export.latency {
        check_latency(latency, service)?;
    }
    if export.response_threshold < 0 || (export.response_threshold > 0 && !service) {
        return Err(ClaimError::Threshold);
    }
    check_subject(&export.subject)?;
    check_token_position(export.account_token_position, &export.subject)?;
    check_info(export.description.as_deref(), export.info_url.as_deref())
}

fn check_latency(latency: &LatencyClaim, service: bool) -> Result<(), ClaimError> {
    if !service {
        return Err(ClaimError::Latency("latency tracking only permitted for services"));
    }
    let percent = match &latency.sampling {
        serde_json::Value::Null => 0,
        serde_json::Value::String(text) if text.eq_ignore_ascii_case("headers") => 0,
        serde_json::Value::Number(n) => n.as_i64().ok_or(ClaimError::Latency(UNDECODABLE_SAMPLING))?,
        _ => return Err(ClaimError::Latency(UNDECODABLE_SAMPLING)),
    };
    if !(0..=100).contains(&percent) {
        return Err(ClaimError::Latency("sampling percentage needs to be between 1-100"));
    }
    check_subject(&latency.results)?;
    if has_wildcards(&latency.results) {
        return Err(ClaimError::Latency("results subject can not contain wildcards"));
    }
    Ok(())
}

fn check_token_position(position: u32, subject: &str) -> Result<(), ClaimError> {
    if position == 0 {
        return Ok(());
    }
    let index = usize::try_from(position - 1).unwrap_or(usize::MAX);
    if !has_wildcards(subject) || subject.split('.').nth(index) != Some("*") {
        return Err(ClaimError::TokenPosition(position, subject.to_string()));
    }
    Ok(())
}

fn check_kind(what: &'static str, kind: &str) -> Result<(), ClaimError> {
    // Case matters: the library decodes only these two spellings.
    match kind {
        "stream" | "service" => Ok(()),
        _ => Err(ClaimError::Kind(what, kind.to_string())),
    }
}

fn check_subject(subject: &str) -> Result<(), ClaimError> {
    if subject.is_empty() {
        return Err(ClaimError::EmptySubject);
    }
    if subject.contains(' ') {
        return Err(ClaimError::Spaces(subject.to_string()));
    }
    Ok(())
}

/// A `local_subject` must keep its subject's trailing `>` and map each `*` once, by `*` or by a
/// `$N` reference to an existing one.
fn check_renaming(local: &str, from: &str) -> Result<(), ClaimError> {
    check_subject(local)?;
    let wrong = || ClaimError::Renaming(local.to_string(), from.to_string());
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
        assert_eq!(check_imports(&[a, b]), Err(ClaimError::Overlap("x.y".into(), "x.>".into())));
        let renamed = [import("service", "x.*", "z.$1", ""), import("service", "z.q", "", "")];
        assert!(check_imports(&renamed).is_err());
        assert_eq!(check_imports(&[import("stream", "x.>", "", ""), import("stream", "x.y", "", "")]), Ok(()));
    }

    #[test]
    fn signing_keys_must_be_account_keys_and_default_permissions_subjects() {
        let account = nkeys::KeyPair::new_account().public_key();
        assert_eq!(check_signing_keys(&[SigningKey::Plain(account)]), Ok(()));
        let user = nkeys::KeyPair::new_user().public_key();
        assert!(check_signing_keys(&[SigningKey::Plain(user)]).is_err());
        let list = |subject: &str| SubjectList { allow: Some(vec![subject.to_string()]), deny: None };
        let subscribe = |subject| DefaultPermissions { subscribe: list(subject), ..DefaultPermissions::default() };
        let publish = |subject| DefaultPermissions { publish: list(subject), ..DefaultPermissions::default() };
        assert_eq!(check_default_permissions(&subscribe("a q")), Ok(()));
        for wrong in [publish("a q"), subscribe("a q r"), publish(""), subscribe("a ")] {
            assert!(check_default_permissions(&wrong).is_err(), "{wrong:?}");
        }
    }

    #[test]
    fn limits_bound_imports_and_exports_a_missing_limit_allowing_none() {
        let limits = |json: &str| serde_json::from_str::<AccountLimits>(json).expect("limits");
        let (imports, exports) = ([import("stream", "a", "", "")], [export("stream", "a.>")]);
        let any = limits(r#"{"imports":-1,"exports":-1}"#);
        assert_eq!(check_limits(&any, &imports, &exports), Ok(()));
        assert_eq!(check_limits(&limits("{}"), &imports, &[]), Err(ClaimError::TooMany("imports")));
        assert_eq!(check_limits(&limits(r#"{"exports":1}"#), &[], &exports), Err(ClaimError::Wildcards));
        assert_eq!(check_limits(&limits(r#"{"exports":1,"wildcards":true}"#), &[], &exports), Ok(()));
        let blank = limits(r#"{"tiered_limits":{"":{}}}"#);
        assert_eq!(check_limits(&blank, &[], &[]), Err(ClaimError::BlankTier));
    }

    #[test]
    fn descriptions_and_info_urls_pass_only_within_the_librarys_bounds() {
        let long = "x".repeat(limits::JWT_INFO_BYTES_MAX + 1);
        assert_eq!(check_info(Some("what it is"), Some("https://example.com/about")), Ok(()));
        assert_eq!(check_info(None, Some("")), Ok(()));
        assert_eq!(check_info(Some(&long), None), Err(ClaimError::InfoTooLong("Description")));
        let long_url = format!("https://example.com/{long}");
        assert_eq!(check_info(None, Some(&long_url)), Err(ClaimError::InfoTooLong("Info URL")));
        for wrong in ["example.com", "http:example.com", "/about", "http://a b/", ":x"] {
            assert!(matches!(check_info(None, Some(wrong)), Err(ClaimError::InfoUrl(_))), "{wrong}");
        }
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
