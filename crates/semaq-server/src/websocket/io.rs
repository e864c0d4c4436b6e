//! A WebSocket stream as the byte stream the connection reads and writes: binary (and text)
//! messages carry the NATS protocol, in any split; pings are answered and closes honoured by
//! tokio-websockets underneath.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes};
use futures::stream::{SplitSink, SplitStream};
use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_websockets::{Message, WebSocketStream};

use crate::limits;

/// The reading half: the payloads of data messages, one after the other.
pub struct Reader<S> {
    stream: SplitStream<WebSocketStream<S>>,
    pending: Bytes,
}

/// The writing half: each write goes out as one binary message.
pub struct Writer<S> {
    sink: SplitSink<WebSocketStream<S>, Message>,
}

/// Splits `stream` into the halves the connection's reader and writer tasks own.
pub fn split<S: AsyncRead + AsyncWrite + Unpin>(stream: WebSocketStream<S>) -> (Reader<S>, Writer<S>) {
    let (sink, stream) = stream.split();
    (Reader { stream, pending: Bytes::new() }, Writer { sink })
}

fn to_io(error: tokio_websockets::Error) -> io::Error {
    match error {
        tokio_websockets::Error::Io(error) => error,
        other => io::Error::new(io::ErrorKind::InvalidData, other),
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for Reader<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        loop {
            if !self.pending.is_empty() {
                let n = self.pending.len().min(buf.remaining());
                buf.put_slice(&self.pending[..n]);
                self.pending.advance(n);
                return Poll::Ready(Ok(()));
            }
            match ready!(self.stream.poll_next_unpin(cx)) {
                Some(Ok(message)) if message.is_binary() || message.is_text() => {
                    self.pending = message.into_payload().into();
                }
                // The close was answered underneath; to the connection it is the end of input.
                Some(Ok(message)) if message.is_close() => return Poll::Ready(Ok(())),
                // Pings (answered underneath) and pongs carry nothing for the connection.
                Some(Ok(_)) => {}
                Some(Err(error)) => return Poll::Ready(Err(to_io(error))),
                None => return Poll::Ready(Ok(())),
            }
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Writer<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        ready!(self.sink.poll_ready_unpin(cx)).map_err(to_io)?;
        let n = buf.len().min(limits::WEBSOCKET_FRAME_BYTES_MAX);
        self.sink.start_send_unpin(Message::binary(Bytes::copy_from_slice(&buf[..n]))).map_err(to_io)?;
        Poll::Ready(Ok(n))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.sink.poll_flush_unpin(cx).map_err(to_io)
    }

    /// Sends a close frame (unless one was already exchanged) and waits for the client's.
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.sink.poll_close_unpin(cx).map_err(to_io)
    }
}
