//! NATS JWTs (nats-io/jwt v2, and v1's `ed25519` header): decoded by hand, the claims read with
//! serde, the signature over `header.claims` checked with the issuer's nkey.
//!
//! Only what authentication needs is read; unknown claims are ignored, as nats-server ignores
//! claims newer than it.

use std::collections::{BTreeMap, HashMap};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde::de::DeserializeOwned;
use serde::Deserialize;

use super::nkey::{self, Role};
use super::restrictions::TimeRange;

/// Why a JWT was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JwtError {
    /// Longer than the bound for its kind.
    #[error("JWT is longer than {0} bytes")]
    TooLong(usize),
    /// Not three base64url parts of JSON with the expected fields.
    #[error("JWT is malformed: {0}")]
    Malformed(&'static str),
    /// The header names something other than a NATS JWT.
    #[error("JWT header is not a NATS ed25519 JWT")]
    Header,
    /// The claims are of another kind (a user where an account was expected...).
    #[error("JWT is a {found} JWT, expected {expected}")]
    Kind {
        /// What the claims say they are.
        found: String,
        /// What was expected.
        expected: &'static str,
    },
    /// The issuer or subject is not an nkey of the right role.
    #[error("JWT {0} is not a valid nkey of the right kind")]
    Key(&'static str),
    /// The signature is not the issuer's.
    #[error("JWT signature does not verify")]
    Signature,
    /// Past `exp`.
    #[error("JWT has expired")]
    Expired,
    /// Before `nbf`.
    #[error("JWT is not yet valid")]
    NotYetValid,
}

/// The registered claims every NATS JWT has, with `nats` the kind-specific part.
#[derive(Debug, Clone, Deserialize)]
pub struct Claims<N> {
    /// Issued at, seconds since the epoch.
    #[serde(default)]
    pub iat: i64,
    /// Who signed: a public nkey.
    pub iss: String,
    /// Who the claims are about: a public nkey.
    pub sub: String,
    /// A display name.
    #[serde(default)]
    pub name: String,
    /// Expiry, seconds since the epoch; 0 never.
    #[serde(default)]
    pub exp: i64,
    /// Not valid before, seconds since the epoch; 0 always.
    #[serde(default)]
    pub nbf: i64,
    /// The kind-specific claims.
    pub nats: N,
}

impl<N> Claims<N> {
    /// Refuses claims outside `exp`/`nbf` at `now` (seconds since the epoch).
    pub fn check_times(&self, now: i64) -> Result<(), JwtError> {
        if self.exp > 0 && now > self.exp {
            return Err(JwtError::Expired);
        }
        if self.nbf > 0 && now < self.nbf {
            return Err(JwtError::NotYetValid);
        }
        Ok(())
    }
}

/// Kind-specific claims, which name their kind in `type`.
pub trait Kind: DeserializeOwned {
    /// The `type` these claims must have.
    const TYPE: &'static str;
    /// The role the issuer's nkey must have.
    const ISSUER: Role;
    /// The role the subject's nkey must have.
    const SUBJECT: Role;
    /// The `type` the claims carry.
    fn kind(&self) -> &str;
}

/// Allow and deny lists as the JWT has them (`null` means none).
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct SubjectList {
    /// Allowed subjects.
    pub allow: Option<Vec<String>>,
    /// Denied subjects.
    pub deny: Option<Vec<String>>,
}

impl SubjectList {
    /// Whether neither list names anything.
    pub fn is_empty(&self) -> bool {
        self.allow.as_ref().is_none_or(Vec::is_empty) && self.deny.as_ref().is_none_or(Vec::is_empty)
    }
}

/// Replies a user may send to requests it received (`resp`).
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct ResponsePermission {
    /// Replies per request.
    pub max: i64,
    /// How long a reply subject stays open, nanoseconds.
    pub ttl: i64,
}

/// A user's permissions and limits: in the user JWT, or a scoped signing key's template.
/// A missing limit is 0, as Go's zero value is to nats-server: nsc writes -1 for unlimited.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct UserPermissionLimits {
    /// What the user may publish to.
    #[serde(rename = "pub")]
    pub publish: SubjectList,
    /// What the user may subscribe to.
    #[serde(rename = "sub")]
    pub subscribe: SubjectList,
    /// Replies allowed to received requests.
    pub resp: Option<ResponsePermission>,
    /// Subscriptions; -1 unlimited.
    pub subs: i64,
    /// Bytes of payload per message; -1 unlimited.
    pub payload: i64,
    /// Bytes per connection (not enforced; read for the empty check scoped users need).
    pub data: i64,
    /// A bearer token: no nonce signature needed.
    pub bearer_token: bool,
    /// Which kinds of connection may use it (`STANDARD`, `WEBSOCKET`...); empty means all.
    pub allowed_connection_types: Option<Vec<String>>,
    /// Networks it may connect from (CIDRs); empty means any.
    #[serde(deserialize_with = "super::restrictions::cidr_list")]
    pub src: Vec<String>,
    /// Daily time ranges it may connect in; none means any time.
    pub times: Option<Vec<TimeRange>>,
    /// The zone of `times` (an IANA name); empty is the server's own.
    pub times_location: String,
}

