//! RFC 6455 frames as the server sees them: client frame headers parsed and checked in
//! nats-server's order and words, payloads unmasked eight bytes at a time, and the server's own
//! (unmasked) frame headers.

/// Opcode of a continuation frame.
pub const CONTINUATION: u8 = 0;
/// Opcode of a text message.
pub const TEXT: u8 = 1;
/// Opcode of a binary message.
pub const BINARY: u8 = 2;
/// Opcode of a close frame.
pub const CLOSE: u8 = 8;
/// Opcode of a ping.
pub const PING: u8 = 9;
/// Opcode of a pong.
pub const PONG: u8 = 10;

const FIN_BIT: u8 = 0x80;
/// RFC 7692: set on the first frame of a compressed message.
const RSV1_BIT: u8 = 0x40;
const RSV2_RSV3_BITS: u8 = 0x30;
const MASK_BIT: u8 = 0x80;
/// RFC 6455 §5.5: control frames carry at most this much.
pub const CONTROL_PAYLOAD_BYTES_MAX: usize = 125;
/// The longest server frame header: two bytes and a 64-bit length (never a mask).
pub const SERVER_HEADER_BYTES_MAX: usize = 10;

/// Close status: normal closure.
pub const STATUS_NORMAL: u16 = 1000;
/// Close status: protocol error.
pub const STATUS_PROTOCOL_ERROR: u16 = 1002;
/// Close status: no status in the peer's close (never sent).
pub const STATUS_NONE: u16 = 1005;
/// Close status: invalid payload data (a close body that is not UTF-8).
pub const STATUS_INVALID_DATA: u16 = 1007;
/// Close status: a message too big to process.
pub const STATUS_TOO_BIG: u16 = 1009;

/// Why a client's frames close its connection; the status and text go in the close frame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// RFC 6455 broken (close status 1002).
    #[error("websocket protocol error: {0}")]
    Protocol(&'static str),
    /// A message, or what it inflates to, larger than the listener allows (close status 1009).
    #[error("websocket message too big: {0}")]
    TooBig(&'static str),
    /// The compressed data is not valid deflate (close status 1007).
    #[error("websocket invalid compressed data")]
    Inflate,
}

impl FrameError {
    /// The close status sent for this error.
    pub fn status(&self) -> u16 {
        match self {
            FrameError::Protocol(_) => STATUS_PROTOCOL_ERROR,
            FrameError::TooBig(_) => STATUS_TOO_BIG,
            FrameError::Inflate => STATUS_INVALID_DATA,
        }
    }

    /// The close frame's text.
    pub fn reason(&self) -> &'static str {
        match self {
            FrameError::Protocol(reason) | FrameError::TooBig(reason) => reason,
            FrameError::Inflate => "invalid compressed data",
        }
    }
}

/// One parsed client frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The opcode (low four bits of the first byte).
    pub opcode: u8,
    /// FIN: the last frame of its message.
    pub fin: bool,
    /// RSV1: the message is compressed (first frame only).
    pub compressed: bool,
    /// Payload length.
    pub len: u64,
    /// The masking key.
    pub mask: [u8; 4],
    /// Bytes the header took.
    pub header_len: usize,
}

impl Header {
    /// Whether this is a close, ping or pong.
    pub fn is_control(&self) -> bool {
        self.opcode >= CLOSE
    }
}

