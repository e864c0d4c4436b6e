//! The NATS client protocol, sans-IO: no sockets, no async, no clocks.
//!
//! - [`subject`]: what a valid subject, wildcard and queue name is, and how subjects match.
//! - [`op`]: the operations a client sends (`PUB`, `SUB`, ...) and their encoding.
//! - [`parser`]: a resumable parser that turns bytes from a socket into [`op::ClientOp`]s,
//!   borrowing slices of the read buffer without copying.
//! - [`encode`]: what the server writes back (`INFO`, `MSG`, `HMSG`, `-ERR`, ...).
//! - [`headers`]: the `NATS/1.0` header block carried by `HPUB`/`HMSG`.
//! - [`info`]: the JSON bodies of `INFO` and `CONNECT`.
//!
//! The server crate owns the sockets; this crate only says what the bytes mean.

pub mod encode;
pub mod headers;
pub mod info;
pub mod op;
pub mod parser;
pub mod subject;

pub use bytestring::ByteString;
pub use headers::HeaderBlock;
pub use op::ClientOp;
pub use parser::{ParseError, Parser, ParserLimits};
