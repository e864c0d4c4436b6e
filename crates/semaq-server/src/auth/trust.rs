//! Decentralized auth: the trusted operators, the accounts they signed (`resolver: MEMORY` with
//! `resolver_preload`), and the users those accounts, or their signing keys, sign.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::IpAddr;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use semaq_wire::info::ConnectOptions;
use semaq_wire::subject;

use super::jwt::{self, AccountLimits, AccountNats, Claims, JwtError, OperatorNats, SubjectList, UserNats};
use super::jwt::{AccountJetStreamLimits, ActivationNats, ExportClaim, ImportClaim, JetStreamLimits};
use super::jwt::{ResponsePermission as JwtResponses, UserPermissionLimits};
use super::restrictions::{self, Window};
use super::templates::{self, TemplateValues};
use super::validation::{self, ClaimError};
use super::{nkey, AuthError, ClientPermissions};
use crate::imports::{AccountLinks, Activation, Export, Import, Kind as LinkKind, Latency, ResponseType, Sampling};
use crate::limits;
use crate::mappings::{MapDest, SubjectMappings};
use crate::options::{AccountJetStream, OperatorOptions, Permissions, ResponsePermission, SubjectPermission};

/// Why the operator configuration cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TrustError {
    /// An operator JWT that does not decode or verify.
    #[error("operator JWT is not valid: {0}")]
    Operator(JwtError),
    /// An operator JWT signed by a key that is neither the operator's nor one of its signing keys.
    #[error("operator JWT for {0} is not signed by the operator")]
    NotSelfSigned(String),
    /// A preloaded account JWT that nats-server's JWT library does not decode (a config error
    /// there, which stops it).
    #[error("resolver_preload {0}: invalid account JWT")]
    InvalidAccount(String),
    /// More preloaded accounts than the bound.
    #[error("resolver_preload lists more than {0} accounts")]
    TooManyAccounts(usize),
}