/// Parses the header at the start of `input`: `Ok(None)` until it is all there. Checks what a
/// header alone can show, in nats-server's order: RSV bits, the mask, control-frame rules, the
/// opcode, the 64-bit length. `compression` says whether permessage-deflate was negotiated.
pub fn parse_header(input: &[u8], compression: bool) -> Result<Option<Header>, FrameError> {
    let [b0, b1, ..] = *input else { return Ok(None) };
    let (opcode, fin, compressed) = (b0 & 0x0f, b0 & FIN_BIT != 0, b0 & RSV1_BIT != 0);
    if b0 & RSV2_RSV3_BITS != 0 {
        return Err(FrameError::Protocol("RSV2 and RSV3 must be clear"));
    }
    if compressed && !compression {
        return Err(FrameError::Protocol("compressed frame received without negotiated permessage-deflate"));
    }
    if b1 & MASK_BIT == 0 {
        return Err(FrameError::Protocol("mask bit missing"));
    }
    let short = u64::from(b1 & 0x7f);
    match opcode {
        CLOSE | PING | PONG => {
            if short > CONTROL_PAYLOAD_BYTES_MAX as u64 {
                return Err(FrameError::Protocol("control frame length bigger than maximum allowed of 125 bytes"));
            }
            if !fin {
                return Err(FrameError::Protocol("control frame does not have final bit set"));
            }
            if compressed {
                return Err(FrameError::Protocol("control frame must not be compressed"));
            }
        }
        CONTINUATION | TEXT | BINARY => {}
        _ => return Err(FrameError::Protocol("unknown opcode")),
    }
    let (len, at) = match short {
        126 => match input.get(2..4) {
            Some(bytes) => (u64::from(u16::from_be_bytes([bytes[0], bytes[1]])), 4),
            None => return Ok(None),
        },
        127 => match input.get(2..10).and_then(|bytes| <[u8; 8]>::try_from(bytes).ok()) {
            Some(bytes) => (u64::from_be_bytes(bytes), 10),
            None => return Ok(None),
        },
        n => (n, 2),
    };
    if len & (1 << 63) != 0 {
        return Err(FrameError::Protocol("invalid 64-bit payload length"));
    }
    let Some(mask) = input.get(at..at + 4).and_then(|bytes| <[u8; 4]>::try_from(bytes).ok()) else {
        return Ok(None);
    };
    Ok(Some(Header { opcode, fin, compressed, len, mask, header_len: at + 4 }))
}

/// Writes a server frame header (FIN set, never masked) into `out`; returns its length.
pub fn server_header(out: &mut [u8; SERVER_HEADER_BYTES_MAX], opcode: u8, compressed: bool, len: usize) -> usize {
    out[0] = FIN_BIT | opcode | if compressed { RSV1_BIT } else { 0 };
    match len {
        0..=125 => {
            out[1] = len as u8;
            2
        }
        126..=0xffff => {
            out[1] = 126;
            out[2..4].copy_from_slice(&(len as u16).to_be_bytes());
            4
        }
        _ => {
            out[1] = 127;
            out[2..10].copy_from_slice(&(len as u64).to_be_bytes());
            10
        }
    }
}

/// A whole server control frame: a pong echoing `payload`, or a close.
pub fn control_frame(opcode: u8, payload: &[u8]) -> Vec<u8> {
    let payload = &payload[..payload.len().min(CONTROL_PAYLOAD_BYTES_MAX)];
    let mut header = [0u8; SERVER_HEADER_BYTES_MAX];
    let n = server_header(&mut header, opcode, false, payload.len());
    [&header[..n], payload].concat()
}

/// A close frame with `status` and as much of `reason` as fits, cut at a character boundary.
pub fn close_frame(status: u16, reason: &str) -> Vec<u8> {
    let mut end = reason.len().min(CONTROL_PAYLOAD_BYTES_MAX - 2);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    control_frame(CLOSE, &[&status.to_be_bytes()[..], &reason.as_bytes()[..end]].concat())
}

/// The reply to a client's close payload, as nats-server answers: its status echoed (1007 for a
/// body that is not UTF-8), nothing for a close without a status; a one-byte payload is an error.
pub fn close_reply(payload: &[u8]) -> Result<Vec<u8>, FrameError> {
    match payload {
        [] => Ok(control_frame(CLOSE, &[])),
        [_] => Err(FrameError::Protocol("close frame payload cannot be 1 byte")),
        [high, low, body @ ..] => {
            let status = u16::from_be_bytes([*high, *low]);
            if !valid_close_status(status) {
                return Err(FrameError::Protocol("invalid close status code"));
            }
            match std::str::from_utf8(body) {
                Ok(text) => Ok(close_frame(status, text)),
                Err(_) => Ok(close_frame(STATUS_INVALID_DATA, "invalid utf8 body in close frame")),
            }
        }
    }
}

/// RFC 6455 §7.4: the codes a peer may send.
fn valid_close_status(status: u16) -> bool {
    matches!(status, 1000..=1003 | 1007..=1011 | 3000..=4999)
}

/// XORs `data` with `mask`, starting `offset` bytes into the mask's cycle; returns the offset
/// after it. Eight bytes at a time: this runs over every byte a client sends.
pub fn unmask(data: &mut [u8], mask: [u8; 4], offset: usize) -> usize {
    let key = rotated(mask, offset);
    let wide = u64::from_ne_bytes([key[0], key[1], key[2], key[3], key[0], key[1], key[2], key[3]]);
    let mut chunks = data.chunks_exact_mut(8);
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        chunk.copy_from_slice(&(u64::from_ne_bytes(word) ^ wide).to_ne_bytes());
    }
    for (i, byte) in chunks.into_remainder().iter_mut().enumerate() {
        *byte ^= key[i % 4];
    }
    (offset + data.len()) % 4
}