impl UserPermissionLimits {
    /// Whether nothing is set, which nats-server requires of users a scoped key signs.
    pub fn is_empty(&self) -> bool {
        !self.has_permissions()
            && [self.subs, self.payload, self.data] == [0, 0, 0]
            && !self.bearer_token
            && self.allowed_connection_types.as_ref().is_none_or(Vec::is_empty)
            && self.src.is_empty()
            && self.times.as_ref().is_none_or(Vec::is_empty)
            && self.times_location.is_empty()
    }

    /// Whether the claims restrict subjects at all (else the account's default permissions apply).
    pub fn has_permissions(&self) -> bool {
        !self.publish.is_empty() || !self.subscribe.is_empty() || self.resp.is_some()
    }
}

/// A user JWT's `nats` claims.
#[derive(Debug, Clone, Deserialize)]
pub struct UserNats {
    /// `user`.
    #[serde(rename = "type", default)]
    pub kind: String,
    /// Permissions and limits.
    #[serde(flatten)]
    pub limits: UserPermissionLimits,
    /// The account, when a signing key of it signed.
    #[serde(default)]
    pub issuer_account: String,
    /// `name:value` tags, which scope templates' `{{tag(name)}}` read.
    #[serde(default)]
    pub tags: Option<Vec<String>>,
}

impl Kind for UserNats {
    const TYPE: &'static str = "user";
    const ISSUER: Role = Role::Account;
    const SUBJECT: Role = Role::User;
    fn kind(&self) -> &str {
        &self.kind
    }
}

/// An account's limits (`nats.limits`); -1 unlimited, missing 0 (Go's zero value, as nats-server
/// reads it).
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct AccountLimits {
    /// Subscriptions per connection.
    pub subs: i64,
    /// Bytes of payload per message.
    pub payload: i64,
    /// Client connections at once.
    pub conn: i64,
    /// Imports the account may list; -1 any.
    pub imports: i64,
    /// Exports the account may list; -1 any.
    pub exports: i64,
    /// Whether its exports may have wildcards (checked only when `exports` is bounded).
    pub wildcards: bool,
    /// The account's JetStream limits, when not tiered.
    #[serde(flatten)]
    pub jetstream: JetStreamLimits,
    /// JetStream limits per tier (`R1`, `R3`...), as modern nsc writes them.
    pub tiered_limits: Option<BTreeMap<String, JetStreamLimits>>,
}

impl AccountLimits {
    /// The JetStream limits in force, nats-server's way: when tiers are listed only they count
    /// (its JWT library drops the plain limits beside them as it decodes), JetStream on if one
    /// has storage; else the plain limits, on if they have storage. `None`: no JetStream.
    pub fn jetstream(&self) -> Option<AccountJetStreamLimits<'_>> {
        match self.tiered_limits.as_ref().filter(|tiers| !tiers.is_empty()) {
            Some(tiers) => {
                tiers.values().any(JetStreamLimits::has_storage).then_some(AccountJetStreamLimits::Tiered(tiers))
            }
            None => self.jetstream.has_storage().then_some(AccountJetStreamLimits::Plain(&self.jetstream)),
        }
    }
}