/// Why a preloaded account is left out (its users are refused).
#[derive(Debug, thiserror::Error)]
enum AccountError {
    /// Its JWT does not decode or verify.
    #[error(transparent)]
    Undecodable(JwtError),
    /// Its JWT names another account or does not come from a trusted operator.
    #[error(transparent)]
    Jwt(#[from] JwtError),
    /// An import's activation token fails the checks nats-server validates the account with.
    #[error("import {subject:?}: {error}")]
    Import {
        /// The imported subject.
        subject: String,
        /// What is wrong with the token.
        error: ActivationError,
    },
    /// An import, export or limit fails a check nats-server's JWT library counts as blocking.
    #[error(transparent)]
    Claim(#[from] ClaimError),
}

/// The operators' keys and the accounts they signed.
#[derive(Debug, Default)]
pub struct Trust {
    operator_keys: HashSet<String>,
    accounts: HashMap<String, Arc<JwtAccount>>,
}

/// An account from its JWT, with its live connection count.
#[derive(Debug)]
pub struct JwtAccount {
    /// The account's public key, its name.
    pub public_key: String,
    /// The name in its claims.
    pub name: String,
    /// The tags in its claims.
    tags: Vec<String>,
    expires: i64,
    not_before: i64,
    /// Signing key → the scope's template, `None` for a plain key.
    signing_keys: HashMap<String, Option<UserPermissionLimits>>,
    revocations: HashMap<String, i64>,
    default_permissions: Option<Arc<ClientPermissions>>,
    /// The limits in its claims.
    pub limits: AccountLimits,
    /// The streams and services it offers.
    pub exports: Vec<Export>,
    /// The streams and services it takes.
    pub imports: Vec<Import>,
    /// Its subject mappings.
    pub mappings: SubjectMappings,
    connections: AtomicI64,
}

/// What a user JWT grants a client.
#[derive(Debug)]
pub struct JwtGrant {
    /// The user's public key.
    pub user: String,
    /// The account's public key.
    pub account: String,
    /// Subject restrictions; `None` allows everything.
    pub permissions: Option<Arc<ClientPermissions>>,
    /// Subscriptions the connection may hold: the least of the user's and the account's.
    pub subscriptions_max: Option<usize>,
    /// Largest payload the connection may publish: the least of the user's and the account's.
    pub payload_bytes_max: Option<usize>,
    /// When the user JWT expires, seconds since the epoch.
    pub expires: Option<i64>,
    /// The connection's place in its account's connection limit.
    pub slot: AccountSlot,
    /// The user JWT's `name`.
    pub name_tag: String,
    /// The user JWT's `tags`.
    pub tags: Vec<String>,
}

/// Holds one of an account's connections; dropping it frees the place.
#[derive(Debug)]
pub struct AccountSlot(Arc<JwtAccount>);

impl Drop for AccountSlot {
    fn drop(&mut self) {
        self.0.connections.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Trust {
    /// Decodes the operators and the preloaded accounts. A preloaded account that is invalid or
    /// not signed by a trusted operator is logged and left out (its users are refused), as
    /// nats-server does; an invalid operator stops the server.
    pub fn load(options: &OperatorOptions) -> Result<Self, TrustError> {
        let mut trust = Trust::default();
        for text in &options.jwts {
            let claims: Claims<OperatorNats> =
                jwt::decode(jwt::undecorate(text), limits::ACCOUNT_JWT_BYTES_MAX).map_err(TrustError::Operator)?;
            let signing_keys = claims.nats.signing_keys.clone().unwrap_or_default();
            if claims.iss != claims.sub && !signing_keys.contains(&claims.iss) {
                return Err(TrustError::NotSelfSigned(claims.sub));
            }
            trust.operator_keys.insert(claims.sub);
            trust
                .operator_keys
                .extend(signing_keys.into_iter().filter(|key| nkey::is_public_key(key, nkey::Role::Operator)));
        }
        if options.preload.len() > limits::PRELOADED_ACCOUNTS_MAX {
            return Err(TrustError::TooManyAccounts(limits::PRELOADED_ACCOUNTS_MAX));
        }
        let mut loaded = Vec::new();
        for (key, text) in &options.preload {
            match trust.account(key, text) {
                Ok(account) => loaded.push(account),
                Err(AccountError::Undecodable(_)) => return Err(TrustError::InvalidAccount(key.clone())),
                Err(AccountError::Claim(error)) if error.is_undecodable() => {
                    return Err(TrustError::InvalidAccount(key.clone()))
                }
                Err(error) => tracing::error!(account = %key, %error, "Preloaded account not valid"),
            }
        }
        activate_imports(&mut loaded, now());
        for (account, _) in loaded {
            trust.accounts.insert(account.public_key.clone(), Arc::new(account));
        }
        Ok(trust)
    }

    /// The account in `text`, with the activation token of each of its imports (empty for none).
    fn account(&self, key: &str, text: &str) -> Result<(JwtAccount, Vec<String>), AccountError> {
        let claims: Claims<AccountNats> =
            jwt::decode(jwt::undecorate(text), limits::ACCOUNT_JWT_BYTES_MAX).map_err(AccountError::Undecodable)?;
        if claims.sub != key {
            return Err(JwtError::Key("subject (not the preload's key)").into());
        }
        if !self.operator_keys.contains(&claims.iss) {
            return Err(JwtError::Key("issuer (not a trusted operator)").into());
        }
        if claims.check_times(now()).is_err() {
            tracing::warn!(account = %key, "Account has validation issues: expired or not yet valid");
        }
        let signing_keys = claims.nats.signing_keys.unwrap_or_default();
        validation::check_signing_keys(&signing_keys)?;
        validation::check_info(claims.nats.description.as_deref(), claims.nats.info_url.as_deref())?;
        if let Some(defaults) = &claims.nats.default_permissions {
            validation::check_default_permissions(defaults)?;
        }
        let signing_keys = signing_keys.into_iter().map(|key| match key {
            jwt::SigningKey::Plain(key) => (key, None),
            jwt::SigningKey::Scoped { key, template } => (key, Some(*template)),
        });
        let default_permissions = claims
            .nats
            .default_permissions
            .map(|defaults| permissions(&defaults.publish, &defaults.subscribe, defaults.resp.as_ref()))
            .filter(|p| p.publish.is_some() || p.subscribe.is_some() || p.responses.is_some())
            .map(|p| Arc::new(ClientPermissions::new(&p)));
        let import_claims = claims.nats.imports.unwrap_or_default();
        let export_claims = claims.nats.exports.unwrap_or_default();
        validation::check_limits(&claims.nats.limits, &import_claims, &export_claims)?;
        let mapping_claims = claims.nats.mappings.unwrap_or_default();
        validation::check_mappings(&mapping_claims)?;
        validation::check_imports(import_claims.get(..limits::ACCOUNT_IMPORTS_MAX).unwrap_or(&import_claims))?;
        validation::check_exports(export_claims.get(..limits::ACCOUNT_IMPORTS_MAX).unwrap_or(&export_claims))?;
        let (imports, tokens): (Vec<Import>, Vec<String>) = import_claims
            .into_iter()
            .take(limits::ACCOUNT_IMPORTS_MAX)
            .filter_map(|claim| Some((import(&claim)?, claim.token)))
            .unzip();
        for (import, token) in imports.iter().zip(&tokens).filter(|(_, token)| !token.is_empty()) {
            activation_claims(token, &claims.sub, import)
                .map_err(|error| AccountError::Import { subject: import.subject.clone(), error })?;
        }
        let account = JwtAccount {
            public_key: claims.sub,
            name: claims.name,
            tags: claims.nats.tags.unwrap_or_default(),
            expires: claims.exp,
            not_before: claims.nbf,
            signing_keys: signing_keys.collect(),
            revocations: claims.nats.revocations.unwrap_or_default(),
            default_permissions,
            limits: claims.nats.limits,
            exports: export_claims.iter().take(limits::ACCOUNT_IMPORTS_MAX).filter_map(export).collect(),
            imports,
            mappings: mappings(key, &mapping_claims),
            connections: AtomicI64::new(0),
        };
        Ok((account, tokens))
    }

    /// Each account's subject mappings.
    pub fn account_mappings(&self) -> impl Iterator<Item = (&str, &SubjectMappings)> + '_ {
        self.accounts.values().map(|account| (account.public_key.as_str(), &account.mappings))
    }

    /// The public keys of the trusted accounts, each its own subject space.
    pub fn account_keys(&self) -> impl Iterator<Item = &str> + '_ {
        self.accounts.keys().map(String::as_str)
    }

    /// Each account's exports and imports, for the link forwarding started at boot (`account_links`).
    pub fn account_links(&self) -> impl Iterator<Item = AccountLinks<'_>> + '_ {
        self.accounts.values().map(|a| AccountLinks { name: &a.public_key, exports: &a.exports, imports: &a.imports })
    }

    /// The accounts that have JetStream (a storage limit other than 0, plain or in a tier), with
    /// their limits.
    pub fn jetstream_accounts(&self) -> impl Iterator<Item = (&str, AccountJetStream)> + '_ {
        self.accounts.values().filter_map(|account| {
            let jetstream = match account.limits.jetstream()? {
                AccountJetStreamLimits::Plain(limits) => jetstream_limits(limits),
                AccountJetStreamLimits::Tiered(tiers) => AccountJetStream {
                    tiers: tiers.iter().map(|(tier, limits)| (tier.clone(), jetstream_limits(limits))).collect(),
                    ..AccountJetStream::default()
                },
            };
            Some((account.public_key.as_str(), jetstream))
        })
    }

    /// Checks the user JWT in `connect` and the chain above it, then the signature of `nonce`,
    /// then that the client at `peer` connects from where and when the JWT allows.
    pub fn authenticate(
        &self,
        connect: &ConnectOptions,
        nonce: Option<&str>,
        peer: Option<IpAddr>,
    ) -> Result<JwtGrant, AuthError> {
        let token = connect.jwt.as_deref().ok_or(AuthError::Violation)?;
        let user: Claims<UserNats> = jwt::decode(token, limits::USER_JWT_BYTES_MAX).map_err(refused("user JWT"))?;
        let now = now();
        user.check_times(now).map_err(refused("user JWT"))?;
        let account_key = if user.nats.issuer_account.is_empty() { &user.iss } else { &user.nats.issuer_account };
        let account = self.accounts.get(account_key).ok_or_else(|| refusal("account of the user JWT is unknown"))?;
        if (account.expires > 0 && now > account.expires) || (account.not_before > 0 && now < account.not_before) {
            return Err(refusal("account JWT has expired or is not yet valid"));
        }
        let limits = account.user_limits(&user)?;
        if let Some(types) = limits.allowed_connection_types.as_ref().filter(|types| !types.is_empty()) {
            if !types.iter().any(|kind| kind.eq_ignore_ascii_case("STANDARD")) {
                return Err(refusal("connection type not allowed"));
            }
        }
        if !limits.bearer_token && !nkey::signed_nonce(&user.sub, nonce, connect.sig.as_deref()) {
            return Err(refusal("signature of the nonce missing or not verified"));
        }
        if account.revoked(&user.sub, user.iat) {
            return Err(refusal("user authentication revoked"));
        }
        if !restrictions::source_allowed(&limits.src, peer) {
            return Err(refusal("bad src IP"));
        }
        let times = limits.times.as_deref().unwrap_or_default();
        let checked_at = jiff::Timestamp::now();
        let window = restrictions::connect_window(times, &limits.times_location, checked_at)
            .ok_or_else(|| refusal("outside connect times"))?;
        let permissions = match limits.has_permissions() {
            true => Some(Arc::new(ClientPermissions::new(&user_permissions(&limits)))),
            false => account.default_permissions.clone(),
        };
        Ok(JwtGrant {
            subscriptions_max: least(limits.subs, account.limits.subs),
            payload_bytes_max: least(limits.payload, account.limits.payload),
            permissions,
            expires: expiry(user.exp, window, checked_at),
            slot: account.take_slot()?,
            name_tag: user.name,
            tags: user.nats.tags.unwrap_or_default(),
            user: user.sub,
            account: account.public_key.clone(),
        })
    }
}

impl JwtAccount {
    /// The user's permissions and limits: its own, or its scoped signing key's template.
    fn user_limits(&self, user: &Claims<UserNats>) -> Result<UserPermissionLimits, AuthError> {
        if user.iss == self.public_key {
            return Ok(user.nats.limits.clone());
        }
        match self.signing_keys.get(&user.iss) {
            None => Err(refusal("user JWT issuer is not known")),
            Some(None) => Ok(user.nats.limits.clone()),
            Some(Some(_)) if !user.nats.limits.is_empty() => {
                Err(refusal("user JWT signed by a scoped key may not carry permissions or limits"))
            }
            Some(Some(template)) if !templates::has_placeholders(template) => Ok(template.clone()),
            Some(Some(template)) => templates::fill(template, &self.template_values(user)).map_err(|error| {
                tracing::debug!(%error, "User JWT generated invalid permissions");
                AuthError::Violation
            }),
        }
    }

