//! A WebSocket connection as the byte stream the connection reads and writes, framed here as
//! nats-server frames it: each write (one flush of the outbound buffer) goes out as one binary
//! frame, written with its header in one vectored write; client payloads are unmasked straight
//! into the parser's buffer; pings are answered and a close is echoed. With permessage-deflate,
//! outbound frames over [`limits::WEBSOCKET_COMPRESS_BYTES_MIN`] are compressed and compressed
//! messages are inflated as the parser asks for bytes, each bounded.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{ready, Context, Poll};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::deflate::{Deflater, Inflater, SYNC_TAIL};
use super::frame::{self, FrameError, Header};
use crate::limits;

/// What both halves share: the socket, and whole frames queued for it.
struct Wire<S> {
    socket: S,
    /// Whole frames (pongs, the unwritten end of a data frame, the close), front first. Only
    /// whole frames are appended, so a pong queued here never lands inside another frame.
    queued: BytesMut,
    /// The close frame to send when the connection ends (an echo or a protocol error's).
    close: Option<Vec<u8>>,
    /// A close frame has been queued: nothing may follow it.
    close_sent: bool,
}

impl<S: AsyncWrite + Unpin> Wire<S> {
    /// Writes out everything queued.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.queued.is_empty() {
            let n = ready!(Pin::new(&mut self.socket).poll_write(cx, &self.queued))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.queued.advance(n);
        }
        Poll::Ready(Ok(()))
    }
}

type Link<S> = Arc<Mutex<Wire<S>>>;

/// Locks the wire; a poisoned lock (a panic elsewhere) is still a consistent buffer.
fn lock<S>(link: &Link<S>) -> MutexGuard<'_, Wire<S>> {
    link.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The reading half: the payloads of data messages, one after the other.
pub struct Reader<S> {
    link: Link<S>,
    /// Bytes read from the socket and not yet decoded.
    raw: Raw,
    /// The data frame whose payload is being read.
    frame: Option<DataFrame>,
    /// A message's frames so far: whether one is open (awaiting a FIN) and its size.
    message: Option<u64>,
    /// The compressed message being inflated, when compression was negotiated.
    inflating: Option<Inflating>,
    /// Kept between compressed messages (its buffers are reused).
    inflater: Option<Inflater>,
    compression: bool,
    message_bytes_max: u64,
    /// The input is over (a close, an error or the socket's end).
    done: bool,
}

/// The socket's bytes not yet decoded, in a buffer allocated (and zeroed) once.
struct Raw {
    bytes: Vec<u8>,
    start: usize,
    end: usize,
}

impl Default for Raw {
    fn default() -> Self {
        Self { bytes: vec![0; limits::READ_BUFFER_BYTES], start: 0, end: 0 }
    }
}

impl Raw {
    fn data(&self) -> &[u8] {
        &self.bytes[self.start..self.end]
    }

    fn len(&self) -> usize {
        self.end - self.start
    }

    fn consume(&mut self, n: usize) {
        self.start = (self.start + n).min(self.end);
    }

    /// Room at the end for the next read, moving the undecoded bytes to the front when needed
    /// (they are at most one frame header and control payload, or a payload's rest).
    fn spare(&mut self) -> &mut [u8] {
        if self.start == self.end {
            (self.start, self.end) = (0, 0);
        } else if self.end == self.bytes.len() {
            self.bytes.copy_within(self.start..self.end, 0);
            (self.start, self.end) = (0, self.end - self.start);
        }
        &mut self.bytes[self.end..]
    }
}

/// Where a data frame's payload stands.
#[derive(Debug, Clone, Copy)]
struct DataFrame {
    remaining: u64,
    mask: [u8; 4],
    mask_offset: usize,
    fin: bool,
}

/// One compressed message: its unmasked deflate data not yet inflated, and whether all of it
/// (with the sync tail) is there.
struct Inflating {
    deflated: BytesMut,
    complete: bool,
}

/// The writing half: each write goes out as one binary frame.
pub struct Writer<S> {
    link: Link<S>,
    deflater: Option<Deflater>,
    /// After the close frame and our FIN: reading the client's last bytes (at most this many).
    lingering: Option<usize>,
}

