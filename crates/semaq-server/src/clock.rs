//! The clock is `semaq_wire::clock`; this re-export is kept only for `registry`, which still
//! names `crate::clock` until it moves to its own crate. Nothing else should use it.

pub use semaq_wire::clock::rfc3339;
