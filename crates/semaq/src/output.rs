//! How received messages are printed: the `nats`-like text form and one JSON object per line.

use std::io::{self, Write};

use async_nats::{HeaderMap, Message};
use serde_json::{json, Map, Value};

use crate::parse::base64_encode;

/// Header lines `Name: value`, sorted by name so output is stable (the map itself is unordered).
pub fn header_lines(headers: &HeaderMap) -> Vec<String> {
    let mut lines: Vec<String> =
        headers.iter().flat_map(|(name, values)| values.iter().map(move |value| format!("{name}: {value}"))).collect();
    lines.sort();
    lines
}

/// Writes `[#n] Received on "subject"`, optional headers, then the payload and a blank line.
pub fn write_text(out: &mut impl Write, number: u64, message: &Message, show_headers: bool) -> io::Result<()> {
    match &message.reply {
        Some(reply) => writeln!(out, "[#{number}] Received on \"{}\" with reply \"{reply}\"", message.subject)?,
        None => writeln!(out, "[#{number}] Received on \"{}\"", message.subject)?,
    }
    if show_headers {
        if let Some(headers) = &message.headers {
            for line in header_lines(headers) {
                writeln!(out, "{line}")?;
            }
        }
        writeln!(out)?;
    }
    out.write_all(&message.payload)?;
    writeln!(out)?;
    writeln!(out)?;
    out.flush()
}

/// The `--json` form of a message: subject, reply, headers (name to list of values) and payload.
pub fn message_json(message: &Message) -> Value {
    let mut object = Map::new();
    object.insert("subject".into(), json!(message.subject.as_str()));
    object.insert("reply".into(), json!(message.reply.as_ref().map(|reply| reply.as_str())));
    object.insert("headers".into(), headers_json(message.headers.as_ref()));
    match std::str::from_utf8(&message.payload) {
        Ok(text) => {
            object.insert("payload".into(), json!(text));
            object.insert("encoding".into(), json!("utf-8"));
        }
        Err(_) => {
            object.insert("payload".into(), json!(base64_encode(&message.payload)));
            object.insert("encoding".into(), json!("base64"));
        }
    }
    Value::Object(object)
}

fn headers_json(headers: Option<&HeaderMap>) -> Value {
    let mut object = Map::new();
    for (name, values) in headers.into_iter().flat_map(|headers| headers.iter()) {
        let values: Vec<Value> = values.iter().map(|value| json!(value.as_str())).collect();
        object.insert(name.to_string(), Value::Array(values));
    }
    Value::Object(object)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn message(payload: &'static [u8], headers: Option<HeaderMap>) -> Message {
        Message {
            subject: "ai.events".into(),
            reply: None,
            payload: Bytes::from_static(payload),
            headers,
            status: None,
            description: None,
            length: payload.len(),
        }
    }

    #[test]
    fn json_keeps_utf8_payload_as_text() {
        let mut headers = HeaderMap::new();
        headers.insert("Semaq-Model", "llama3");
        let value = message_json(&message(b"hello", Some(headers)));
        assert_eq!(value["subject"], "ai.events");
        assert_eq!(value["reply"], Value::Null);
        assert_eq!(value["payload"], "hello");
        assert_eq!(value["encoding"], "utf-8");
        assert_eq!(value["headers"]["Semaq-Model"][0], "llama3");
    }

    #[test]
    fn json_encodes_binary_payload_as_base64() {
        let value = message_json(&message(&[0xff, 0x00], None));
        assert_eq!(value["payload"], "/wA=");
        assert_eq!(value["encoding"], "base64");
    }

    #[test]
    fn text_form_matches_nats_cli() {
        let mut out = Vec::new();
        write_text(&mut out, 1, &message(b"hi", None), false).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "[#1] Received on \"ai.events\"\nhi\n\n");
    }
}
