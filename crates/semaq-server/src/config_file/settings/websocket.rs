//! The `websocket { }` block, as nats-server reads it (`server/opts.go`, `parseWebsocket`).

use super::{block, boolean, duration, host_port, integer, invalid, or_default, string, wrong_type, Mapper};
use crate::config_file::syntax::{Kind, Value};
use crate::config_file::ConfigError;
use crate::limits;
use crate::options::{Options, Origin, WebsocketAuth, WebsocketOptions};

impl Mapper<'_> {
    /// `websocket { host, port, listen, advertise, no_tls, tls, same_origin, allowed_origins,
    /// handshake_timeout, compression, authorization, no_auth_user, *_cookie, headers,
    /// ping_interval }`. Refused as
    /// nats-server refuses it: a port with neither `tls` nor `no_tls: true`, an allowed origin
    /// that is not an absolute http(s) URL (and, once the whole file is read, the auth
    /// settings [`Mapper::check_websocket`] checks).
    pub(super) fn websocket(&mut self, value: &Value) -> Result<(), ConfigError> {
        let map = block("websocket", value)?;
        let mut ws = WebsocketOptions::default();
        let (mut no_tls, mut listening) = (false, false);
        for entry in &map.entries {
            let v = &entry.value;
            match entry.key.to_ascii_lowercase().as_str() {
                "listen" => {
                    let (host, port) = host_port("websocket.listen", v, websocket_port)?;
                    ws.host = host.unwrap_or(ws.host);
                    listening = port.inspect(|port| ws.port = *port).is_some();
                }
                "port" => {
                    let port = websocket_port(integer("websocket.port", v)?)
                        .map_err(|why| invalid(&v.at, format!("invalid port for \"websocket.port\": {why}")))?;
                    listening = port.inspect(|port| ws.port = *port).is_some();
                }
                "host" | "net" => ws.host = string("websocket.host", v)?,
                "no_tls" => no_tls = boolean("websocket.no_tls", v)?,
                "tls" => ws.tls = Some(self.tls_options("websocket.tls", v)?),
                "same_origin" => ws.same_origin = boolean("websocket.same_origin", v)?,
                "allowed_origins" | "allowed_origin" | "allow_origins" | "allow_origin" | "origins" | "origin" => {
                    ws.allowed_origins = allowed_origins(v)?
                }
                "handshake_timeout" => {
                    let timeout = duration("websocket.handshake_timeout", v)?;
                    ws.handshake_timeout = or_default(timeout, limits::WEBSOCKET_HANDSHAKE_TIMEOUT);
                }
                "compress" | "compression" => ws.compression = boolean("websocket.compression", v)?,
                "authorization" | "authentication" => ws.auth = self.websocket_authorization(v, ws.auth)?,
                "no_auth_user" => ws.auth.no_auth_user = Some(string("websocket.no_auth_user", v)?),
                "jwt_cookie" => ws.cookies.jwt = Some(string("websocket.jwt_cookie", v)?),
                "user_cookie" => ws.cookies.user = Some(string("websocket.user_cookie", v)?),
                "pass_cookie" => ws.cookies.pass = Some(string("websocket.pass_cookie", v)?),
                "token_cookie" => ws.cookies.token = Some(string("websocket.token_cookie", v)?),
                // nats-server gives the advertised address only to clients of a cluster
                // (`ws_connect_urls` learnt over routes); a lone server, as SemaQ always is,
                // checks it and sends it to nobody.
                "advertise" => advertise(v)?,
                "headers" => ws.headers = headers(v)?,
                "ping_interval" => {
                    let interval = duration("websocket.ping_interval", v)?;
                    // nats-server: zero keeps the server's `ping_interval`.
                    ws.ping_interval = Some(interval).filter(|interval| !interval.is_zero());
                }
                _ => self.unknown(entry, "websocket"),
            }
        }
        // nats-server: "If no port is defined, we don't care about other options".
        if !listening {
            self.options.websocket = None;
            return Ok(());
        }
        if ws.tls.is_none() && !no_tls {
            return Err(invalid(&value.at, "websocket requires TLS configuration".to_string()));
        }
        self.options.websocket = Some(ws);
        self.websocket_at = Some(value.at.clone());
        Ok(())
    }

    /// `websocket { authorization { user, password, token, timeout } }` (nats-server's
    /// `parseSimpleAuth`: no users array here).
    fn websocket_authorization(
        &mut self,
        value: &Value,
        mut auth: WebsocketAuth,
    ) -> Result<WebsocketAuth, ConfigError> {
        let map = block("websocket.authorization", value)?;
        for entry in &map.entries {
            let v = &entry.value;
            match entry.key.to_ascii_lowercase().as_str() {
                "user" | "username" => auth.username = Some(string("websocket.authorization.user", v)?),
                "pass" | "password" => auth.password = Some(string("websocket.authorization.password", v)?),
                "token" => auth.token = Some(string("websocket.authorization.token", v)?),
                "timeout" => {
                    let timeout = duration("websocket.authorization.timeout", v)?;
                    // nats-server: zero keeps the server's `authorization { timeout }`.
                    auth.timeout = Some(timeout).filter(|t| !t.is_zero());
                }
                _ => self.unknown(entry, "websocket.authorization"),
            }
        }
        Ok(auth)
    }

    /// nats-server's `validateWebsocketOptions` auth rules, which need every user of the file:
    /// `no_auth_user` must name a user or nkey (not in operator mode), a user or token cannot
    /// stand beside `users` or nkeys, and `jwt_cookie` needs an operator.
    pub(super) fn check_websocket(&self) -> Result<(), ConfigError> {
        let (Some(at), Some(ws)) = (&self.websocket_at, &self.options.websocket) else { return Ok(()) };
        websocket_auth_refusal(self.options, ws).map_or(Ok(()), |message| Err(invalid(at, message)))
    }
}

