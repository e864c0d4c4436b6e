//! What the server writes to a client.

use bytes::{BufMut, BytesMut};

use crate::info::ServerInfo;
use crate::op::put_number;

/// `+OK`, sent after each op when the client asked for verbose mode.
pub const OK: &[u8] = b"+OK\r\n";
/// A server-initiated liveness check.
pub const PING: &[u8] = b"PING\r\n";
/// The answer to a client's `PING`.
pub const PONG: &[u8] = b"PONG\r\n";

/// Appends `INFO {json}`.
pub fn info(out: &mut BytesMut, info: &ServerInfo) {
    out.put_slice(b"INFO ");
    // Serializing a struct of strings, numbers and bools into a buffer cannot fail.
    let json = serde_json::to_vec(info).unwrap_or_default();
    out.put_slice(&json);
    out.put_slice(b"\r\n");
}

/// Appends `-ERR 'text'`.
pub fn err(out: &mut BytesMut, text: &str) {
    out.put_slice(b"-ERR '");
    out.put_slice(text.as_bytes());
    out.put_slice(b"'\r\n");
}

/// Bytes [`err`] will append.
pub fn err_len(text: &str) -> usize {
    "-ERR ''\r\n".len() + text.len()
}

/// Appends `MSG` (no headers) or `HMSG` (with a header block) for one delivery.
pub fn message(
    out: &mut BytesMut,
    subject: &[u8],
    sid: &[u8],
    reply: Option<&[u8]>,
    headers: Option<&[u8]>,
    payload: &[u8],
) {
    let header_len = headers.map_or(0, <[u8]>::len);
    out.reserve(message_len(subject, sid, reply, headers, payload));
    out.put_slice(if headers.is_some() { b"HMSG " } else { b"MSG " });
    out.put_slice(subject);
    out.put_u8(b' ');
    out.put_slice(sid);
    out.put_u8(b' ');
    if let Some(reply) = reply {
        out.put_slice(reply);
        out.put_u8(b' ');
    }
    if let Some(headers) = headers {
        put_number(out, headers.len() as u64);
        out.put_u8(b' ');
    }
    put_number(out, (header_len + payload.len()) as u64);
    out.put_slice(b"\r\n");
    if let Some(headers) = headers {
        out.put_slice(headers);
    }
    out.put_slice(payload);
    out.put_slice(b"\r\n");
}

/// Bytes [`message`] will append, for accounting before writing.
pub fn message_len(subject: &[u8], sid: &[u8], reply: Option<&[u8]>, headers: Option<&[u8]>, payload: &[u8]) -> usize {
    const FRAMING_BYTES_MAX: usize = 5 + 4 + 2 * 11 + 4;
    subject.len()
        + sid.len()
        + reply.map_or(0, <[u8]>::len)
        + headers.map_or(0, <[u8]>::len)
        + payload.len()
        + FRAMING_BYTES_MAX
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn msg_and_hmsg_have_nats_framing() {
        let mut out = BytesMut::new();
        message(&mut out, b"foo", b"1", None, None, b"hello");
        message(&mut out, b"foo", b"2", Some(b"_INBOX.1"), Some(b"NATS/1.0\r\n\r\n"), b"hi");
        assert_eq!(&out[..], b"MSG foo 1 5\r\nhello\r\nHMSG foo 2 _INBOX.1 12 14\r\nNATS/1.0\r\n\r\nhi\r\n");
    }

    #[test]
    fn err_is_quoted() {
        let mut out = BytesMut::new();
        err(&mut out, "Unknown Protocol Operation");
        assert_eq!(&out[..], b"-ERR 'Unknown Protocol Operation'\r\n");
        assert_eq!(err_len("Unknown Protocol Operation"), out.len());
    }
}
