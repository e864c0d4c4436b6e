//! A raw protocol connection over TCP.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// Bound on waiting for expected text, or for the server to close the connection.
const EXPECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A raw protocol connection.
pub struct Raw {
    stream: TcpStream,
    /// Text received and not yet consumed by `expect`.
    pub received: String,
}

impl Raw {
    /// Connects and reads INFO.
    pub fn connect(addr: SocketAddr) -> Self {
        let stream = TcpStream::connect(addr).unwrap_or_else(|error| panic!("connect to {addr}: {error}"));
        stream.set_read_timeout(Some(Duration::from_millis(100))).expect("timeout");
        let mut raw = Self { stream, received: String::new() };
        raw.expect("INFO {");
        raw.received.clear();
        raw
    }

    /// Connects and returns the connection with the INFO the server sent, as JSON.
    pub fn connect_with_info(addr: SocketAddr) -> (Self, serde_json::Value) {
        let stream = TcpStream::connect(addr).unwrap_or_else(|error| panic!("connect to {addr}: {error}"));
        stream.set_read_timeout(Some(Duration::from_millis(100))).expect("timeout");
        let mut raw = Self { stream, received: String::new() };
        raw.expect("INFO ");
        let line = raw.read_until("\r\n");
        let info = serde_json::from_str(line.trim_end()).unwrap_or_else(|error| panic!("INFO {line:?}: {error}"));
        (raw, info)
    }

    /// Writes bytes.
    pub fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("write");
    }

    /// Writes bytes one at a time.
    pub fn send_bytewise(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.stream.write_all(&[*byte]).expect("write");
        }
    }

    /// Reads what is there (waiting at most the 100 ms read timeout); false once the peer closed.
    fn fill(&mut self) -> bool {
        let mut chunk = [0u8; 65536];
        match self.stream.read(&mut chunk) {
            Ok(0) => false,
            Ok(n) => {
                self.received.push_str(&String::from_utf8_lossy(&chunk[..n]));
                true
            }
            Err(_) => true,
        }
    }

    /// Reads until `text` has arrived (within 5 s) and consumes up to its end.
    pub fn expect(&mut self, text: &str) {
        self.expect_keep(text);
    }

    /// Reads until `text` has arrived and returns everything up to and including it.
    pub fn read_until(&mut self, text: &str) -> String {
        self.expect_keep(text)
    }

    fn expect_keep(&mut self, text: &str) -> String {
        let deadline = Instant::now() + EXPECT_TIMEOUT;
        while !self.received.contains(text) {
            assert!(Instant::now() < deadline, "expected {text:?}, got {:?}", self.received);
            if !self.fill() {
                assert!(self.received.contains(text), "closed; expected {text:?}, got {:?}", self.received);
            }
        }
        let end = self.received.find(text).map(|i| i + text.len()).unwrap_or(0);
        self.received.drain(..end).collect()
    }

    /// Reads for `wait` (or until the peer closes) and returns everything received.
    pub fn drain(&mut self, wait: Duration) -> String {
        let deadline = Instant::now() + wait;
        while Instant::now() < deadline {
            if !self.fill() {
                break;
            }
        }
        std::mem::take(&mut self.received)
    }

    /// Whether the server closed the connection (within 5 s).
    pub fn is_closed(&mut self) -> bool {
        let deadline = Instant::now() + EXPECT_TIMEOUT;
        while Instant::now() < deadline {
            if !self.fill() {
                return true;
            }
        }
        false
    }
}
