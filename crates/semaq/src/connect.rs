//! Connection options shared by every command, and turning connect failures into one clear line.

use std::error::Error as StdError;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use async_nats::{Client, ConnectErrorKind, ConnectOptions};
use futures::StreamExt;

use crate::parse::{format_duration, parse_duration};

/// The URL used when neither `--server`, `SEMAQ_URL` nor `NATS_URL` names one.
pub const DEFAULT_URL: &str = "nats://127.0.0.1:4222";

/// Options every command accepts: where the server is and how to authenticate.
#[derive(clap::Args, Debug, Clone)]
#[command(next_help_heading = "Connection options")]
pub struct GlobalArgs {
    /// Server URL [default: $SEMAQ_URL, then $NATS_URL, then nats://127.0.0.1:4222]
    #[arg(long, short = 's', global = true, env = "SEMAQ_URL", hide_env_values = true, value_name = "URL")]
    pub server: Option<String>,
    /// User name for user/password authentication
    #[arg(long, global = true)]
    pub user: Option<String>,
    /// Password for user/password authentication
    #[arg(long, global = true)]
    pub password: Option<String>,
    /// Authentication token
    #[arg(long, global = true)]
    pub token: Option<String>,
    /// CA certificate (PEM) that signs the server's certificate
    #[arg(long, global = true, value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
    /// Client certificate (PEM) for mutual TLS
    #[arg(long, global = true, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// Client private key (PEM) for mutual TLS
    #[arg(long, global = true, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Require TLS even if the URL scheme is nats://
    #[arg(long, global = true)]
    pub tls: bool,
    /// Connect and request timeout, e.g. 2s or 500ms
    #[arg(long, global = true, default_value = "5s", value_parser = parse_duration)]
    pub timeout: Duration,
}

/// Where and how to connect: built from [`GlobalArgs`] or for a local server the bench started.
#[derive(Debug, Clone)]
pub struct Target {
    /// Server URL as given, used in messages.
    pub url: String,
    /// Connect and request timeout.
    pub timeout: Duration,
    /// Whether the URL was named (`--server`, `SEMAQ_URL`) rather than the fallbacks: benches that
    /// otherwise start their own server use a named one instead.
    pub named: bool,
    auth: Auth,
    tls: TlsFiles,
}

#[derive(Debug, Clone, Default)]
enum Auth {
    #[default]
    None,
    UserPassword(String, String),
    Token(String),
}

#[derive(Debug, Clone, Default)]
struct TlsFiles {
    required: bool,
    ca: Option<PathBuf>,
    cert_and_key: Option<(PathBuf, PathBuf)>,
}

impl Target {
    /// Resolves the server URL and credentials from the command line and environment.
    pub fn from_args(args: &GlobalArgs) -> Result<Target> {
        let url = args
            .server
            .clone()
            .or_else(|| std::env::var("NATS_URL").ok().filter(|url| !url.is_empty()))
            .unwrap_or_else(|| DEFAULT_URL.to_string());
        let auth = match (&args.user, &args.password, &args.token) {
            (Some(_), _, Some(_)) => bail!("use either --user/--password or --token, not both"),
            (Some(user), password, None) => Auth::UserPassword(user.clone(), password.clone().unwrap_or_default()),
            (None, Some(_), _) => bail!("--password needs --user"),
            (None, None, Some(token)) => Auth::Token(token.clone()),
            (None, None, None) => Auth::None,
        };
        let cert_and_key = args.tls_cert.clone().zip(args.tls_key.clone());
        let tls = TlsFiles { required: args.tls, ca: args.tls_ca.clone(), cert_and_key };
        Ok(Target { url, timeout: args.timeout, named: args.server.is_some(), auth, tls })
    }

    /// A plain, unauthenticated target, for servers the bench starts itself.
    pub fn plain(url: String, timeout: Duration) -> Target {
        Target { url, timeout, named: true, auth: Auth::None, tls: TlsFiles::default() }
    }

    /// Connects with the default client options.
    pub async fn connect(&self) -> Result<Client> {
        self.connect_tuned(|options| options).await
    }

    /// Connects after letting the caller adjust client options (buffer capacities for benchmarks).
    pub async fn connect_tuned(&self, tune: impl FnOnce(ConnectOptions) -> ConnectOptions) -> Result<Client> {
        let options = tune(self.options());
        options.connect(self.url.as_str()).await.map_err(|error| {
            anyhow!("cannot connect to {}: {}", self.url, describe_connect_error(&error, self.timeout))
        })
    }