/// Which JetStream limits an account JWT gives: one set, or one per tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccountJetStreamLimits<'a> {
    /// The same limits whatever a stream's replicas.
    Plain(&'a JetStreamLimits),
    /// Tier name (`R<replicas>`) → its limits.
    Tiered(&'a BTreeMap<String, JetStreamLimits>),
}

/// JetStream limits of an account, or of one of its tiers.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct JetStreamLimits {
    /// JetStream memory storage, bytes.
    pub mem_storage: i64,
    /// JetStream file storage, bytes.
    pub disk_storage: i64,
    /// Streams.
    pub streams: i64,
    /// Consumers.
    pub consumer: i64,
    /// Largest max_ack_pending of a consumer.
    pub max_ack_pending: i64,
    /// Largest max_bytes of a memory stream.
    pub mem_max_stream_bytes: i64,
    /// Largest max_bytes of a file stream.
    pub disk_max_stream_bytes: i64,
    /// Streams must set max_bytes.
    pub max_bytes_required: bool,
}

impl JetStreamLimits {
    /// Whether either storage limit is other than 0, which is what turns JetStream on.
    pub fn has_storage(&self) -> bool {
        self.mem_storage != 0 || self.disk_storage != 0
    }
}

/// A signing key of an account: plain, or scoped with the permissions its users get.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum SigningKey {
    /// Users it signs carry their own permissions.
    Plain(String),
    /// `{ kind: "user_scope", key, template }`: users get the template's permissions.
    Scoped {
        /// The public nkey.
        key: String,
        /// What users signed with it may do.
        #[serde(default)]
        template: Box<UserPermissionLimits>,
    },
}

/// Default permissions of an account's users (`default_permissions`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct DefaultPermissions {
    /// Publish.
    #[serde(rename = "pub")]
    pub publish: SubjectList,
    /// Subscribe.
    #[serde(rename = "sub")]
    pub subscribe: SubjectList,
    /// Replies to received requests.
    pub resp: Option<ResponsePermission>,
}

/// An account JWT's `nats` claims.
#[derive(Debug, Clone, Deserialize)]
pub struct AccountNats {
    /// `account`.
    #[serde(rename = "type", default)]
    pub kind: String,
    /// Limits.
    #[serde(default)]
    pub limits: AccountLimits,
    /// Keys besides the account's own that may sign its users.
    #[serde(default)]
    pub signing_keys: Option<Vec<SigningKey>>,
    /// User key (or `*`) → users of it issued at or before this time are revoked.
    #[serde(default)]
    pub revocations: Option<HashMap<String, i64>>,
    /// Permissions of users whose JWT names none.
    #[serde(default)]
    pub default_permissions: Option<DefaultPermissions>,
    /// Streams and services the account offers other accounts.
    #[serde(default)]
    pub exports: Option<Vec<ExportClaim>>,
    /// Streams and services the account takes from other accounts.
    #[serde(default)]
    pub imports: Option<Vec<ImportClaim>>,
    /// `name:value` tags, which scope templates' `{{account-tag(name)}}` read.
    #[serde(default)]
    pub tags: Option<Vec<String>>,
    /// Subject mappings: published subject → its weighted destinations.
    #[serde(default)]
    pub mappings: Option<BTreeMap<String, Vec<WeightedMapping>>>,
    /// What the account is for.
    #[serde(default)]
    pub description: Option<String>,
    /// Where to read more about it: an absolute URL.
    #[serde(default)]
    pub info_url: Option<String>,
}

/// One destination of an account JWT's subject mapping.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct WeightedMapping {
    /// The destination subject.
    pub subject: String,
    /// Per cent of the messages; 0 (or none) means 100, as in the jwt library. A number that is
    /// no `u8` fails to decode there too.
    pub weight: u8,
    /// The cluster the destination applies in.
    pub cluster: String,
}

