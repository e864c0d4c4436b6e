//! Who may connect (token, users with passwords, nkey users, user JWTs of trusted accounts) and
//! what each user may publish and subscribe to.

pub mod certificate;
pub mod go_url;
pub mod jwt;
pub mod nkey;
pub mod responses;
pub mod restrictions;
pub mod templates;
pub mod trust;
pub mod validation;

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use semaq_wire::info::ConnectOptions;
use semaq_wire::subject;

use crate::options::{Options, Permissions, ResponsePermission, SubjectPermission, WebsocketAuth};
use certificate::{CertificateNames, Dn};
pub use trust::{AccountSlot, Trust, TrustError};

/// Why a client was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// Wrong, missing or unknown credentials.
    #[error("Authorization Violation")]
    Violation,
    /// The user's account has as many connections as its JWT allows (nats-server's words).
    #[error("maximum account active connections exceeded")]
    AccountConnectionsExceeded,
}

/// What an authenticated client may do.
#[derive(Debug, Clone, Default)]
pub struct Grant {
    /// The user name (for nkey and JWT users, the public key), when the client logged in as a user.
    pub user: Option<String>,
    /// Restrictions; `None` allows everything.
    pub permissions: Option<Arc<ClientPermissions>>,
    /// Bounds a user JWT and its account set on the connection.
    pub limits: ConnectionLimits,
    /// The account: its name for a user of a config account, its public key for a JWT user;
    /// `None` for the global account `$G`.
    pub account: Option<String>,
    /// Holds the connection's place in its account's connection limit while the grant lives.
    pub slot: Option<Arc<AccountSlot>>,
    /// A JWT user's `name` and `tags`, which nats-server shows in its client details.
    pub jwt_tags: (String, Vec<String>),
}

/// Bounds on one connection beyond the server's own.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Subscriptions the connection may hold.
    pub subscriptions_max: Option<usize>,
    /// Largest message it may publish, bytes.
    pub payload_bytes_max: Option<usize>,
    /// When its credentials expire, seconds since the epoch.
    pub expires: Option<i64>,
}

/// What a configured user is given once its credentials check out.
#[derive(Debug, Clone)]
struct Login {
    permissions: Option<Arc<ClientPermissions>>,
    /// The config account it belongs to; `None` for the server's own users (`$G`).
    account: Option<Arc<str>>,
}

impl Login {
    fn grant(&self, user: &str) -> Grant {
        Grant {
            user: Some(user.to_string()),
            permissions: self.permissions.clone(),
            account: self.account.as_deref().map(str::to_string),
            ..Grant::default()
        }
    }
}

/// The listener a client came through, which decides whose single user, token and
/// `no_auth_user` apply.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Transport {
    /// The client port: the server's own settings.
    #[default]
    Tcp,
    /// The WebSocket listener: its `websocket { authorization, no_auth_user }` when set.
    Websocket,
}

/// Credentials read from a WebSocket upgrade's cookies, which fill what a CONNECT leaves empty.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cookies {
    /// A user JWT (`jwt_cookie`).
    pub jwt: Option<String>,
    /// A user name (`user_cookie`).
    pub user: Option<String>,
    /// A password (`pass_cookie`).
    pub pass: Option<String>,
    /// A token (`token_cookie`).
    pub token: Option<String>,
}

impl Cookies {
    /// Fills each of `connect`'s JWT, user, password and token that is missing or empty from
    /// its cookie, field by field, as nats-server does.
    pub fn fill(&self, connect: &mut ConnectOptions) {
        let pairs = [
            (&mut connect.jwt, &self.jwt),
            (&mut connect.user, &self.user),
            (&mut connect.pass, &self.pass),
            (&mut connect.auth_token, &self.token),
        ];
        for (field, cookie) in pairs {
            if field.as_deref().is_none_or(str::is_empty) {
                if let Some(value) = cookie.as_ref().filter(|value| !value.is_empty()) {
                    *field = Some(value.clone());
                }
            }
        }
    }
}