/// `mask` as it applies from `offset` bytes into its cycle.
fn rotated(mask: [u8; 4], offset: usize) -> [u8; 4] {
    let mut key = mask;
    key.rotate_left(offset % 4);
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    fn masked(opcode_byte: u8, payload: &[u8]) -> Vec<u8> {
        let mask = [1, 2, 3, 4];
        let mut out = vec![opcode_byte, MASK_BIT | payload.len() as u8];
        out.extend_from_slice(&mask);
        out.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        out
    }

    #[test]
    fn headers_parse_only_when_whole() {
        let frame = masked(FIN_BIT | BINARY, b"hello");
        for cut in 0..6 {
            assert_eq!(parse_header(&frame[..cut], false), Ok(None));
        }
        let header = parse_header(&frame, false).unwrap().unwrap();
        assert_eq!((header.opcode, header.fin, header.len, header.header_len), (BINARY, true, 5, 6));
        let long = [&[FIN_BIT | BINARY, MASK_BIT | 126, 0x01, 0x00][..], &[9, 9, 9, 9]].concat();
        assert_eq!(parse_header(&long, false).unwrap().unwrap().len, 256);
    }

    #[test]
    fn bad_headers_are_named_as_nats_server_names_them() {
        let cases: [(&[u8], &str); 5] = [
            (&[FIN_BIT | 0x20 | BINARY, MASK_BIT], "RSV2 and RSV3 must be clear"),
            (
                &[FIN_BIT | RSV1_BIT | BINARY, MASK_BIT],
                "compressed frame received without negotiated permessage-deflate",
            ),
            (&[FIN_BIT | BINARY, 0], "mask bit missing"),
            (&[PING, MASK_BIT], "control frame does not have final bit set"),
            (&[FIN_BIT | 3, MASK_BIT], "unknown opcode"),
        ];
        for (bytes, reason) in cases {
            assert_eq!(parse_header(bytes, false), Err(FrameError::Protocol(reason)));
        }
        assert!(parse_header(&[FIN_BIT | RSV1_BIT | BINARY, MASK_BIT], true).is_ok());
        let huge = [&[FIN_BIT | BINARY, MASK_BIT | 127][..], &u64::MAX.to_be_bytes(), &[0; 4]].concat();
        assert_eq!(parse_header(&huge, false), Err(FrameError::Protocol("invalid 64-bit payload length")));
    }

    #[test]
    fn unmasking_in_pieces_matches_unmasking_at_once() {
        let mask = [0x37, 0xfa, 0x21, 0x3d];
        let plain: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
        let masked: Vec<u8> = plain.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]).collect();
        for split in [0, 1, 3, 7, 8, 13, 999] {
            let mut data = masked.clone();
            let (head, tail) = data.split_at_mut(split);
            let offset = unmask(head, mask, 0);
            unmask(tail, mask, offset);
            assert_eq!(data, plain, "split at {split}");
        }
    }

    #[test]
    fn server_headers_use_the_shortest_length() {
        let mut out = [0u8; SERVER_HEADER_BYTES_MAX];
        assert_eq!(server_header(&mut out, BINARY, false, 125), 2);
        assert_eq!(&out[..2], &[0x82, 125]);
        assert_eq!(server_header(&mut out, BINARY, true, 126), 4);
        assert_eq!(&out[..4], &[0xc2, 126, 0, 126]);
        assert_eq!(server_header(&mut out, BINARY, false, 70_000), 10);
        assert_eq!(out[1], 127);
    }

    #[test]
    fn close_replies_echo_the_status() {
        assert_eq!(close_reply(&1000u16.to_be_bytes()).unwrap(), vec![0x88, 2, 0x03, 0xe8]);
        assert_eq!(close_reply(&[]).unwrap(), vec![0x88, 0]);
        assert!(close_reply(&[3]).is_err());
        assert!(close_reply(&999u16.to_be_bytes()).is_err());
        let bad_body = close_reply(&[0x03, 0xe8, 0xff]).unwrap();
        assert_eq!(&bad_body[2..4], &STATUS_INVALID_DATA.to_be_bytes());
    }
}
