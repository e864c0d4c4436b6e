//! The broker's side of the schema registry ([`semaq_registry`]): serving it and announcing what auto-evolution registers. The registry itself (formats,
//! compatibility, the registry file, decoding, inference, evolution proposals) is that crate;
//! its modules used across the broker are re-exported here.
//!
//! - [`http`]: the Confluent REST API; [`nats`]: the same over `$SEMAQ.API.SCHEMA.*`.
//! - [`evolve`]: L4 streams widen their schema from payloads, and each evolution is published as
//!   an event. (Binding a stream to a subject is JetStream's: `jetstream::schema`.)

pub mod evolve;
pub mod http;
pub mod nats;

use std::sync::Arc;

pub use semaq_registry::{decode, error, format, queries, store, types, Registry, RegistryError};

/// Opens `<store_dir>/registry`, serves it over NATS and makes it the server's registry. A
/// damaged registry file stops the server: starting empty would silently drop schemas.
pub fn start(
    bus: &Arc<crate::bus::Bus>,
    options: &crate::options::Options,
) -> Result<Arc<Registry>, store::StoreFileError> {
    let dir = options.store_dir.join("registry");
    let registry = match Registry::open(dir) {
        Ok(registry) => Arc::new(registry),
        Err(error) => {
            tracing::error!("{error}");
            return Err(error);
        }
    };
    let (subjects, schemas) = registry.summary();
    if subjects > 0 {
        tracing::info!("  Schema registry: {subjects} subjects, {schemas} schemas");
    }
    nats::start(bus, registry.clone());
    Ok(registry)
}
