//! A minimal HTTP/1.0 client for monitoring endpoints.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// Bound on connecting to, writing to and reading from the monitoring port.
const HTTP_TIMEOUT: Duration = Duration::from_secs(10);

/// GETs `path` from the HTTP server at `addr` and parses the body as JSON (whatever the status).
pub fn http_get_json(addr: SocketAddr, path: &str) -> serde_json::Value {
    let (_, body) = http_get(addr, path, &[]);
    serde_json::from_str(&body).unwrap_or_else(|error| panic!("GET {path}: the body is not JSON ({error}): {body}"))
}

/// GETs `path` with extra request `headers` from the HTTP server at `addr`: the status code
/// and the body as text.
pub fn http_get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let mut stream = TcpStream::connect_timeout(&addr, HTTP_TIMEOUT)
        .unwrap_or_else(|error| panic!("GET {path}: cannot connect to {addr}: {error}"));
    stream.set_read_timeout(Some(HTTP_TIMEOUT)).expect("read timeout");
    stream.set_write_timeout(Some(HTTP_TIMEOUT)).expect("write timeout");
    let extra: String = headers.iter().map(|(name, value)| format!("{name}: {value}\r\n")).collect();
    write!(stream, "GET {path} HTTP/1.0\r\nHost: localhost\r\n{extra}\r\n")
        .unwrap_or_else(|e| panic!("GET {path}: {e}"));
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap_or_else(|error| panic!("GET {path}: reading the answer: {error}"));
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or_else(|| panic!("GET {path}: no body in {response:?}"));
    let status = head.split_whitespace().nth(1).and_then(|code| code.parse().ok());
    let status = status.unwrap_or_else(|| panic!("GET {path}: no status in {head:?}"));
    (status, body.to_string())
}

/// GETs `path` from the HTTP server at `addr`: the status code and the body parsed as JSON.
pub fn http_get_json_status(addr: SocketAddr, path: &str) -> (u16, serde_json::Value) {
    let (status, body) = http_get(addr, path, &[]);
    let json = serde_json::from_str(&body)
        .unwrap_or_else(|error| panic!("GET {path}: the body is not JSON ({error}): {body}"));
    (status, json)
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead, BufReader};
    use std::net::TcpListener;

    use super::*;

    #[test]
    fn the_json_body_of_a_get_is_parsed() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            let mut reader = BufReader::new(stream);
            let mut request = String::new();
            reader.read_line(&mut request).unwrap();
            // Read the rest of the head: closing with unread bytes would reset the connection.
            let mut line = String::new();
            while reader.read_line(&mut line).unwrap() > 0 && line != "\r\n" {
                line.clear();
            }
            let mut stream = reader.into_inner();
            stream.write_all(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{\"ok\":true}").unwrap();
            request
        });
        assert_eq!(http_get_json_status(addr, "/varz"), (200, serde_json::json!({"ok": true})));
        assert_eq!(server.join().unwrap(), "GET /varz HTTP/1.0\r\n");
    }
}