/// The single user, token and `no_auth_user` one listener checks (nats-server's `username`,
/// `password`, `token`, `noAuthUser` in `processClientOrLeafAuthentication`).
#[derive(Debug, Default)]
struct Simple {
    token: Option<String>,
    /// A user checked by name and password alone; only the WebSocket override has one, the
    /// server's single user is among `users`.
    user: Option<(String, String)>,
    no_auth_user: Option<String>,
    /// A user of `users` this listener may not log in as: the server's single user, which
    /// the WebSocket override replaces.
    hidden_user: Option<String>,
    no_auth_global: bool,
}

/// Checks credentials from `CONNECT` against the configured token, users, nkeys and operators.
#[derive(Debug, Default)]
pub struct Authenticator {
    users: HashMap<String, (String, Login)>,
    nkeys: HashMap<String, Login>,
    /// The server's own single user, token and `no_auth_user`.
    server: Simple,
    /// `websocket { authorization, no_auth_user }`, when it overrides the server's.
    websocket: Option<Simple>,
    trust: Option<Trust>,
    /// `verify_and_map` on the client port's and the WebSocket listener's `tls { }`.
    maps: TlsMaps,
}

/// Where client certificates name the user (`verify_and_map`), and who they can name.
#[derive(Debug, Default)]
struct TlsMaps {
    tcp: bool,
    websocket: bool,
    /// The server's single user (`authorization { user, password }`), which nats-server keeps
    /// out of its users table and so never maps.
    single_user: Option<String>,
    /// The users whose names parse as distinguished names, in configuration order.
    dn_users: Vec<(String, Dn)>,
}

impl TlsMaps {
    fn from_options(options: &Options) -> Self {
        let maps = |tls: Option<&crate::options::TlsOptions>| tls.is_some_and(|tls| tls.map);
        let single_user = options.auth.single_user.clone();
        let account_users = options.accounts.iter().flat_map(|account| account.users.iter());
        let dn_users = options
            .auth
            .users
            .iter()
            .chain(account_users)
            .filter(|user| Some(&user.username) != single_user.as_ref())
            .filter_map(|user| Some((user.username.clone(), Dn::parse(&user.username)?)))
            .collect();
        Self {
            tcp: maps(options.tls.as_ref()),
            websocket: maps(options.websocket.as_ref().and_then(|ws| ws.tls.as_ref())),
            single_user,
            dn_users,
        }
    }

    fn on(&self, transport: Transport) -> bool {
        match transport {
            Transport::Tcp => self.tcp,
            Transport::Websocket => self.websocket,
        }
    }

    /// Whether a certificate could name `user` on some listener (nats-server's `canTLSMap`).
    fn can_map(&self, user: &str) -> bool {
        (self.tcp || self.websocket) && self.single_user.as_deref() != Some(user)
    }
}

impl Authenticator {
    /// Collects the server-level and account users and nkeys of `options`, and decodes its
    /// operators and preloaded accounts.
    pub fn from_options(options: &Options) -> Result<Self, TrustError> {
        let compile = |p: &Option<Permissions>| p.as_ref().map(|p| Arc::new(ClientPermissions::new(p)));
        let mut users = HashMap::new();
        let mut nkeys = HashMap::new();
        let server_level = (None, options.auth.users.as_slice(), options.auth.nkeys.as_slice());
        let accounts =
            options.accounts.iter().map(|a| (Some(Arc::<str>::from(a.name.as_str())), &a.users[..], &a.nkeys[..]));
        for (account, account_users, account_nkeys) in std::iter::once(server_level).chain(accounts) {
            for user in account_users {
                let login = Login { permissions: compile(&user.permissions), account: account.clone() };
                users.insert(user.username.clone(), (user.password.clone(), login));
            }
            for user in account_nkeys {
                nkeys.insert(
                    user.nkey.clone(),
                    Login { permissions: compile(&user.permissions), account: account.clone() },
                );
            }
        }
        let trust = options.auth.operator.as_ref().map(Trust::load).transpose()?;
        let server = Simple {
            token: options.auth.token.clone(),
            no_auth_user: options.auth.no_auth_user.clone(),
            no_auth_global: options.auth.no_auth_global,
            ..Simple::default()
        };
        let websocket = options.websocket.as_ref().map(|ws| &ws.auth).filter(|auth| auth.overrides());
        let websocket = websocket.map(|auth| websocket_simple(auth, options.auth.single_user.clone()));
        let maps = TlsMaps::from_options(options);
        Ok(Self { users, nkeys, server, websocket, trust, maps })
    }

