//! Starts a real `semaq-server` process on free ports and talks to it over TCP.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// A running server process, killed on drop.
pub struct TestServer {
    child: Child,
    /// Client address.
    pub addr: SocketAddr,
    /// Monitoring address, when enabled.
    pub http: Option<SocketAddr>,
    /// The working directory, removed on drop.
    _dir: tempfile::TempDir,
}

impl TestServer {
    /// Starts with default options on random ports.
    pub fn start() -> Self {
        Self::with_args(&[])
    }

    /// Starts with extra command-line flags (nats-server syntax).
    pub fn with_args(extra: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        Self::in_dir(dir, extra)
    }

    /// Starts with a config file holding `config`, plus extra flags.
    pub fn with_config(config: &str, extra: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("server.conf");
        std::fs::write(&path, config).expect("write config");
        let path = path.to_string_lossy().into_owned();
        let mut args = vec!["-c", path.as_str()];
        args.extend_from_slice(extra);
        Self::in_dir(dir, &args)
    }

    fn in_dir(dir: tempfile::TempDir, extra: &[&str]) -> Self {
        let store = dir.path().join("store");
        let mut command = Command::new(env!("CARGO_BIN_EXE_semaq-server"));
        command.args(["-a", "127.0.0.1", "-p", "-1", "-m", "-1", "-sd"]).arg(&store).args(extra);
        Self::spawn(command, dir)
    }

    /// Spawns `command` and waits for `Server is ready`.
    pub fn spawn(command: Command, dir: tempfile::TempDir) -> Self {
        let Started { child, addr, http, .. } = start_process(command);
        Self { child, addr, http, _dir: dir }
    }

    /// `nats://host:port`.
    pub fn url(&self) -> String {
        format!("nats://{}", self.addr)
    }

    /// Connects with async-nats using default options.
    pub async fn client(&self) -> async_nats::Client {
        async_nats::connect(self.url()).await.expect("connect")
    }

    /// A raw TCP connection with the INFO line already read.
    pub fn raw(&self) -> Raw {
        Raw::connect(self.addr)
    }

    /// The INFO line a new raw connection receives.
    pub fn raw_info(&self) -> String {
        let stream = TcpStream::connect(self.addr).expect("connect");
        stream.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
        let mut line = String::new();
        BufReader::new(stream).read_line(&mut line).expect("INFO line");
        line
    }

    /// GETs a monitoring endpoint and parses the JSON.
    pub fn http_json(&self, path: &str) -> serde_json::Value {
        let addr = self.http.expect("monitoring enabled");
        let mut stream = TcpStream::connect(addr).expect("connect http");
        write!(stream, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").expect("write");
        let mut response = String::new();
        stream.read_to_string(&mut response).expect("read");
        let body = response.split("\r\n\r\n").nth(1).expect("body");
        serde_json::from_str(body).expect("json")
    }

    /// Process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM and waits for exit, returning the exit code.
    pub fn terminate(mut self) -> Option<i32> {
        unsafe_kill(self.child.id(), "TERM");
        wait_for_exit(&mut self.child)?.code()
    }
}

/// Waits (at most 10 s) for a server process to exit; its status, or `None` if it is still running.
pub fn wait_for_exit(child: &mut Child) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// Waits until the server has processed everything `client` sent before. async-nats' `flush`
/// only empties the client's socket buffer; a request that nobody answers comes back with a
/// 503 status only after the server has read every earlier op of the connection.
pub async fn sync(client: &async_nats::Client) {
    sync_via(client, "_SEMAQ_TEST.sync").await;
}

/// [`sync`] through a subject of the caller's choosing (one the client may publish to).
pub async fn sync_via(client: &async_nats::Client, subject: &str) {
    let outcome = client.request(subject.to_string(), bytes::Bytes::new()).await;
    assert!(
        matches!(&outcome, Err(error) if error.kind() == async_nats::RequestErrorKind::NoResponders),
        "sync round trip: {outcome:?}"
    );
}

/// A started `semaq-server` process and what its log said.
pub struct Started {
    /// The process.
    pub child: Child,
    /// Client address.
    pub addr: SocketAddr,
    /// Monitoring address, when enabled.
    pub http: Option<SocketAddr>,
    /// Every log line so far (kept filling while the process runs).
    pub log: Arc<Mutex<Vec<String>>>,
}

/// Spawns `command` (a semaq-server), keeps draining its log, and waits for `Server is ready`.
pub fn start_process(mut command: Command) -> Started {
    let mut child = command.stderr(Stdio::piped()).stdout(Stdio::null()).spawn().expect("spawn semaq-server");
    let stderr = child.stderr.take().expect("stderr");
    let log = Arc::new(Mutex::new(Vec::new()));
    let (sender, lines) = mpsc::channel();
    let kept = log.clone();
    std::thread::spawn(move || {
        // Keep draining after the test stops listening, so the server never blocks on a full pipe.
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            kept.lock().unwrap_or_else(|p| p.into_inner()).push(line.clone());
            let _ = sender.send(line);
        }
    });
    let (mut addr, mut http) = (None, None);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        let Ok(line) = lines.recv_timeout(remaining) else {
            let _ = child.kill();
            panic!("server did not become ready; log:\n{}", log.lock().unwrap_or_else(|p| p.into_inner()).join("\n"));
        };
        if let Some(rest) = line.split("Listening for client connections on ").nth(1) {
            addr = rest.trim().parse().ok();
        }
        if let Some(rest) = line.split("Starting http monitor on ").nth(1) {
            http = rest.trim().parse().ok();
        }
        if line.contains("Server is ready") {
            break;
        }
    }
    Started { child, addr: addr.expect("client address logged"), http, log }
}

/// Sends a signal with the `kill` command (no libc in tests).
pub fn unsafe_kill(pid: u32, signal: &str) {
    let _ = Command::new("kill").arg(format!("-{signal}")).arg(pid.to_string()).status();
}

impl Drop for TestServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A raw protocol connection.
pub struct Raw {
    stream: TcpStream,
    /// Text received and not yet consumed by `expect`.
    pub received: String,
}

impl Raw {
    /// Connects and reads INFO.
    pub fn connect(addr: SocketAddr) -> Self {
        let stream = TcpStream::connect(addr).expect("connect");
        stream.set_read_timeout(Some(Duration::from_millis(100))).expect("timeout");
        let mut raw = Self { stream, received: String::new() };
        raw.expect("INFO {");
        raw.received.clear();
        raw
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
        let deadline = Instant::now() + Duration::from_secs(5);
        while !self.received.contains(text) {
            assert!(Instant::now() < deadline, "expected {text:?}, got {:?}", self.received);
            if !self.fill() {
                assert!(self.received.contains(text), "closed; expected {text:?}, got {:?}", self.received);
            }
        }
        let end = self.received.find(text).map(|i| i + text.len()).unwrap_or(0);
        self.received.drain(..end).collect()
    }

    /// Reads for `wait` and returns everything received.
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
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if !self.fill() {
                return true;
            }
        }
        false
    }
}
