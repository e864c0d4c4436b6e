//! The WebSocket transport (`websocket { }`): real clients over `ws://` and `wss://`, and raw
//! frames written here for what a client library would never send.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use async_nats::HeaderMap;
use futures::StreamExt;
use semaq_testkit::{sync, SemaqServer};

pub(super) const RECEIVE_TIMEOUT: Duration = Duration::from_secs(5);
const PLAIN: &str = r#"websocket { host: "127.0.0.1", port: -1, no_tls: true }"#;

/// The WebSocket URL the server logged (`Listening for websocket clients on ws://...`).
pub(super) fn ws_url(server: &SemaqServer) -> String {
    let log = server.log_text();
    let line = log.lines().find_map(|line| line.split("Listening for websocket clients on ").nth(1));
    line.expect("websocket listener logged").trim().to_string()
}

pub(super) fn ws_addr(server: &SemaqServer) -> SocketAddr {
    let url = ws_url(server);
    url.split("://").nth(1).unwrap().parse().unwrap()
}

async fn ws_client(server: &SemaqServer) -> async_nats::Client {
    async_nats::connect(ws_url(server)).await.expect("connect over ws://")
}

async fn next(subscriber: &mut async_nats::Subscriber) -> async_nats::Message {
    tokio::time::timeout(RECEIVE_TIMEOUT, subscriber.next()).await.expect("message in time").expect("open")
}

#[tokio::test]
async fn async_nats_over_websocket_publishes_and_subscribes_with_headers() {
    let server = SemaqServer::with_config(PLAIN, &[]);
    assert!(ws_url(&server).starts_with("ws://127.0.0.1:"), "{}", ws_url(&server));
    let client = ws_client(&server).await;
    let mut subscriber = client.subscribe("ws.greet.*").await.unwrap();
    client.flush().await.unwrap();
    let mut headers = HeaderMap::new();
    headers.insert("X-Origin", "browser");
    client.publish_with_headers("ws.greet.joe", headers, "hello over ws".into()).await.unwrap();
    let message = next(&mut subscriber).await;
    assert_eq!(message.subject.as_str(), "ws.greet.joe");
    assert_eq!(message.payload, "hello over ws");
    assert_eq!(message.headers.unwrap().get("X-Origin").unwrap().as_str(), "browser");
    // A message bigger than one read or write buffer crosses intact.
    let big = vec![b'x'; 300 * 1024];
    client.publish("ws.greet.big", big.clone().into()).await.unwrap();
    assert_eq!(next(&mut subscriber).await.payload.as_ref(), big.as_slice());
}

#[tokio::test]
async fn requests_over_websocket_get_replies() {
    let server = SemaqServer::with_config(PLAIN, &[]);
    let responder = ws_client(&server).await;
    let mut requests = responder.subscribe("ws.echo").await.unwrap();
    responder.flush().await.unwrap();
    tokio::spawn(async move {
        while let Some(request) = requests.next().await {
            let reply = request.reply.unwrap();
            let answer = format!("echo: {}", String::from_utf8_lossy(&request.payload));
            responder.publish(reply, answer.into()).await.unwrap();
        }
    });
    let requester = ws_client(&server).await;
    let reply = tokio::time::timeout(RECEIVE_TIMEOUT, requester.request("ws.echo", "ping".into())).await;
    assert_eq!(reply.unwrap().unwrap().payload, "echo: ping");
    // Nobody listens here: no responders, as over TCP.
    let none = requester.request("ws.nobody", "anyone?".into()).await.unwrap_err();
    assert_eq!(none.kind(), async_nats::RequestErrorKind::NoResponders);
}

#[tokio::test]
async fn jetstream_publish_over_websocket_is_acknowledged_and_stored() {
    let server = SemaqServer::with_config(PLAIN, &[]);
    let client = ws_client(&server).await;
    let jetstream = async_nats::jetstream::new(client);
    let config = async_nats::jetstream::stream::Config {
        name: "WSORDERS".into(),
        subjects: vec!["ws.orders.>".into()],
        ..Default::default()
    };
    jetstream.create_stream(config).await.unwrap();
    for i in 1..=3u64 {
        let ack = jetstream.publish("ws.orders.new", format!("order {i}").into()).await.unwrap().await.unwrap();
        assert_eq!((ack.stream.as_str(), ack.sequence), ("WSORDERS", i));
    }
    let mut stream = jetstream.get_stream("WSORDERS").await.unwrap();
    assert_eq!(stream.info().await.unwrap().state.messages, 3);
}