    fn simple(&self, transport: Transport) -> &Simple {
        match (transport, &self.websocket) {
            (Transport::Websocket, Some(simple)) => simple,
            _ => &self.server,
        }
    }

    /// The operators and accounts of decentralized auth, when configured.
    pub fn trust(&self) -> Option<&Trust> {
        self.trust.as_ref()
    }

    /// Whether clients of the client port must present credentials.
    pub fn is_required(&self) -> bool {
        self.server.token.is_some() || !self.users.is_empty() || !self.nkeys.is_empty() || self.trust.is_some()
    }

    /// Whether clients coming through `transport` must present credentials: a WebSocket
    /// override requires them even on a server that does not.
    pub fn is_required_on(&self, transport: Transport) -> bool {
        self.is_required() || (transport == Transport::Websocket && self.websocket.is_some())
    }

    /// [`Authenticator::authenticate_on`] for a client of the client port.
    pub fn authenticate(
        &self,
        connect: &ConnectOptions,
        nonce: Option<&str>,
        peer: Option<IpAddr>,
    ) -> Result<Grant, AuthError> {
        self.authenticate_on(connect, nonce, Transport::Tcp, peer, None)
    }

    /// Grants access for the credentials in `connect`, whose nkey signature must be of `nonce`
    /// (the one sent in this connection's INFO), to a client at `peer` that came through
    /// `transport` presenting the client `certificate` (when TLS asked for one), or refuses.
    pub fn authenticate_on(
        &self,
        connect: &ConnectOptions,
        nonce: Option<&str>,
        transport: Transport,
        peer: Option<IpAddr>,
        certificate: Option<&CertificateNames>,
    ) -> Result<Grant, AuthError> {
        if !self.is_required_on(transport) {
            return Ok(Grant::default());
        }
        let simple = self.simple(transport);
        if let Some(trust) = &self.trust {
            // Operator mode has no other kind of user (the config refuses them).
            let granted = trust.authenticate(connect, nonce, peer)?;
            let limits = ConnectionLimits {
                subscriptions_max: granted.subscriptions_max,
                payload_bytes_max: granted.payload_bytes_max,
                expires: granted.expires,
            };
            return Ok(Grant {
                user: Some(granted.user),
                permissions: granted.permissions,
                limits,
                account: Some(granted.account),
                slot: Some(Arc::new(granted.slot)),
                jwt_tags: (granted.name_tag, granted.tags),
            });
        }
        if let Some(grant) = self.nkey_user(connect, nonce, simple) {
            return grant;
        }
        if let Some(grant) = self.mapped_user(connect, transport, certificate) {
            return grant;
        }
        if let (Some(expected), Some(given)) = (&simple.token, &connect.auth_token) {
            return if constant_time_eq(expected, given) { Ok(Grant::default()) } else { Err(AuthError::Violation) };
        }
        let no_credentials = connect.user.is_none() && connect.auth_token.is_none();
        if no_credentials && connect.nkey.is_none() && simple.no_auth_global {
            return Ok(Grant::default());
        }
        if let (true, Some(default_user)) = (no_credentials, &simple.no_auth_user) {
            let (_, login) = self.user(default_user, simple).ok_or(AuthError::Violation)?;
            return Ok(login.grant(default_user));
        }
        let (Some(user), Some(pass)) = (&connect.user, &connect.pass) else {
            return Err(AuthError::Violation);
        };
        if let Some((name, password)) = &simple.user {
            // nats-server forbids a single WebSocket user beside `users`, so it is the only one;
            // and a token, when set too, is the only credential it checks.
            let matches = simple.token.is_none() && constant_time_eq(name, user) && constant_time_eq(password, pass);
            return if matches {
                Ok(Grant { user: Some(user.clone()), ..Grant::default() })
            } else {
                Err(AuthError::Violation)
            };
        }
        match self.user(user, simple) {
            // nats-server's `canTLSMap`: a user without a password whom a certificate can name
            // is a certificate identity, not a login without password on a listener that does
            // not map.
            Some((password, _)) if password.is_empty() && self.maps.can_map(user) => Err(AuthError::Violation),
            Some((password, login)) if constant_time_eq(password, pass) => Ok(login.grant(user)),
            _ => Err(AuthError::Violation),
        }
    }

