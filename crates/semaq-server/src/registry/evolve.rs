//! L4 auto-evolution, the broker's half: the stream metadata key that turns it on, the server id
//! its rate bound is kept per, and the `$SEMAQ.EVENT.SCHEMA.EVOLVED` event each new version is
//! announced with. Proposals, compatibility and registration are [`semaq_registry::evolve`]'s.

use std::sync::{Arc, Weak};

use serde_json::{Map, Value};

pub use semaq_registry::evolve::{top_level_fields, Outcome};

use super::Registry;
use crate::bus::Bus;

/// Stream metadata key: `auto` evolves the bound schema from payloads (L4 only); `off` (default) does not.
pub const EVOLVE_KEY: &str = "semaq.evolve";
/// Where each evolution is announced.
pub const EVENT_SUBJECT: &str = "$SEMAQ.EVENT.SCHEMA.EVOLVED";

/// A stream's [`semaq_registry::evolve::Evolver`], with the server that announces its evolutions.
#[derive(Debug)]
pub struct Evolver {
    inner: semaq_registry::evolve::Evolver,
    /// Where evolutions are announced (weak: it must not keep the bus alive).
    bus: Weak<Bus>,
    /// Event bodies waiting for [`Evolver::announce`]: evolution runs under the stream's store
    /// lock, and a publish there could reach a handler that takes a consumer's state (a
    /// filtered subscription delivering to `$JS.ACK.>`), against the lock order.
    pending: Vec<String>,
}

impl Evolver {
    /// The evolver of a stream whose metadata says `semaq.evolve: auto`, bound to schema `id`.
    /// Evolutions are announced on `bus`; the rate bound is kept per `server_id` and stream.
    pub fn new(stream: &str, (bus, server_id): (&Arc<Bus>, &str), registry: &Registry, id: u32) -> Option<Self> {
        let inner = semaq_registry::evolve::Evolver::new(stream, server_id, registry, id)?;
        Some(Self { inner, bus: Arc::downgrade(bus), pending: Vec::new() })
    }

    /// Whether `object` has a field the schema does not declare, at the top level or nested.
    pub fn has_new_fields(&self, object: &Map<String, Value>) -> bool {
        self.inner.has_new_fields(object)
    }

    /// Tries to evolve `subject` (bound at `version`) so that `object` fits, and queues the
    /// event when a version was registered; `valid` says whether it already fits.
    pub fn attempt(
        &mut self,
        registry: &Registry,
        bound: (&str, u32, u32),
        object: &Map<String, Value>,
        valid: bool,
    ) -> Outcome {
        let (outcome, evolution) = self.inner.attempt(registry, bound, object, valid);
        if let Some(evolution) = evolution {
            let event = evolution.event(&semaq_wire::clock::rfc3339(std::time::SystemTime::now()));
            self.pending.push(event.to_string());
        }
        outcome
    }

    /// Publishes the queued events; called once the stream's locks are released.
    pub fn announce(&mut self) {
        let Some(bus) = self.bus.upgrade() else { return };
        for event in self.pending.drain(..) {
            bus.publish(EVENT_SUBJECT, None, event.as_bytes());
        }
    }
}