    fn template_values<'a>(&'a self, user: &'a Claims<UserNats>) -> TemplateValues<'a> {
        TemplateValues {
            user_name: &user.name,
            user_key: &user.sub,
            user_tags: user.nats.tags.as_deref().unwrap_or_default(),
            account_name: &self.name,
            account_key: &self.public_key,
            account_tags: &self.tags,
        }
    }

    fn revoked(&self, user: &str, issued_at: i64) -> bool {
        [user, "*"].iter().any(|key| self.revocations.get(*key).is_some_and(|at| *at >= issued_at))
    }

    fn take_slot(self: &Arc<Self>) -> Result<AccountSlot, AuthError> {
        let most = self.limits.conn;
        let taken = self
            .connections
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |open| (most < 0 || open < most).then_some(open + 1));
        match taken {
            Ok(_) => Ok(AccountSlot(self.clone())),
            Err(_) => Err(AuthError::AccountConnectionsExceeded),
        }
    }
}

/// Checks the activation token of each import that has one against its exporter, as
/// nats-server's `checkActivation` does; a token that does not hold is logged and left out, so
/// an export requiring one refuses the import.
fn activate_imports(accounts: &mut [(JwtAccount, Vec<String>)], now: i64) {
    let signing_keys: HashMap<String, HashSet<String>> = accounts
        .iter()
        .map(|(account, _)| (account.public_key.clone(), account.signing_keys.keys().cloned().collect()))
        .collect();
    for (account, tokens) in accounts.iter_mut() {
        for (import, token) in account.imports.iter_mut().zip(tokens.iter()).filter(|(_, t)| !t.is_empty()) {
            let exporter_keys = signing_keys.get(&import.account);
            match activation(token, &account.public_key, import, exporter_keys, now) {
                Ok(activation) => import.activation = Some(activation),
                Err(error) => tracing::warn!(
                    account = %account.public_key,
                    subject = %import.subject,
                    %error,
                    "Import activation token not valid"
                ),
            }
        }
    }
}