    /// The verdict of `verify_and_map` on `transport` (nats-server's `checkClientTLSCertSubject`
    /// over its users table); `None` when this listener does not map or there are no users to
    /// map to. The user's password, if it has one, must be sent too.
    fn mapped_user(
        &self,
        connect: &ConnectOptions,
        transport: Transport,
        certificate: Option<&CertificateNames>,
    ) -> Option<Result<Grant, AuthError>> {
        let mappable = |name: &str| self.maps.single_user.as_deref() != Some(name) && self.users.contains_key(name);
        if !self.maps.on(transport) || !self.users.keys().any(|name| mappable(name)) {
            return None;
        }
        let Some(certificate) = certificate else { return Some(Err(AuthError::Violation)) };
        let Some(name) = certificate.find_user(mappable, &self.maps.dn_users) else {
            return Some(Err(AuthError::Violation));
        };
        let (password, login) = self.users.get(&name)?;
        let sent = connect.pass.as_deref().unwrap_or_default();
        Some(if constant_time_eq(password, sent) { Ok(login.grant(&name)) } else { Err(AuthError::Violation) })
    }

    /// The configured user `name` with its password, unless this listener hides it.
    fn user(&self, name: &str, simple: &Simple) -> Option<&(String, Login)> {
        self.users.get(name).filter(|_| simple.hidden_user.as_deref() != Some(name))
    }

    /// The verdict for a client that names an nkey (or, sending nothing, falls to an nkey
    /// `no_auth_user`); `None` when nkeys do not apply and the other kinds of user are tried.
    fn nkey_user(
        &self,
        connect: &ConnectOptions,
        nonce: Option<&str>,
        simple: &Simple,
    ) -> Option<Result<Grant, AuthError>> {
        if self.nkeys.is_empty() {
            return None;
        }
        let sent_nothing =
            connect.user.is_none() && connect.pass.is_none() && connect.auth_token.is_none() && connect.nkey.is_none();
        let default_nkey = simple.no_auth_user.as_ref().filter(|_| sent_nothing);
        if let Some((user, login)) = default_nkey.and_then(|user| self.nkeys.get(user).map(|login| (user, login))) {
            return Some(Ok(login.grant(user)));
        }
        let key = connect.nkey.as_ref()?;
        let Some(login) = self.nkeys.get(key) else { return Some(Err(AuthError::Violation)) };
        if !nkey::signed_nonce(key, nonce, connect.sig.as_deref()) {
            return Some(Err(AuthError::Violation));
        }
        Some(Ok(login.grant(key)))
    }
}

/// The WebSocket override: its own single user, token and `no_auth_user`, with the server's
/// single user (`single_user`) hidden from WebSocket clients.
fn websocket_simple(auth: &WebsocketAuth, single_user: Option<String>) -> Simple {
    Simple {
        token: auth.token.clone(),
        user: auth.username.clone().map(|name| (name, auth.password.clone().unwrap_or_default())),
        no_auth_user: auth.no_auth_user.clone(),
        hidden_user: single_user,
        no_auth_global: false,
    }
}

/// Compares secrets without an early exit that would leak how many bytes matched.
fn constant_time_eq(a: &str, b: &str) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A user's permissions, ready for checks on the hot path.
#[derive(Debug, Default)]
pub struct ClientPermissions {
    publish: Option<SubjectPermission>,
    subscribe: Option<SubjectPermission>,
    responses: Option<ResponsePermission>,
}

impl ClientPermissions {
    /// Compiles configured permissions. Response permissions restrict publishing as
    /// nats-server's `validateResponsePermissions` does: without an allow list, the user may
    /// publish nothing but its replies.
    pub fn new(permissions: &Permissions) -> Self {
        let mut publish = permissions.publish.clone();
        if permissions.responses.is_some() {
            publish.get_or_insert_with(SubjectPermission::default);
        }
        Self { publish, subscribe: permissions.subscribe.clone(), responses: permissions.responses }
    }

