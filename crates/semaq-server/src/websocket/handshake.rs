//! The HTTP/1.1 upgrade request (RFC 6455 §4.2.1), checked as nats-server checks it: the
//! method, `Host`, `Upgrade`, `Connection`, the key, the version, then the `Origin`.

use base64::Engine;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::auth::Cookies;
use crate::limits;
use crate::options::{CookieNames, Origin, WebsocketOptions};

/// RFC 6455's GUID, appended to the client's key before hashing it into the accept value.
const ACCEPT_GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// Why an upgrade was refused: the HTTP status sent back and the reason logged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("websocket handshake error ({status}): {reason}")]
pub struct Refusal {
    /// HTTP status code.
    pub status: u16,
    /// What was wrong, as nats-server words it.
    pub reason: String,
}

impl Refusal {
    fn new(status: u16, reason: impl Into<String>) -> Self {
        Self { status, reason: reason.into() }
    }

    /// The HTTP response, shaped like Go's `http.Error` with nats-server's version header.
    pub fn response(&self) -> Vec<u8> {
        let text = status_text(self.status);
        let body = format!("{text}\n");
        format!(
            "HTTP/1.1 {} {text}\r\nContent-Type: text/plain; charset=utf-8\r\nSec-Websocket-Version: 13\r\n\
             X-Content-Type-Options: nosniff\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.status,
            body.len()
        )
        .into_bytes()
    }
}

fn status_text(status: u16) -> &'static str {
    match status {
        400 => "Bad Request",
        403 => "Forbidden",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        _ => "Error",
    }
}

/// An accepted upgrade: what the connection needs from the request.
#[derive(Debug)]
pub struct Upgrade {
    /// The `101 Switching Protocols` response to send.
    pub response: Vec<u8>,
    /// The client's address from `X-Forwarded-For`, when a proxy named a valid one.
    pub forwarded_for: Option<std::net::IpAddr>,
    /// permessage-deflate was configured, offered and accepted.
    pub compression: bool,
    /// The configured cookies the request carried.
    pub cookies: Cookies,
}

/// Why the request could not be read at all.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The socket failed or closed before the request ended.
    #[error("reading the upgrade request: {0}")]
    Io(#[from] std::io::Error),
    /// The request was malformed or too large; answer with this.
    #[error(transparent)]
    Refused(#[from] Refusal),
}

/// Reads one request head, up to [`limits::WEBSOCKET_REQUEST_BYTES_MAX`], and checks it.
pub async fn read<S: AsyncRead + Unpin>(
    stream: &mut S,
    options: &WebsocketOptions,
    tls: bool,
) -> Result<Upgrade, ReadError> {
    let too_large = || Refusal::new(431, "request headers too large");
    let mut buffer = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    loop {
        // One byte past the limit is enough to know the head is too large.
        let room = (limits::WEBSOCKET_REQUEST_BYTES_MAX + 1).saturating_sub(buffer.len()).min(chunk.len());
        if room == 0 {
            return Err(too_large().into());
        }
        let n = stream.read(&mut chunk[..room]).await?;
        if n == 0 {
            return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into());
        }
        buffer.extend_from_slice(&chunk[..n]);
        let mut headers = [httparse::EMPTY_HEADER; limits::WEBSOCKET_REQUEST_HEADERS_MAX];
        let mut request = httparse::Request::new(&mut headers);
        match request.parse(&buffer) {
            Ok(httparse::Status::Complete(length)) if length > limits::WEBSOCKET_REQUEST_BYTES_MAX => {
                return Err(too_large().into());
            }
            Ok(httparse::Status::Complete(length)) if length < buffer.len() => {
                return Err(Refusal::new(400, "client sent data before handshake is complete").into());
            }
            Ok(httparse::Status::Complete(_)) => return Ok(check(&request, options, tls)?),
            Ok(httparse::Status::Partial) => {}
            Err(httparse::Error::TooManyHeaders) => return Err(Refusal::new(431, "too many headers").into()),
            Err(error) => return Err(Refusal::new(400, format!("malformed request: {error}")).into()),
        }
    }
}