/// Why an activation token does not activate an import; the texts are nats-server's (nats-io/jwt).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ActivationError {
    /// The token does not decode or verify, or is outside its times.
    #[error("import contains an invalid activation token: {0}")]
    Token(#[from] JwtError),
    /// Signed neither by the exporter nor by one of its signing keys on its behalf.
    #[error("activation token doesn't match account for import")]
    Issuer,
    /// Issued to another account than the importer.
    #[error("activation token doesn't match account it is being included in")]
    Importer,
    /// For a stream where the import is of a service, or the reverse.
    #[error("mismatch between token import type and type of import")]
    Kind,
    /// For a subject that does not contain the imported one.
    #[error("activation token import subject {0:?} doesn't match import")]
    Subject(String),
}

/// The grant of `token` for `importer`'s `import`, checked as nats-server checks it: the checks
/// of [`activation_claims`], then, naming the exporter in `issuer_account`, a signer among its
/// `exporter_keys`, a subject a service may import, and its times.
pub fn activation(
    token: &str,
    importer: &str,
    import: &Import,
    exporter_keys: Option<&HashSet<String>>,
    now: i64,
) -> Result<Activation, ActivationError> {
    let claims = activation_claims(token, importer, import)?;
    let on_behalf = claims.nats.issuer_account.as_str();
    let exporters_key = on_behalf == import.account && exporter_keys.is_some_and(|keys| keys.contains(&claims.iss));
    if !on_behalf.is_empty() && !exporters_key {
        return Err(ActivationError::Issuer);
    }
    let granted = &claims.nats.subject;
    if (import.kind == LinkKind::Service && subject::has_wildcard(granted)) || !subject::is_valid_filter(granted) {
        return Err(ActivationError::Subject(granted.clone()));
    }
    if claims.exp > 0 && claims.exp <= now {
        return Err(JwtError::Expired.into());
    }
    if claims.nbf > 0 && now < claims.nbf {
        return Err(JwtError::NotYetValid.into());
    }
    Ok(Activation { issued_at: claims.iat, expires: (claims.exp > 0).then_some(claims.exp) })
}

