//! Exports and imports between accounts, as nats-server has them: an account exports streams
//! (subjects others may subscribe to) and services (subjects others may send requests to), and
//! another account imports them, optionally under other subjects.
//!
//! Checked when the server starts ([`resolve`]), as nats-server does when it loads its config;
//! then put in place as internal subscriptions (`account_links`), so a publish in an account
//! that takes part in no import pays nothing: its router simply holds no such subscription.

pub mod mapping;

use std::collections::HashMap;
use std::time::Duration;

use semaq_wire::subject;

use crate::limits;
pub use mapping::Mapping;

/// The subjects responders answer service-import requests on, as in nats-server.
pub const REPLY_PREFIX: &str = "_R_.";

/// Whether an export or import is of a stream or a service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Messages published in the exporting account, delivered to the importer's subscribers.
    Stream,
    /// Requests from the importer, answered by the exporter's responders.
    Service,
}

impl Kind {
    /// The word nats-server's messages use.
    pub fn word(self) -> &'static str {
        match self {
            Kind::Stream => "stream",
            Kind::Service => "service",
        }
    }
}

/// How many responses a service request may get (nats-server `response_type`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ResponseType {
    /// One response; the reply mapping ends with it.
    #[default]
    Singleton,
    /// Any number of responses until the response timeout.
    Stream,
    /// Any number of responses in chunks until the response timeout.
    Chunked,
}

/// Which requests through a service import are measured (nats-server `sampling`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sampling {
    /// This percentage of requests, 1 to 100, then those whose tracing headers ask for it.
    Percent(u8),
    /// Only requests whose tracing headers (`traceparent`, B3, `Uber-Trace-Id`) say sampled.
    Headers,
}

/// Service latency tracking of an export: which requests, and where their results go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Latency {
    /// Which requests are measured.
    pub sampling: Sampling,
    /// The subject, in the exporting account, results are published to.
    pub subject: String,
}

/// A subject an account offers to other accounts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Export {
    /// Stream or service.
    pub kind: Kind,
    /// The subject (wildcards allowed).
    pub subject: String,
    /// The accounts allowed to import it; empty for every account.
    pub accounts: Vec<String>,
    /// For services, how many responses a request gets.
    pub response: ResponseType,
    /// Only importers presenting an activation token may import it (JWT exports).
    pub token_required: bool,
    /// The subject token (from 1) that must be the importer's account key; 0 for none.
    pub account_token_position: usize,
    /// Importer (or `*`) → activation tokens issued to it at or before this time are revoked.
    pub revocations: HashMap<String, i64>,
    /// For services, latency tracking of requests through imports.
    pub latency: Option<Latency>,
    /// For services, how long a request waits for its response (`response_threshold`);
    /// `None` for nats-server's default, 2 minutes.
    pub response_threshold: Option<Duration>,
    /// For services, whether a `Nats-Trace-Dest` trace goes on into this account (`allow_trace`).
    pub allow_trace: bool,
}

impl Export {
    /// A public export of `subject` (or one to `accounts`), with no token or subject-token checks.
    pub fn new(kind: Kind, subject: String, accounts: Vec<String>, response: ResponseType) -> Self {
        Export {
            kind,
            subject,
            accounts,
            response,
            token_required: false,
            account_token_position: 0,
            revocations: HashMap::new(),
            latency: None,
            response_threshold: None,
            allow_trace: false,
        }
    }
}

/// An activation token's grant, its signature, issuer, importer, kind, subject and times
/// already checked by whoever read it (`auth::trust`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Activation {
    /// When it was issued, seconds since the epoch (what the export's `revocations` compare).
    pub issued_at: i64,
    /// When it expires, seconds since the epoch; `None` for never.
    pub expires: Option<i64>,
}

