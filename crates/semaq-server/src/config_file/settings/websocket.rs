//! The `websocket { }` block, as nats-server reads it (`server/opts.go`, `parseWebsocket`).

use super::{block, boolean, duration, host_port, integer, invalid, or_default, string, wrong_type, Mapper};
use crate::config_file::syntax::{Kind, Value};
use crate::config_file::ConfigError;
use crate::limits;
use crate::options::{Origin, WebsocketOptions};

/// nats-server keys SemaQ reads but does not act on: accepted with a warning.
const UNSUPPORTED_KEYS: &[&str] = &[
    "advertise",
    "authorization",
    "authentication",
    "jwt_cookie",
    "user_cookie",
    "pass_cookie",
    "token_cookie",
    "no_auth_user",
    "headers",
    "ping_interval",
];

impl Mapper<'_> {
    /// `websocket { host, port, listen, no_tls, tls, same_origin, allowed_origins,
    /// handshake_timeout, compression }`. Refused as nats-server refuses it: a port with neither
    /// `tls` nor `no_tls: true`, an allowed origin that is not an absolute http(s) URL.
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
                key if UNSUPPORTED_KEYS.contains(&key) && !entry.referenced => {
                    let line = self.line_of(&entry.at);
                    self.report.warnings.push(format!(
                        "config key \"websocket.{}\" at {line} is a nats-server feature SemaQ does not support, ignored",
                        entry.key
                    ));
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
        Ok(())
    }
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
