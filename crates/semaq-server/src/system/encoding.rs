//! Compressed `$SYS` answers, as nats-server 2.10+ gives them: a request whose `Accept-Encoding`
//! header names `snappy` or `s2` gets its answer in the Snappy framing format, one naming `gzip`
//! gets it gzipped, each marked with `Content-Encoding`; any other value gets the plain answer
//! marked `identity`. Only endpoint data is compressed, never an error.

use std::io::Write;

use semaq_wire::headers::{HeaderBlock, Headers};

/// The header a request names the encodings it accepts in.
const ACCEPT_ENCODING: &str = "Accept-Encoding";
/// The header that says how an answer is encoded.
const CONTENT_ENCODING: &str = "Content-Encoding";

/// How an answer's body is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Encoding {
    /// As it is, unmarked (no `Accept-Encoding`).
    #[default]
    Plain,
    /// gzip.
    Gzip,
    /// Snappy's framing format (nats-server writes it with s2's Snappy-compatible writer).
    Snappy,
    /// As it is, marked `identity`: the request accepts nothing the server writes.
    Identity,
}

impl Encoding {
    /// What a request with `headers` accepts, read as nats-server's `getAcceptEncoding` does:
    /// `snappy` or `s2` anywhere first, then `gzip`, case-insensitively.
    pub fn accepted(headers: Option<&[u8]>) -> Self {
        let Some(value) = headers.and_then(|block| Headers::new(block).get(ACCEPT_ENCODING)) else {
            return Self::Plain;
        };
        let value = value.to_ascii_lowercase();
        if value.is_empty() {
            Self::Plain
        } else if value.contains("snappy") || value.contains("s2") {
            Self::Snappy
        } else if value.contains("gzip") {
            Self::Gzip
        } else {
            Self::Identity
        }
    }

    /// `body` encoded, with the header block that names the encoding (`None` for a plain body).
    pub fn encode(self, body: Vec<u8>) -> (Option<bytes::Bytes>, Vec<u8>) {
        let (name, encoded) = match self {
            Self::Plain => return (None, body),
            Self::Identity => ("identity", None),
            Self::Gzip => ("gzip", Some(gzip(&body))),
            Self::Snappy => ("snappy", Some(snappy(&body))),
        };
        let body = match encoded {
            None => body,
            Some(Ok(encoded)) => encoded,
            // Writing into memory does not fail; should it, the plain answer is still right.
            Some(Err(error)) => {
                tracing::warn!(%error, encoding = name, "$SYS answer sent uncompressed");
                return (None, body);
            }
        };
        let mut block = HeaderBlock::default();
        block.insert(CONTENT_ENCODING, name);
        (Some(block.encode()), body)
    }
}

fn gzip(body: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::with_capacity(body.len() / 4), flate2::Compression::default());
    encoder.write_all(body)?;
    encoder.finish()
}

fn snappy(body: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut encoder = snap::write::FrameEncoder::new(Vec::with_capacity(body.len() / 2));
    encoder.write_all(body)?;
    encoder.into_inner().map_err(|error| error.into_error())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn asking(value: &str) -> Encoding {
        let mut block = HeaderBlock::default();
        block.insert("Accept-Encoding", value);
        Encoding::accepted(Some(&block.encode()))
    }

    #[test]
    fn snappy_or_s2_wins_over_gzip_and_anything_else_is_identity() {
        assert_eq!(Encoding::accepted(None), Encoding::Plain);
        assert_eq!(asking("gzip, snappy"), Encoding::Snappy);
        assert_eq!(asking("S2"), Encoding::Snappy);
        assert_eq!(asking("GZip"), Encoding::Gzip);
        assert_eq!(asking("br"), Encoding::Identity);
    }

    #[test]
    fn each_encoding_reads_back_as_the_body_with_its_header() {
        let body = br#"{"server":{},"data":{"x":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}}"#.to_vec();
        let (header, gzipped) = Encoding::Gzip.encode(body.clone());
        assert_eq!(HeaderBlock::parse(&header.unwrap()).unwrap().get("Content-Encoding"), Some("gzip"));
        let mut read = Vec::new();
        flate2::read::GzDecoder::new(gzipped.as_slice()).read_to_end(&mut read).unwrap();
        assert_eq!(read, body);
        let (header, framed) = Encoding::Snappy.encode(body.clone());
        assert_eq!(HeaderBlock::parse(&header.unwrap()).unwrap().get("Content-Encoding"), Some("snappy"));
        let mut read = Vec::new();
        snap::read::FrameDecoder::new(framed.as_slice()).read_to_end(&mut read).unwrap();
        assert_eq!(read, body);
        let (header, plain) = Encoding::Identity.encode(body.clone());
        assert_eq!(HeaderBlock::parse(&header.unwrap()).unwrap().get("Content-Encoding"), Some("identity"));
        assert_eq!(plain, body);
        assert_eq!(Encoding::Plain.encode(body.clone()), (None, body));
    }
}