/// A subject an account takes from another account's exports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Import {
    /// Stream or service.
    pub kind: Kind,
    /// The exporting account.
    pub account: String,
    /// The subject in the exporting account.
    pub subject: String,
    /// The subject in the importing account: where a stream's messages arrive, or where
    /// requesters send a service's requests. `None` for the same subject.
    pub to: Option<String>,
    /// For streams, a literal prefix put before the subject (`prefix`, exclusive with `to`).
    pub prefix: Option<String>,
    /// A valid activation token for it, for exports that require one.
    pub activation: Option<Activation>,
    /// For services, whether the requester's details go to the exporter (`share`).
    pub share: bool,
    /// For streams, whether a `Nats-Trace-Dest` trace goes on into this account (`allow_trace`).
    pub allow_trace: bool,
}

/// One account's name and its exports and imports.
#[derive(Debug, Clone, Copy)]
pub struct AccountLinks<'a> {
    /// The account's name (its public key for JWT accounts).
    pub name: &'a str,
    /// What it offers.
    pub exports: &'a [Export],
    /// What it takes.
    pub imports: &'a [Import],
}

/// An import checked against its export, ready to be put in place.
#[derive(Debug, Clone)]
pub struct Link {
    /// Stream or service.
    pub kind: Kind,
    /// The exporting account.
    pub exporter: String,
    /// The importing account.
    pub importer: String,
    /// For a stream, exporter's subject → importer's; for a service, importer's → exporter's.
    pub mapping: Mapping,
    /// For services, the export's response type.
    pub response: ResponseType,
    /// For services, the export's latency tracking.
    pub latency: Option<Latency>,
    /// For services, whether the import shares the requester's details.
    pub share: bool,
    /// For services, how long a request waits for its response.
    pub response_threshold: Duration,
    /// Whether a `Nats-Trace-Dest` trace crosses it: the export's `allow_trace` for a service,
    /// the import's for a stream.
    pub allow_trace: bool,
    /// When the activation that admits it expires (an export requiring one), seconds since
    /// the epoch: the import ends then, as nats-server's activation timer ends it.
    pub expires: Option<i64>,
}

/// Why an import cannot be put in place; the texts are nats-server's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImportError {
    /// The exporting account does not exist.
    #[error("{account:?} account not defined for {} import", kind.word())]
    UnknownAccount {
        /// Stream or service.
        kind: Kind,
        /// The account named.
        account: String,
    },
    /// The import cannot be added, for `reason`.
    #[error("Error adding {} import {subject:?}: {reason}", kind.word())]
    Refused {
        /// Stream or service.
        kind: Kind,
        /// The imported subject.
        subject: String,
        /// Why, in nats-server's words.
        reason: String,
    },
    /// A service export's latency tracking that is not valid.
    #[error("Error adding service latency sampling for {subject:?} on subject {results:?}: {reason}")]
    BadLatency {
        /// The exported subject.
        subject: String,
        /// The results subject.
        results: String,
        /// Why, in nats-server's words.
        reason: String,
    },
    /// An export that is not valid.
    #[error("Error adding {} export {subject:?}: {reason}", kind.word())]
    BadExport {
        /// Stream or service.
        kind: Kind,
        /// The exported subject.
        subject: String,
        /// Why.
        reason: String,
    },
}

/// Where an error was found: the account and the index of its import (or export).
pub type Site = (String, usize);