impl WeightedMapping {
    /// The weight as the jwt library reads it (`GetWeight`).
    pub fn weight(&self) -> u8 {
        if self.weight == 0 {
            100
        } else {
            self.weight
        }
    }
}

/// One of an account JWT's `exports`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ExportClaim {
    /// The exported subject.
    #[serde(default)]
    pub subject: String,
    /// `stream` or `service`; empty when the claim has none.
    #[serde(rename = "type", default, deserialize_with = "link_type")]
    pub kind: String,
    /// Importers need an activation token.
    #[serde(default)]
    pub token_req: bool,
    /// `Singleton`, `Stream` or `Chunked`, for services.
    #[serde(default)]
    pub response_type: String,
    /// The subject token that must be the importer's account key; 0 for none.
    #[serde(default)]
    pub account_token_position: u32,
    /// Importer key (or `*`) → activations issued to it at or before this time are revoked.
    #[serde(default)]
    pub revocations: Option<HashMap<String, i64>>,
    /// Service latency tracking, for services (the library's `service_latency`; `latency` read too).
    #[serde(default, rename = "service_latency", alias = "latency")]
    pub latency: Option<LatencyClaim>,
    /// How long a service request waits for its response, in nanoseconds; 0 for the default.
    #[serde(default)]
    pub response_threshold: i64,
    /// For services, whether `Nats-Trace-Dest` traces go on into the exporter.
    #[serde(default)]
    pub allow_trace: bool,
    /// What the export offers.
    #[serde(default)]
    pub description: Option<String>,
    /// Where to read more about it: an absolute URL.
    #[serde(default)]
    pub info_url: Option<String>,
}

/// An export's `latency`: `sampling` a percentage or `"headers"`, `results` the subject.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct LatencyClaim {
    /// 1 to 100, or `"headers"` (or 0) for header-triggered sampling.
    #[serde(default)]
    pub sampling: serde_json::Value,
    /// Where results are published.
    #[serde(default)]
    pub results: String,
}

/// One of an account JWT's `imports`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ImportClaim {
    /// The subject: the exporter's, or (a service import without `local_subject`) the local one.
    #[serde(default)]
    pub subject: String,
    /// The exporting account's public key.
    #[serde(default)]
    pub account: String,
    /// Deprecated: a stream import's prefix, or the exporter's subject of a service import.
    #[serde(default)]
    pub to: String,
    /// The subject in the importing account.
    #[serde(default)]
    pub local_subject: String,
    /// `stream` or `service`; empty when the claim has none.
    #[serde(rename = "type", default, deserialize_with = "link_type")]
    pub kind: String,
    /// An activation token, for exports that require one.
    #[serde(default)]
    pub token: String,
    /// Whether the requester's details go to the exporter.
    #[serde(default)]
    pub share: bool,
    /// For streams, whether `Nats-Trace-Dest` traces go on into the importer.
    #[serde(default)]
    pub allow_trace: bool,
}

/// An import's or export's `type` as the jwt library decodes it (`ExportType`): only `stream`
/// and `service`, spelled so. Anything else given, `""` and `null` too, fails the whole account
/// JWT, which stops nats-server at start; a missing `type` decodes (and is refused later).
fn link_type<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    match Option::<String>::deserialize(deserializer)?.as_deref() {
        Some(kind @ ("stream" | "service")) => Ok(kind.to_string()),
        other => Err(serde::de::Error::custom(format!("unknown export type {:?}", other.unwrap_or_default()))),
    }
}

impl Kind for AccountNats {
    const TYPE: &'static str = "account";
    const ISSUER: Role = Role::Operator;
    const SUBJECT: Role = Role::Account;
    fn kind(&self) -> &str {
        &self.kind
    }
}

