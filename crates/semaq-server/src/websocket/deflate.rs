//! permessage-deflate (RFC 7692) as nats-server negotiates it: no context takeover either way,
//! so each message is compressed and inflated on its own, and inflation is bounded.

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress};

use super::frame::FrameError;

/// What a sync flush ends with; RFC 7692 §7.2.1 drops it from the frame and the reader adds it back.
pub const SYNC_TAIL: [u8; 4] = [0x00, 0x00, 0xff, 0xff];

/// Compresses outbound messages, each on its own (`server_no_context_takeover`).
pub struct Deflater {
    compress: Compress,
    out: Vec<u8>,
}

impl Default for Deflater {
    fn default() -> Self {
        // nats-server compresses with BestSpeed: the frames are small and latency counts.
        Self { compress: Compress::new(Compression::fast(), false), out: Vec::new() }
    }
}

impl Deflater {
    /// `input` compressed as one message's payload (the sync tail removed).
    pub fn message(&mut self, input: &[u8]) -> std::io::Result<&[u8]> {
        self.compress.reset();
        self.out.clear();
        self.out.reserve(input.len() / 2 + 64);
        let start = self.compress.total_in();
        loop {
            let consumed = (self.compress.total_in() - start) as usize;
            self.compress
                .compress_vec(&input[consumed..], &mut self.out, FlushCompress::Sync)
                .map_err(std::io::Error::other)?;
            let done = self.compress.total_in() - start == input.len() as u64;
            // Spare room left after a sync flush means the flush is complete.
            if done && self.out.len() < self.out.capacity() {
                break;
            }
            self.out.reserve(self.out.capacity().max(64));
        }
        if self.out.ends_with(&SYNC_TAIL) {
            self.out.truncate(self.out.len() - SYNC_TAIL.len());
        }
        Ok(&self.out)
    }

    /// Gives back a burst's memory, keeping a buffer of `keep` bytes at most.
    pub fn trim(&mut self, keep: usize) {
        if self.out.capacity() > keep {
            self.out = Vec::new();
        }
    }
}

/// Inflates inbound compressed messages (`client_no_context_takeover`), counting what each
/// inflates to against `bytes_max`.
pub struct Inflater {
    decompress: Decompress,
    inflated: u64,
    bytes_max: u64,
}

impl Inflater {
    /// An inflater whose messages may inflate to `bytes_max` each.
    pub fn new(bytes_max: usize) -> Self {
        Self { decompress: Decompress::new(false), inflated: 0, bytes_max: bytes_max as u64 }
    }

    /// Starts a new message: no history, nothing counted.
    pub fn reset(&mut self) {
        self.decompress.reset(false);
        self.inflated = 0;
    }

    /// Inflates from `input` into `output`: (bytes consumed, bytes produced).
    pub fn inflate(&mut self, input: &[u8], output: &mut [u8]) -> Result<(usize, usize), FrameError> {
        let (before_in, before_out) = (self.decompress.total_in(), self.decompress.total_out());
        // Never produce more than one byte past the bound, so a bomb costs at most one buffer.
        let room = (self.bytes_max - self.inflated.min(self.bytes_max)).saturating_add(1);
        let output_len = output.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        self.decompress
            .decompress(input, &mut output[..output_len], FlushDecompress::None)
            .map_err(|_| FrameError::Inflate)?;
        let consumed = (self.decompress.total_in() - before_in) as usize;
        let produced = self.decompress.total_out() - before_out;
        self.inflated += produced;
        if self.inflated > self.bytes_max {
            return Err(FrameError::TooBig("inflated message exceeds the maximum size"));
        }
        Ok((consumed, produced as usize))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inflate_all(inflater: &mut Inflater, mut input: &[u8]) -> Result<Vec<u8>, FrameError> {
        let mut out = Vec::new();
        let mut chunk = [0u8; 100];
        loop {
            let (consumed, produced) = inflater.inflate(input, &mut chunk)?;
            out.extend_from_slice(&chunk[..produced]);
            input = &input[consumed..];
            if consumed == 0 && produced == 0 {
                return Ok(out);
            }
        }
    }

    #[test]
    fn messages_round_trip_each_on_its_own() {
        let mut deflater = Deflater::default();
        let mut inflater = Inflater::new(1 << 20);
        for text in [&b"MSG a 1 5\r\nhello\r\n".repeat(50)[..], b"", b"x"] {
            let compressed = [deflater.message(text).unwrap(), &SYNC_TAIL[..]].concat();
            inflater.reset();
            assert_eq!(inflate_all(&mut inflater, &compressed).unwrap(), text);
        }
    }

    #[test]
    fn inflation_stops_past_the_bound() {
        let zeros = vec![0u8; 100_000];
        let compressed = [Deflater::default().message(&zeros).unwrap(), &SYNC_TAIL[..]].concat();
        assert!(compressed.len() < 1_000);
        let mut inflater = Inflater::new(10_000);
        let error = inflate_all(&mut inflater, &compressed).unwrap_err();
        assert_eq!(error, FrameError::TooBig("inflated message exceeds the maximum size"));
        assert_eq!(Inflater::new(10).inflate(b"\xff\xff\xff", &mut [0; 10]), Err(FrameError::Inflate));
    }
}