#[tokio::test]
async fn messages_cross_between_tcp_and_websocket_clients() {
    let server = SemaqServer::with_config(PLAIN, &[]);
    let tcp = server.client().await;
    let ws = ws_client(&server).await;
    let mut at_ws = ws.subscribe("to.ws").await.unwrap();
    let mut at_tcp = tcp.subscribe("to.tcp").await.unwrap();
    sync(&ws).await;
    sync(&tcp).await;
    tcp.publish("to.ws", "from tcp".into()).await.unwrap();
    assert_eq!(next(&mut at_ws).await.payload, "from tcp");
    ws.publish("to.tcp", "from ws".into()).await.unwrap();
    assert_eq!(next(&mut at_tcp).await.payload, "from ws");
    // Both count as connections of the one server; /varz describes the listener as nats-server does.
    let varz = server.http_json("/varz");
    assert_eq!(varz["connections"], 2);
    assert_eq!(varz["websocket"]["port"], ws_addr(&server).port());
    assert_eq!(varz["websocket"]["no_tls"], true);
}

// --- TLS -----------------------------------------------------------------------------------

fn write_pem(dir: &Path, name: &str, pem: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, pem).unwrap();
    path.to_str().unwrap().to_string()
}

/// A self-signed CA and a server certificate for 127.0.0.1 it signed: (ca, cert, key) files.
fn certificates(dir: &Path) -> (String, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair, KeyUsagePurpose};
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let params = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()]).unwrap();
    let cert = params.signed_by(&key, &ca).unwrap();
    (
        write_pem(dir, "ca.pem", &ca.pem()),
        write_pem(dir, "ws-cert.pem", &cert.pem()),
        write_pem(dir, "ws-key.pem", &key.serialize_pem()),
    )
}

#[tokio::test]
async fn wss_clients_connect_with_tls_and_exchange_messages() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = certificates(dir.path());
    let config =
        format!("websocket {{ host: \"127.0.0.1\", port: -1, tls {{ cert_file: {cert:?}, key_file: {key:?} }} }}");
    let server = SemaqServer::with_config(&config, &[]);
    let url = ws_url(&server);
    assert!(url.starts_with("wss://"), "{url}");
    let connect = || async_nats::ConnectOptions::new().add_root_certificates(ca.clone().into()).connect(url.clone());
    let client = connect().await.expect("connect over wss://");
    let mut subscriber = client.subscribe("sealed").await.unwrap();
    let other = connect().await.expect("second wss client");
    sync(&client).await;
    other.publish("sealed", "over tls".into()).await.unwrap();
    assert_eq!(next(&mut subscriber).await.payload, "over tls");
    assert_eq!(server.http_json("/connz")["connections"][0]["tls"], true);
    // A plain-text upgrade on the TLS port is not a WebSocket.
    let mut plain = TcpStream::connect(ws_addr(&server)).unwrap();
    plain.set_read_timeout(Some(RECEIVE_TIMEOUT)).unwrap();
    plain.write_all(upgrade_request("/", &[]).as_bytes()).unwrap();
    let mut answer = Vec::new();
    let _ = plain.read_to_end(&mut answer);
    assert!(!String::from_utf8_lossy(&answer).contains("101 Switching"));
}

// --- Raw frames ----------------------------------------------------------------------------

const KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";

pub(super) fn upgrade_request(path: &str, extra: &[&str]) -> String {
    let mut request = format!(
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: {KEY}\r\nSec-WebSocket-Version: 13\r\n"
    );
    for line in extra {
        request.push_str(line);
        request.push_str("\r\n");
    }
    request.push_str("\r\n");
    request
}

