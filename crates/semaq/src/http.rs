//! A GET for the monitoring port's JSON endpoints: HTTP/1.0 over one TCP connection, the body
//! read to the end (the server closes it), bounded in size and time.

use std::time::Duration;

use anyhow::{anyhow, bail, Context as _, Result};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Largest response read.
const RESPONSE_BYTES_MAX: u64 = 16 * 1024 * 1024;

/// `host:port` of an `http://host:port` base URL (a bare `host:port` is accepted too).
pub fn authority(base: &str) -> Result<String> {
    let rest = base.strip_prefix("http://").unwrap_or(base);
    if base.starts_with("https://") {
        bail!("{base}: only http:// monitoring URLs are supported");
    }
    let authority = rest.split('/').next().unwrap_or_default();
    if authority.is_empty() {
        bail!("{base:?} names no host");
    }
    Ok(match authority.contains(':') {
        true => authority.to_string(),
        false => format!("{authority}:80"),
    })
}

/// GETs `path` from the monitoring server at `authority` and parses the JSON body; a status
/// other than 200 is an error with the body's text.
pub async fn get_json(authority: &str, path: &str, timeout: Duration) -> Result<Value> {
    tokio::time::timeout(timeout, get(authority, path))
        .await
        .map_err(|_| anyhow!("GET http://{authority}{path}: no answer within {timeout:?}"))?
}

/// GETs `path` and returns the body as text; a status other than 200 is an error.
pub async fn get_text(authority: &str, path: &str, timeout: Duration) -> Result<String> {
    tokio::time::timeout(timeout, get_body(authority, path))
        .await
        .map_err(|_| anyhow!("GET http://{authority}{path}: no answer within {timeout:?}"))?
}

async fn get(authority: &str, path: &str) -> Result<Value> {
    let body = get_body(authority, path).await?;
    serde_json::from_str(&body).with_context(|| format!("GET {path}: the body is not JSON"))
}

async fn get_body(authority: &str, path: &str) -> Result<String> {
    let mut stream =
        TcpStream::connect(authority).await.with_context(|| format!("cannot connect to http://{authority}"))?;
    let host = authority.split(':').next().unwrap_or(authority);
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: {host}\r\nAccept: application/json\r\n\r\n").as_bytes())
        .await?;
    let mut response = Vec::new();
    stream.take(RESPONSE_BYTES_MAX).read_to_end(&mut response).await?;
    let text = String::from_utf8_lossy(&response);
    let (head, body) = text.split_once("\r\n\r\n").ok_or_else(|| anyhow!("GET {path}: not an HTTP response"))?;
    let status = head.split_whitespace().nth(1).unwrap_or_default();
    if status != "200" {
        bail!("GET {path}: HTTP {status}: {}", body.chars().take(200).collect::<String>());
    }
    Ok(body.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls_name_their_host_and_port() {
        assert_eq!(authority("http://127.0.0.1:8222").unwrap(), "127.0.0.1:8222");
        assert_eq!(authority("http://monitor/").unwrap(), "monitor:80");
        assert_eq!(authority("localhost:9000").unwrap(), "localhost:9000");
        assert!(authority("https://secure:443").is_err());
        assert!(authority("http://").is_err());
    }
}
