//! The JSON bodies of `INFO` (server → client) and `CONNECT` (client → server).

use serde::{Deserialize, Serialize};

/// What the server tells a client when it connects.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ServerInfo {
    /// Unique id of this server process.
    pub server_id: String,
    /// Configured or generated server name.
    pub server_name: String,
    /// Version string; reported as nats-server 2.10-compatible so clients enable headers and JetStream.
    pub version: String,
    /// Protocol level: 1 supports async INFO and headers.
    pub proto: u8,
    /// Implementation language, a field clients print.
    pub go: String,
    /// Address the client listener is bound to.
    pub host: String,
    /// Port the client listener is bound to.
    pub port: u16,
    /// Headers (`HPUB`/`HMSG`) are supported.
    pub headers: bool,
    /// Largest message the server accepts, headers included.
    pub max_payload: usize,
    /// JetStream is enabled.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub jetstream: bool,
    /// Id of this connection.
    pub client_id: u64,
    /// Address of the client as the server sees it.
    pub client_ip: String,
    /// Credentials must be sent in `CONNECT`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub auth_required: bool,
    /// The connection must be upgraded to TLS.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tls_required: bool,
    /// A client certificate is required.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tls_verify: bool,
    /// Challenge for nonce-based auth; present when auth is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nonce: Option<String>,
    /// JetStream domain, when configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    /// Lame duck mode: the server is about to close this connection; only in the async INFO that says so.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ldm: bool,
}

/// The options a client sends in `CONNECT`; unknown fields are ignored.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct ConnectOptions {
    /// Acknowledge each op with `+OK`.
    pub verbose: bool,
    /// Strict checks (e.g. subject validity on publish).
    pub pedantic: bool,
    /// Client wants TLS.
    pub tls_required: bool,
    /// Deliver the client's own publishes back to its matching subscriptions.
    pub echo: bool,
    /// Client understands `HMSG`.
    pub headers: bool,
    /// Client wants a `503` status when a request has no responders.
    pub no_responders: bool,
    /// Client-chosen connection name.
    pub name: Option<String>,
    /// Client library language.
    pub lang: Option<String>,
    /// Client library version.
    pub version: Option<String>,
    /// Protocol level the client speaks.
    pub protocol: u8,
    /// Username for user/password auth.
    pub user: Option<String>,
    /// Password for user/password auth.
    pub pass: Option<String>,
    /// Token for token auth.
    pub auth_token: Option<String>,
    /// A user JWT, for decentralized (operator) auth.
    pub jwt: Option<String>,
    /// The public nkey of an nkey user.
    pub nkey: Option<String>,
    /// The client's Ed25519 signature of the INFO nonce, base64url.
    pub sig: Option<String>,
}

/// Defaults for fields a CONNECT leaves out: verbose and pedantic on, as nats-server assumes
/// (real clients always send both).
impl Default for ConnectOptions {
    fn default() -> Self {
        Self {
            verbose: true,
            pedantic: true,
            tls_required: false,
            echo: true,
            headers: false,
            no_responders: false,
            name: None,
            lang: None,
            version: None,
            protocol: 0,
            user: None,
            pass: None,
            auth_token: None,
            jwt: None,
            nkey: None,
            sig: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_defaults_echo_on_and_ignores_unknown_fields() {
        let options: ConnectOptions = serde_json::from_str(r#"{"verbose":false,"sig":"x","name":"a"}"#).expect("valid");
        assert!(!options.verbose);
        assert!(options.pedantic, "pedantic unless the client says otherwise");
        assert!(options.echo);
        assert_eq!(options.name.as_deref(), Some("a"));
    }
}