/// One frame as a client writes it: FIN and opcode, the length, the mask key, masked payload.
pub(super) fn frame(opcode: u8, fin: bool, masked: bool, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![(u8::from(fin) << 7) | opcode];
    let mask_bit = u8::from(masked) << 7;
    match payload.len() {
        n if n < 126 => out.push(mask_bit | n as u8),
        n if n <= 0xffff => {
            out.push(mask_bit | 126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(mask_bit | 127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    let key = [0x37, 0xfa, 0x21, 0x3d];
    if masked {
        out.extend_from_slice(&key);
        out.extend(payload.iter().enumerate().map(|(i, byte)| byte ^ key[i % 4]));
    } else {
        out.extend_from_slice(payload);
    }
    out
}

const TEXT: u8 = 1;
pub(super) const BINARY: u8 = 2;
const CONTINUATION: u8 = 0;
const CLOSE: u8 = 8;
const PING: u8 = 9;
const PONG: u8 = 10;

/// A raw WebSocket connection after a successful upgrade.
pub(super) struct RawWs {
    pub(super) stream: TcpStream,
}

impl RawWs {
    fn connect(server: &SemaqServer) -> Self {
        let (status, stream) = upgrade(ws_addr(server), &upgrade_request("/", &[]));
        assert!(status.starts_with("HTTP/1.1 101"), "{status}");
        let mut ws = Self { stream };
        let (opcode, info) = ws.read_frame();
        assert_eq!(opcode, BINARY);
        assert!(info.starts_with(b"INFO {"), "{}", String::from_utf8_lossy(&info));
        ws
    }

    pub(super) fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).unwrap();
    }

    fn read_exact(&mut self, n: usize) -> Vec<u8> {
        let mut buffer = vec![0; n];
        self.stream.read_exact(&mut buffer).expect("frame bytes");
        buffer
    }

    /// The next frame from the server: opcode and payload (servers never mask).
    pub(super) fn read_frame(&mut self) -> (u8, Vec<u8>) {
        let (head, payload) = self.read_frame_head();
        assert_eq!(head & 0x40, 0, "compressed without negotiation");
        (head & 0x0f, payload)
    }

    /// The next frame, inflated when RSV1 marks it compressed: opcode, payload, whether it was.
    fn read_inflated(&mut self) -> (u8, Vec<u8>, bool) {
        let (head, payload) = self.read_frame_head();
        assert_ne!(head & 0x80, 0, "the server sends whole messages");
        let compressed = head & 0x40 != 0;
        (head & 0x0f, if compressed { inflate(&payload) } else { payload }, compressed)
    }

    /// The next frame's first byte and its payload.
    fn read_frame_head(&mut self) -> (u8, Vec<u8>) {
        let head = self.read_exact(2);
        assert_eq!(head[1] & 0x80, 0, "server frames are unmasked");
        let length = match head[1] & 0x7f {
            126 => u16::from_be_bytes(self.read_exact(2).try_into().unwrap()) as usize,
            127 => u64::from_be_bytes(self.read_exact(8).try_into().unwrap()) as usize,
            n => n as usize,
        };
        (head[0], self.read_exact(length))
    }

    /// Reads frames until a data frame holds `text`, skipping server PINGs.
    pub(super) fn read_text_until(&mut self, text: &str) -> String {
        let mut seen = String::new();
        while !seen.contains(text) {
            let (opcode, payload) = self.read_frame();
            assert!(opcode == BINARY || opcode == CONTINUATION, "opcode {opcode}: {seen}");
            seen.push_str(&String::from_utf8_lossy(&payload));
        }
        seen
    }

    /// The close frame the server sends after a protocol error (after any data frames still
    /// due): its status code, then EOF.
    fn expect_close(&mut self, status: u16) {
        let (mut opcode, mut payload) = self.read_frame_head();
        while opcode & 0x0f == BINARY {
            (opcode, payload) = self.read_frame_head();
        }
        let opcode = opcode & 0x0f;
        assert_eq!(opcode, CLOSE, "payload {}", String::from_utf8_lossy(&payload));
        assert_eq!(u16::from_be_bytes([payload[0], payload[1]]), status, "{}", String::from_utf8_lossy(&payload));
        let mut rest = Vec::new();
        let _ = self.stream.read_to_end(&mut rest);
    }
}

/// Sends `request` and reads the response head: (status line and headers, the stream).
pub(super) fn upgrade(addr: SocketAddr, request: &str) -> (String, TcpStream) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(RECEIVE_TIMEOUT)).unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => break,
        }
    }
    (String::from_utf8_lossy(&head).into_owned(), stream)
}

fn status_of(server: &SemaqServer, request: &str) -> String {
    let (head, _) = upgrade(ws_addr(server), request);
    head.lines().next().unwrap_or_default().to_string()
}

