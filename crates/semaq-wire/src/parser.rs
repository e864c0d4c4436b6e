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
        let line_len = if newline > 0 && buffer[newline - 1] == b'\r' { newline - 1 } else { newline };
        if line_len > self.limits.control_line_bytes_max {
            return Err(ParseError::ControlLineTooLong);
        }
        let op_end = buffer[..line_len].iter().position(|b| is_space(*b)).unwrap_or(line_len);
        let name = &buffer[..op_end];
        let with_headers = name.eq_ignore_ascii_case(b"HPUB");
        if with_headers || name.eq_ignore_ascii_case(b"PUB") {
            let args = PublishArgs::parse(&buffer[..line_len], op_end, with_headers)?;
            return self.start_publish(args, newline + 1, buffer);
        }
        let line = buffer.split_to(newline + 1).freeze();
        self.parse_control_line(line.slice(..line_len))
    }

    fn parse_control_line(&mut self, line: Bytes) -> Result<Option<ClientOp>, ParseError> {
        let op_end = line.iter().position(|b| is_space(*b)).unwrap_or(line.len());
        let name = &line[..op_end];
        let rest = line.slice(op_end..);
        if name.eq_ignore_ascii_case(b"SUB") {
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

    /// With the whole message in the buffer, takes it off in one split and slices subject,
    /// reply and payload out of it (the hot path: no copy, few reference-count updates).
    /// Otherwise copies the few argument bytes and waits for the payload.
    fn start_publish(
        &mut self,
        args: PublishArgs,
        frame_start: usize,
        buffer: &mut BytesMut,
    ) -> Result<Option<ClientOp>, ParseError> {
        if args.total_len > self.limits.payload_bytes_max {
            return Err(ParseError::PayloadTooLarge);
        }
        let frame_end = frame_start + args.total_len + 2;
        if buffer.len() < frame_end {
            let pending = PendingPublish {
                subject: Bytes::copy_from_slice(&buffer[args.subject.clone()]),
                reply: args.reply.clone().map(|range| Bytes::copy_from_slice(&buffer[range])),
                header_len: args.header_len,
                total_len: args.total_len,
            };
            buffer.advance(frame_start);
            return self.finish_publish(pending, buffer);
        }
        if &buffer[frame_end - 2..frame_end] != b"\r\n" {
            return Err(ParseError::UnknownOperation);
        }
        let frame = buffer.split_to(frame_end).freeze();
        let mut body = frame.slice(frame_start..frame_end - 2);
        let headers = args.header_len.map(|header_len| body.split_to(header_len));
        let text = |range: std::ops::Range<usize>| {
            ByteString::try_from(frame.slice(range)).map_err(|_| ParseError::InvalidPublishSubject)
        };
        let subject = text(args.subject)?;
        let reply = args.reply.map(text).transpose()?;
        Ok(Some(ClientOp::Publish(Publish { subject, reply, headers, payload: body })))
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

/// The arguments of a `PUB`/`HPUB` line, as positions in the line (nothing is copied yet).
#[derive(Debug)]
struct PublishArgs {
    subject: std::ops::Range<usize>,
    reply: Option<std::ops::Range<usize>>,
    header_len: Option<usize>,
    total_len: usize,
}

impl PublishArgs {
    /// Reads `subject [reply] [header_size] size` from `line[from..]`.
    fn parse(line: &[u8], from: usize, with_headers: bool) -> Result<Self, ParseError> {
        const ARGS_MAX: usize = 4;
        let mut ranges = [0..0, 0..0, 0..0, 0..0];
        let mut count = 0;
        let mut index = from;
        while index < line.len() {
            if is_space(line[index]) {
                index += 1;
                continue;
            }
            let start = index;
            while index < line.len() && !is_space(line[index]) {
                index += 1;
            }
            if count == ARGS_MAX {
                return Err(ParseError::UnknownOperation);
            }
            ranges[count] = start..index;
            count += 1;
        }
        let size = |i: usize| parse_size(&line[ranges[i].clone()]);
        let (subject, reply, header_len, total_len) = match (with_headers, count) {
            (false, 2) => (ranges[0].clone(), None, None, size(1)?),
            (false, 3) => (ranges[0].clone(), Some(ranges[1].clone()), None, size(2)?),
            (true, 3) => (ranges[0].clone(), None, Some(size(1)?), size(2)?),
            (true, 4) => (ranges[0].clone(), Some(ranges[1].clone()), Some(size(2)?), size(3)?),
            _ => return Err(ParseError::UnknownOperation),
        };
        if header_len.is_some_and(|header_len| header_len > total_len) {
            return Err(ParseError::UnknownOperation);
        }
        Ok(Self { subject, reply, header_len, total_len })
    }
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