/// What nats-server says about `ws`'s auth settings in a server configured as `options`, if
/// it refuses them.
fn websocket_auth_refusal(options: &Options, ws: &WebsocketOptions) -> Option<String> {
    let auth = &options.auth;
    let single = auth.single_user.as_deref();
    let account_users = options.accounts.iter().flat_map(|account| account.users.iter());
    let users: Vec<&str> = auth
        .users
        .iter()
        .chain(account_users)
        .map(|user| user.username.as_str())
        .filter(|name| Some(*name) != single)
        .collect();
    let account_nkeys = options.accounts.iter().flat_map(|account| account.nkeys.iter());
    let nkeys: Vec<&str> = auth.nkeys.iter().chain(account_nkeys).map(|user| user.nkey.as_str()).collect();
    if let Some(name) = &ws.auth.no_auth_user {
        if auth.operator.is_some() {
            return Some("no_auth_user not compatible with Trusted Operator".to_string());
        }
        if users.is_empty() && nkeys.is_empty() {
            return Some(format!("no_auth_user: \"{name}\" present, but users/nkeys are not defined"));
        }
        if !users.contains(&name.as_str()) && !nkeys.contains(&name.as_str()) {
            return Some(format!(
                "no_auth_user: \"{name}\" not present as user or nkey in authorization block or account configuration"
            ));
        }
    }
    if !users.is_empty() || !nkeys.is_empty() {
        if ws.auth.username.is_some() {
            return Some("websocket authentication username not compatible with presence of users/nkeys".to_string());
        }
        if ws.auth.token.is_some() {
            return Some("websocket authentication token not compatible with presence of users/nkeys".to_string());
        }
    }
    match (&ws.cookies.jwt, &auth.operator) {
        (Some(cookie), None) => Some(format!(
            "trusted operators or trusted keys configuration is required for JWT authentication via cookie \"{cookie}\""
        )),
        _ => None,
    }
}