/// An activation JWT's `nats` claims: the exporter's leave for one account (the JWT's `sub`)
/// to import a subject of an export that requires a token.
#[derive(Debug, Clone, Deserialize)]
pub struct ActivationNats {
    /// `activation`.
    #[serde(rename = "type", default)]
    pub kind: String,
    /// The subject the importer may import (wildcards allowed for streams).
    #[serde(default)]
    pub subject: String,
    /// `stream` or `service`.
    #[serde(rename = "kind", default)]
    pub import_kind: String,
    /// The exporting account, when one of its signing keys signed.
    #[serde(default)]
    pub issuer_account: String,
}

impl Kind for ActivationNats {
    const TYPE: &'static str = "activation";
    const ISSUER: Role = Role::Account;
    const SUBJECT: Role = Role::Account;
    fn kind(&self) -> &str {
        &self.kind
    }
}

/// An operator JWT's `nats` claims.
#[derive(Debug, Clone, Deserialize)]
pub struct OperatorNats {
    /// `operator`.
    #[serde(rename = "type", default)]
    pub kind: String,
    /// Keys besides the operator's own that may sign accounts.
    #[serde(default)]
    pub signing_keys: Option<Vec<String>>,
    /// The system account's public key.
    #[serde(default)]
    pub system_account: String,
}

impl Kind for OperatorNats {
    const TYPE: &'static str = "operator";
    const ISSUER: Role = Role::Operator;
    const SUBJECT: Role = Role::Operator;
    fn kind(&self) -> &str {
        &self.kind
    }
}

#[derive(Deserialize)]
struct Header {
    #[serde(default)]
    typ: String,
    #[serde(default)]
    alg: String,
}

/// Decodes `token` as claims of kind `N`, checking its form, its keys and its issuer's signature,
/// not its times or whether the issuer is trusted.
pub fn decode<N: Kind>(token: &str, bytes_max: usize) -> Result<Claims<N>, JwtError> {
    if token.len() > bytes_max {
        return Err(JwtError::TooLong(bytes_max));
    }
    let mut parts = token.trim().split('.');
    let (Some(header), Some(claims), Some(signature), None) = (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(JwtError::Malformed("not three parts"));
    };
    let header: Header = json_part(header)?;
    let nats_jwt = header.typ.eq_ignore_ascii_case("jwt") || header.typ.is_empty();
    if !nats_jwt || !matches!(header.alg.as_str(), "ed25519-nkey" | "ed25519") {
        return Err(JwtError::Header);
    }
    let signed_len = token.trim().len() - signature.len() - 1;
    let decoded: Claims<N> = json_part(claims)?;
    if decoded.nats.kind() != N::TYPE {
        return Err(JwtError::Kind { found: decoded.nats.kind().to_string(), expected: N::TYPE });
    }
    let issuer = nkey::public_key(&decoded.iss, N::ISSUER).ok_or(JwtError::Key("issuer"))?;
    if !nkey::is_public_key(&decoded.sub, N::SUBJECT) {
        return Err(JwtError::Key("subject"));
    }
    if !nkey::verifies(&issuer, &token.trim().as_bytes()[..signed_len], signature) {
        return Err(JwtError::Signature);
    }
    Ok(decoded)
}

fn json_part<T: DeserializeOwned>(part: &str) -> Result<T, JwtError> {
    let bytes = URL_SAFE_NO_PAD
        .decode(part.trim_end_matches('='))
        .map_err(|_| JwtError::Malformed("a part is not base64url"))?;
    serde_json::from_slice(&bytes).map_err(|_| JwtError::Malformed("a part is not the expected JSON"))
}