    /// How many replies to each delivered request the user may send, when it may.
    pub fn responses(&self) -> Option<ResponsePermission> {
        self.responses
    }

    /// The publish rules, when publishing is restricted.
    pub fn publish(&self) -> Option<&SubjectPermission> {
        self.publish.as_ref()
    }

    /// The subscribe rules, when subscribing is restricted.
    pub fn subscribe(&self) -> Option<&SubjectPermission> {
        self.subscribe.as_ref()
    }

    /// Whether a message may be published to the literal `subject`, replies allowed by response
    /// permissions aside (the connection tracks those).
    pub fn may_publish(&self, subject: &str) -> bool {
        let Some(rules) = &self.publish else { return true };
        let allow_all = rules.allow.is_empty() && self.responses.is_none();
        let allowed = allow_all || rules.allow.iter().any(|filter| subject::matches(filter, subject));
        allowed && !rules.deny.iter().any(|filter| subject::matches(filter, subject))
    }

    /// Whether a subscription to `filter` may be made: it must lie inside an allowed filter and
    /// not inside a denied one. A filter that only overlaps a denied one is allowed, and the
    /// denied messages are held back at delivery by [`ClientPermissions::may_receive`].
    pub fn may_subscribe(&self, filter: &str) -> bool {
        let Some(rules) = &self.subscribe else { return true };
        let allowed = rules.allow.is_empty() || rules.allow.iter().any(|allow| subject::is_subset(filter, allow));
        allowed && !rules.deny.iter().any(|deny| subject::is_subset(filter, deny))
    }

    /// Whether a message on the literal `subject` may be delivered to this client.
    pub fn may_receive(&self, subject: &str) -> bool {
        match &self.subscribe {
            Some(rules) => !rules.deny.iter().any(|deny| subject::matches(deny, subject)),
            None => true,
        }
    }

