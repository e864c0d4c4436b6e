//! A resumable parser for the client side of the NATS protocol.
//!
//! Bytes are appended to a `BytesMut` by the connection; [`Parser::next_op`] takes whole
//! operations off its front and returns `Ok(None)` while one is still incomplete, so a read
//! may split the stream at any byte. Subjects and payloads are zero-copy slices of the
//! buffer. Only one piece of state survives between calls: the control line of a
//! `PUB`/`HPUB` whose payload has not fully arrived, so it is never parsed twice.

use bytes::{Buf, Bytes, BytesMut};
use bytestring::ByteString;

use crate::op::{ClientOp, Publish};

/// The bounds the parser enforces.
#[derive(Debug, Clone, Copy)]
pub struct ParserLimits {
    /// Longest control line (the op and its arguments), without the line ending.
    pub control_line_bytes_max: usize,
    /// Largest message, headers and payload together.
    pub payload_bytes_max: usize,
}

impl Default for ParserLimits {
    fn default() -> Self {
        Self { control_line_bytes_max: 4096, payload_bytes_max: 1024 * 1024 }
    }
}

/// Why bytes could not be parsed. Fatal errors close the connection, as nats-server does.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Not an op, wrong arguments, or a payload not followed by CRLF.
    #[error("Unknown Protocol Operation")]
    UnknownOperation,
    /// The control line is longer than the limit.
    #[error("Maximum Control Line Exceeded")]
    ControlLineTooLong,
    /// The message is larger than the limit.
    #[error("Maximum Payload Violation")]
    PayloadTooLarge,
    /// A publish subject that is not valid UTF-8; the message was consumed.
    #[error("Invalid Publish Subject")]
    InvalidPublishSubject,
    /// A subscription subject, queue or sid that is not valid UTF-8.
    #[error("Invalid Subject")]
    InvalidSubject,
}

impl ParseError {
    /// Whether the connection must be closed after reporting this error.
    pub fn is_fatal(&self) -> bool {
        !matches!(self, ParseError::InvalidPublishSubject | ParseError::InvalidSubject)
    }
}

/// A `PUB`/`HPUB` control line whose payload is still arriving.
#[derive(Debug)]
struct PendingPublish {
    subject: Bytes,
    reply: Option<Bytes>,
    header_len: Option<usize>,
    total_len: usize,
}

/// The parser for one connection.
#[derive(Debug, Default)]
pub struct Parser {
    limits: ParserLimits,
    pending: Option<PendingPublish>,
}

impl Parser {
    /// A parser enforcing `limits`.
    pub fn new(limits: ParserLimits) -> Self {
        Self { limits, pending: None }
    }

    /// Bytes the buffer must hold before the next op can complete (a hint for read sizing).
    pub fn bytes_wanted(&self) -> usize {
        self.pending.as_ref().map_or(0, |pending| pending.total_len + 2)
    }

    /// Takes the next whole op off the front of `buffer`, or `Ok(None)` if more bytes are needed.
    pub fn next_op(&mut self, buffer: &mut BytesMut) -> Result<Option<ClientOp>, ParseError> {
        if let Some(pending) = self.pending.take() {
            return self.finish_publish(pending, buffer);
        }
        let scan_len = buffer.len().min(self.limits.control_line_bytes_max + 2);
        let Some(newline) = memchr::memchr(b'\n', &buffer[..scan_len]) else {
            if buffer.len() > self.limits.control_line_bytes_max + 1 {
                return Err(ParseError::ControlLineTooLong);
            }
            return Ok(None);
        };
        let line = buffer.split_to(newline + 1).freeze();
        let line = strip_line_ending(&line);
        if line.len() > self.limits.control_line_bytes_max {
            return Err(ParseError::ControlLineTooLong);
        }
        self.parse_control_line(line, buffer)
    }

    fn parse_control_line(&mut self, line: Bytes, buffer: &mut BytesMut) -> Result<Option<ClientOp>, ParseError> {
        let op_end = line.iter().position(|b| is_space(*b)).unwrap_or(line.len());
        let name = &line[..op_end];
        let rest = line.slice(op_end..);
        if name.eq_ignore_ascii_case(b"PUB") {
            self.start_publish(&rest, false, buffer)
        } else if name.eq_ignore_ascii_case(b"HPUB") {
            self.start_publish(&rest, true, buffer)
        } else if name.eq_ignore_ascii_case(b"SUB") {
            parse_subscribe(&rest).map(Some)
        } else if name.eq_ignore_ascii_case(b"UNSUB") {
            parse_unsubscribe(&rest).map(Some)
        } else if name.eq_ignore_ascii_case(b"PING") && is_blank(&rest) {
            Ok(Some(ClientOp::Ping))
        } else if name.eq_ignore_ascii_case(b"PONG") && is_blank(&rest) {
            Ok(Some(ClientOp::Pong))
        } else if name.eq_ignore_ascii_case(b"CONNECT") && !is_blank(&rest) {
            Ok(Some(ClientOp::Connect(trim(&rest))))
        } else {
            Err(ParseError::UnknownOperation)
        }
    }

