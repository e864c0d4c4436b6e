//! Each client's bounded outbound buffer, and the task that writes it to the socket.
//!
//! Publishers append deliveries straight into the subscriber's buffer (one copy, no channel
//! hop) and wake its writer once per batch of input. The buffer is a queue of blocks of
//! `OUTBOUND_BLOCK_BYTES` (a larger message gets a block of its own), written with vectored
//! writes: a burst never moves what is queued to grow one buffer, and emptied blocks
//! are reused, so a fast stream of deliveries touches no fresh memory. The buffer is bounded by
//! `pending_bytes_max`, counting bytes still being written: a client that falls that far
//! behind is a slow consumer, gets `-ERR 'Slow Consumer'` and is closed, so one stuck reader
//! can never make the server hold unbounded memory or stall its publishers.
//!
//! Before that bound, a high-water mark ([`limits::LOSSY_HIGH_WATER_PERCENT`] of it): past it,
//! deliveries the publisher marked `Semaq-Lossy: true` are shed instead of queued, so a client
//! that falls behind loses what may be lost first and keeps its room for the rest. A lossy
//! message is shed too when it would reach the bound, so lossy traffic alone never makes a
//! slow consumer.

use std::collections::VecDeque;
use std::io::IoSlice;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::Notify;

use crate::limits;
use crate::stats::Traffic;

/// Why a connection is closing; reported in logs and `/connz`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseReason {
    /// The client went away.
    ClientClosed,
    /// The client fell `pending_bytes_max` behind.
    SlowConsumer,
    /// A socket write blocked longer than the write deadline.
    WriteTimeout,
    /// The client did not answer pings.
    StaleConnection,
    /// A fatal protocol error.
    ProtocolViolation,
    /// Bad credentials or no CONNECT in time.
    AuthenticationFailure,
    /// The server is shutting down.
    ServerShutdown,
    /// The connection limit was reached.
    MaxConnectionsExceeded,
    /// The socket failed.
    IoError,
}

impl CloseReason {
    /// The nats-server `/connz` name for the reason.
    pub fn as_str(self) -> &'static str {
        match self {
            CloseReason::ClientClosed => "Client Closed",
            CloseReason::SlowConsumer => "Slow Consumer (Pending Bytes)",
            CloseReason::WriteTimeout => "Slow Consumer (Write Deadline)",
            CloseReason::StaleConnection => "Stale Connection",
            CloseReason::ProtocolViolation => "Protocol Violation",
            CloseReason::AuthenticationFailure => "Authentication Failure",
            CloseReason::ServerShutdown => "Server Shutdown",
            CloseReason::MaxConnectionsExceeded => "Maximum Connections Exceeded",
            CloseReason::IoError => "Read Error",
        }
    }
}

#[derive(Debug, Default)]
struct State {
    /// Bytes queued for the writer, in order.
    blocks: VecDeque<BytesMut>,
    /// Bytes in `blocks`.
    queued_bytes: usize,
    /// Emptied blocks kept for reuse, at most `OUTBOUND_SPARE_BYTES_MAX` of them.
    spare: Vec<BytesMut>,
    /// Bytes handed to the writer and not yet confirmed written.
    in_flight_bytes: usize,
    close_reason: Option<CloseReason>,
}

impl State {
    /// Appends what `write` produces (at most `len` bytes, or the block grows) after the queue.
    fn write(&mut self, len: usize, write: impl FnOnce(&mut BytesMut)) {
        let fits = self.blocks.back().is_some_and(|block| block.capacity() - block.len() >= len);
        if !fits {
            let spare = self.spare.iter().position(|block| block.capacity() >= len);
            let block = match spare {
                Some(at) => self.spare.swap_remove(at),
                None => BytesMut::with_capacity(len.max(limits::OUTBOUND_BLOCK_BYTES)),
            };
            self.blocks.push_back(block);
        }
        let Some(block) = self.blocks.back_mut() else { return };
        let before = block.len();
        write(block);
        self.queued_bytes += block.len() - before;
        if block.is_empty() {
            // Nothing was written (a TLS connection's greeting: its INFO went out before the
            // handshake). An empty block would be written as zero bytes, which reads as a
            // socket that takes nothing.
            self.blocks.pop_back();
        }
    }

    fn drop_queued(&mut self) {
        self.blocks.clear();
        self.queued_bytes = 0;
    }

    /// Takes written blocks back for reuse, up to `OUTBOUND_SPARE_BYTES_MAX` of them.
    fn recycle(&mut self, written: &mut VecDeque<BytesMut>) {
        let mut kept_bytes: usize = self.spare.iter().map(BytesMut::capacity).sum();
        for mut block in written.drain(..) {
            if kept_bytes + block.capacity() <= limits::OUTBOUND_SPARE_BYTES_MAX {
                kept_bytes += block.capacity();
                block.clear();
                self.spare.push(block);
            }
        }
    }
}