/// The claims of `token` when it passes the checks nats-server's JWT library makes of an
/// account's import as it validates the account (`Import.Validate`): a token that verifies,
/// from the exporter (or naming it in `issuer_account`), issued to the importer, of the
/// import's kind, for a subject containing the imported one. nats-server refuses the whole
/// account over a token failing these; times and revocations only leave the import out.
pub fn activation_claims(
    token: &str,
    importer: &str,
    import: &Import,
) -> Result<Claims<ActivationNats>, ActivationError> {
    let claims: Claims<ActivationNats> = jwt::decode(token.trim(), limits::ACTIVATION_JWT_BYTES_MAX)?;
    if claims.iss != import.account && claims.nats.issuer_account != import.account {
        return Err(ActivationError::Issuer);
    }
    if claims.sub != importer {
        return Err(ActivationError::Importer);
    }
    if link_kind(&claims.nats.import_kind) != Some(import.kind) {
        return Err(ActivationError::Kind);
    }
    let granted = &claims.nats.subject;
    let contains = *granted == import.subject || subject::is_subset(&import.subject, granted);
    if granted.is_empty() || granted.contains(' ') || !contains {
        return Err(ActivationError::Subject(granted.clone()));
    }
    Ok(claims)
}

/// A JWT export claim as an export; `None` for an unknown type.
/// The table of an account JWT's `mappings`. One nats-server cannot add (a destination that is
/// no transform of its source, say) is left out with a warning, as nats-server leaves it out.
fn mappings(account: &str, claims: &BTreeMap<String, Vec<jwt::WeightedMapping>>) -> SubjectMappings {
    let mut table = SubjectMappings::default();
    for (source, destinations) in claims {
        let destinations: Vec<MapDest> = destinations
            .iter()
            .map(|d| MapDest { subject: d.subject.clone(), weight: d.weight(), cluster: d.cluster.clone() })
            .collect();
        if let Err(error) = table.add(source, &destinations) {
            tracing::warn!(%account, %source, %error, "Account subject mapping left out");
        }
    }
    table
}