/// Splits `socket` (past the upgrade) into the halves the connection's reader and writer
/// tasks own. `compression`: permessage-deflate was negotiated. A message (or what it inflates
/// to) over `message_bytes_max` closes the connection with 1009.
pub fn split<S: AsyncRead + AsyncWrite + Unpin>(
    socket: S,
    compression: bool,
    message_bytes_max: usize,
) -> (Reader<S>, Writer<S>) {
    let link = Arc::new(Mutex::new(Wire { socket, queued: BytesMut::new(), close: None, close_sent: false }));
    let reader = Reader {
        link: link.clone(),
        raw: Raw::default(),
        frame: None,
        message: None,
        inflating: None,
        inflater: None,
        compression,
        message_bytes_max: message_bytes_max as u64,
        done: false,
    };
    let deflater = compression.then(Deflater::default);
    (reader, Writer { link, deflater, lingering: None })
}

/// What the reader does next.
enum Step {
    /// Bytes went into the caller's buffer.
    Filled,
    /// Progress without output; go round again.
    Again,
    /// More input is needed from the socket.
    Read,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Reader<S> {
    /// Ends the input after a protocol error; the close frame goes out as the connection ends.
    fn fail(&mut self, error: FrameError) -> io::Error {
        tracing::debug!(%error, "closing websocket connection");
        lock(&self.link).close.get_or_insert_with(|| frame::close_frame(error.status(), error.reason()));
        self.done = true;
        io::Error::new(io::ErrorKind::InvalidData, error)
    }

    /// Inflates what the current compressed message holds into `buf`.
    fn step_inflate(&mut self, buf: &mut ReadBuf<'_>) -> Result<Step, FrameError> {
        let Some(inflating) = self.inflating.as_mut() else { return Ok(Step::Read) };
        let Some(inflater) = self.inflater.as_mut() else { return Ok(Step::Read) };
        let (consumed, produced) = inflater.inflate(&inflating.deflated, buf.initialize_unfilled())?;
        inflating.deflated.advance(consumed);
        if produced > 0 {
            buf.advance(produced);
            return Ok(Step::Filled);
        }
        if consumed > 0 {
            return Ok(Step::Again);
        }
        if !inflating.complete {
            // Everything given is inflated; the rest of the message is still to come.
            return Ok(Step::Read);
        }
        if !inflating.deflated.is_empty() {
            return Err(FrameError::Inflate);
        }
        self.inflating = None;
        Ok(Step::Again)
    }

    /// Moves the current data frame's payload on: unmasked into `buf`, or, for a compressed
    /// message, into its deflate data.
    fn step_payload(&mut self, buf: &mut ReadBuf<'_>) -> Step {
        let Some(mut data) = self.frame else { return Step::Again };
        let available = (self.raw.len() as u64).min(data.remaining) as usize;
        if data.remaining > 0 && available == 0 {
            return Step::Read;
        }
        let filled = if let Some(inflating) = self.inflating.as_mut() {
            let start = inflating.deflated.len();
            inflating.deflated.extend_from_slice(&self.raw.data()[..available]);
            data.mask_offset = frame::unmask(&mut inflating.deflated[start..], data.mask, data.mask_offset);
            self.raw.consume(available);
            data.remaining -= available as u64;
            false
        } else {
            let n = available.min(buf.remaining());
            let start = buf.filled().len();
            buf.put_slice(&self.raw.data()[..n]);
            data.mask_offset = frame::unmask(&mut buf.filled_mut()[start..], data.mask, data.mask_offset);
            self.raw.consume(n);
            data.remaining -= n as u64;
            n > 0
        };
        self.frame = (data.remaining > 0).then_some(data);
        if data.remaining == 0 && data.fin {
            self.message = None;
            if let Some(inflating) = self.inflating.as_mut() {
                inflating.deflated.extend_from_slice(&SYNC_TAIL);
                inflating.complete = true;
            }
        }
        if filled {
            Step::Filled
        } else {
            Step::Again
        }
    }

    /// Decodes the next frame header (and a control frame's payload) from the raw bytes.
    fn step_header(&mut self, cx: &mut Context<'_>) -> Result<Step, FrameError> {
        let Some(header) = frame::parse_header(self.raw.data(), self.compression)? else { return Ok(Step::Read) };
        if header.is_control() {
            let end = header.header_len + header.len as usize;
            if self.raw.len() < end {
                return Ok(Step::Read);
            }
            let mut payload = [0u8; frame::CONTROL_PAYLOAD_BYTES_MAX];
            let payload = &mut payload[..end - header.header_len];
            payload.copy_from_slice(&self.raw.data()[header.header_len..end]);
            self.raw.consume(end);
            frame::unmask(payload, header.mask, 0);
            return self.control(cx, header.opcode, payload);
        }
        self.start_data(header)?;
        self.raw.consume(header.header_len);
        Ok(Step::Again)
    }

    /// Checks a data frame against the message it starts or continues.
    fn start_data(&mut self, header: Header) -> Result<(), FrameError> {
        let so_far = match (header.opcode, self.message) {
            // RSV1 marks only a message's first frame.
            (frame::CONTINUATION, Some(so_far)) if !header.compressed => so_far,
            (frame::CONTINUATION, _) => return Err(FrameError::Protocol("invalid continuation frame")),
            (_, Some(_)) => {
                return Err(FrameError::Protocol(
                    "new message started before final frame for previous message was received",
                ))
            }
            (_, None) => 0,
        };
        let size = so_far.saturating_add(header.len);
        if size > self.message_bytes_max {
            return Err(FrameError::TooBig("message exceeds the maximum size"));
        }
        if header.compressed {
            let bytes_max = self.message_bytes_max as usize;
            self.inflater.get_or_insert_with(|| Inflater::new(bytes_max)).reset();
            self.inflating = Some(Inflating { deflated: BytesMut::new(), complete: false });
        }
        self.message = (!header.fin).then_some(size);
        // Even an empty frame is taken as one: an empty last frame still ends its message.
        self.frame = Some(DataFrame { remaining: header.len, mask: header.mask, mask_offset: 0, fin: header.fin });
        Ok(())
    }

    /// A ping is answered with a pong; a close is echoed and ends the input.
    fn control(&mut self, cx: &mut Context<'_>, opcode: u8, payload: &[u8]) -> Result<Step, FrameError> {
        match opcode {
            frame::PING => {
                let mut wire = lock(&self.link);
                // A client pinging faster than it reads gets its latest pings answered only.
                if !wire.close_sent && wire.queued.len() < limits::WEBSOCKET_QUEUED_CONTROL_BYTES_MAX {
                    wire.queued.extend_from_slice(&frame::control_frame(frame::PONG, payload));
                }
                // Out now if the socket takes it; else the writer's next write sends it first.
                let _ = wire.poll_drain(cx);
                Ok(Step::Again)
            }
            frame::CLOSE => {
                let reply = frame::close_reply(payload)?;
                lock(&self.link).close.get_or_insert(reply);
                self.done = true;
                Ok(Step::Again)
            }
            _ => Ok(Step::Again),
        }
    }

    /// Reads more raw bytes from the socket.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut wire = lock(&self.link);
        if wire.close_sent {
            self.done = true;
            return Poll::Ready(Ok(()));
        }
        // A pong the socket could not take before: out now, if the socket has room.
        if !wire.queued.is_empty() {
            if let Poll::Ready(Err(error)) = wire.poll_drain(cx) {
                return Poll::Ready(Err(error));
            }
        }
        let mut read = ReadBuf::new(self.raw.spare());
        ready!(Pin::new(&mut wire.socket).poll_read(cx, &mut read))?;
        let n = read.filled().len();
        self.raw.end += n;
        self.done = n == 0;
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for Reader<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        // Bounded: each pass consumes input or ends in a read that may pend.
        loop {
            if this.done {
                return Poll::Ready(Ok(()));
            }
            let step = match this.step_inflate(buf) {
                Ok(Step::Read) if this.frame.is_some() => Ok(this.step_payload(buf)),
                Ok(Step::Read) => this.step_header(cx),
                other => other,
            };
            match step {
                Ok(Step::Filled) => return Poll::Ready(Ok(())),
                Ok(Step::Again) => {}
                Ok(Step::Read) => {
                    if let Err(error) = ready!(this.poll_fill(cx)) {
                        this.done = true;
                        return Poll::Ready(Err(error));
                    }
                }
                Err(error) => return Poll::Ready(Err(this.fail(error))),
            }
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> Writer<S> {
    /// Frames `payload` (compressing it when negotiated and worth it) and writes it, or queues
    /// what the socket did not take.
    fn poll_frame(&mut self, cx: &mut Context<'_>, payload: &[u8]) -> Poll<io::Result<()>> {
        let mut wire = lock(&self.link);
        let (payload, compressed) = match self.deflater.as_mut() {
            Some(deflater) if payload.len() > limits::WEBSOCKET_COMPRESS_BYTES_MIN => {
                (deflater.message(payload)?, true)
            }
            _ => (payload, false),
        };
        let mut header = [0u8; frame::SERVER_HEADER_BYTES_MAX];
        let header_len = frame::server_header(&mut header, frame::BINARY, compressed, payload.len());
        let header = &header[..header_len];
        let written = if wire.socket.is_write_vectored() {
            let slices = [IoSlice::new(header), IoSlice::new(payload)];
            match Pin::new(&mut wire.socket).poll_write_vectored(cx, &slices) {
                Poll::Ready(result) => result?,
                Poll::Pending => 0,
            }
        } else {
            0
        };
        // What the socket did not take waits, whole, in the queue (at most one frame).
        if written < header.len() {
            wire.queued.extend_from_slice(&header[written..]);
            wire.queued.extend_from_slice(payload);
        } else {
            wire.queued.extend_from_slice(&payload[written - header.len()..]);
        }
        if let Some(deflater) = self.deflater.as_mut() {
            deflater.trim(limits::READ_BUFFER_BYTES);
        }
        match wire.poll_drain(cx) {
            Poll::Ready(Err(error)) => Poll::Ready(Err(error)),
            _ => Poll::Ready(Ok(())),
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Writer<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        {
            let mut wire = lock(&self.link);
            ready!(wire.poll_drain(cx))?;
            if wire.close_sent {
                // Nothing may follow a close; the connection is ending.
                return Poll::Ready(Ok(buf.len()));
            }
        }
        let n = buf.len().min(limits::WEBSOCKET_FRAME_BYTES_MAX);
        ready!(self.poll_frame(cx, &buf[..n]))?;
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut wire = lock(&self.link);
        ready!(wire.poll_drain(cx))?;
        Pin::new(&mut wire.socket).poll_flush(cx)
    }

    /// Sends the close frame (the echo of the client's, a protocol error's, or 1000), ends our
    /// side, then reads what the client still sends until it closes, so closing with unread
    /// input does not reset the connection and destroy the close before the client reads it.
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let mut wire = lock(&this.link);
        if this.lingering.is_none() {
            if !wire.close_sent {
                let close = wire.close.take().unwrap_or_else(|| frame::close_frame(frame::STATUS_NORMAL, ""));
                wire.queued.extend_from_slice(&close);
                wire.close_sent = true;
            }
            ready!(wire.poll_drain(cx))?;
            ready!(Pin::new(&mut wire.socket).poll_shutdown(cx))?;
            this.lingering = Some(limits::WEBSOCKET_LINGER_BYTES_MAX);
        }
        let mut scratch = [0u8; 4096];
        while let Some(left) = this.lingering.filter(|left| *left > 0) {
            let mut read = ReadBuf::new(&mut scratch);
            match ready!(Pin::new(&mut wire.socket).poll_read(cx, &mut read)) {
                Ok(()) if !read.filled().is_empty() => this.lingering = Some(left.saturating_sub(read.filled().len())),
                _ => break,
            }
        }
        this.lingering = Some(0);
        Poll::Ready(Ok(()))
    }
}