/// A client's queue of bytes to send.
#[derive(Debug)]
pub struct Outbound {
    state: Mutex<State>,
    wake_writer: Notify,
    /// Set once the connection must end; wakes the reader too.
    closing: AtomicBool,
    closed_signal: Notify,
    pending_bytes_max: usize,
    /// Past this many pending bytes, lossy messages are shed.
    high_water_bytes: usize,
    /// Messages and bytes delivered to this client.
    pub traffic: Traffic,
    /// `Semaq-Lossy` messages and bytes shed for this client.
    pub lossy_shed: Traffic,
}

/// The client could not take more: it has been marked a slow consumer and is closing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlowConsumer;

/// What [`Outbound::append_or_shed`] did with a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Appended {
    /// Queued for the writer.
    Queued,
    /// Dropped as lossy: the buffer was past its high-water mark, or the message would reach
    /// the bound (the caller counts it).
    Shed,
}

impl Outbound {
    /// An empty queue bounded by `pending_bytes_max`.
    pub fn new(pending_bytes_max: usize) -> Self {
        Self {
            state: Mutex::new(State::default()),
            wake_writer: Notify::new(),
            closing: AtomicBool::new(false),
            closed_signal: Notify::new(),
            pending_bytes_max,
            high_water_bytes: high_water_bytes(pending_bytes_max),
            traffic: Traffic::default(),
            lossy_shed: Traffic::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding this lock cannot leave the buffer half-written in a way that
        // matters more than losing the connection, so recover rather than poison everything.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Appends `len` bytes produced by `write`, unless that would exceed the bound. Does not wake
    /// the writer: call [`Outbound::flush`] once the batch is done.
    pub fn append_with(&self, len: usize, write: impl FnOnce(&mut BytesMut)) -> Result<(), SlowConsumer> {
        self.append_or_shed(len, || false, write).map(|_| ())
    }

    /// Like [`Outbound::append_with`], but sheds the message instead when `lossy` says it may be
    /// lost and the buffer is past its high-water mark, or the message would reach the bound.
    /// `lossy` is asked only then, so a client that keeps up costs no header lookup.
    pub fn append_or_shed(
        &self,
        len: usize,
        lossy: impl FnOnce() -> bool,
        write: impl FnOnce(&mut BytesMut),
    ) -> Result<Appended, SlowConsumer> {
        let mut state = self.lock();
        if state.close_reason.is_some() {
            return Err(SlowConsumer);
        }
        let pending = state.queued_bytes + state.in_flight_bytes;
        let overflows = pending + len > self.pending_bytes_max;
        if (pending > self.high_water_bytes || overflows) && lossy() {
            return Ok(Appended::Shed);
        }
        if overflows {
            // The client is not reading: what is queued would never arrive, so drop it and
            // leave only the reason, which a client that wakes up may still read.
            state.drop_queued();
            drop(state);
            self.close_with_error(CloseReason::SlowConsumer, "Slow Consumer");
            return Err(SlowConsumer);
        }
        state.write(len, write);
        Ok(Appended::Queued)
    }

    /// Appends bytes and wakes the writer (for protocol replies such as `PONG` or `-ERR`).
    pub fn send(&self, bytes: &[u8]) {
        if self.append_with(bytes.len(), |buffer| buffer.extend_from_slice(bytes)).is_ok() {
            self.flush();
        }
    }

    /// Wakes the writer to send what has been appended.
    pub fn flush(&self) {
        self.wake_writer.notify_one();
    }

    /// Bytes queued or being written.
    pub fn pending_bytes(&self) -> usize {
        let state = self.lock();
        state.queued_bytes + state.in_flight_bytes
    }

    /// Ends the connection after sending what is queued.
    pub fn close(&self, reason: CloseReason) {
        let mut state = self.lock();
        state.close_reason.get_or_insert(reason);
        drop(state);
        self.signal_closing();
    }

    /// Ends the connection after sending what is queued and then `-ERR 'text'`.
    pub fn close_with_error(&self, reason: CloseReason, text: &str) {
        let mut state = self.lock();
        if state.close_reason.is_some() {
            return;
        }
        state.close_reason = Some(reason);
        state.write(semaq_wire::encode::err_len(text), |buffer| semaq_wire::encode::err(buffer, text));
        drop(state);
        self.signal_closing();
    }

    fn signal_closing(&self) {
        self.closing.store(true, Ordering::Release);
        self.closed_signal.notify_waiters();
        self.wake_writer.notify_one();
    }

    /// Why the connection is closing, if it is.
    pub fn close_reason(&self) -> Option<CloseReason> {
        self.lock().close_reason
    }

    /// Whether the connection is closing.
    pub fn is_closing(&self) -> bool {
        self.closing.load(Ordering::Acquire)
    }

    /// Resolves once the connection starts closing.
    pub async fn closed(&self) {
        loop {
            let notified = self.closed_signal.notified();
            if self.is_closing() {
                return;
            }
            notified.await;
        }
    }

    /// Resolves once the client is closed as a slow consumer (never for other reasons).
    async fn abandoned(&self) {
        loop {
            let notified = self.closed_signal.notified();
            match self.close_reason() {
                Some(CloseReason::SlowConsumer) => return,
                Some(_) => return std::future::pending().await,
                None => notified.await,
            }
        }
    }

    /// Moves the queued blocks into `batch` (empty) for writing.
    fn take(&self, batch: &mut VecDeque<BytesMut>) -> Option<CloseReason> {
        let mut state = self.lock();
        std::mem::swap(&mut state.blocks, batch);
        state.in_flight_bytes = std::mem::take(&mut state.queued_bytes);
        state.close_reason
    }

    /// Confirms `batch` written and keeps its blocks for reuse.
    fn written(&self, batch: &mut VecDeque<BytesMut>) {
        let mut state = self.lock();
        state.in_flight_bytes = 0;
        state.recycle(batch);
    }

    /// Writes queued bytes to `socket` until the connection closes; returns why it closed.
    pub async fn run_writer<W: AsyncWrite + Unpin>(&self, mut socket: W, write_deadline: Duration) -> CloseReason {
        let mut batch = VecDeque::new();
        loop {
            let notified = self.wake_writer.notified();
            let close_reason = self.take(&mut batch);
            if !batch.is_empty() {
                let deadline = match close_reason {
                    Some(CloseReason::SlowConsumer) => limits::SLOW_CONSUMER_NOTICE_TIMEOUT,
                    _ => write_deadline,
                };
                let outcome = tokio::select! {
                    outcome = tokio::time::timeout(deadline, write_blocks(&mut socket, &batch)) => outcome,
                    // A slow consumer's queued bytes were dropped; so is the write stuck on them.
                    _ = self.abandoned() => return CloseReason::SlowConsumer,
                };
                match outcome {
                    Ok(Ok(())) => self.written(&mut batch),
                    Ok(Err(_)) => {
                        self.close(CloseReason::IoError);
                        return CloseReason::IoError;
                    }
                    Err(_) => {
                        self.close(CloseReason::WriteTimeout);
                        return close_reason.unwrap_or(CloseReason::WriteTimeout);
                    }
                }
            }
            if let Some(reason) = close_reason {
                if self.pending_bytes() == 0 {
                    let _ = tokio::time::timeout(write_deadline, socket.shutdown()).await;
                    return reason;
                }
            }
            if close_reason.is_none() && self.pending_bytes() == 0 {
                notified.await;
            }
        }
    }
}

/// Writes `blocks` in order, up to `WRITE_SLICES_MAX` of them per call, and flushes.
async fn write_blocks<W: AsyncWrite + Unpin>(socket: &mut W, blocks: &VecDeque<BytesMut>) -> std::io::Result<()> {
    // The first block not wholly written, and how much of it was.
    let (mut index, mut offset) = (0, 0);
    loop {
        while blocks.get(index).is_some_and(|block| block.len() == offset) {
            (index, offset) = (index + 1, 0);
        }
        if index == blocks.len() {
            return socket.flush().await;
        }
        let rest = blocks.range(index..).enumerate().take(limits::WRITE_SLICES_MAX);
        let slices: Vec<IoSlice<'_>> =
            rest.map(|(at, block)| IoSlice::new(if at == 0 { &block[offset..] } else { block })).collect();
        let mut written = socket.write_vectored(&slices).await?;
        if written == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        while let Some(block) = blocks.get(index).filter(|_| written > 0) {
            let step = written.min(block.len() - offset);
            (offset, written) = (offset + step, written - step);
            if offset == block.len() {
                (index, offset) = (index + 1, 0);
            }
        }
    }
}

/// [`limits::LOSSY_HIGH_WATER_PERCENT`] of `pending_bytes_max`, without overflowing for huge bounds.
fn high_water_bytes(pending_bytes_max: usize) -> usize {
    let percent = limits::LOSSY_HIGH_WATER_PERCENT;
    pending_bytes_max / 100 * percent + pending_bytes_max % 100 * percent / 100
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fill(outbound: &Outbound, len: usize) -> Result<Appended, SlowConsumer> {
        outbound.append_or_shed(len, || false, |buffer| buffer.resize(buffer.len() + len, b'x'))
    }

    #[test]
    fn below_the_high_water_mark_nothing_is_shed_and_no_header_is_read() {
        let outbound = Outbound::new(1000);
        assert_eq!(fill(&outbound, 500), Ok(Appended::Queued));
        let appended =
            outbound.append_or_shed(10, || panic!("headers read below the mark"), |b| b.extend_from_slice(&[0; 10]));
        assert_eq!(appended, Ok(Appended::Queued));
    }

    #[test]
    fn past_the_mark_lossy_messages_are_shed_and_others_queued_up_to_the_bound() {
        let outbound = Outbound::new(1000);
        assert_eq!(fill(&outbound, 501), Ok(Appended::Queued));
        assert_eq!(outbound.append_or_shed(10, || true, |_| unreachable!()), Ok(Appended::Shed));
        assert_eq!(outbound.pending_bytes(), 501, "a shed message takes no room");
        assert_eq!(fill(&outbound, 499), Ok(Appended::Queued));
        assert_eq!(
            fill(&outbound, 1),
            Err(SlowConsumer),
            "past the bound, a message that must arrive closes the client"
        );
        assert_eq!(outbound.close_reason(), Some(CloseReason::SlowConsumer));
    }

    /// A socket that takes at most `per_call` bytes per write, spread over the slices given.
    struct Trickle {
        written: Vec<u8>,
        per_call: usize,
    }

    impl AsyncWrite for Trickle {
        fn poll_write(
            self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
            buf: &[u8],
        ) -> std::task::Poll<std::io::Result<usize>> {
            self.poll_write_vectored(cx, &[IoSlice::new(buf)])
        }

        fn poll_write_vectored(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            slices: &[IoSlice<'_>],
        ) -> std::task::Poll<std::io::Result<usize>> {
            let mut left = self.per_call;
            for slice in slices {
                let taken = slice.len().min(left);
                self.written.extend_from_slice(&slice[..taken]);
                left -= taken;
            }
            std::task::Poll::Ready(Ok(self.per_call - left))
        }

        fn is_write_vectored(&self) -> bool {
            true
        }

        fn poll_flush(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }

        fn poll_shutdown(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn a_burst_of_small_and_large_messages_reaches_the_socket_whole_and_in_order() {
        let block = limits::OUTBOUND_BLOCK_BYTES;
        let outbound = Outbound::new(64 * block);
        let mut expected = Vec::new();
        for (index, len) in [0, 10, block - 3, 0, 7, 3 * block + 1, block, 1, 2 * block, 0].into_iter().enumerate() {
            let message = vec![b'a' + index as u8; len];
            expected.extend_from_slice(&message);
            outbound.append_with(len, |buffer| buffer.extend_from_slice(&message)).expect("room");
        }
        outbound.close(CloseReason::ServerShutdown);
        // Writes that end inside a block, on a block's edge and across several blocks.
        for per_call in [1000, block, 3 * block + 17] {
            let again = Outbound::new(64 * block);
            again.append_with(expected.len(), |buffer| buffer.extend_from_slice(&expected)).expect("room");
            again.close(CloseReason::ServerShutdown);
            let mut socket = Trickle { written: Vec::new(), per_call };
            assert_eq!(again.run_writer(&mut socket, Duration::from_secs(5)).await, CloseReason::ServerShutdown);
            assert!(socket.written == expected, "{per_call} bytes per write: the bytes differ");
        }
        let mut socket = Trickle { written: Vec::new(), per_call: 1000 };
        assert_eq!(outbound.run_writer(&mut socket, Duration::from_secs(5)).await, CloseReason::ServerShutdown);
        assert!(socket.written == expected, "message by message: the bytes differ");
        assert_eq!(outbound.pending_bytes(), 0);
    }

    #[test]
    fn written_blocks_are_kept_for_reuse_up_to_the_spare_bound() {
        let outbound = Outbound::new(usize::MAX);
        let burst = 4 * limits::OUTBOUND_SPARE_BYTES_MAX;
        for _ in 0..burst / limits::OUTBOUND_BLOCK_BYTES {
            fill(&outbound, limits::OUTBOUND_BLOCK_BYTES).expect("room");
        }
        let mut batch = VecDeque::new();
        outbound.take(&mut batch);
        assert_eq!(outbound.pending_bytes(), burst, "in flight until written");
        outbound.written(&mut batch);
        assert_eq!(outbound.pending_bytes(), 0);
        let state = outbound.lock();
        let kept: usize = state.spare.iter().map(BytesMut::capacity).sum();
        assert!(kept > 0 && kept <= limits::OUTBOUND_SPARE_BYTES_MAX, "kept {kept} bytes of blocks");
        assert!(state.spare.iter().all(BytesMut::is_empty));
    }

    #[test]
    fn a_lossy_message_that_would_reach_the_bound_is_shed_not_a_slow_consumer() {
        let outbound = Outbound::new(1000);
        assert_eq!(outbound.append_or_shed(1001, || true, |_| unreachable!()), Ok(Appended::Shed));
        assert_eq!(outbound.close_reason(), None);
    }
}