/// RFC 6455 §4.2.1 points 1 to 7, in nats-server's order and words.
fn check(request: &httparse::Request, options: &WebsocketOptions, tls: bool) -> Result<Upgrade, Refusal> {
    if request.method != Some("GET") {
        return Err(Refusal::new(405, "request method must be GET"));
    }
    let Some(host) = header(request, "Host").filter(|host| !host.is_empty()) else {
        return Err(Refusal::new(400, "'Host' missing in request"));
    };
    if !header_contains(request, "Upgrade", "websocket") {
        return Err(Refusal::new(400, "invalid value for header 'Upgrade'"));
    }
    if !header_contains(request, "Connection", "Upgrade") {
        return Err(Refusal::new(400, "invalid value for header 'Connection'"));
    }
    let Some(key) = header(request, "Sec-WebSocket-Key").filter(|key| !key.is_empty()) else {
        return Err(Refusal::new(400, "key missing"));
    };
    let decoded = base64::engine::general_purpose::STANDARD.decode(key.trim());
    if !matches!(decoded, Ok(bytes) if bytes.len() == 16) {
        return Err(Refusal::new(400, "invalid websocket key"));
    }
    if !header_contains(request, "Sec-WebSocket-Version", "13") {
        return Err(Refusal::new(400, "invalid version"));
    }
    check_origin(request, options, host, tls).map_err(|why| Refusal::new(403, format!("origin not allowed: {why}")))?;
    let forwarded_for = header(request, "X-Forwarded-For").and_then(|ip| ip.trim().parse().ok());
    let compression = options.compression && offers_deflate(request);
    let extra: String = options.headers.iter().map(|(name, value)| format!("{name}: {value}\r\n")).collect();
    let response = format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {}\r\n{}{extra}\r\n",
        accept_key(key.trim()),
        if compression { DEFLATE_RESPONSE } else { "" },
    );
    let cookies = if options.cookies.any() { cookies(request, &options.cookies) } else { Cookies::default() };
    Ok(Upgrade { response: response.into_bytes(), forwarded_for, compression, cookies })
}

/// The configured cookies among the request's `Cookie` headers (RFC 6265 §5.4: `name=value`
/// pairs split by `;`), read as Go's `Request.Cookies` reads them: a quoted value loses its
/// quotes, a pair with an invalid name or value is skipped, and the last of a name wins.
/// At most [`limits::WEBSOCKET_COOKIES_MAX`] pairs are read.
fn cookies(request: &httparse::Request, names: &CookieNames) -> Cookies {
    let mut found = Cookies::default();
    let pairs = request
        .headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("Cookie"))
        .filter_map(|h| std::str::from_utf8(h.value).ok())
        .flat_map(|line| line.split(';'))
        .map(str::trim)
        .filter(|pair| !pair.is_empty())
        .take(limits::WEBSOCKET_COOKIES_MAX);
    for pair in pairs {
        let Some((name, value)) = cookie_pair(pair) else { continue };
        let slot = [
            (&names.jwt, &mut found.jwt),
            (&names.user, &mut found.user),
            (&names.pass, &mut found.pass),
            (&names.token, &mut found.token),
        ]
        .into_iter()
        .find(|(wanted, _)| wanted.as_deref() == Some(name));
        if let Some((_, slot)) = slot {
            *slot = Some(value.to_string());
        }
    }
    found
}

/// One `name=value` pair (a bare `name` has an empty value), or `None` when either part is
/// not valid for a cookie.
fn cookie_pair(pair: &str) -> Option<(&str, &str)> {
    let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
    let name = name.trim();
    let value = value.strip_prefix('"').and_then(|v| v.strip_suffix('"')).unwrap_or(value);
    let token_byte = |b: u8| b.is_ascii_graphic() && !b"()<>@,;:\\\"/[]?={}".contains(&b);
    let value_byte = |b: u8| (0x20..0x7f).contains(&b) && b != b'"' && b != b';' && b != b'\\';
    let valid = !name.is_empty() && name.bytes().all(token_byte) && value.bytes().all(value_byte);
    valid.then_some((name, value))
}

/// nats-server's answer to any permessage-deflate offer, whatever its parameters: no context
/// kept on either side, so each message is compressed on its own.
const DEFLATE_RESPONSE: &str =
    "Sec-WebSocket-Extensions: permessage-deflate; server_no_context_takeover; client_no_context_takeover\r\n";

/// Whether any `Sec-WebSocket-Extensions` offer names permessage-deflate (RFC 7692 §5).
fn offers_deflate(request: &httparse::Request) -> bool {
    request.headers.iter().filter(|h| h.name.eq_ignore_ascii_case("Sec-WebSocket-Extensions")).any(|h| {
        std::str::from_utf8(h.value).is_ok_and(|value| {
            value
                .split(',')
                .any(|offer| offer.split(';').any(|item| item.trim().eq_ignore_ascii_case("permessage-deflate")))
        })
    })
}

