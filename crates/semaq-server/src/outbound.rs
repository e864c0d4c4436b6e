//! Each client's bounded outbound buffer, and the task that writes it to the socket.
//!
//! Publishers append deliveries straight into the subscriber's buffer (one copy, no channel
//! hop) and wake its writer once per batch of input. The buffer is bounded by
//! `pending_bytes_max`, counting bytes still being written: a client that falls that far
//! behind is a slow consumer, gets `-ERR 'Slow Consumer'` and is closed, so one stuck reader
//! can never make the server hold unbounded memory or stall its publishers.

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
    buffer: BytesMut,
    /// Bytes handed to the writer and not yet confirmed written.
    in_flight_bytes: usize,
    close_reason: Option<CloseReason>,
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
    /// Messages and bytes delivered to this client.
    pub traffic: Traffic,
}

/// The client could not take more: it has been marked a slow consumer and is closing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlowConsumer;

impl Outbound {
    /// An empty queue bounded by `pending_bytes_max`.
    pub fn new(pending_bytes_max: usize) -> Self {
        Self {
            state: Mutex::new(State::default()),
            wake_writer: Notify::new(),
            closing: AtomicBool::new(false),
            closed_signal: Notify::new(),
            pending_bytes_max,
            traffic: Traffic::default(),
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
        let mut state = self.lock();
        if state.close_reason.is_some() {
            return Err(SlowConsumer);
        }
        if state.buffer.len() + state.in_flight_bytes + len > self.pending_bytes_max {
            // The client is not reading: what is queued would never arrive, so drop it and
            // leave only the reason, which a client that wakes up may still read.
            state.buffer.clear();
            drop(state);
            self.close_with_error(CloseReason::SlowConsumer, "Slow Consumer");
            return Err(SlowConsumer);
        }
        write(&mut state.buffer);
        Ok(())
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
        state.buffer.len() + state.in_flight_bytes
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
        semaq_wire::encode::err(&mut state.buffer, text);
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

    /// Takes the queued bytes for writing, leaving `spare` (empty) in their place.
    fn take(&self, spare: BytesMut) -> (BytesMut, Option<CloseReason>) {
        let mut state = self.lock();
        let batch = std::mem::replace(&mut state.buffer, spare);
        state.in_flight_bytes = batch.len();
        (batch, state.close_reason)
    }

    fn written(&self) {
        self.lock().in_flight_bytes = 0;
    }

    /// Writes queued bytes to `socket` until the connection closes; returns why it closed.
    pub async fn run_writer<W: AsyncWrite + Unpin>(&self, mut socket: W, write_deadline: Duration) -> CloseReason {
        let mut spare = BytesMut::with_capacity(limits::READ_BUFFER_BYTES);
        loop {
            let notified = self.wake_writer.notified();
            let (mut batch, close_reason) = self.take(spare);
            if !batch.is_empty() {
                let deadline = match close_reason {
                    Some(CloseReason::SlowConsumer) => limits::SLOW_CONSUMER_NOTICE_TIMEOUT,
                    _ => write_deadline,
                };
                let write = async {
                    socket.write_all(&batch).await?;
                    socket.flush().await
                };
                let outcome = tokio::select! {
                    outcome = tokio::time::timeout(deadline, write) => outcome,
                    // A slow consumer's queued bytes were dropped; so is the write stuck on them.
                    _ = self.abandoned() => return CloseReason::SlowConsumer,
                };
                match outcome {
                    Ok(Ok(())) => self.written(),
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
            batch.clear();
            // Keep one buffer's worth of capacity for reuse; give back what a burst grew.
            spare = if batch.capacity() > limits::WRITE_BATCH_BYTES_MAX { BytesMut::new() } else { batch };
            if close_reason.is_none() && self.pending_bytes() == 0 {
                notified.await;
            }
        }
    }
}