    fn start_publish(
        &mut self,
        args: &Bytes,
        with_headers: bool,
        buffer: &mut BytesMut,
    ) -> Result<Option<ClientOp>, ParseError> {
        let args = split_args::<4>(args).ok_or(ParseError::UnknownOperation)?;
        let (subject, reply, header_len, total_len) = match (with_headers, args.as_slice()) {
            (false, [subject, size]) => (subject, None, None, parse_size(size)?),
            (false, [subject, reply, size]) => (subject, Some(reply), None, parse_size(size)?),
            (true, [subject, header_size, size]) => (subject, None, Some(parse_size(header_size)?), parse_size(size)?),
            (true, [subject, reply, header_size, size]) => {
                (subject, Some(reply), Some(parse_size(header_size)?), parse_size(size)?)
            }
            _ => return Err(ParseError::UnknownOperation),
        };
        if header_len.is_some_and(|header_len| header_len > total_len) {
            return Err(ParseError::UnknownOperation);
        }
        if total_len > self.limits.payload_bytes_max {
            return Err(ParseError::PayloadTooLarge);
        }
        let pending = PendingPublish { subject: subject.clone(), reply: reply.cloned(), header_len, total_len };
        self.finish_publish(pending, buffer)
    }

    fn finish_publish(
        &mut self,
        pending: PendingPublish,
        buffer: &mut BytesMut,
    ) -> Result<Option<ClientOp>, ParseError> {
        let needed = pending.total_len + 2;
        if buffer.len() < needed {
            buffer.reserve(needed - buffer.len());
            self.pending = Some(pending);
            return Ok(None);
        }
        if &buffer[pending.total_len..needed] != b"\r\n" {
            return Err(ParseError::UnknownOperation);
        }
        let mut body = buffer.split_to(pending.total_len).freeze();
        buffer.advance(2);
        let headers = pending.header_len.map(|header_len| body.split_to(header_len));
        let subject = ByteString::try_from(pending.subject).map_err(|_| ParseError::InvalidPublishSubject)?;
        let reply = match pending.reply {
            Some(reply) => Some(ByteString::try_from(reply).map_err(|_| ParseError::InvalidPublishSubject)?),
            None => None,
        };
        Ok(Some(ClientOp::Publish(Publish { subject, reply, headers, payload: body })))
    }
}

fn parse_subscribe(args: &Bytes) -> Result<ClientOp, ParseError> {
    let args = split_args::<3>(args).ok_or(ParseError::UnknownOperation)?;
    let (subject, queue, sid) = match args.as_slice() {
        [subject, sid] => (subject, None, sid),
        [subject, queue, sid] => (subject, Some(queue), sid),
        _ => return Err(ParseError::UnknownOperation),
    };
    let text = |bytes: &Bytes| ByteString::try_from(bytes.clone()).map_err(|_| ParseError::InvalidSubject);
    Ok(ClientOp::Subscribe { subject: text(subject)?, queue: queue.map(text).transpose()?, sid: text(sid)? })
}

fn parse_unsubscribe(args: &Bytes) -> Result<ClientOp, ParseError> {
    let args = split_args::<2>(args).ok_or(ParseError::UnknownOperation)?;
    let (sid, max_msgs) = match args.as_slice() {
        [sid] => (sid, None),
        [sid, max] => (sid, Some(parse_size(max)? as u64)),
        _ => return Err(ParseError::UnknownOperation),
    };
    let sid = ByteString::try_from(sid.clone()).map_err(|_| ParseError::InvalidSubject)?;
    Ok(ClientOp::Unsubscribe { sid, max_msgs })
}

fn is_space(byte: u8) -> bool {
    byte == b' ' || byte == b'\t'
}

fn is_blank(bytes: &[u8]) -> bool {
    bytes.iter().all(|b| is_space(*b))
}

fn trim(bytes: &Bytes) -> Bytes {
    let start = bytes.iter().position(|b| !is_space(*b)).unwrap_or(bytes.len());
    let end = bytes.iter().rposition(|b| !is_space(*b)).map_or(start, |end| end + 1);
    bytes.slice(start..end)
}

fn strip_line_ending(line: &Bytes) -> Bytes {
    let mut end = line.len() - 1;
    if end > 0 && line[end - 1] == b'\r' {
        end -= 1;
    }
    line.slice(..end)
}

/// Whitespace-separated arguments, at most `N` of them; `None` if there are more.
fn split_args<const N: usize>(args: &Bytes) -> Option<Vec<Bytes>> {
    let mut out = Vec::with_capacity(N);
    let mut index = 0;
    while index < args.len() {
        if is_space(args[index]) {
            index += 1;
            continue;
        }
        let start = index;
        while index < args.len() && !is_space(args[index]) {
            index += 1;
        }
        if out.len() == N {
            return None;
        }
        out.push(args.slice(start..index));
    }
    Some(out)
}

/// A decimal size; anything else (sign, letters, overflow past 1 GiB) is an error.
fn parse_size(digits: &[u8]) -> Result<usize, ParseError> {
    const SIZE_DIGITS_MAX: usize = 10;
    if digits.is_empty() || digits.len() > SIZE_DIGITS_MAX {
        return Err(ParseError::UnknownOperation);
    }
    let mut value: usize = 0;
    for digit in digits {
        if !digit.is_ascii_digit() {
            return Err(ParseError::UnknownOperation);
        }
        value = value * 10 + usize::from(digit - b'0');
    }
    Ok(value)
}

#[cfg(test)]
mod tests;