fn export(claim: &ExportClaim) -> Option<Export> {
    let response = match claim.response_type.to_ascii_lowercase().as_str() {
        "stream" => ResponseType::Stream,
        "chunked" => ResponseType::Chunked,
        _ => ResponseType::Singleton,
    };
    Some(Export {
        token_required: claim.token_req,
        account_token_position: usize::try_from(claim.account_token_position).unwrap_or(usize::MAX),
        revocations: claim.revocations.clone().unwrap_or_default(),
        latency: claim.latency.as_ref().map(latency),
        response_threshold: u64::try_from(claim.response_threshold).ok().filter(|ns| *ns > 0).map(Duration::from_nanos),
        allow_trace: claim.allow_trace,
        ..Export::new(link_kind(&claim.kind)?, claim.subject.clone(), Vec::new(), response)
    })
}

/// A JWT `latency` claim, read as the jwt library reads it: `"headers"` or 0 is header-triggered
/// sampling, a number a percentage (one out of range fails the export's check, as in nats-server).
fn latency(claim: &jwt::LatencyClaim) -> Latency {
    let sampling = match &claim.sampling {
        serde_json::Value::String(text) if text.eq_ignore_ascii_case("headers") => Sampling::Headers,
        serde_json::Value::Number(n) if n.as_i64() == Some(0) => Sampling::Headers,
        serde_json::Value::Number(n) => Sampling::Percent(n.as_i64().and_then(|n| u8::try_from(n).ok()).unwrap_or(0)),
        _ => Sampling::Percent(0),
    };
    Latency { sampling, subject: claim.results.clone() }
}

/// A JWT import claim as an import, read as nats-server reads it: `local_subject` is the local
/// subject; without it a stream's `to` is its prefix, and a service's `subject` is the local one
/// and `to` (when set) the exporter's.
fn import(claim: &ImportClaim) -> Option<Import> {
    let kind = link_kind(&claim.kind)?;
    let set = |text: &str| (!text.is_empty()).then(|| text.to_string());
    let (subject, to, prefix) = match (kind, set(&claim.local_subject)) {
        (_, Some(local)) => (claim.subject.clone(), Some(local), None),
        (LinkKind::Stream, None) => (claim.subject.clone(), None, set(&claim.to)),
        (LinkKind::Service, None) => match set(&claim.to) {
            Some(remote) => (remote, Some(claim.subject.clone()), None),
            None => (claim.subject.clone(), None, None),
        },
    };
    let (share, allow_trace) = (claim.share, claim.allow_trace);
    Some(Import { kind, account: claim.account.clone(), subject, to, prefix, activation: None, share, allow_trace })
}

/// A JWT's link kind, spelled exactly as the jwt library decodes it (it fails on any other).
fn link_kind(text: &str) -> Option<LinkKind> {
    match text {
        "stream" => Some(LinkKind::Stream),
        "service" => Some(LinkKind::Service),
        _ => None,
    }
}

fn permissions(publish: &SubjectList, subscribe: &SubjectList, resp: Option<&JwtResponses>) -> Permissions {
    let rules = |list: &SubjectList| {
        (!list.is_empty()).then(|| SubjectPermission {
            allow: list.allow.clone().unwrap_or_default(),
            deny: list.deny.clone().unwrap_or_default(),
        })
    };
    Permissions { publish: rules(publish), subscribe: rules(subscribe), responses: resp.map(responses) }
}

/// The user's own permissions.
fn user_permissions(limits: &UserPermissionLimits) -> Permissions {
    permissions(&limits.publish, &limits.subscribe, limits.resp.as_ref())
}

/// A JWT's `resp` as nats-server reads it: `max` and `ttl` (nanoseconds) of 0 take the defaults,
/// negative ones mean no bound.
fn responses(resp: &JwtResponses) -> ResponsePermission {
    let mut responses = ResponsePermission::default();
    if resp.max != 0 {
        responses.msgs_max = u64::try_from(resp.max).ok();
    }
    if resp.ttl != 0 {
        responses.expires = u64::try_from(resp.ttl).ok().map(Duration::from_nanos);
    }
    responses
}

/// The JWT's JetStream limits as the type the config's account `jetstream {}` blocks fill,
/// field by field, so limits the type gains stay at their defaults until mapped here.
fn jetstream_limits(limits: &JetStreamLimits) -> AccountJetStream {
    AccountJetStream {
        memory_bytes_max: limit(limits.mem_storage),
        file_bytes_max: limit(limits.disk_storage),
        streams_max: count_limit(limits.streams),
        consumers_max: count_limit(limits.consumer),
        ack_pending_max: count_limit(limits.max_ack_pending),
        memory_stream_bytes_max: count_limit(limits.mem_max_stream_bytes),
        file_stream_bytes_max: count_limit(limits.disk_max_stream_bytes),
        max_bytes_required: limits.max_bytes_required,
        ..AccountJetStream::default()
    }
}