#[test]
fn info_over_websocket_names_the_websocket_listener() {
    let server = SemaqServer::with_config(PLAIN, &[]);
    let (status, stream) = upgrade(ws_addr(&server), &upgrade_request("/", &[]));
    assert!(status.contains("Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"), "{status}");
    let mut ws = RawWs { stream };
    let (_, info) = ws.read_frame();
    let info: serde_json::Value = serde_json::from_slice(&info[5..]).unwrap();
    assert_eq!(info["port"], ws_addr(&server).port());
    assert!(info.get("tls_required").is_none(), "{info}");
    assert_eq!(info["headers"], true);
}

#[test]
fn raw_frames_carry_the_protocol_in_any_split_and_pings_are_answered() {
    let server = SemaqServer::with_config(PLAIN, &[]);
    let mut ws = RawWs::connect(&server);
    ws.send(&frame(PING, true, true, b"are you there"));
    assert_eq!(ws.read_frame(), (PONG, b"are you there".to_vec()));
    // One NATS op split over a fragmented message, with a ping between the fragments.
    ws.send(&frame(BINARY, false, true, b"CONNECT {\"verbose\":false}\r\nSUB raw 1\r\nPUB raw 5\r\nhe"));
    ws.send(&frame(PING, true, true, b""));
    ws.send(&frame(CONTINUATION, true, true, b"llo\r\nPING\r\n"));
    assert_eq!(ws.read_frame().0, PONG);
    assert!(ws.read_text_until("PONG\r\n").contains("MSG raw 1 5\r\nhello\r\n"));
    // Text frames are read like binary ones, as nats-server does.
    ws.send(&frame(TEXT, true, true, b"PUB raw 2\r\nhi\r\nPING\r\n"));
    assert!(ws.read_text_until("PONG\r\n").contains("MSG raw 1 2\r\nhi\r\n"));
    // A close is answered with a close.
    ws.send(&frame(CLOSE, true, true, &1000u16.to_be_bytes()));
    ws.expect_close(1000);
}

/// The bad-frame cases: each closes only its own connection with the right status.
#[test]
fn bad_frames_close_the_connection_with_a_protocol_error_and_the_server_stays_up() {
    let server =
        SemaqServer::with_config("max_payload: 1024\nwebsocket { host: \"127.0.0.1\", port: -1, no_tls: true }", &[]);
    let cases: [(&str, Vec<u8>, u16); 4] = [
        ("an unmasked client frame", frame(BINARY, true, false, b"PING\r\n"), 1002),
        ("a continuation without a start", frame(CONTINUATION, true, true, b"PING\r\n"), 1002),
        (
            "a new data frame mid-message",
            [frame(BINARY, false, true, b"PI"), frame(BINARY, true, true, b"NG\r\n")].concat(),
            1002,
        ),
        // max_payload 1024: one message may carry 8 of them, 8192 bytes.
        ("an oversized frame", frame(BINARY, true, true, &vec![b' '; 8193]), 1009),
    ];
    for (what, bytes, status) in cases {
        let mut ws = RawWs::connect(&server);
        ws.send(&bytes);
        println!("{what}");
        ws.expect_close(status);
    }
    // A message at the bound is fine: 8 PUBs of 1,000 bytes (1,016 each) and one of 50 (64).
    let mut ws = RawWs::connect(&server);
    let publish =
        |size: usize| [format!("PUB pad {size}\r\n").into_bytes(), vec![b'.'; size], b"\r\n".to_vec()].concat();
    let batch = [publish(1000).repeat(8), publish(50)].concat();
    assert_eq!(batch.len(), 8192);
    ws.send(&frame(BINARY, true, true, &batch));
    ws.send(&frame(BINARY, true, true, b"PING\r\n"));
    ws.read_text_until("PONG\r\n");
    // The server is up for everyone.
    assert!(server.raw_info().starts_with("INFO "));
}

#[test]
fn bad_upgrade_requests_get_http_errors() {
    let server = SemaqServer::with_config(PLAIN, &[]);
    let without = |header: &str| upgrade_request("/", &[]).replace(&format!("{header}\r\n"), "");
    let cases = [
        ("POST / HTTP/1.1\r\nHost: x\r\n\r\n".to_string(), "405"),
        (without("Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=="), "400"),
        (upgrade_request("/", &[]).replace(KEY, "c2hvcnQ="), "400"),
        (without("Upgrade: websocket"), "400"),
        (without("Connection: Upgrade"), "400"),
        (upgrade_request("/", &[]).replace("Version: 13", "Version: 8"), "400"),
        ("GARBAGE\r\n\r\n".to_string(), "400"),
        (format!("GET / HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n", "a".repeat(20_000)), "431"),
    ];
    for (request, status) in cases {
        let line = status_of(&server, &request);
        assert!(line.starts_with(&format!("HTTP/1.1 {status} ")), "{line:?} for {:.60}", request);
    }
    // The server is up and upgrades a good request afterwards.
    RawWs::connect(&server);
}

