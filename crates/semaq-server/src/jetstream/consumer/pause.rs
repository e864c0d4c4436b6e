//! Paused consumers (nats-server 2.11): no deliveries until `pause_until`.

use std::time::{Duration, Instant, SystemTime};

use semaq_wire::clock;

use crate::jetstream::config::ConsumerConfig;

/// How long the consumer stays paused from now, if it is paused.
pub fn remaining(config: &ConsumerConfig) -> Option<Duration> {
    let until_ns = config.pause_until.as_deref().and_then(clock::parse_rfc3339)?;
    let until = clock::system_time(until_ns);
    until.duration_since(SystemTime::now()).ok().filter(|left| !left.is_zero())
}

/// Whether deliveries are paused now.
pub fn is_paused(config: &ConsumerConfig) -> bool {
    remaining(config).is_some()
}

/// When a pause ends, for the consumer's task to wake then.
pub fn ends(config: &ConsumerConfig) -> Option<Instant> {
    remaining(config).map(|left| Instant::now() + left)
}
