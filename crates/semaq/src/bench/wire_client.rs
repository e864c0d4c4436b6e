//! A lean NATS client for the transport benchmark: the raw protocol over TCP or over WebSocket
//! (tokio-websockets), publishing prebuilt batches of `PUB`s and counting `MSG`s without
//! looking at their payloads. A full client (async-nats) spends several times the server's CPU
//! per message, more over WebSocket (a copy per frame each way), and on a shared machine that
//! cost sets the rate; this one costs little and the same on both transports, so the rate is
//! what the server's transport can carry.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use futures::{SinkExt as _, StreamExt as _};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio_websockets::{MaybeTlsStream, Message, WebSocketStream};

use super::flow::{window_msgs, STALL_TIMEOUT};
use super::Load;

/// Bytes of `PUB`s the publisher writes at once (one WebSocket message).
const BATCH_BYTES: usize = 64 * 1024;
/// A protocol line longer than this is not the NATS protocol.
const LINE_BYTES_MAX: usize = 4096;
/// Bytes asked of a TCP socket per read.
const READ_BYTES: usize = 64 * 1024;
/// How long connecting and the first PING/PONG may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// The subject every message goes to.
const SUBJECT: &str = "semaq.bench.wire";

/// One connection, over either transport.
enum Link {
    Tcp(TcpStream),
    Ws(Box<WebSocketStream<MaybeTlsStream<TcpStream>>>),
}

impl Link {
    /// Connects to `url` (`nats://` or `ws://`), reads INFO, sends CONNECT and waits for PONG.
    async fn open(url: &str, input: &mut BytesMut) -> Result<Self> {
        let mut link = match url.strip_prefix("nats://") {
            Some(address) => {
                Link::Tcp(TcpStream::connect(address).await.with_context(|| format!("cannot connect to {url}"))?)
            }
            None => {
                let builder =
                    tokio_websockets::ClientBuilder::new().uri(url).with_context(|| format!("bad URL {url}"))?;
                let (stream, _) = builder.connect().await.with_context(|| format!("cannot connect to {url}"))?;
                Link::Ws(Box::new(stream))
            }
        };
        tokio::time::timeout(HANDSHAKE_TIMEOUT, link.handshake(input))
            .await
            .with_context(|| format!("{url} did not answer in {HANDSHAKE_TIMEOUT:?}"))??;
        Ok(link)
    }

    async fn handshake(&mut self, input: &mut BytesMut) -> Result<()> {
        self.line_starting(b"INFO ", input).await?;
        let connect =
            r#"CONNECT {"verbose":false,"pedantic":false,"protocol":1,"headers":false,"no_responders":false}"#;
        self.send(Bytes::from(format!("{connect}\r\nPING\r\n"))).await?;
        self.line_starting(b"PONG", input).await
    }

    /// Reads until a line starting with `prefix`, dropping the lines before it.
    async fn line_starting(&mut self, prefix: &[u8], input: &mut BytesMut) -> Result<()> {
        loop {
            while let Some(end) = memchr::memchr(b'\n', input) {
                let line = input.split_to(end + 1);
                if line.starts_with(b"-ERR") {
                    bail!("the server refused: {}", String::from_utf8_lossy(&line).trim_end());
                }
                if line.starts_with(prefix) {
                    return Ok(());
                }
            }
            if input.len() > LINE_BYTES_MAX {
                bail!("a protocol line longer than {LINE_BYTES_MAX} bytes");
            }
            self.receive(input).await?;
        }
    }

    async fn send(&mut self, bytes: Bytes) -> Result<()> {
        match self {
            Link::Tcp(socket) => socket.write_all(&bytes).await?,
            Link::Ws(socket) => socket.send(Message::binary(bytes)).await?,
        }
        Ok(())
    }

    /// Appends what arrives next to `input`; the end of the connection is an error.
    async fn receive(&mut self, input: &mut BytesMut) -> Result<()> {
        match self {
            Link::Tcp(socket) => {
                input.reserve(READ_BYTES);
                if socket.read_buf(input).await? == 0 {
                    bail!("the server closed the connection");
                }
            }
            Link::Ws(socket) => match socket.next().await {
                Some(message) => input.extend_from_slice(message?.as_payload()),
                None => bail!("the server closed the connection"),
            },
        }
        Ok(())
    }
}

/// What the subscriber found in its input so far.
#[derive(Debug, Default, PartialEq, Eq)]
struct Counted {
    msgs: u64,
    pings: u32,
}