#[test]
fn origins_outside_the_allowed_list_or_the_same_origin_are_forbidden() {
    let config = r#"websocket { host: "127.0.0.1", port: -1, no_tls: true, allowed_origins: ["https://app.example.com", "http://localhost:3000"] }"#;
    let server = SemaqServer::with_config(config, &[]);
    let status = |origin: &str| status_of(&server, &upgrade_request("/", &[&format!("Origin: {origin}")]));
    assert!(status("https://app.example.com").starts_with("HTTP/1.1 101"));
    assert!(status("http://localhost:3000").starts_with("HTTP/1.1 101"));
    assert!(status("https://evil.example.com").starts_with("HTTP/1.1 403"));
    assert!(status("http://app.example.com").starts_with("HTTP/1.1 403"), "scheme counts");
    assert!(status("http://localhost:3001").starts_with("HTTP/1.1 403"), "port counts");
    // Without an Origin (not a browser), anyone may connect.
    assert!(status_of(&server, &upgrade_request("/", &[])).starts_with("HTTP/1.1 101"));

    let same =
        SemaqServer::with_config(r#"websocket { host: "127.0.0.1", port: -1, no_tls: true, same_origin: true }"#, &[]);
    let host = format!("Host: {}", ws_addr(&same));
    let request =
        |origin: &str| upgrade_request("/", &[&format!("Origin: {origin}")]).replace("Host: 127.0.0.1", &host);
    assert!(status_of(&same, &request(&format!("http://{}", ws_addr(&same)))).starts_with("HTTP/1.1 101"));
    assert!(status_of(&same, &request("http://127.0.0.1:1")).starts_with("HTTP/1.1 403"));
}

#[test]
fn a_slow_handshake_is_dropped_after_the_handshake_timeout() {
    let server = SemaqServer::with_config(
        r#"websocket { host: "127.0.0.1", port: -1, no_tls: true, handshake_timeout: "300ms" }"#,
        &[],
    );
    let mut slow = TcpStream::connect(ws_addr(&server)).unwrap();
    slow.set_read_timeout(Some(RECEIVE_TIMEOUT)).unwrap();
    slow.write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n").unwrap();
    let started = Instant::now();
    let mut rest = Vec::new();
    let read = slow.read_to_end(&mut rest);
    assert!(read.is_ok() && rest.is_empty(), "closed without an answer: {read:?} {rest:?}");
    assert!(started.elapsed() < Duration::from_secs(3), "took {:?}", started.elapsed());
    RawWs::connect(&server);
}

#[test]
fn a_websocket_port_without_tls_or_no_tls_is_refused_as_nats_server_does() {
    let output = SemaqServer::builder().config("websocket { port: -1 }").output();
    assert!(!output.status.success());
    let text = String::from_utf8_lossy(&output.stderr);
    assert!(text.contains("websocket requires TLS configuration"), "{text}");
    let output =
        SemaqServer::builder().config(r#"websocket { port: -1, no_tls: true, allowed_origins: ["ftp://x"] }"#).output();
    assert!(String::from_utf8_lossy(&output.stderr).contains("allowed origins must be absolute URLs"));
}

#[test]
fn websocket_clients_count_against_max_connections() {
    let server =
        SemaqServer::with_config("max_connections: 1\nwebsocket { host: \"127.0.0.1\", port: -1, no_tls: true }", &[]);
    let _first = RawWs::connect(&server);
    let (status, stream) = upgrade(ws_addr(&server), &upgrade_request("/", &[]));
    assert!(status.starts_with("HTTP/1.1 101"), "{status}");
    let mut refused = RawWs { stream };
    assert!(refused.read_text_until("\r\n").contains("-ERR 'maximum connections exceeded'"));
}

// --- permessage-deflate ----------------------------------------------------------------------

const OFFER: &str = "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits";
const COMPRESSED: &str = r#"websocket { host: "127.0.0.1", port: -1, no_tls: true, compression: true }"#;

/// Raw deflate with a sync flush, its 00 00 ff ff tail dropped (RFC 7692 §7.2.1).
fn deflate(data: &[u8]) -> Vec<u8> {
    let mut compress = flate2::Compress::new(flate2::Compression::default(), false);
    let mut out = Vec::with_capacity(data.len() + 1024);
    compress.compress_vec(data, &mut out, flate2::FlushCompress::Sync).unwrap();
    assert_eq!(compress.total_in() as usize, data.len());
    assert!(out.ends_with(&[0, 0, 0xff, 0xff]));
    out.truncate(out.len() - 4);
    out
}

/// The inverse: the tail added back, inflated without a bound (the server's frames are small).
fn inflate(data: &[u8]) -> Vec<u8> {
    let mut decompress = flate2::Decompress::new(false);
    let input = [data, &[0, 0, 0xff, 0xff]].concat();
    let mut out = Vec::with_capacity(64 * 1024);
    loop {
        let before = decompress.total_out();
        let consumed = decompress.total_in() as usize;
        decompress.decompress_vec(&input[consumed..], &mut out, flate2::FlushDecompress::Sync).unwrap();
        if decompress.total_out() == before && decompress.total_in() as usize == input.len() {
            return out;
        }
        out.reserve(64 * 1024);
    }
}

/// `frame`, with RSV1 set: the first frame of a compressed message.
fn compressed_frame(opcode: u8, fin: bool, payload: &[u8]) -> Vec<u8> {
    let mut bytes = frame(opcode, fin, true, payload);
    bytes[0] |= 0x40;
    bytes
}

impl RawWs {
    /// Upgrades offering permessage-deflate; returns the response head and the INFO.
    fn connect_offering_deflate(server: &SemaqServer) -> (Self, String, Vec<u8>, bool) {
        let (head, stream) = upgrade(ws_addr(server), &upgrade_request("/", &[OFFER]));
        assert!(head.starts_with("HTTP/1.1 101"), "{head}");
        let mut ws = Self { stream };
        let (opcode, info, compressed) = ws.read_inflated();
        assert_eq!(opcode, BINARY);
        assert!(info.starts_with(b"INFO {"), "{}", String::from_utf8_lossy(&info));
        (ws, head, info, compressed)
    }

    /// Reads (and inflates) data frames until they hold `text`; counts the compressed ones.
    fn read_inflated_until(&mut self, text: &str) -> (String, usize) {
        let (mut seen, mut compressed) = (String::new(), 0);
        while !seen.contains(text) {
            let (opcode, payload, was) = self.read_inflated();
            assert_eq!(opcode, BINARY, "{seen}");
            seen.push_str(&String::from_utf8_lossy(&payload));
            compressed += usize::from(was);
        }
        (seen, compressed)
    }
}

#[test]
fn compression_is_negotiated_when_configured_and_offered_and_works_both_ways() {
    let server = SemaqServer::with_config(COMPRESSED, &[]);
    let (mut ws, head, _, info_compressed) = RawWs::connect_offering_deflate(&server);
    let answer =
        "Sec-WebSocket-Extensions: permessage-deflate; server_no_context_takeover; client_no_context_takeover\r\n";
    assert!(head.contains(answer), "{head}");
    assert!(info_compressed, "the INFO (over 64 bytes) is compressed");
    // A compressed message split over two frames, then an uncompressed one on the same socket.
    let body = "compressible ".repeat(500);
    let ops = format!("CONNECT {{\"verbose\":false}}\r\nSUB zip 1\r\nPUB zip {}\r\n{body}\r\n", body.len());
    let deflated = deflate(ops.as_bytes());
    let (first, rest) = deflated.split_at(deflated.len() / 2);
    ws.send(&[compressed_frame(BINARY, false, first), frame(CONTINUATION, true, true, rest)].concat());
    ws.send(&frame(BINARY, true, true, b"PUB zip 2\r\nhi\r\nPING\r\n"));
    let (seen, compressed) = ws.read_inflated_until("PONG\r\n");
    assert!(seen.contains(&format!("MSG zip 1 {}\r\n{body}\r\n", body.len())), "{seen:.200}");
    assert!(seen.contains("MSG zip 1 2\r\nhi\r\n"), "{seen:.200}");
    assert!(compressed >= 1, "the big delivery went out compressed");
    // Small frames stay uncompressed, as nats-server's (64 bytes or less).
    ws.send(&compressed_frame(BINARY, true, &deflate(b"PING\r\n")));
    assert_eq!(ws.read_inflated(), (BINARY, b"PONG\r\n".to_vec(), false));
    // A client that does not offer the extension gets uncompressed frames.
    RawWs::connect(&server);
}

#[test]
fn compression_is_declined_when_not_configured_and_compressed_frames_then_close_the_connection() {
    let server = SemaqServer::with_config(PLAIN, &[]);
    let (head, stream) = upgrade(ws_addr(&server), &upgrade_request("/", &[OFFER]));
    assert!(head.starts_with("HTTP/1.1 101") && !head.contains("Sec-WebSocket-Extensions"), "{head}");
    let mut ws = RawWs { stream };
    assert!(ws.read_frame().1.starts_with(b"INFO {"));
    ws.send(&compressed_frame(BINARY, true, &deflate(b"PING\r\n")));
    ws.expect_close(1002);
    assert!(server.raw_info().starts_with("INFO "));
}

#[test]
fn bad_compressed_input_closes_only_its_connection() {
    let server = SemaqServer::with_config(
        "max_payload: 1024\nwebsocket { host: \"127.0.0.1\", port: -1, no_tls: true, compression: true }",
        &[],
    );
    // 256 KiB of PINGs deflate to well under the 8 KiB a message may hold, and inflate far past it.
    let bomb = deflate(&b"PING\r\n".repeat(256 * 1024 / 6));
    assert!(bomb.len() < 4096, "{}", bomb.len());
    let cases: [(&str, Vec<u8>, u16); 4] = [
        ("an inflate bomb", compressed_frame(BINARY, true, &bomb), 1009),
        ("data that is not deflate", compressed_frame(BINARY, true, b"\xff\xff\xff\xff"), 1007),
        (
            "RSV1 on a continuation",
            [compressed_frame(BINARY, false, &deflate(b"PI")), compressed_frame(CONTINUATION, true, b"")].concat(),
            1002,
        ),
        ("a compressed control frame", compressed_frame(PING, true, b""), 1002),
    ];
    for (what, bytes, status) in cases {
        let (mut ws, ..) = RawWs::connect_offering_deflate(&server);
        ws.send(&bytes);
        println!("{what}");
        ws.expect_close(status);
    }
    // At the bound is fine: 8 KiB of PUBs in one compressed message, then a PING.
    let publish = [b"PUB pad 1000\r\n".to_vec(), vec![b'.'; 1000], b"\r\n".to_vec()].concat();
    let batch = [publish.repeat(8), b"PUB pad 50\r\n".to_vec(), vec![b'.'; 50], b"\r\n".to_vec()].concat();
    assert_eq!(batch.len(), 8192);
    let (mut ws, ..) = RawWs::connect_offering_deflate(&server);
    ws.send(&compressed_frame(BINARY, true, &deflate(&batch)));
    ws.send(&frame(BINARY, true, true, b"PING\r\n"));
    ws.read_inflated_until("PONG\r\n");
    assert!(server.raw_info().starts_with("INFO "));
}

// --- headers and ping_interval -------------------------------------------------------------

#[test]
fn configured_headers_are_added_to_the_upgrade_response() {
    let config = r#"websocket { host: "127.0.0.1", port: -1, no_tls: true, headers { X-Frame-Options: DENY, "Cache-Control": "no-store" } }"#;
    let server = SemaqServer::with_config(config, &[]);
    let (head, _) = upgrade(ws_addr(&server), &upgrade_request("/", &[]));
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    assert!(head.contains("\r\nX-Frame-Options: DENY\r\nCache-Control: no-store\r\n\r\n"), "{head}");
}

#[test]
fn websocket_ping_interval_replaces_the_servers_for_websocket_clients() {
    let config = r#"ping_interval: "2m"
        websocket { host: "127.0.0.1", port: -1, no_tls: true, ping_interval: "200ms" }"#;
    let server = SemaqServer::with_config(config, &[]);
    let mut ws = RawWs::connect(&server);
    ws.send(&frame(BINARY, true, true, b"CONNECT {}\r\n"));
    // The stream's read timeout (RECEIVE_TIMEOUT) bounds the wait, far below the server's 2m.
    assert!(ws.read_text_until("PING\r\n").contains("PING\r\n"));
}