/// Checks every account's exports and imports in order, as nats-server adds them, and returns
/// the imports that pass with the errors of those that do not, each with its site.
pub fn resolve(accounts: &[AccountLinks<'_>]) -> (Vec<Link>, Vec<(Site, ImportError)>) {
    let by_name: HashMap<&str, &AccountLinks<'_>> = accounts.iter().map(|a| (a.name, a)).collect();
    let mut errors = Vec::new();
    for account in accounts {
        for (index, export) in account.exports.iter().enumerate() {
            if let Err(error) = check_export(export).and_then(|()| check_latency(account, export)) {
                errors.push(((account.name.to_string(), index), error));
            }
        }
    }
    let mut links: Vec<Link> = Vec::new();
    for account in accounts {
        for (index, import) in account.imports.iter().enumerate() {
            match check_import(account.name, import, &by_name, &links) {
                Ok(link) => links.push(link),
                Err(error) => errors.push(((account.name.to_string(), index), error)),
            }
        }
    }
    (links, errors)
}

fn check_export(export: &Export) -> Result<(), ImportError> {
    let bad = |reason: &str| ImportError::BadExport {
        kind: export.kind,
        subject: export.subject.clone(),
        reason: reason.to_string(),
    };
    if !subject::is_valid_filter(&export.subject) {
        return Err(bad("invalid subject"));
    }
    if !names_importer_at_a_wildcard(export) {
        return Err(bad("sublist: invalid subject"));
    }
    Ok(())
}

/// nats-server's checks of a service export's latency tracking (`TrackServiceExportWithSampling`):
/// a sampling of 1 to 100, a literal results subject that is none of the account's services (a
/// result would be a request), and a singleton export.
fn check_latency(account: &AccountLinks<'_>, export: &Export) -> Result<(), ImportError> {
    let Some(latency) = &export.latency else { return Ok(()) };
    let bad = |reason: &str| ImportError::BadLatency {
        subject: export.subject.clone(),
        results: latency.subject.clone(),
        reason: reason.to_string(),
    };
    if let Sampling::Percent(percent) = latency.sampling {
        if !(1..=100).contains(&percent) {
            return Err(bad("bad sampling percentage, should be 1-100"));
        }
    }
    let is_service = |service: &Export| {
        service.kind == Kind::Service
            && (service.subject == latency.subject || subject::is_subset(&latency.subject, &service.subject))
    };
    if !subject::is_valid_literal(&latency.subject) || account.exports.iter().any(is_service) {
        return Err(bad("invalid publish subject"));
    }
    if export.response != ResponseType::Singleton {
        return Err(bad("bad service response type"));
    }
    Ok(())
}

fn check_import(
    importer: &str,
    import: &Import,
    accounts: &HashMap<&str, &AccountLinks<'_>>,
    added: &[Link],
) -> Result<Link, ImportError> {
    let refused = |reason: &str| ImportError::Refused {
        kind: import.kind,
        subject: import.subject.clone(),
        reason: reason.to_string(),
    };
    let Some(exporter) = accounts.get(import.account.as_str()) else {
        return Err(ImportError::UnknownAccount { kind: import.kind, account: import.account.clone() });
    };
    let local = local_subject(import).map_err(|reason| refused(&reason))?;
    if !subject::is_valid_filter(&import.subject) || !subject::is_valid_filter(&local) {
        return Err(refused("invalid subject"));
    }
    let Some(export) = approving_export(exporter, importer, import) else {
        return Err(refused(&format!("{} import not authorized", import.kind.word())));
    };
    let duplicate = added.iter().any(|link| {
        link.importer == importer && link.exporter == import.account && link.kind == import.kind && {
            let exporter_side = match link.kind {
                Kind::Stream => link.mapping.from(),
                Kind::Service => link.mapping.to(),
            };
            exporter_side == import.subject
        }
    });
    if duplicate {
        return Err(refused(&format!("{} import already exists", import.kind.word())));
    }
    let mapping = match import.kind {
        Kind::Stream => Mapping::new(&import.subject, &local),
        Kind::Service => Mapping::new(&local, &import.subject),
    }
    .map_err(|reason| refused(&reason))?;
    let link = Link {
        kind: import.kind,
        exporter: import.account.clone(),
        importer: importer.to_string(),
        mapping,
        response: export.response,
        // An export whose tracking does not hold was reported and serves untracked.
        latency: export.latency.clone().filter(|_| check_latency(exporter, export).is_ok()),
        share: import.share && import.kind == Kind::Service,
        response_threshold: export.response_threshold.unwrap_or(limits::SERVICE_RESPONSE_TIMEOUT),
        allow_trace: match import.kind {
            Kind::Stream => import.allow_trace,
            Kind::Service => export.allow_trace,
        },
        expires: import.activation.filter(|_| export.token_required).and_then(|activation| activation.expires),
    };
    if forms_cycle(&link, added) {
        return Err(refused("import forms a cycle"));
    }
    Ok(link)
}

/// The subject in the importing account: `to`, the prefix before the subject, or the subject.
fn local_subject(import: &Import) -> Result<String, String> {
    match (&import.prefix, &import.to) {
        (Some(_), Some(_)) => Err("Stream import can not have a 'prefix' and a 'to' property".to_string()),
        (Some(prefix), None) => {
            if subject::has_wildcard(prefix) || !subject::is_valid_filter(prefix.trim_end_matches('.')) {
                return Err("stream import prefix can not contain wildcard tokens".to_string());
            }
            Ok(format!("{}.{}", prefix.trim_end_matches('.'), import.subject))
        }
        (None, Some(to)) => Ok(to.clone()),
        (None, None) => Ok(import.subject.clone()),
    }
}

/// The export of the same kind that lets `importer` import the subject: one whose subject is
/// the import's or contains it, and that approves the importer.
fn approving_export<'e>(exporter: &'e AccountLinks<'_>, importer: &str, import: &Import) -> Option<&'e Export> {
    exporter.exports.iter().filter(|e| e.kind == import.kind).find(|export| {
        let exact = export.subject == import.subject;
        (exact || subject::is_subset(&import.subject, &export.subject)) && approves(export, importer, import, exact)
    })
}

/// Whether the export admits `importer`, nats-server's `checkAuth`: an export naming the
/// importer by subject token wants its key there (never on an import of the export's own
/// subject, which holds the wildcard), one requiring a token wants an activation not revoked,
/// others a public export or one listing the importer.
fn approves(export: &Export, importer: &str, import: &Import, exact: bool) -> bool {
    if export.account_token_position > 0 {
        let position = export.account_token_position - 1;
        let named = import.subject.split('.').nth(position) == Some(importer);
        return names_importer_at_a_wildcard(export) && !exact && named;
    }
    if export.token_required {
        return import.activation.is_some_and(|activation| !revoked(&export.revocations, importer, activation));
    }
    export.accounts.is_empty() || export.accounts.iter().any(|name| name == importer)
}

/// Whether an export naming the importer by subject token has a `*` at that token, which
/// nats-server requires of it (else the export is not valid and admits no one).
fn names_importer_at_a_wildcard(export: &Export) -> bool {
    let position = export.account_token_position;
    position == 0 || export.subject.split('.').nth(position - 1) == Some("*")
}

/// Whether the export's `revocations` revoke an activation issued to `importer` (by key, or `*`
/// for every importer), as nats-server's `isRevoked`.
fn revoked(revocations: &HashMap<String, i64>, importer: &str, activation: Activation) -> bool {
    [importer, "*"].iter().any(|key| revocations.get(*key).is_some_and(|at| *at >= activation.issued_at))
}

/// Whether `link` closes a loop with the links added before it: starting where it delivers,
/// following links of its kind whose subjects overlap, we come back to where it starts.
fn forms_cycle(link: &Link, added: &[Link]) -> bool {
    // A stream flows exporter → importer; a service's requests flow importer → exporter.
    let (start, first_hop, subject) = match link.kind {
        Kind::Stream => (&link.exporter, &link.importer, link.mapping.to()),
        Kind::Service => (&link.importer, &link.exporter, link.mapping.to()),
    };
    let mut frontier = vec![(first_hop.clone(), subject.to_string())];
    let mut steps = 0;
    while let Some((account, subject)) = frontier.pop() {
        steps += 1;
        if steps > limits::IMPORT_CYCLE_SEARCH_STEPS_MAX {
            return true;
        }
        for next in added.iter().filter(|other| other.kind == link.kind) {
            let (source, target) = match next.kind {
                Kind::Stream => (&next.exporter, &next.importer),
                Kind::Service => (&next.importer, &next.exporter),
            };
            if *source != account || !subject::overlaps(next.mapping.from(), &subject) {
                continue;
            }
            if target == start {
                return true;
            }
            frontier.push((target.clone(), next.mapping.to().to_string()));
        }
    }
    false
}

#[cfg(test)]
mod tests;
