//! The NATS client protocol, sans-IO: no sockets, no async; the wall clock is read in one place.
//!
//! - [`subject`]: what a valid subject, wildcard and queue name is, and how subjects match.
//! - [`op`]: the operations a client sends (`PUB`, `SUB`, ...) and their encoding.
//! - [`parser`]: a resumable parser that turns bytes from a socket into [`op::ClientOp`]s,
//!   borrowing slices of the read buffer without copying.
//! - [`encode`]: what the server writes back (`INFO`, `MSG`, `HMSG`, `-ERR`, ...).
//! - [`headers`]: the `NATS/1.0` header block carried by `HPUB`/`HMSG`: the one reader of it
//!   every crate uses, and [`headers::names`], the spelling of every header name.
//! - [`clock`]: the one wall clock (unix nanoseconds now), the civil calendar and the text forms
//!   of time (RFC 3339, nats-server's log stamp, Go durations) the server, store and CLI share.
//! - [`info`]: the JSON bodies of `INFO` and `CONNECT`.
//!
//! The server crate owns the sockets; this crate only says what the bytes mean.

pub mod clock;
pub mod encode;
pub mod headers;
pub mod info;
pub mod op;
pub mod parser;
pub mod subject;

pub use bytestring::ByteString;
pub use headers::{HeaderBlock, Headers};
pub use op::ClientOp;
pub use parser::{ParseError, Parser, ParserLimits};