/// `advertise: "host[:port]"`, checked as nats-server's `parseHostPort` does when it starts.
fn advertise(value: &Value) -> Result<(), ConfigError> {
    let text = string("websocket.advertise", value)?;
    let port = match text.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') || host.ends_with(']') => Some(port),
        _ => None,
    };
    match port.map(|port| port.trim().parse::<i32>()) {
        None | Some(Ok(_)) => Ok(()),
        Some(Err(_)) => {
            let message = format!("unable to get websocket connect URLs: invalid port in advertise address {text:?}");
            Err(invalid(&value.at, message))
        }
    }
}

/// The upgrade response headers nats-server keeps for itself (`validateWebsocketOptions`).
const RESERVED_HEADERS: &[&str] = &["host", "content-length", "connection", "upgrade", "nats-no-masking"];

/// `headers { name: value }`: extra lines of the upgrade response, refused as nats-server
/// refuses them (a reserved header, a `Sec-WebSocket-` one, a value that is not a string) and
/// when a name or value could break the response (a line break, a name that is no HTTP token).
fn headers(value: &Value) -> Result<Vec<(String, String)>, ConfigError> {
    let Kind::Map(map) = &value.kind else {
        return Err(wrong_type("websocket.headers", "a block of name: value", value));
    };
    let mut headers = Vec::new();
    for entry in map.entries.iter().take(limits::WEBSOCKET_HEADERS_MAX + 1) {
        if headers.len() == limits::WEBSOCKET_HEADERS_MAX {
            let message = format!("websocket.headers: more than {} headers", limits::WEBSOCKET_HEADERS_MAX);
            return Err(invalid(&entry.at, message));
        }
        let name = entry.key.as_str();
        let Kind::String(text) = &entry.value.kind else {
            return Err(wrong_type(&format!("websocket.headers.{name}"), "a string", &entry.value));
        };
        let lower = name.to_ascii_lowercase();
        if RESERVED_HEADERS.contains(&lower.as_str()) {
            return Err(invalid(&entry.at, format!("websocket: invalid header {name:?} not allowed")));
        }
        if lower.starts_with("sec-websocket-") {
            let message = format!("websocket: invalid header {name:?}, \"Sec-WebSocket-\" prefix not allowed");
            return Err(invalid(&entry.at, message));
        }
        let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
        if name.is_empty() || !name.chars().all(token) || text.contains(['\r', '\n']) {
            let message = format!("websocket: invalid header {name:?}: not an HTTP header name and one-line value");
            return Err(invalid(&entry.at, message));
        }
        headers.push((name.to_string(), text.clone()));
    }
    Ok(headers)
}

/// nats-server's WebSocket port: -1 picks a free port (`Some(0)`), 0 means no listener (`None`).
fn websocket_port(number: i64) -> Result<Option<u16>, String> {
    match number {
        -1 => Ok(Some(0)),
        0 => Ok(None),
        1..=65535 => Ok(Some(number as u16)),
        _ => Err("expected a port between 1 and 65535, -1 for a random free port, or 0 for none".to_string()),
    }
}

fn allowed_origins(value: &Value) -> Result<Vec<Origin>, ConfigError> {
    let items: Vec<&Value> = match &value.kind {
        Kind::String(_) => vec![value],
        Kind::Array(items) => items.iter().collect(),
        _ => return Err(wrong_type("websocket.allowed_origins", "a string or an array of strings", value)),
    };
    items
        .into_iter()
        .map(|item| {
            let text = string("websocket.allowed_origins", item)?;
            let origin = Origin::parse(&text)
                .map_err(|why| invalid(&item.at, format!("unable to parse allowed origin: {why}")))?;
            if origin.scheme != "http" && origin.scheme != "https" {
                let message = format!(
                    "unable to parse allowed origin {text:?}: allowed origins must be absolute URLs with http or https scheme"
                );
                return Err(invalid(&item.at, message));
            }
            Ok(origin)
        })
        .collect()
}
