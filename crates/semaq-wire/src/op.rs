//! The operations a client sends, and their encoding (used by tests and tools that speak raw protocol).

use bytes::{BufMut, Bytes, BytesMut};
use bytestring::ByteString;

/// A message a client publishes with `PUB` (no headers) or `HPUB` (headers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Publish {
    /// Where the message goes.
    pub subject: ByteString,
    /// Where replies go, for request/reply.
    pub reply: Option<ByteString>,
    /// The raw `NATS/1.0` header block, trailing blank line included; `None` for `PUB`.
    pub headers: Option<Bytes>,
    /// The message body.
    pub payload: Bytes,
}

/// One operation from a client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientOp {
    /// `CONNECT {json}`: the raw JSON options.
    Connect(Bytes),
    /// `PUB` or `HPUB`.
    Publish(Publish),
    /// `SUB subject [queue] sid`.
    Subscribe {
        /// Subject filter, wildcards allowed.
        subject: ByteString,
        /// Queue group: each message goes to one member.
        queue: Option<ByteString>,
        /// The client's id for this subscription.
        sid: ByteString,
    },
    /// `UNSUB sid [max_msgs]`.
    Unsubscribe {
        /// The subscription.
        sid: ByteString,
        /// Unsubscribe after this many messages in all have been delivered.
        max_msgs: Option<u64>,
    },
    /// `PING`.
    Ping,
    /// `PONG`.
    Pong,
}

impl ClientOp {
    /// Appends the wire form of this op to `out`.
    pub fn encode(&self, out: &mut BytesMut) {
        match self {
            ClientOp::Connect(json) => {
                out.put_slice(b"CONNECT ");
                out.put_slice(json);
                out.put_slice(b"\r\n");
            }
            ClientOp::Publish(publish) => {
                out.put_slice(if publish.headers.is_some() { b"HPUB " } else { b"PUB " });
                out.put_slice(publish.subject.as_bytes());
                out.put_u8(b' ');
                if let Some(reply) = &publish.reply {
                    out.put_slice(reply.as_bytes());
                    out.put_u8(b' ');
                }
                let header_len = publish.headers.as_ref().map_or(0, Bytes::len);
                if publish.headers.is_some() {
                    put_number(out, header_len as u64);
                    out.put_u8(b' ');
                }
                put_number(out, (header_len + publish.payload.len()) as u64);
                out.put_slice(b"\r\n");
                if let Some(headers) = &publish.headers {
                    out.put_slice(headers);
                }
                out.put_slice(&publish.payload);
                out.put_slice(b"\r\n");
            }
            ClientOp::Subscribe { subject, queue, sid } => {
                out.put_slice(b"SUB ");
                out.put_slice(subject.as_bytes());
                out.put_u8(b' ');
                if let Some(queue) = queue {
                    out.put_slice(queue.as_bytes());
                    out.put_u8(b' ');
                }
                out.put_slice(sid.as_bytes());
                out.put_slice(b"\r\n");
            }
            ClientOp::Unsubscribe { sid, max_msgs } => {
                out.put_slice(b"UNSUB ");
                out.put_slice(sid.as_bytes());
                if let Some(max) = max_msgs {
                    out.put_u8(b' ');
                    put_number(out, *max);
                }
                out.put_slice(b"\r\n");
            }
            ClientOp::Ping => out.put_slice(b"PING\r\n"),
            ClientOp::Pong => out.put_slice(b"PONG\r\n"),
        }
    }
}

/// Appends a decimal number without allocating.
pub(crate) fn put_number(out: &mut BytesMut, value: u64) {
    let mut buffer = itoa::Buffer::new();
    out.put_slice(buffer.format(value).as_bytes());
}