/// Takes every whole operation off the front of `input`: counts `MSG`s and `PING`s, skips the
/// rest, refuses `-ERR`. A partial operation stays for the next read.
fn take_ops(input: &mut BytesMut) -> Result<Counted> {
    let mut counted = Counted::default();
    while let Some(end) = memchr::memchr(b'\n', input) {
        let line = &input[..end];
        let is_msg = line.starts_with(b"MSG ");
        let whole = if is_msg {
            let size = line.trim_ascii_end().rsplit(|&b| b == b' ').next().unwrap_or_default();
            let size: usize =
                std::str::from_utf8(size).ok().and_then(|s| s.parse().ok()).context("a MSG without its size")?;
            end + 1 + size + 2
        } else if line.starts_with(b"-ERR") {
            bail!("the server said {}", String::from_utf8_lossy(line).trim_end());
        } else {
            end + 1
        };
        if input.len() < whole {
            return Ok(counted);
        }
        if is_msg {
            counted.msgs += 1;
        } else if line.starts_with(b"PING") {
            counted.pings += 1;
        }
        input.advance(whole);
    }
    if input.len() > LINE_BYTES_MAX {
        bail!("a protocol line longer than {LINE_BYTES_MAX} bytes");
    }
    Ok(counted)
}

/// `PUB`s of `size`-byte payloads filling about [`BATCH_BYTES`], and how many there are.
fn batch(size: usize) -> (Bytes, u64) {
    let op = format!("PUB {SUBJECT} {size}\r\n");
    let per_batch = (BATCH_BYTES / (op.len() + size + 2)).max(1);
    let mut bytes = BytesMut::with_capacity(per_batch * (op.len() + size + 2));
    for _ in 0..per_batch {
        bytes.put_slice(op.as_bytes());
        bytes.put_bytes(b'x', size);
        bytes.put_slice(b"\r\n");
    }
    (bytes.freeze(), per_batch as u64)
}

/// What one run measured.
pub struct Run {
    pub delivered: u64,
    pub elapsed: Duration,
}

impl Run {
    /// Deliveries per second.
    pub fn rate(&self) -> f64 {
        self.delivered as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Publishes `load` from a connection to `publisher_url` to one subscriber on `subscriber_url`.
pub async fn pubsub(publisher_url: &str, subscriber_url: &str, load: &Load) -> Result<Run> {
    let mut sub_input = BytesMut::new();
    let mut subscriber = Link::open(subscriber_url, &mut sub_input).await?;
    subscriber.send(Bytes::from(format!("SUB {SUBJECT} 1\r\nPING\r\n"))).await?;
    subscriber.line_starting(b"PONG", &mut sub_input).await?;
    let mut publisher = Link::open(publisher_url, &mut BytesMut::new()).await?;

    let received = Arc::new(AtomicU64::new(0));
    let progress = Arc::new(Notify::new());
    let receiving = tokio::spawn(receive(subscriber, sub_input, received.clone(), progress.clone()));
    let (ops, per_batch) = batch(load.size);
    let window = window_msgs(load.size).max(per_batch * 2);
    let started = Instant::now();
    let mut sent = 0;
    while sent < load.msgs && started.elapsed() < load.duration {
        while sent - received.load(Ordering::Acquire) > window {
            if tokio::time::timeout(STALL_TIMEOUT, progress.notified()).await.is_err() {
                bail!("the subscriber received nothing for {STALL_TIMEOUT:?}");
            }
        }
        publisher.send(ops.clone()).await?;
        sent += per_batch;
    }
    loop {
        let delivered = received.load(Ordering::Acquire);
        if delivered >= sent {
            break;
        }
        if tokio::time::timeout(STALL_TIMEOUT, progress.notified()).await.is_err() {
            receiving.abort();
            bail!("{delivered} of {sent} messages arrived, then nothing for {STALL_TIMEOUT:?}");
        }
    }
    let elapsed = started.elapsed();
    receiving.abort();
    Ok(Run { delivered: received.load(Ordering::Acquire), elapsed })
}

/// The subscriber: counts messages into `received` and wakes the publisher as they arrive.
async fn receive(mut link: Link, mut input: BytesMut, received: Arc<AtomicU64>, progress: Arc<Notify>) -> Result<()> {
    loop {
        link.receive(&mut input).await?;
        let counted = take_ops(&mut input)?;
        for _ in 0..counted.pings {
            link.send(Bytes::from_static(b"PONG\r\n")).await?;
        }
        received.fetch_add(counted.msgs, Ordering::Release);
        progress.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_messages_are_counted_and_a_partial_one_waits_for_its_payload() {
        let mut input = BytesMut::from(&b"MSG a 1 3\r\nabc\r\nPING\r\nMSG a 1 5\r\nab"[..]);
        assert_eq!(take_ops(&mut input).unwrap(), Counted { msgs: 1, pings: 1 });
        assert_eq!(&input[..], b"MSG a 1 5\r\nab");
        input.extend_from_slice(b"cde\r\n");
        assert_eq!(take_ops(&mut input).unwrap(), Counted { msgs: 1, pings: 0 });
        assert!(input.is_empty());
    }

    #[test]
    fn an_error_from_the_server_ends_the_run() {
        let mut input = BytesMut::from(&b"-ERR 'Slow Consumer'\r\n"[..]);
        assert!(take_ops(&mut input).is_err());
    }

    #[test]
    fn a_batch_holds_whole_pubs_of_the_payload_size() {
        let (ops, count) = batch(128);
        let op_bytes = "PUB semaq.bench.wire 128\r\n".len() + 128 + 2;
        assert_eq!(ops.len(), count as usize * op_bytes);
        assert!(ops.len() <= BATCH_BYTES);
    }
}