    /// Whether delivery needs a per-message check at all.
    pub fn filters_deliveries(&self) -> bool {
        self.subscribe.as_ref().is_some_and(|rules| !rules.deny.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::User;

    fn connect(user: Option<&str>, pass: Option<&str>, token: Option<&str>) -> ConnectOptions {
        ConnectOptions {
            user: user.map(Into::into),
            pass: pass.map(Into::into),
            auth_token: token.map(Into::into),
            ..ConnectOptions::default()
        }
    }

    #[test]
    fn without_auth_everyone_is_granted() {
        let auth = Authenticator::from_options(&Options::default()).unwrap();
        assert!(!auth.is_required());
        assert!(auth.authenticate(&connect(None, None, None), None, None).is_ok());
    }

    #[test]
    fn token_must_match() {
        let mut options = Options::default();
        options.auth.token = Some("s3cret".into());
        let auth = Authenticator::from_options(&options).unwrap();
        assert!(auth.authenticate(&connect(None, None, Some("s3cret")), None, None).is_ok());
        assert_eq!(auth.authenticate(&connect(None, None, Some("nope")), None, None).err(), Some(AuthError::Violation));
        assert_eq!(auth.authenticate(&connect(None, None, None), None, None).err(), Some(AuthError::Violation));
    }

    #[test]
    fn users_need_their_own_password_and_no_auth_user_applies_without_credentials() {
        let mut options = Options::default();
        for (name, password) in [("alice", "a"), ("bob", "b")] {
            options.auth.users.push(User { username: name.into(), password: password.into(), permissions: None });
        }
        let auth = Authenticator::from_options(&options).unwrap();
        assert_eq!(
            auth.authenticate(&connect(Some("alice"), Some("a"), None), None, None).ok().and_then(|g| g.user),
            Some("alice".into())
        );
        assert!(auth.authenticate(&connect(Some("alice"), Some("b"), None), None, None).is_err());
        assert!(auth.authenticate(&connect(Some("carol"), Some("a"), None), None, None).is_err());
        assert!(auth.authenticate(&connect(None, None, None), None, None).is_err());
        options.auth.no_auth_user = Some("bob".into());
        let auth = Authenticator::from_options(&options).unwrap();
        assert_eq!(
            auth.authenticate(&connect(None, None, None), None, None).ok().and_then(|g| g.user),
            Some("bob".into())
        );
    }

    #[test]
    fn websocket_override_applies_to_websocket_clients_only_and_its_token_wins_over_its_user() {
        let mut options = Options::default();
        options.auth.users.push(User { username: "tcp".into(), password: "t".into(), permissions: None });
        options.auth.single_user = Some("tcp".into());
        let mut ws = crate::options::WebsocketOptions::default();
        ws.auth.username = Some("web".into());
        ws.auth.password = Some("w".into());
        options.websocket = Some(ws.clone());
        let auth = Authenticator::from_options(&options).unwrap();
        let web = connect(Some("web"), Some("w"), None);
        let tcp = connect(Some("tcp"), Some("t"), None);
        assert!(auth.authenticate_on(&web, None, Transport::Websocket, None, None).is_ok());
        assert!(auth.authenticate_on(&tcp, None, Transport::Websocket, None, None).is_err());
        assert!(auth.authenticate_on(&tcp, None, Transport::Tcp, None, None).is_ok());
        assert!(auth.authenticate_on(&web, None, Transport::Tcp, None, None).is_err());
        ws.auth.token = Some("tok".into());
        options.websocket = Some(ws);
        let auth = Authenticator::from_options(&options).unwrap();
        assert!(auth.authenticate_on(&web, None, Transport::Websocket, None, None).is_err());
        assert!(auth
            .authenticate_on(&connect(None, None, Some("tok")), None, Transport::Websocket, None, None)
            .is_ok());
    }

    #[test]
    fn cookies_fill_only_what_connect_leaves_empty() {
        let cookies =
            Cookies { user: Some("cookie-user".into()), pass: Some("cookie-pass".into()), ..Cookies::default() };
        let mut given = connect(Some("mine"), Some(""), None);
        cookies.fill(&mut given);
        assert_eq!((given.user.as_deref(), given.pass.as_deref()), (Some("mine"), Some("cookie-pass")));
        assert_eq!((given.auth_token, given.jwt), (None, None));
    }

    #[test]
    fn permissions_allow_then_deny() {
        let rules = |allow: &[&str], deny: &[&str]| SubjectPermission {
            allow: allow.iter().map(|s| s.to_string()).collect(),
            deny: deny.iter().map(|s| s.to_string()).collect(),
        };
        let permissions = ClientPermissions::new(&Permissions {
            publish: Some(rules(&["orders.>"], &["orders.secret"])),
            subscribe: Some(rules(&["events.>", "_INBOX.>"], &["events.private.>"])),
            responses: None,
        });
        assert!(permissions.may_publish("orders.new"));
        assert!(!permissions.may_publish("orders.secret"));
        assert!(!permissions.may_publish("payments"));
        assert!(permissions.may_subscribe("events.*"));
        assert!(permissions.may_subscribe("events.>"));
        assert!(!permissions.may_subscribe("events.private.x"));
        assert!(!permissions.may_subscribe(">"));
        assert!(!permissions.may_receive("events.private.x"));
        assert!(permissions.may_receive("events.public"));
    }

    #[test]
    fn response_permissions_without_a_publish_allow_list_allow_no_publish() {
        let responses = Some(ResponsePermission::default());
        let only_responses = ClientPermissions::new(&Permissions { responses, ..Permissions::default() });
        assert!(!only_responses.may_publish("_INBOX.abc"));
        let deny_only = SubjectPermission { allow: Vec::new(), deny: vec!["secret".into()] };
        let with_deny = ClientPermissions::new(&Permissions { publish: Some(deny_only), responses, subscribe: None });
        assert!(!with_deny.may_publish("orders"), "a deny list alone is no allow list");
        let allow = SubjectPermission { allow: vec!["orders.>".into()], deny: Vec::new() };
        let with_allow = ClientPermissions::new(&Permissions { publish: Some(allow), responses, subscribe: None });
        assert!(with_allow.may_publish("orders.new") && !with_allow.may_publish("payments"));
    }
}
