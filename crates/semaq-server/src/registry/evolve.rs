//! L4 auto-evolution, the broker's half: the stream metadata key that turns it on, the server id
//! its rate bound is kept per, and the `$SEMAQ.EVENT.SCHEMA.EVOLVED` event each new version is
//! announced with. Proposals, compatibility and registration are [`semaq_registry::evolve`]'s.

use std::sync::Weak;

use serde_json::{Map, Value};

pub use semaq_registry::evolve::{top_level_fields, Outcome};

use super::Registry;
use crate::server::Shared;

/// Stream metadata key: `auto` evolves the bound schema from payloads (L4 only); `off` (default) does not.
pub const EVOLVE_KEY: &str = "semaq.evolve";
/// Where each evolution is announced.
pub const EVENT_SUBJECT: &str = "$SEMAQ.EVENT.SCHEMA.EVOLVED";

/// A stream's [`semaq_registry::evolve::Evolver`], with the server that announces its evolutions.
#[derive(Debug)]
pub struct Evolver {
    inner: semaq_registry::evolve::Evolver,
    shared: Weak<Shared>,
}

impl Evolver {
    /// The evolver of a stream whose metadata says `semaq.evolve: auto`, bound to schema `id`.
    pub fn new(stream: &str, shared: &Weak<Shared>, registry: &Registry, id: u32) -> Option<Self> {
        let server = shared.upgrade().map(|shared| shared.server_id.clone()).unwrap_or_default();
        let inner = semaq_registry::evolve::Evolver::new(stream, &server, registry, id)?;
        Some(Self { inner, shared: shared.clone() })
    }

    /// Whether `object` has a field the schema does not declare, at the top level or nested.
    pub fn has_new_fields(&self, object: &Map<String, Value>) -> bool {
        self.inner.has_new_fields(object)
    }

    /// Tries to evolve `subject` (bound at `version`) so that `object` fits, and publishes the
    /// event when a version was registered; `valid` says whether it already fits.
    pub fn attempt(
        &mut self,
        registry: &Registry,
        bound: (&str, u32, u32),
        object: &Map<String, Value>,
        valid: bool,
    ) -> Outcome {
        let (outcome, evolution) = self.inner.attempt(registry, bound, object, valid);
        if let (Some(evolution), Some(shared)) = (evolution, self.shared.upgrade()) {
            let event = evolution.event(&crate::clock::rfc3339(std::time::SystemTime::now()));
            shared.publish(EVENT_SUBJECT, None, event.to_string().as_bytes());
        }
        outcome
    }
}