/// The JWT in `text`: the text itself, or the one between nsc's `-----BEGIN ... JWT-----` lines.
pub fn undecorate(text: &str) -> &str {
    let mut lines = text.lines().map(str::trim);
    if !lines.any(|line| line.starts_with("-----BEGIN") && line.contains("JWT")) {
        return text.trim();
    }
    lines.find(|line| !line.is_empty()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use nkeys::KeyPair;

    use super::*;

    fn encode(text: &str) -> String {
        URL_SAFE_NO_PAD.encode(text)
    }

    fn signed(issuer: &KeyPair, header: &str, claims: &str) -> String {
        let input = format!("{}.{}", encode(header), encode(claims));
        format!("{input}.{}", URL_SAFE_NO_PAD.encode(issuer.sign(input.as_bytes()).unwrap()))
    }

    const HEADER: &str = r#"{"typ":"JWT","alg":"ed25519-nkey"}"#;

    #[test]
    fn a_user_jwt_decodes_only_whole_well_signed_and_of_its_kind() {
        let (account, user) = (KeyPair::new_account(), KeyPair::new_user());
        let claims = format!(
            r#"{{"iss":"{}","sub":"{}","iat":1,"exp":100,"nats":{{"type":"user","pub":{{"allow":["a"]}}}}}}"#,
            account.public_key(),
            user.public_key()
        );
        let token = signed(&account, HEADER, &claims);
        let decoded = decode::<UserNats>(&token, 4096).expect("valid");
        assert_eq!(decoded.nats.limits.publish.allow, Some(vec!["a".to_string()]));
        assert_eq!(decoded.nats.limits.subs, 0, "a missing limit is 0, as to nats-server");
        assert_eq!(decoded.check_times(50), Ok(()));
        assert_eq!(decoded.check_times(101), Err(JwtError::Expired));
        assert_eq!(decode::<UserNats>(&token, 10).err(), Some(JwtError::TooLong(10)));
        assert!(matches!(decode::<AccountNats>(&token, 4096), Err(JwtError::Kind { .. })));
        let by_user = signed(&user, HEADER, &claims);
        assert_eq!(decode::<UserNats>(&by_user, 4096).err(), Some(JwtError::Signature));
        let other_alg = signed(&account, r#"{"typ":"JWT","alg":"HS256"}"#, &claims);
        assert_eq!(decode::<UserNats>(&other_alg, 4096).err(), Some(JwtError::Header));
        for broken in ["", "a.b", "a.b.c.d", "!!.!!.!!", &token[..token.len() / 2]] {
            assert!(decode::<UserNats>(broken, 4096).is_err(), "{broken:?}");
        }
    }

    #[test]
    fn tiered_limits_give_jetstream_when_a_tier_has_storage_and_plain_ones_beside_them_count_for_nothing() {
        let limits = |json: &str| serde_json::from_str::<AccountLimits>(json).expect("limits");
        let tiered = limits(r#"{"tiered_limits":{"R1":{"disk_storage":-1,"streams":2}}}"#);
        let Some(AccountJetStreamLimits::Tiered(tiers)) = tiered.jetstream() else { panic!("tiered: {tiered:?}") };
        assert_eq!(tiers.get("R1").map(|tier| tier.streams), Some(2));
        assert_eq!(limits(r#"{"tiered_limits":{"R1":{"streams":2}}}"#).jetstream(), None, "no tier has storage");
        let both = limits(r#"{"mem_storage":5,"tiered_limits":{"R1":{"disk_storage":-1}}}"#);
        assert!(matches!(both.jetstream(), Some(AccountJetStreamLimits::Tiered(_))), "the tiers hold");
        let plain_ignored = limits(r#"{"mem_storage":5,"tiered_limits":{"R1":{"streams":1}}}"#);
        assert_eq!(plain_ignored.jetstream(), None, "tiers listed: only they can turn JetStream on");
        assert_eq!(limits(r#"{"tiered_limits":{}}"#).jetstream(), None, "no tiers: the plain limits decide");
        assert!(matches!(limits(r#"{"disk_storage":-1}"#).jetstream(), Some(AccountJetStreamLimits::Plain(_))));
    }

    #[test]
    fn decorated_jwts_are_unwrapped() {
        let text = "-----BEGIN NATS OPERATOR JWT-----\neyJx.y.z\n------END NATS OPERATOR JWT------\n";
        assert_eq!(undecorate(text), "eyJx.y.z");
        assert_eq!(undecorate("  eyJx.y.z\n"), "eyJx.y.z");
    }
}