/// `base64(sha1(key + GUID))`.
pub fn accept_key(key: &str) -> String {
    let digest =
        ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, format!("{key}{ACCEPT_GUID}").as_bytes());
    base64::engine::general_purpose::STANDARD.encode(digest.as_ref())
}

/// The first header named `name` (any case), as text.
fn header<'r>(request: &'r httparse::Request, name: &str) -> Option<&'r str> {
    request.headers.iter().find(|h| h.name.eq_ignore_ascii_case(name)).and_then(|h| std::str::from_utf8(h.value).ok())
}

/// Whether any header named `name` holds `token` in its comma-separated list (any case).
fn header_contains(request: &httparse::Request, name: &str, token: &str) -> bool {
    request.headers.iter().filter(|h| h.name.eq_ignore_ascii_case(name)).any(|h| {
        std::str::from_utf8(h.value)
            .is_ok_and(|value| value.split(',').any(|item| item.trim().eq_ignore_ascii_case(token)))
    })
}

/// Accepts any origin unless `same_origin` or `allowed_origins` is set; a request without an
/// `Origin` is accepted too (RFC 6455 §1.6: only browsers send one).
fn check_origin(request: &httparse::Request, options: &WebsocketOptions, host: &str, tls: bool) -> Result<(), String> {
    if !options.same_origin && options.allowed_origins.is_empty() {
        return Ok(());
    }
    let Some(text) = header(request, "Origin").or_else(|| header(request, "Sec-WebSocket-Origin")) else {
        return Ok(());
    };
    if text.is_empty() {
        return Ok(());
    }
    let origin = Origin::parse(text)?;
    if options.same_origin {
        let scheme = if tls { "https" } else { "http" };
        let own = Origin::from_authority(scheme, host).ok_or_else(|| format!("invalid Host {host:?}"))?;
        if origin != own {
            return Err("not same origin".to_string());
        }
    }
    if !options.allowed_origins.is_empty() && !options.allowed_origins.contains(&origin) {
        return Err("not in the allowed list".to_string());
    }
    Ok(())
}

/// Writes `bytes` and flushes.
pub async fn send<S: AsyncWrite + Unpin>(stream: &mut S, bytes: &[u8]) -> std::io::Result<()> {
    stream.write_all(bytes).await?;
    stream.flush().await
}

/// After a refusal: ends our side, then reads and drops what the client still sends (at most
/// [`limits::WEBSOCKET_LINGER_BYTES_MAX`]) until it closes, so closing with unread input does not reset the
/// connection and destroy the answer before the client reads it (as Go's HTTP server does).
pub async fn linger<S: AsyncRead + AsyncWrite + Unpin>(stream: &mut S) {
    let _ = stream.shutdown().await;
    let mut scratch = [0u8; 4096];
    let mut left = limits::WEBSOCKET_LINGER_BYTES_MAX;
    while left > 0 {
        match stream.read(&mut scratch).await {
            Ok(0) | Err(_) => return,
            Ok(n) => left = left.saturating_sub(n),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_key_matches_rfc_6455_example() {
        assert_eq!(accept_key("dGhlIHNhbXBsZSBub25jZQ=="), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
    }

    #[test]
    fn cookie_pairs_are_read_as_go_reads_them() {
        assert_eq!(cookie_pair("jwt=abc"), Some(("jwt", "abc")));
        assert_eq!(cookie_pair("user=\"bob\""), Some(("user", "bob")));
        assert_eq!(cookie_pair("empty="), Some(("empty", "")));
        assert_eq!(cookie_pair("bare"), Some(("bare", "")));
        assert_eq!(cookie_pair("bad name=x"), None);
        assert_eq!(cookie_pair("x=a\\b"), None);
    }

    #[test]
    fn origins_compare_scheme_host_and_default_port() {
        let a = Origin::parse("http://Example.com").unwrap();
        assert_eq!(a, Origin::from_authority("http", "example.com:80").unwrap());
        assert_ne!(a, Origin::parse("https://example.com").unwrap());
        assert_eq!(Origin::parse("https://[::1]:8443/x").unwrap().host, "::1");
        assert!(Origin::parse("nope").is_err());
    }
}
