//! The clock is `semaq_wire::clock`; this re-export is kept only for `registry::evolve`, which
//! still names `crate::clock`. Nothing else should use it.

pub use semaq_wire::clock::rfc3339;