    fn options(&self) -> ConnectOptions {
        let mut options = match &self.auth {
            Auth::None => ConnectOptions::new(),
            Auth::UserPassword(user, password) => {
                ConnectOptions::with_user_and_password(user.clone(), password.clone())
            }
            Auth::Token(token) => ConnectOptions::with_token(token.clone()),
        };
        options = options
            .name("semaq")
            .connection_timeout(self.timeout)
            .request_timeout(Some(self.timeout))
            .require_tls(self.tls.required)
            .event_callback(|event| async move {
                // Errors after connecting (permissions, slow consumer) would otherwise pass silently.
                if let async_nats::Event::ServerError(error) = event {
                    eprintln!("semaq: server error: {error}");
                } else if let async_nats::Event::SlowConsumer(sid) = event {
                    eprintln!("semaq: warning: messages dropped on subscription {sid}: client too slow");
                }
            });
        if let Some(ca) = &self.tls.ca {
            options = options.add_root_certificates(ca.clone());
        }
        if let Some((cert, key)) = &self.tls.cert_and_key {
            options = options.add_client_certificate(cert.clone(), key.clone());
        }
        options
    }
}

/// Describes a connect failure in a few lowercase words, e.g. `connection refused`.
fn describe_connect_error(error: &async_nats::ConnectError, timeout: Duration) -> String {
    match error.kind() {
        ConnectErrorKind::TimedOut => format!("timed out after {}", format_duration(timeout)),
        ConnectErrorKind::AuthorizationViolation => "authorization violation".to_string(),
        ConnectErrorKind::Authentication => "authentication failed".to_string(),
        ConnectErrorKind::ServerParse => format!("invalid server URL ({})", innermost(error)),
        ConnectErrorKind::Dns => format!("cannot resolve host ({})", innermost(error)),
        ConnectErrorKind::Tls => format!("TLS error: {}", innermost(error)),
        ConnectErrorKind::Io | ConnectErrorKind::MaxReconnects => match find_io_error(error) {
            // OS errors read best as their kind ("connection refused"); others carry their own message.
            Some(io_error) if io_error.raw_os_error().is_some() => io_error.kind().to_string(),
            Some(io_error) => io_error.to_string(),
            None => innermost(error),
        },
    }
}

/// The message of the deepest cause, which is the most specific one.
fn innermost(error: &(dyn StdError + 'static)) -> String {
    let mut current = error;
    while let Some(next) = current.source() {
        current = next;
    }
    current.to_string()
}

fn find_io_error<'a>(error: &'a (dyn StdError + 'static)) -> Option<&'a std::io::Error> {
    let mut current = Some(error);
    while let Some(error) = current {
        if let Some(io_error) = error.downcast_ref::<std::io::Error>() {
            return Some(io_error);
        }
        current = error.source();
    }
    None
}

/// Waits until the server has processed everything this client sent so far (a SUB, say).
///
/// async-nats' `flush` only empties the socket buffer, so this echoes a message through the server instead.
pub async fn sync_with_server(client: &Client, timeout: Duration) -> Result<()> {
    let inbox = client.new_inbox();
    let mut echo = client.subscribe(inbox.clone()).await.context("cannot subscribe")?;
    client.publish(inbox, bytes::Bytes::new()).await.context("cannot publish")?;
    client.flush().await.context("cannot flush")?;
    match tokio::time::timeout(timeout, echo.next()).await {
        Ok(Some(_)) => Ok(()),
        Ok(None) => bail!("connection closed"),
        Err(_) => bail!("server did not answer within {}", format_duration(timeout)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_os = "linux")] // 111 is ECONNREFUSED on Linux
    fn io_errors_are_described_by_kind() {
        let refused = std::io::Error::from_raw_os_error(111);
        let error = async_nats::ConnectError::with_source(ConnectErrorKind::Io, refused);
        assert_eq!(describe_connect_error(&error, Duration::from_secs(5)), "connection refused");
    }

    #[test]
    fn timeouts_name_the_limit() {
        let error = async_nats::ConnectError::new(ConnectErrorKind::TimedOut);
        assert_eq!(describe_connect_error(&error, Duration::from_millis(500)), "timed out after 500ms");
    }
}