/// A JetStream count or per-stream bytes from a JWT as a bound: nats-server treats 0, like -1,
/// as no bound.
fn count_limit(value: i64) -> Option<u64> {
    u64::try_from(value).ok().filter(|count| *count > 0)
}

/// A JWT limit as a bound: -1 (or any negative) is none.
fn limit(value: i64) -> Option<u64> {
    u64::try_from(value).ok()
}

/// When the connection must close, seconds since the epoch: at the JWT's `exp`, or when its
/// time range ends (rounded up, so never before), whichever is first (nats-server's
/// `setExpiration`).
fn expiry(exp: i64, window: Window, checked_at: jiff::Timestamp) -> Option<i64> {
    let exp = (exp > 0).then_some(exp);
    let range_end = match window {
        Window::Always => None,
        Window::For(left) => {
            let end = checked_at.as_nanosecond().saturating_add(i128::try_from(left.as_nanos()).unwrap_or(i128::MAX));
            let seconds = end.div_euclid(1_000_000_000) + i128::from(end.rem_euclid(1_000_000_000) > 0);
            Some(i64::try_from(seconds).unwrap_or(i64::MAX))
        }
    };
    match (exp, range_end) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn least(a: i64, b: i64) -> Option<usize> {
    let bound = |v: i64| usize::try_from(v).ok();
    match (bound(a), bound(b)) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn refusal(why: &str) -> AuthError {
    tracing::debug!(why, "JWT authentication refused");
    AuthError::Violation
}

fn refused(what: &'static str) -> impl Fn(JwtError) -> AuthError {
    move |error| {
        tracing::debug!(%error, what, "JWT authentication refused");
        AuthError::Violation
    }
}

fn now() -> i64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(since.as_secs()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine;
    use nkeys::KeyPair;

    use super::*;

    fn token(signer: &KeyPair, importer: &str, times: &str, nats: &str) -> String {
        let header = URL_SAFE_NO_PAD.encode(r#"{"typ":"JWT","alg":"ed25519-nkey"}"#);
        let claims = format!(
            r#"{{"iss":"{}","sub":"{importer}",{times}"nats":{{"type":"activation","version":2,{nats}}}}}"#,
            signer.public_key()
        );
        let input = format!("{header}.{}", URL_SAFE_NO_PAD.encode(claims));
        let signature = URL_SAFE_NO_PAD.encode(signer.sign(input.as_bytes()).expect("sign"));
        format!("{input}.{signature}")
    }

    #[test]
    fn an_activation_holds_only_from_the_exporter_for_the_importer_its_kind_and_subject_in_time() {
        let (exporter, scope, importer) = (KeyPair::new_account(), KeyPair::new_account(), KeyPair::new_account());
        let import = Import {
            kind: LinkKind::Stream,
            account: exporter.public_key(),
            subject: "orders.eu.>".into(),
            to: None,
            prefix: None,
            activation: None,
            share: false,
            allow_trace: false,
        };
        let keys = HashSet::from([scope.public_key()]);
        let me = importer.public_key();
        let check = |token: &str| activation(token, &me, &import, Some(&keys), 1_000);
        let stream = r#""subject":"orders.>","kind":"stream""#;
        let granted = check(&token(&exporter, &me, r#""iat":7,"exp":2000,"#, stream));
        assert_eq!(granted, Ok(Activation { issued_at: 7, expires: Some(2_000) }));
        let on_behalf = format!(r#"{stream},"issuer_account":"{}""#, exporter.public_key());
        assert!(check(&token(&scope, &me, "", &on_behalf)).is_ok(), "a signing key on the exporter's behalf");
        assert_eq!(check(&token(&scope, &me, "", stream)), Err(ActivationError::Issuer));
        let stranger = KeyPair::new_account();
        let claimed = format!(r#"{stream},"issuer_account":"{}""#, exporter.public_key());
        assert_eq!(check(&token(&stranger, &me, "", &claimed)), Err(ActivationError::Issuer), "not its signing key");
        assert_eq!(check(&token(&exporter, &stranger.public_key(), "", stream)), Err(ActivationError::Importer));
        let service = r#""subject":"orders.>","kind":"service""#;
        assert_eq!(check(&token(&exporter, &me, "", service)), Err(ActivationError::Kind));
        let narrower = r#""subject":"orders.us.>","kind":"stream""#;
        assert!(matches!(check(&token(&exporter, &me, "", narrower)), Err(ActivationError::Subject(_))));
        let expired = check(&token(&exporter, &me, r#""exp":1000,"#, stream));
        assert_eq!(expired, Err(ActivationError::Token(JwtError::Expired)), "expired at its exp");
        let early = check(&token(&exporter, &me, r#""nbf":1001,"#, stream));
        assert_eq!(early, Err(ActivationError::Token(JwtError::NotYetValid)));
        let mut forged = token(&exporter, &me, "", stream);
        forged.push('A');
        assert!(matches!(check(&forged), Err(ActivationError::Token(_))));
    }

    #[test]
    fn a_token_out_of_time_or_from_an_unknown_signing_key_passes_the_account_checks_others_fail_them() {
        let (exporter, importer) = (KeyPair::new_account(), KeyPair::new_account());
        let import = Import {
            kind: LinkKind::Stream,
            account: exporter.public_key(),
            subject: "orders.>".into(),
            to: None,
            prefix: None,
            activation: None,
            share: false,
            allow_trace: false,
        };
        let me = importer.public_key();
        let passes = |token: &str| activation_claims(token, &me, &import).is_ok();
        let stream = r#""subject":"orders.>","kind":"stream""#;
        assert!(passes(&token(&exporter, &me, r#""exp":1000,"#, stream)), "expired: only the import is left out");
        let claimed = format!(r#"{stream},"issuer_account":"{}""#, exporter.public_key());
        assert!(passes(&token(&KeyPair::new_account(), &me, "", &claimed)), "the signing key is the server's check");
        assert!(!passes(&token(&KeyPair::new_account(), &me, "", stream)), "another issuer");
        assert!(!passes(&token(&exporter, &KeyPair::new_account().public_key(), "", stream)), "another importer");
        assert!(!passes(&token(&exporter, &me, "", r#""subject":"orders.>","kind":"service""#)), "another kind");
        assert!(!passes(&token(&exporter, &me, "", r#""subject":"orders.eu.>","kind":"stream""#)), "narrower");
        assert!(!passes("not a token"));
    }

    #[test]
    fn responses_without_a_publish_allow_list_allow_only_replies() {
        let limits = UserPermissionLimits { resp: Some(JwtResponses::default()), ..Default::default() };
        let granted = ClientPermissions::new(&user_permissions(&limits));
        assert!(!granted.may_publish("_INBOX.abc"), "only as a reply the connection tracks");
        assert_eq!(granted.responses(), Some(ResponsePermission::default()));
        let allowed = SubjectList { allow: Some(vec!["orders.>".into()]), deny: None };
        let limits = UserPermissionLimits { publish: allowed, ..limits };
        let granted = ClientPermissions::new(&user_permissions(&limits));
        assert!(granted.may_publish("orders.new") && !granted.may_publish("payments"));
    }

    #[test]
    fn jwt_responses_of_zero_take_the_defaults_and_negative_ones_no_bound() {
        let given = responses(&JwtResponses { max: 3, ttl: 5_000_000_000 });
        assert_eq!(given, ResponsePermission { msgs_max: Some(3), expires: Some(Duration::from_secs(5)) });
        assert_eq!(responses(&JwtResponses { max: 0, ttl: 0 }), ResponsePermission::default());
        assert_eq!(responses(&JwtResponses { max: -1, ttl: -1 }), ResponsePermission { msgs_max: None, expires: None });
    }

    #[test]
    fn limits_take_the_least_and_negative_means_none() {
        assert_eq!(least(-1, -1), None);
        assert_eq!(least(5, -1), Some(5));
        assert_eq!(least(-1, 3), Some(3));
        assert_eq!(least(5, 3), Some(3));
        assert_eq!(limit(-1), None);
        assert_eq!(limit(7), Some(7));
        assert_eq!(count_limit(0), None, "no stream count bound, as in nats-server");
        assert_eq!(count_limit(4), Some(4));
    }
}
